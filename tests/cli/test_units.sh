#!/bin/sh
# SPDX-License-Identifier: MIT
# test_units.sh -- sizes as a user meets them, and the exit statuses that
# tell a script what happened:
#   - a number without a unit is refused, with the forms that say what was
#     meant, by every size option and every size variable vram owns; HAMi's
#     variables keep HAMi's convention (bytes);
#   - a size as vram prints it ("5.00 GiB") is accepted where a size is;
#   - every value `vram env` shows, pasted back into its variable, is the
#     same value;
#   - a malformed variable makes every command that reports it exit non-zero
#     (vram env, --json, --check, stat --config, doctor);
#   - `vram plan` exits 3 when the job does not fit --gpu-memory, 0 when it
#     does, and says so in --help.
# Usage: test_units.sh VRAM REPO_ROOT
set -u
VRAM=$1
ROOT=$2
. "$(dirname "$0")/lib.sh"
test_begin units
TRACE=$ROOT/data/traces/leak_mlp.trace.csv.gz
run() { vram_cmd "$@"; }
# expect_rc NAME CODE
expect_rc() { if [ "$rc" -eq "$2" ]; then pass "$1"; else fail "$1" "exit $rc, expected $2"; fi; }
# A small model, so that plan is quick: a total of a few MiB.
SMALL="--arch gpt2 --layers 2 --hidden 64 --heads 2 --vocab 100 --positions 64 --batch 1 --seq 8"

# ---- a number without a unit, on the command line ----
for args in "plan $SMALL --gpu-memory 80" "replay --limit 80 $TRACE" \
    "replay --device-memory 80 $TRACE" "analyze --limit 80 $TRACE" \
    "analyze --device-memory 80 $TRACE" "doctor --limit 80 $TRACE" \
    "tune --device-memory 80 --trace $TRACE"; do
    # shellcheck disable=SC2086
    run "" -- $args
    opt=$(echo "$args" | sed 's/.*\(--[a-z-]*\) 80.*/\1/')
    cmd=${args%% *}
    expect_error "vram $cmd $opt 80: refused with the forms to write" 2 \
        "$cmd: $opt: '80': a size needs a unit: 80G (GiB), 80M (MiB) or 80B (bytes)"
done
run "" -- plan $SMALL --gpu-memory 85899345920
expect_error "a byte count without B: the exact forms, and why it changed" 2 \
    "plan: --gpu-memory: '85899345920': a size needs a unit: 85899345920B for bytes (= 80G), as earlier versions read a bare number"
run "" -- run --limit 80 -- true
expect_error "vram run --limit 80" 2 "run: --limit: VRAM_LIMIT='80': '80': a size needs a unit"

# ---- sizes as vram prints them, and with their unit ----
for s in "5.00 GiB" 5G 5120M 5368709120B "5 GiB"; do
    run "" -- plan $SMALL --gpu-memory "$s" --json
    if [ "$rc" -eq 0 ] && grep -q '"gpu_memory_bytes": *5368709120' "$TMP/out"; then
        pass "--gpu-memory '$s' is 5 GiB"
    else
        fail "--gpu-memory '$s' is 5 GiB" "exit $rc"
    fi
done
run "" -- replay --limit "512.00 MiB" --json "$TRACE"
expect_rc "replay --limit '512.00 MiB'" 0

# ---- vram plan: exit 3 when the job does not fit ----
run "" -- plan $SMALL --gpu-memory 1M
expect_rc "plan: does not fit 1 MiB: exit 3" 3
if grep -q "does NOT fit" "$TMP/out" && [ ! -s "$TMP/err" ]; then
    pass "plan: the report is printed all the same, nothing on stderr"
else
    fail "plan: the report is printed all the same"
fi
run "" -- plan $SMALL --gpu-memory 1M --json
if [ "$rc" -eq 3 ] && grep -q '"fits": *false' "$TMP/out"; then pass "plan --json: exit 3, fits false"
else fail "plan --json: exit 3, fits false" "exit $rc"; fi
run "" -- plan $SMALL --gpu-memory 80G
expect_rc "plan: fits 80 GiB: exit 0" 0
run "" -- plan $SMALL
expect_rc "plan without --gpu-memory: exit 0" 0
run "" -- plan --arch gpt2 --layers 2 --hidden 64 --heads 2 --vocab 100 --positions 64 \
    --generate --batch 1 --prompt 8 --new-tokens 8 --gpu-memory 1M
