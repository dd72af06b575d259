# SPDX-License-Identifier: MIT
"""vram.holders -- what keeps GPU memory alive in a Python program.

A leak's allocating line is often not its cause: `logits = net(x)` allocates,
`history.append(logits.detach())` three lines later keeps it. This module
names the variable or container that refers to the arrays in given device
allocations, found through the garbage collector:

    find_holders([(id, address, size), ...])
    -> {id: "list `history` of module __main__; appended at train.py:15"}

It knows PyTorch tensors (their storage's data_ptr), JAX arrays (their
buffers' unsafe_buffer_pointer) and anything with __cuda_array_interface__
(CuPy, Numba): an array belongs to the allocation that holds its first byte.
A holder is named from a root down: a module's global (`history`, module
__main__), a local variable of a running function, then attributes
(`.buf`), dict keys (`['step3']`) and indexes (`[12]`). A tensor kept only
by the autograd graph of another (a loss kept with its graph: every
activation it saved) is named as that graph's. Where the root is a module
or a class, the lines of its source that add to the container (`.append(`,
`[...] =`, `.update(`, ...) are named too.

Under `vram record` the preload library loads this file by its path
(VRAM_TRACE_HOLDERS) at the program's first allocation and calls install():
the holders of every live allocation are then written into the trace
("#@held" lines) when the program exits, when a top-level function of the
main module returns (a `main()` whose locals hold the leak), and at
`vram.mark(label)` calls, each search kept under a twentieth of the time
since the last; `vram analyze` joins them to its leak suspects by id. Pure
Python: nothing of vram is imported, nothing is loaded.
"""

import ast
import atexit
import bisect
import gc
import sys
import time
import types
import warnings

__all__ = ["find_holders", "install", "Recorder"]

# How deep a holder is named: the container of the array, its holder, ...
MAX_DEPTH = 5
# Mutating calls and statements that add to a container, for "appended at".
_ADDS = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft",
         "extendleft", "put", "push", "__setitem__"}
# Longest text of a holder (the trace cuts at 1000 bytes).
_TEXT_MAX = 400
# The dicts of a PyTorch module that hold its attributes, and what each is.
_MODULE_DICTS = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "module"}


def _short(text, n=40):
    text = str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


# ---------------------------------------------------------------------------
# Arrays and their device addresses
# ---------------------------------------------------------------------------


class _Arrays:
    """Which objects are device arrays, and their first byte's address."""

    def __init__(self):
        self.kinds = {}  # type -> "torch" | "jax" | "cai" | None
        torch = sys.modules.get("torch")
        self.tensor = getattr(torch, "Tensor", None) if torch is not None else None
        jax = sys.modules.get("jax")
        self.jax_array = getattr(jax, "Array", None) if jax is not None else None

    def kind(self, obj):
        t = type(obj)
        k = self.kinds.get(t, False)
        if k is not False:
            return k
        k = None
        try:
            if self.tensor is not None and issubclass(t, self.tensor):
                k = "torch"
            elif self.jax_array is not None and issubclass(t, self.jax_array):
                k = "jax"
            elif hasattr(t, "__cuda_array_interface__"):
                k = "cai"
        except Exception:  # a type that cannot be asked: not an array
            k = None
        self.kinds[t] = k
        return k

    def addresses(self, obj, kind):
        """The device addresses of OBJ's memory (several for a sharded JAX
        array); [] when it has none it can tell."""
        try:
            if kind == "torch":
                storage = obj.untyped_storage() if hasattr(obj, "untyped_storage") \
                    else obj.storage()
                return [int(storage.data_ptr())]
            if kind == "jax":
                try:
                    return [int(obj.unsafe_buffer_pointer())]
                except Exception:
                    return [int(s.data.unsafe_buffer_pointer()) for s in obj.addressable_shards]
            return [int(obj.__cuda_array_interface__["data"][0])]
        except Exception:  # a deleted buffer, a meta tensor, a CPU array
            return []


