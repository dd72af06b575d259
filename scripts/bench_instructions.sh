#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_instructions.sh -- instructions (callgrind's Ir) per vram_alloc,
# per vram_free and per replayed event, for each trace under each strategy
# on the simulated backend: a measure of the allocator's host cost that a
# loaded machine does not change, for comparing two builds.
# Usage: scripts/bench_instructions.sh VRAM_BINARY TRACE...
# Prints one Markdown row per trace and strategy: calls and instructions
# per call of vram_alloc and vram_free (inclusive of what they call), and
# the replay loop's instructions per trace event (replay_once's inclusive
# count less opening, configuring and closing the simulated device).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: scripts/bench_instructions.sh VRAM_BINARY TRACE..." >&2
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

echo "| trace | strategy | events | vram_alloc calls | Ir/alloc | vram_free calls | Ir/free | Ir/event (loop) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for trace in "$@"; do
    events=$(gzip -dcf "$trace" | grep -c '^[^#]' || true)
    events=$((events - 1)) # the header line
    for st in $strategies; do
        valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
            "$vram" replay --backend sim --strategy "$st" "$trace" >/dev/null 2>"$tmp/log" ||
            { cat "$tmp/log" >&2; exit 1; }
        python3 - "$tmp/out" "$(basename "$trace" .trace.csv.gz)" "$st" "$events" <<'PY'
import re, sys
path, trace, st, events = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
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
def per(fn, n):
    return '%.1f' % (incl.get(fn, 0) / n) if n else '-'
a, fr = calls.get('vram_alloc', 0), calls.get('vram_free', 0)
# The loop alone: without opening, configuring and closing the device.
loop = incl.get('replay_once', 0) - sum(
    incl.get(f, 0) for f in ('vram_open', 'vram_configure', 'vram_device_get', 'vram_close'))
print('| %s | %s | %d | %d | %s | %d | %s | %.1f |' % (
    trace, st, events, a, per('vram_alloc', a), fr, per('vram_free', fr), loop / events))
PY
    done
done
