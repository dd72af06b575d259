#!/bin/sh
# SPDX-License-Identifier: MIT
# test_shm_full.sh -- a full /dev/shm never kills a CUDA program: in a
# private mount namespace (unshare -m) with a tiny tmpfs on /dev/shm, filled
# to the last block, a program under the preload library (the probe, over
# the fake driver) that must create its group's ledger gets
# CUDA_ERROR_OUT_OF_MEMORY for its allocation and one line naming the
# ledger, not a SIGBUS; a program joining a ledger made before the fill
# works (its blocks were allocated when it was made); once room is made
# again, a new group works. Exit 77 (skipped) without root or unshare.
# Usage: test_shm_full.sh LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR
set -u
if [ "${1:-}" != --inside ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
        echo "skipped: needs root and unshare (a private /dev/shm)"
        exit 77
    fi
    exec unshare -m --propagation private sh "$0" --inside "$@"
fi
shift
PRELOAD=$1
BIN=$2
FAKE=$3
PROBE=$BIN/preload_probe
. "$(dirname "$0")/../cli/lib.sh"
test_begin shmfull
# This namespace's own /dev/shm: 1 MiB, room for two ledgers (the
# mount goes with the namespace when the test ends).
mount -t tmpfs -o size=1m,mode=1777 tmpfs /dev/shm || { echo "skipped: cannot mount a tmpfs"; exit 77; }
LIBPATH="$FAKE:$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
U=$(id -u)

# run VAR=VALUE... -- ARGS: the probe with the preload; status in $rc.
run() {
    vars=""
    while [ "$1" != "--" ]; do vars="$vars $1"; shift; done
    shift
    # shellcheck disable=SC2086
    env $vars LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" timeout 60 "$PROBE" "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# A group whose ledger is made while there is room: its holder keeps it.
env LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$LIBPATH" VRAM_LIMIT=1G VRAM_GROUP=early \
    "$PROBE" hold 16 0 "$TMP/stop" >"$TMP/hold" 2>"$TMP/hold.err" &
HOLD=$!
test_cleanup() { touch "$TMP/stop"; kill -9 "$HOLD" 2>/dev/null; wait 2>/dev/null; }
i=0
while [ $i -lt 100 ] && ! grep -q held "$TMP/hold"; do sleep 0.1; i=$((i + 1)); done
check "a ledger made while there is room" "grep -q held $TMP/hold"
check "... has all its blocks: a sparse file would take them when written" \
    "[ \$(du -k /dev/shm/vram-$U/early | cut -f1) -ge \$((\$(stat -c %s /dev/shm/vram-$U/early) / 1024)) ]"

# Fill /dev/shm to its last block.
dd if=/dev/zero of=/dev/shm/fill bs=4096 2>/dev/null
check "/dev/shm is full" "! dd if=/dev/zero of=/dev/shm/more bs=4096 count=1 2>/dev/null"
rm -f /dev/shm/more

run VRAM_LIMIT=1G VRAM_GROUP=late -- alloc 32 0 2
check "a new group on a full /dev/shm: the allocation gets CUDA_ERROR_OUT_OF_MEMORY, no signal" \
    "[ $rc -eq 0 ] && grep -q 'alloc 32 MiB on 0: 2 ' $TMP/out"
check "... with one line naming the ledger and the lack of room" \
    "[ \$(wc -l <$TMP/err) -eq 1 ] && grep -q \"^vram: cuMemAlloc_v2 refused: cannot create the ledger of group late: ledger /dev/shm/vram-$U[^ ]*/late: cannot allocate its [0-9]* bytes: No space left on device\$\" $TMP/err"
check "... and no ledger of it left behind" "[ ! -e /dev/shm/vram-$U/late ]"
run VRAM_LIMIT=1G -- alloc 32 0 2
check "a private group on a full /dev/shm: CUDA_ERROR_OUT_OF_MEMORY too" \
    "[ $rc -eq 0 ] && [ \$(wc -l <$TMP/err) -eq 1 ] && grep -q '^vram: cuMemAlloc_v2 refused: cannot create the ledger of group pid-' $TMP/err"

run VRAM_LIMIT=1G VRAM_GROUP=early -- alloc 32 0 0
check "joining a ledger made before the fill works" "[ $rc -eq 0 ] && [ ! -s $TMP/err ] || { cat $TMP/out $TMP/err; false; }"

rm -f /dev/shm/fill
run VRAM_LIMIT=1G VRAM_GROUP=late -- alloc 32 0 0
check "with room again, a new group works" "[ $rc -eq 0 ] && [ ! -s $TMP/err ]"

touch "$TMP/stop"
wait "$HOLD"
test_end