class _Live:
    """The live allocations, by address: which one holds an address."""

    def __init__(self, live):
        rows = sorted((int(addr), int(size), int(i)) for i, addr, size in live)
        self.starts = [r[0] for r in rows]
        self.rows = rows

    def find(self, addr):
        k = bisect.bisect_right(self.starts, addr) - 1
        if k >= 0:
            start, size, i = self.rows[k]
            if start <= addr < start + max(size, 1):
                return i
        return None


# ---------------------------------------------------------------------------
# Naming a holder
# ---------------------------------------------------------------------------


def _module_file(m):
    """The source of module M: its __file__, else its loader's path (a
    script's __main__ loses __file__ when the script ends, before exit)."""
    f = getattr(m, "__file__", None)
    if not f:
        f = getattr(getattr(m, "__loader__", None), "path", None)
    if not f:
        f = getattr(getattr(m, "__spec__", None), "origin", None)
    return f if isinstance(f, str) else None


def _step(parent, child):
    """How PARENT refers to CHILD: ("key", repr), ("index", i), ("attr",
    name), ("member", None) for a set, ("dict", None) when CHILD is
    PARENT's __dict__; None when it cannot tell."""
    try:
        if isinstance(parent, dict):
            for k, v in parent.items():
                if v is child:
                    return ("key", _short(repr(k), 30))
        elif isinstance(parent, (list, tuple)):
            for k, v in enumerate(parent):
                if v is child:
                    return ("index", k)
        elif isinstance(parent, (set, frozenset)):
            return ("member", None)
        else:
            d = getattr(parent, "__dict__", None)
            if d is child:
                return ("dict", None)
            if isinstance(d, dict):
                for k, v in d.items():
                    if v is child:
                        return ("attr", str(k))
            for k in getattr(type(parent), "__slots__", ()) or ():
                if getattr(parent, k, None) is child:
                    return ("attr", k)
    except Exception:
        pass
    return None


def _step_text(step):
    kind, key = step
    return {"key": "[%s]" % key, "index": "[%s]" % key, "attr": ".%s" % key,
            "member": "{...}"}.get(kind, "")


class _Namer:
    """Names objects from the roots down: module globals, locals of the
    frames given, then through the referrers the garbage collector knows."""

    def __init__(self, frames, deadline):
        self.deadline = deadline
        self.modules = {}
        for name, m in list(sys.modules.items()):
            d = getattr(m, "__dict__", None)
            # A module under two names (multiprocessing aliases __main__ as
            # __mp_main__) is named by the one without the alias's prefix.
            if isinstance(d, dict) and (id(d) not in self.modules or
                                        self.modules[id(d)][0].startswith("__mp_")):
                self.modules[id(d)] = (name, m)
        self.frames = list(frames)
        # The roots by the identity of what they name, once: id -> [(name,
        # where, file)]. Locals first: a function's variable says more
        # than a module's that happens to name the same object.
        self.names = {}
        for f in self.frames:
            try:
                local = f.f_locals
                if local is f.f_globals:
                    continue  # module level: its globals below
                items = list(local.items())
            except Exception:
                continue
            code = f.f_code
            where = " (local of %s() in %s)" % (code.co_name, code.co_filename.split("/")[-1])
            for k, v in items:
                self.names.setdefault(id(v), []).append((k, where, code.co_filename))
        for name, m in self.modules.values():
            try:
                items = list(m.__dict__.items())
            except Exception:
                continue
            where, path = " of module %s" % name, None
            for k, v in items:
                if not k.startswith("__") and not isinstance(v, types.ModuleType):
                    if path is None:
                        path = _module_file(m) or ""
                    self.names.setdefault(id(v), []).append((k, where, path or None))

    def roots(self, obj):
        """OBJ as a root: [(name, where, file)] for each local variable of
        the frames and each module global that is OBJ."""
        return self.names.get(id(obj), [])

    def parents(self, objs):
        """The referrers of each object of OBJS, in one pass over the
        garbage collector's objects: {id: [referrer, ...]}."""
        want = {id(o): [] for o in objs}
        for o in gc.get_objects():
            if time.monotonic() > self.deadline:
                break
            if isinstance(o, types.FrameType) or id(o) in self.modules:
                continue  # frames and module globals are roots
            try:
                for r in gc.get_referents(o):
                    if id(r) in want:
                        want[id(r)].append(o)
            except Exception:
                continue
        return want


