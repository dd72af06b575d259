# SPDX-License-Identifier: MIT
"""vram.import_torch -- a PyTorch memory snapshot as a vram trace.

    python -m vram.import_torch SNAPSHOT.pickle -o run.trace.csv.gz

SNAPSHOT is what torch.cuda.memory._dump_snapshot() writes after
torch.cuda.memory._record_memory_history(): a pickled dict whose
"device_traces" holds, per device, the allocator's history as dicts with
"action", "addr", "size", "stream" and (PyTorch 2.1 and later) "time_us".
Each becomes a trace event (docs/TRACE_FORMAT.md):

    alloc                      'a' (a new id; its size)
    free_completed (or free)   'f' of the id allocated at that address
    oom                        'o' with the size asked
    free_requested, segment_*, snapshot   nothing: the trace holds tensors,
                               and a free counts once the memory is free

Frees of addresses allocated before the history began are left out (they
are counted in the metadata line as skipped=N). Without "time_us" the
events are one microsecond apart.

The stack of each allocation (the entry's "frames": dicts with
"filename", "line" and "name", innermost first) becomes its call site: the
trace is then format 2, with a frames table ("#@frame", "#@site") and a
site column, each distinct frame and stack written once. Only the Python
frames (files ending in .py) are kept: with context="all" PyTorch puts its
allocator's own C++ frames innermost, which would name the allocator as
the source of every tensor, and a C++ frame is not a line of Python (a
stack of C++ frames alone gives no site). A snapshot without stacks gives
a format-1 trace, as before.

The pickle is read with an unpickler that builds only plain data (dict,
list, str, numbers): a snapshot holds nothing else, and a pickle naming any
class or function is refused rather than run.

Exit status: 0 written; 1 the output cannot be written; 2 bad usage or bad
input (not a pickle, truncated, not a snapshot, a foreign version) -- one
line on standard error, "vram.import_torch: SNAPSHOT: why".
"""
import argparse
import io
import os
import pickle
import sys

from .outfile import open_trace

PROG = "vram.import_torch"

