#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_instructions.sh -- instructions (callgrind's Ir) per vram_alloc,
# per vram_free and per replayed event, for each trace under each strategy
# on the simulated backend: a measure of the allocator's host cost that a
# loaded machine does not change, for comparing two builds.
# Usage: scripts/bench_instructions.sh [--warm] VRAM_BINARY TRACE...
# Prints one Markdown row per trace and strategy: calls and instructions
# per call of vram_alloc and vram_free (inclusive of what they call), and
# the replay loop's instructions per trace event (replay_once's inclusive
# count less opening, configuring and closing the simulated device).
# --warm: also the steady state's, per event of the timed pass of `vram
# replay --warm` (its loop less the cold run's: the timed pass, and the
# frees between the passes of what the trace left live).
set -eu

warm=0
if [ "${1:-}" = --warm ]; then
    warm=1
    shift
fi
if [ $# -lt 2 ]; then
    echo "usage: scripts/bench_instructions.sh [--warm] VRAM_BINARY TRACE..." >&2
    exit 2
fi
command -v valgrind >/dev/null || { echo "bench_instructions.sh: valgrind is not installed" >&2; exit 2; }
vram=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every strategy the binary knows, from its help: "Strategies: a b ... (or 'all')."
strategies=$("$vram" replay --help | sed -n "s/^Strategies: \(.*\) (or 'all')\.\$/\1/p")
[ -n "$strategies" ] || { echo "bench_instructions.sh: no strategy list in '$vram replay --help'" >&2; exit 1; }

if [ "$warm" = 1 ]; then
    echo "| trace | strategy | events | vram_alloc calls | Ir/alloc | vram_free calls | Ir/free | Ir/event (loop) | Ir/event (warm pass) |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
else
    echo "| trace | strategy | events | vram_alloc calls | Ir/alloc | vram_free calls | Ir/free | Ir/event (loop) |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
fi
for trace in "$@"; do
    events=$(gzip -dcf "$trace" | grep -c '^[^#]' || true)
    events=$((events - 1)) # the header line
    for st in $strategies; do
        valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
            "$vram" replay --backend sim --strategy "$st" "$trace" >/dev/null 2>"$tmp/log" ||
            { cat "$tmp/log" >&2; exit 1; }
        warm_out=-
        if [ "$warm" = 1 ]; then
            warm_out=$tmp/warm
            valgrind --tool=callgrind --callgrind-out-file="$warm_out" \
                "$vram" replay --backend sim --strategy "$st" --warm "$trace" >/dev/null \
                2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
        fi
        python3 - "$tmp/out" "$warm_out" "$(basename "$trace" .trace.csv.gz)" "$st" "$events" <<'PY'
import re, sys
path, warm_path, trace, st, events = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def profile(path):
    """Calls and inclusive instructions per function of one callgrind file."""
    names, calls, incl = {}, {}, {}
    def name(tok):
        # "(12) name" defines id 12; "(12)" refers to it.
        m = re.match(r'\((\d+)\)(?: (.*))?', tok)
        if not m:
            return tok
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]
    cfn, pending = None, None
    with open(path) as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('fn='):
                name(line[3:])
            elif line.startswith('cfn='):
                cfn = name(line[4:])
            elif line.startswith('calls='):
                pending = (cfn, int(line[6:].split()[0]))
            elif pending is not None and line and (line[0].isdigit() or line[0] in '+-*'):
                fn, n = pending
                cost = int(line.split()[1])
                calls[fn] = calls.get(fn, 0) + n
                incl[fn] = incl.get(fn, 0) + cost
                pending = None
    return calls, incl
def loop(incl):
    """The loop alone: without opening, configuring and closing the device."""
    return incl.get('replay_once', 0) - sum(
        incl.get(f, 0) for f in ('vram_open', 'vram_configure', 'vram_device_get', 'vram_close'))
calls, incl = profile(path)
def per(fn, n):
    return '%.1f' % (incl.get(fn, 0) / n) if n else '-'
a, fr = calls.get('vram_alloc', 0), calls.get('vram_free', 0)
row = '| %s | %s | %d | %d | %s | %d | %s | %.1f |' % (
    trace, st, events, a, per('vram_alloc', a), fr, per('vram_free', fr), loop(incl) / events)
if warm_path != '-':
    row += ' %.1f |' % ((loop(profile(warm_path)[1]) - loop(incl)) / events)
print(row)
PY
    done
done