def _named_paths(namer, arrays):
    """For each array of ARRAYS ({id: array}), its first named path: (root
    name, where, file, [(parent, step), ...] from the root down to it)."""
    found = {}
    level = [(a, i, []) for i, a in arrays.items()]
    seen = set()
    for _ in range(MAX_DEPTH + 1):
        if not level or time.monotonic() > namer.deadline:
            break
        for obj, leaf, below in level:
            if leaf not in found:
                for name, where, path in namer.roots(obj):
                    found[leaf] = (name, where, path, below)
                    break
        level = [x for x in level if x[1] not in found]
        if not level:
            break
        parents = namer.parents([obj for obj, _, _ in level])
        nxt = []
        for obj, leaf, below in level:
            for parent in parents.get(id(obj), []):
                if (id(parent), leaf) in seen:
                    continue
                seen.add((id(parent), leaf))
                step = _step(parent, obj)
                if step is None:
                    continue
                if step[0] == "dict":
                    # OBJ is PARENT's __dict__: its key below is an attribute.
                    if below and below[0][1][0] == "key":
                        key = below[0][1][1].strip("'\"")
                        nxt.append((parent, leaf, [(parent, ("attr", key))] + below[1:]))
                    continue
                nxt.append((parent, leaf, [(parent, step)] + below))
        level = nxt
    return found


def _additions(path, name, kinds):
    """Lines of the source at PATH that add to a container, or set an
    attribute, named NAME (the last name of its path): `history.append(`,
    `self.buf.add(`, `cache[k] = ...`, `self.last = ...`. At most three,
    as "file:line"."""
    if not path or not str(path).endswith(".py"):
        return []
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except Exception:
        return []

    def last_name(node):
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        return None

    lines = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            hit = "add" in kinds and node.func.attr in _ADDS and \
                last_name(node.func.value) == name
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if "add" in kinds and isinstance(t, ast.Subscript) and last_name(t.value) == name:
                    hit = True
                if "set" in kinds and isinstance(t, ast.Attribute) and t.attr == name:
                    hit = True
                if "add" in kinds and isinstance(node, ast.AugAssign) and last_name(t) == name:
                    hit = True
        if hit:
            lines.append(node.lineno)
    base = str(path).split("/")[-1]
    return ["%s:%d" % (base, n) for n in sorted(set(lines))[:3]]


def _describe(array_name, entry):
    """The text of a named path: "list `history` of module __main__;
    appended at train.py:15", "attribute `trainer.last` of module __main__;
    set at train.py:30", "tensor `x` (local of main() at train.py:40)"."""
    name, where, path, steps = entry
    if not steps:
        return _short("%s `%s`%s" % (array_name, name, where), _TEXT_MAX)
    # PyTorch's modules keep parameters, buffers and submodules in dicts
    # under their attribute names: `net._parameters['weight']` is
    # `net.weight`, a parameter.
    steps = list(steps)
    role = None
    for k in range(len(steps) - 1, 0, -1):
        (_, prev), (holder, step) = steps[k - 1], steps[k]
        if prev[0] == "attr" and prev[1] in _MODULE_DICTS and step[0] == "key":
            steps[k - 1:k + 1] = [(steps[k - 1][0], ("attr", step[1].strip("'\"")))]
            if k == len(steps):
                role = _MODULE_DICTS[prev[1]]
    expr = name + "".join(_step_text(s) for _, s in steps[:-1])
    holder, last = steps[-1]
    if role is not None:
        return _short("%s `%s.%s`%s" % (role, expr, last[1], where), _TEXT_MAX)
    files = [path]
    for parent, _ in steps:
        mod = sys.modules.get(getattr(type(parent), "__module__", "") or "")
        f = _module_file(mod) if mod is not None else None
        if f and f not in files:
            files.append(f)
    if last[0] == "attr":
        text = "attribute `%s.%s`%s" % (expr, last[1], where)
        target, kinds, verb = last[1], ("set",), "set"
    else:
        kind = type(holder).__name__
        text = "%s `%s`%s" % (kind, expr, where)
        target = expr.split(".")[-1].split("[")[0]
        kinds, verb = ("add",), "appended" if isinstance(holder, list) else "added"
    adds = []
    for f in files:
        adds += [a for a in _additions(f, target, kinds) if a not in adds]
    if adds:
        text += "; %s at %s" % (verb, ", ".join(adds[:3]))
    return _short(text, _TEXT_MAX)


