#!/bin/sh
# SPDX-License-Identifier: MIT
# test_devices.sh -- `vram devices` as a user runs it: against the fake CUDA
# driver (found as libcuda.so.1 through LD_LIBRARY_PATH), on the simulated
# backend, with logical devices from VRAM_MEMORY_LIMIT / _FRACTION, and
# with no driver or no device (exit 1, one line). The last line is
# "N passed, M failed"; the exit status is 1 if anything failed.
# Usage: tests/cli/test_devices.sh path/to/vram FAKECUDA_DIR
set -u

if [ $# -ne 2 ]; then
    echo "usage: test_devices.sh VRAM_BINARY FAKECUDA_DIR" >&2
    exit 2
fi
VRAM=$1
FAKE=$2

. "$(dirname "$0")/lib.sh"
test_begin devices

# run VAR=VALUE... -- ARGS...: vram devices (lib.sh's vram_cmd).
run() { vram_cmd devices "$@"; }

# expect_out NAME TEXT: stdout contains TEXT (a fixed string).
expect_out() {
    if grep -qF -- "$2" "$TMP/out"; then pass "$1"; else fail "$1" "no '$2' in the output"; fi
}

# jcheck NAME EXPR...: stdout is one JSON object `o` and each Python EXPR holds.
jcheck() {
    jname=$1
    shift
    if python3 -c '
import json, sys
text = sys.stdin.read()
if text.count("\n") != 1:
    sys.exit("expected exactly one line of output")
o = json.loads(text)
for e in sys.argv[1:]:
    if not eval(e, {}, {"o": o}):
        sys.exit("%s is false for %s" % (e, text.strip()))
' "$@" <"$TMP/out" 2>"$TMP/jerr"; then
        pass "$jname"
    else
        fail "$jname" "$(tail -n 1 "$TMP/jerr")"
    fi
}

# The fake goes first on the library path, ahead of any real driver.
CUDA="LD_LIBRARY_PATH=$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} VRAM_BACKEND=cuda"
GIB=1073741824

# ---- usage ----
run -- --help
expect_ok "devices --help"
expect_out "help names --json" "--json"
run -- --bogus
expect_error "unknown option" 2 "devices: unknown option"
run -- extra
expect_error "unexpected argument" 2 "devices: unexpected argument"

# ---- the fake CUDA driver ----
run $CUDA --
expect_ok "fake driver: table"
expect_out "fake driver: first UUID" "GPU-facecda0-0001-4000-8000-000000000000"
expect_out "fake driver: second UUID" "GPU-facecda0-0001-4000-8000-000000000001"
expect_out "fake driver: name" "Fake GPU"
expect_out "fake driver: total in IEC units" "1.00 GiB"
expect_out "fake driver: default cap is TensorFlow's rule" "free - reserve (TensorFlow's rule)"
expect_out "fake driver: default strategy" "expandable"

run $CUDA -- --json
expect_ok "fake driver: --json"
jcheck "fake driver: --json physical" \
    "set(o) == {'physical', 'logical'}" "len(o['physical']) == 2" \
    "[p['index'] for p in o['physical']] == [0, 1]" \
    "all(p['total_bytes'] == $GIB and p['free_bytes'] == $GIB for p in o['physical'])" \
    "all(p['name'] == 'Fake GPU' and p['uuid'].startswith('GPU-facecda0-') for p in o['physical'])" \
    "all(p['compute_capability'] == '9.0' and p['granularity_bytes'] == 2097152 for p in o['physical'])"
jcheck "fake driver: --json logical, nothing initialized" \
    "len(o['logical']) == 2" "[l['physical'] for l in o['logical']] == [0, 1]" \
    "all(l['cap_bytes'] is None and l['cap_rule'] == 'free_minus_reserve' for l in o['logical'])"

run $CUDA VRAM_MEMORY_LIMIT=0:256M+128M,1:512M VRAM_STRATEGY=growth -- --json
expect_ok "fake driver: split by VRAM_MEMORY_LIMIT"
jcheck "split: three logical devices with their caps" \
    "len(o['logical']) == 3" "[l['index'] for l in o['logical']] == [0, 1, 2]" \
    "[l['physical'] for l in o['logical']] == [0, 0, 1]" \
    "[l['cap_bytes'] for l in o['logical']] == [256 << 20, 128 << 20, 512 << 20]" \
    "all(l['cap_rule'] == 'memory_limit' and l['strategy'] == 'growth' for l in o['logical'])"
run $CUDA VRAM_MEMORY_LIMIT=0:256M+128M,1:512M VRAM_STRATEGY=growth --
expect_ok "split: table"
expect_out "split: table shows the limit" "256.00 MiB (memory limit)"

run $CUDA VRAM_MEMORY_FRACTION=50% -- --json
expect_ok "fake driver: VRAM_MEMORY_FRACTION"
jcheck "fraction: half of total" \
    "all(l['cap_bytes'] == $GIB // 2 and l['cap_rule'] == 'memory_fraction' for l in o['logical'])"

# ---- the simulated backend ----
run VRAM_BACKEND=sim VRAM_SIM_DEVICES=3 VRAM_SIM_MEMORY=80G -- --json
expect_ok "sim: --json"
jcheck "sim: three devices of 80 GiB" "len(o['physical']) == 3" \
    "all(p['total_bytes'] == 80 * $GIB for p in o['physical'])" "len(o['logical']) == 3"
run VRAM_BACKEND=sim --
expect_ok "sim: table"
expect_out "sim: name" "Simulated GPU"

# ---- failures: one line each ----
run $CUDA FAKECUDA_FAIL=cuInit --
expect_error "driver whose cuInit fails" 1 "no CUDA driver: cuInit: CUDA_ERROR_UNKNOWN"
run $CUDA FAKECUDA_DEVICES=0 -- --json
expect_error "driver without devices" 1 "cannot open the device backend: "
run $CUDA VRAM_MEMORY_FRACTION=2 --
expect_error "malformed variable" 2 "VRAM_MEMORY_FRACTION"
# No driver at all: only where the system has none of its own.
has_driver=0
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then has_driver=1; fi
for d in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
    if [ -e "$d/libcuda.so.1" ]; then has_driver=1; fi
done
if [ $has_driver -eq 1 ]; then
    echo "skip no driver: this machine has libcuda.so.1"
else
    run VRAM_BACKEND=cuda --
    expect_error "no driver" 1 "no CUDA driver: CUDA driver not found (libcuda.so.1: "
    run -- --json
    expect_error "no driver, default backend" 1 "no CUDA driver: "
fi

test_end