expect_rc "plan --generate: does not fit: exit 3" 3
run "" -- plan --help
expect_match "plan --help documents exit 3" "3 the job does not fit"

# ---- vram env: values paste back ----
# Each variable set to an unusual spelling; the value vram env shows, set
# again, must show the same (in --json, where values are whole).
values() {
    /usr/bin/python3 -c '
import json, sys
for v in json.load(open(sys.argv[1]))["variables"]:
    if v["name"] in sys.argv[2:]:
        print("%s=%s" % (v["name"], v.get("value", "ERROR " + v.get("error", ""))))
' "$TMP/out" "$@"
}
NAMES="VRAM_SIM_MEMORY VRAM_MEMORY_LIMIT VRAM_MEMORY_FRACTION TF_DEVICE_MIN_SYS_MEMORY_IN_MB VRAM_LIMIT"
# (vram_cmd splits its variables at spaces: env is called here directly.)
env VRAM_SIM_MEMORY="140.40 GiB" VRAM_MEMORY_LIMIT=0:1.5G+3072M,3:6144m \
    VRAM_MEMORY_FRACTION=12.5% TF_DEVICE_MIN_SYS_MEMORY_IN_MB=00500 \
    VRAM_LIMIT=GPU-8c6f1e2a:6144MiB,1:0.5 "$VRAM" env --json >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "vram env (unusual spellings): exit 0" 0
# shellcheck disable=SC2086
values $NAMES >"$TMP/first"
check "vram env shows the values as the variables take them" \
    "grep -qx 'VRAM_MEMORY_LIMIT=0:1536M+3G,3:6G' '$TMP/first' && grep -qx 'VRAM_LIMIT=GPU-8c6f1e2a:6G,1:50%' '$TMP/first' && grep -qx 'TF_DEVICE_MIN_SYS_MEMORY_IN_MB=500' '$TMP/first'"
set --
while IFS= read -r assignment; do set -- "$@" "$assignment"; done <"$TMP/first"
env "$@" "$VRAM" env --json >"$TMP/out" 2>"$TMP/err"
rc=$?
# shellcheck disable=SC2086
values $NAMES >"$TMP/second"
if [ "$rc" -eq 0 ] && cmp -s "$TMP/first" "$TMP/second"; then
    pass "every value vram env shows, pasted back, is the same value"
else
    fail "vram env values paste back" "exit $rc; $(diff "$TMP/first" "$TMP/second" | tr '\n' ' ')"
fi
# HAMi's convention: a bare number is bytes.
run env CUDA_DEVICE_MEMORY_LIMIT=6442450944 CUDA_DEVICE_MEMORY_LIMIT_1=1000 -- --json
values CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_LIMIT_\<i\> >"$TMP/hami"
check "HAMi's bare numbers are bytes (exit $rc)" \
    "[ $rc -eq 0 ] && grep -qx 'CUDA_DEVICE_MEMORY_LIMIT=6G' '$TMP/hami' && grep -qx 'CUDA_DEVICE_MEMORY_LIMIT_<i>=device 1: 1000B' '$TMP/hami'"

# ---- a malformed variable: every command that reports it exits non-zero ----
for var in VRAM_SIM_MEMORY VRAM_MEMORY_LIMIT VRAM_LIMIT; do
    run env "$var=80" --
    if [ "$rc" -eq 2 ] && grep -q "^$var  *error: $var='80': '80': a size needs a unit" "$TMP/out"; then
        pass "vram env with $var=80: flagged, exit 2"
    else
        fail "vram env with $var=80: flagged, exit 2" "exit $rc"
    fi
    run env "$var=80" -- --json
    expect_rc "vram env --json with $var=80: exit 2" 2
    run env "$var=80" -- --check
    expect_error "vram env --check with $var=80: exit 2, naming it" 2 "$var='80': '80': a size needs a unit"
    run stat "$var=80" -- --config
    expect_rc "vram stat --config with $var=80: exit 2" 2
    run doctor "$var=80" VRAM_BACKEND=sim -- --json
    if [ "$rc" -eq 1 ] && grep -q "\"evidence\": *\"$var='80'" "$TMP/out"; then
        pass "vram doctor with $var=80: a problem naming it, exit 1"
    else
        fail "vram doctor with $var=80: a problem naming it, exit 1" "exit $rc: $(head -c 300 "$TMP/out")"
    fi
done
run env -- --check
expect_ok "vram env --check, nothing set: exit 0, silent"
run env --
expect_rc "vram env, nothing set: exit 0" 0
test_end