def find_holders(live, frames=(), budget=30.0):
    """What holds each of the LIVE allocations ((id, address, size), ...):
    {id: text} for those an array of the program refers to, named from a
    module global or a local variable of FRAMES (frame objects, e.g. those
    of sys._current_frames()) down. Stops after BUDGET seconds with what
    it has."""
    with warnings.catch_warnings():
        # Looking at every object touches deprecated ones, which warn.
        warnings.simplefilter("ignore")
        return _find_holders(live, frames, budget)


def _find_holders(live, frames, budget):
    deadline = time.monotonic() + budget
    index = _Live(live)
    if not index.rows:
        return {}
    arrays = _Arrays()
    # The arrays in the allocations: from the referents of every object the
    # garbage collector tracks (an array need not be tracked itself) and
    # of the frames' locals.
    found = {}  # id(array) -> (array, allocation id)
    frames = list(frames)
    sources = []
    for f in frames:
        try:
            sources.append(list(f.f_locals.values()))
        except Exception:
            pass
    for o in gc.get_objects():
        if time.monotonic() > deadline:
            break
        if isinstance(o, types.FrameType):
            continue
        try:
            sources.append(gc.get_referents(o))
        except Exception:
            continue
    for refs in sources:
        for r in refs:
            if id(r) in found:
                continue
            kind = arrays.kind(r)
            if kind is None:
                continue
            for addr in arrays.addresses(r, kind):
                i = index.find(addr)
                if i is not None:
                    found[id(r)] = (r, i, kind)
                    break
    sources = None
    namer = _Namer(frames, deadline)
    paths = _named_paths(namer, {k: v[0] for k, v in found.items()})
    out = {}
    for key, (array, i, kind) in found.items():
        entry = paths.get(key)
        if entry is not None and i not in out:
            out[i] = _describe({"torch": "tensor", "jax": "array"}.get(kind, type(array).__name__),
                               entry)
    # Tensors kept only by the autograd graph of a named one.
    _graphs(arrays, index, [(a, i) for a, i, k in found.values() if k == "torch" and i in out],
            out, deadline)
    return out


def _graphs(arrays, index, tensors, out, deadline):
    """Allocations saved by the autograd graph of a named tensor: "the
    autograd graph of a tensor in list `losses` of module __main__"."""
    for t, i in tensors:
        if time.monotonic() > deadline:
            break
        fn = getattr(t, "grad_fn", None)
        todo, seen = ([fn] if fn is not None else []), set()
        while todo and len(seen) < 20000:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            for name in dir(node):
                if not name.startswith("_saved_"):
                    continue
                try:
                    v = getattr(node, name)
                except Exception:  # freed by a backward pass
                    continue
                for s in v if isinstance(v, (list, tuple)) else [v]:
                    kind = arrays.kind(s)
                    for addr in arrays.addresses(s, kind) if kind else []:
                        j = index.find(addr)
                        if j is not None and j not in out:
                            out[j] = _short("the autograd graph of %s" % out[i], _TEXT_MAX)
            for nxt in getattr(node, "next_functions", ()) or ():
                todo.append(nxt[0] if isinstance(nxt, tuple) else nxt)


# ---------------------------------------------------------------------------
# Under vram record
# ---------------------------------------------------------------------------