# Actions of PyTorch's allocator history and what they become.
ALLOC = {"alloc"}
FREE = {"free_completed", "free"}  # "free": snapshots before 2.1
OOM = {"oom"}
IGNORED = {"free_requested", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot"}


class BadInput(Exception):
    """The snapshot cannot be read: the message is the reason."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise BadInput("the pickle names %s.%s: not a PyTorch memory snapshot (only plain "
                       "data is read)" % (module, name))


def load_snapshot(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInput(e.strerror or str(e))
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except BadInput:
        raise
    except EOFError:
        raise BadInput("truncated (the pickle ends early)")
    except (pickle.UnpicklingError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, UnicodeDecodeError, OverflowError) as e:
        raise BadInput("not a pickle, or truncated (%s)" % (str(e) or type(e).__name__))
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise BadInput("not a PyTorch memory snapshot (no device_traces; written by "
                       "torch.cuda.memory._dump_snapshot?)")
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(d, list) for d in traces):
        raise BadInput("device_traces is not a list per device: a snapshot version this "
                       "importer does not know")
    return snap


def _number(entry, key, where):
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BadInput("%s: %r is not a byte count or address" % (where, key))
    return v


# The trace format's limits on frames (docs/TRACE_FORMAT.md).
SITE_MAX_FRAMES = 64
FRAME_TEXT_MAX = 1000


def _safe_text(text):
    """TEXT as the trace format allows it: commas, double quotes and
    control characters become spaces; at most FRAME_TEXT_MAX bytes of UTF-8,
    never cutting a character."""
    text = "".join(" " if (c in ',"' or ord(c) < 0x20 or ord(c) == 0x7f) else c
                   for c in str(text))
    raw = text.encode("utf-8", "replace")
    if len(raw) > FRAME_TEXT_MAX:
        text = raw[:FRAME_TEXT_MAX].decode("utf-8", "ignore")
    return text or "?"


def _stack(entry, where):
    """The (file, line, function) Python frames of ENTRY's stack, innermost
    first; () without any."""
    frames = entry.get("frames")
    if frames is None:
        return ()
    if not isinstance(frames, list):
        raise BadInput("%s: frames is not a list: a snapshot version this importer does "
                       "not know" % where)
    out = []
    for f in frames:
        if (not isinstance(f, dict) or not isinstance(f.get("filename"), str)
                or isinstance(f.get("line"), bool) or not isinstance(f.get("line"), int)
                or not isinstance(f.get("name"), str)):
            raise BadInput("%s: a frame is not {filename, line, name}: a snapshot version "
                           "this importer does not know" % where)
        out.append((_safe_text(f["filename"]), max(f["line"], 0), _safe_text(f["name"])))
    return tuple([f for f in out if f[0].endswith(".py")][:SITE_MAX_FRAMES])


def convert(snap):
    """The events of SNAP as (t_us, op, id, size, stream, device, stack)
    tuples in time order (STACK: the frames kept, () for none), and the
    number of frees left out."""
    events = []
    next_id = 0
    skipped = 0
    for dev, entries in enumerate(snap["device_traces"]):
        live = {}  # addr -> (id, size)
        for i, e in enumerate(entries):
            where = "device %d entry %d" % (dev, i)
            if not isinstance(e, dict) or not isinstance(e.get("action"), str):
                raise BadInput("%s: no action: a snapshot version this importer does not "
                               "know" % where)
            action = e["action"]
            t = e.get("time_us", i)
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise BadInput("%s: time_us %r is not a time" % (where, t))
            stream = e.get("stream", 0)
            stream = stream if isinstance(stream, int) and stream >= 0 else 0
            if action in ALLOC:
                addr, size = _number(e, "addr", where), _number(e, "size", where)
                if size == 0:
                    continue
                if addr in live:
                    raise BadInput("%s: address %#x allocated twice without a free"
                                   % (where, addr))
                live[addr] = (next_id, size)
                events.append((int(t), "a", next_id, size, stream, dev, _stack(e, where)))
                next_id += 1
            elif action in FREE:
                addr = _number(e, "addr", where)
                if addr not in live:
                    skipped += 1  # allocated before the history began
                    continue
                ident, size = live.pop(addr)
                events.append((int(t), "f", ident, size, stream, dev, ()))
            elif action in OOM:
                size = _number(e, "size", where)
                if size > 0:
                    events.append((int(t), "o", 0, size, stream, dev, _stack(e, where)))
            elif action in IGNORED:
                continue
            else:
                raise BadInput("%s: unknown action %r: a snapshot version this importer "
                               "does not know" % (where, action))
    # One timeline for all devices; within a device the order is kept.
    order = sorted(range(len(events)), key=lambda k: (events[k][0], k))
    return [events[k] for k in order], skipped


def write_trace(path, events, meta):
    sites = any(e[6] for e in events)
    frame_ids, site_ids = {}, {}
    # Never through a link, never over another user's file (vram.outfile).
    with open_trace(path) as f:
        f.write("# %s\n" % meta)
        if sites:
            f.write("#@format 2\nt_us,op,id,size,stream,device,site\n")
        else:
            f.write("t_us,op,id,size,stream,device\n")
        last = 0
        for t, op, ident, size, stream, dev, stack in events:
            last = max(last, t)  # time never runs backwards in a trace
            line = "%d,%s,%d,%d,%d,%d" % (last, op, ident, size, stream, dev)
            if not sites:
                f.write(line + "\n")
                continue
            site = 0
            if stack:
                ids = []
                for fr in stack:  # each frame, then the site, before first use
                    if fr not in frame_ids:
                        frame_ids[fr] = len(frame_ids) + 1
                        f.write("#@frame %d,py,%s,%d,%s\n" % (frame_ids[fr], fr[0], fr[1],
                                                               fr[2]))
                    ids.append(frame_ids[fr])
                key = tuple(ids)
                if key not in site_ids:
                    site_ids[key] = len(site_ids) + 1
                    f.write("#@site %d,%s\n" % (site_ids[key], ",".join(map(str, ids))))
                site = site_ids[key]
            f.write("%s,%s\n" % (line, site if site else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m " + PROG,
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) "
                    "into a vram trace for vram analyze and vram replay.")
    ap.add_argument("snapshot", help="the snapshot pickle")
    ap.add_argument("-o", "--output", required=True,
                    help="the trace to write (gzip when it ends in .gz)")
    a = ap.parse_args(argv)
    try:
        snap = load_snapshot(a.snapshot)
        events, skipped = convert(snap)
    except BadInput as e:
        sys.stderr.write("%s: %s: %s\n" % (PROG, a.snapshot, e))
        return 2
    meta = "workload=torch-snapshot source=%s skipped=%d" % (
        os.path.basename(a.snapshot).replace(" ", "_"), skipped)
    try:
        write_trace(a.output, events, meta)
    except OSError as e:
        sys.stderr.write("%s: %s: %s\n" % (PROG, a.output, e.strerror or e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