def _all_frames():
    """Every thread's frames but this module's own: a list of them held by
    a frame of this module would be a cycle that keeps every local alive
    until the garbage collector runs."""
    frames = []
    for f in sys._current_frames().values():
        while f is not None:
            if f.f_code.co_filename != __file__:
                frames.append(f)
            f = f.f_back
    return frames


class Recorder:
    """The recording's Python side: CALL(op, ...) is the preload library's
    function ("mark", LABEL: a mark in the trace; "live": the live
    allocations as "id address size" lines; "held", TEXT: "id<TAB>text"
    lines written as the trace's "#@held" lines; "watch", CODE, FN: call
    FN(frame) when a frame of CODE returns, before Python 3.12)."""

    # A search waits until the time since the last one is this many times
    # what the last one cost: at most a twentieth of the run.
    SHARE = 20

    def __init__(self, call, tool=-1):
        self.call = call
        self.tool = tool
        self.searching = False
        self.last_end = 0.0
        self.last_cost = 0.0
        self.searches = 0
        self.returned = set()  # code objects whose return was searched

    def mark(self, label):
        self.call("mark", str(label))
        self.maybe_search()

    def due(self):
        return self.searches == 0 or \
            time.monotonic() - self.last_end >= self.SHARE * self.last_cost

    def maybe_search(self, frames=None):
        if self.due():
            self.search(frames)

    def search(self, frames=None, budget=30.0):
        """Name the holders of every live allocation now, into the trace."""
        if self.searching:
            return
        self.searching = True
        start = time.monotonic()
        try:
            text = self.call("live") or ""
            live = []
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 3:
                    live.append((int(parts[0]), int(parts[1]), int(parts[2])))
            own = frames is None
            if own:
                frames = _all_frames()
            found = find_holders(live, frames, budget=budget)
            if own:
                frames.clear()
            if found:
                self.call("held", "".join("%d\t%s\n" % (i, t.replace("\n", " "))
                                          for i, t in sorted(found.items())))
        except Exception as e:  # never the program's failure
            sys.stderr.write("vram: record: naming what holds memory failed: %s\n" % e)
        finally:
            end = time.monotonic()
            self.last_cost = end - start
            self.last_end = end
            self.searches += 1
            self.searching = False

    def on_return(self, frame):
        """A top-level function of the main module returns: its locals are
        still there. Its first return is always searched (a main() returns
        once, and the memory its locals kept is freed next); later ones of
        the same function (a train_step() called from the module's loop)
        when due."""
        code = frame.f_code
        if code not in self.returned or self.due():
            self.returned.add(code)
            frames = [frame] + _all_frames()
            try:
                self.search(frames)
            finally:
                frames.clear()

    def at_exit(self):
        self.search(budget=60.0)


def _top_level_code():
    """The code of the function of the main module running now below its
    module level (main()), or None."""
    f = sys._getframe(1)
    while f is not None and f.f_back is not None:
        back = f.f_back
        if back.f_code.co_name == "<module>" and back.f_globals.get("__name__") == "__main__":
            return f.f_code if f.f_code.co_name != "<module>" else None
        f = back
    return None


def install(call, tool=-1):
    """Make the recording's Python side: sys._vram_record (what vram.mark
    calls), a search at exit, and one when the main module's top-level
    function running now returns (through sys.monitoring's tool TOOL from
    Python 3.12, else the preload library's profile function)."""
    rec = Recorder(call, tool)
    # Marks the program made before its first GPU allocation (vram.mark
    # kept them): the recording's first events.
    for label in sys.__dict__.pop("_vram_pending_marks", []):
        call("mark", str(label))
    sys._vram_record = rec
    atexit.register(rec.at_exit)
    code = _top_level_code()
    if code is not None:
        mon = getattr(sys, "monitoring", None)
        if mon is not None and tool >= 0:
            def on_py_return(c, offset, retval):
                rec.on_return(sys._getframe(1))
            try:
                mon.register_callback(tool, mon.events.PY_RETURN, on_py_return)
                mon.set_local_events(tool, code, mon.events.PY_RETURN)
            except Exception:
                pass
        else:
            try:
                call("watch", code, rec.on_return)
            except Exception:
                pass
    return rec
