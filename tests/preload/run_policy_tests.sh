#!/bin/sh
# SPDX-License-Identifier: MIT
# run_policy_tests.sh -- the host's policy file (/etc/vram/policy.conf)
# applied to every process through /etc/ld.so.preload, with two Unix users
# whose processes reach the fake CUDA driver (probe.c).
#
# Nothing on the machine changes: the script re-runs itself in a private
# mount namespace (unshare -m) where a copy of /etc is bound over /etc
# (so /etc/ld.so.preload, /etc/vram/policy.conf and the two users exist
# only there) and a fresh tmpfs is mounted on /dev/shm (so no ledger is
# left behind). The users are removed again at the end all the same, and
# every process started is killed.
#
# It covers: per-user quotas shared by many processes of a user, whatever
# their group; the effective limit is the smallest (VRAM_LIMIT, vram run
# --limit lower it, never raise it) and the refusal line names which one
# refused; root exempt; host ordinals through CUDA_VISIBLE_DEVICES; a user
# cannot read, change or join another user's accounting; a malformed,
# writable or symlinked policy fails closed with one line; `vram admin`;
# root's `vram stat --json` sees both users.
# The last line is "N passed, M failed"; exit 1 if anything failed, 77
# (skipped) without root or unshare.
# Usage: run_policy_tests.sh LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR VRAM
set -u

if [ $# -ne 4 ]; then
    echo "usage: run_policy_tests.sh LIBVRAM_PRELOAD PROBE_DIR FAKECUDA_DIR VRAM" >&2
    exit 2
fi
PRELOAD=$1
BIN=$2
FAKE=$3
VRAM=$4
PROBE=$BIN/preload_probe
FILL=$(dirname "$BIN")/ledger_fill
SELF=$(readlink -f "$0")

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null || ! command -v useradd >/dev/null ||
    ! command -v setpriv >/dev/null; then
    echo "skipped: needs root, unshare, useradd and setpriv"
    exit 77
fi

# ---- outside: enter the private namespace ----
if [ "${VRAM_POLICY_TEST_INSIDE:-}" != 1 ]; then
    ROOTDIR=$(mktemp -d /tmp/vram-policy-ns.XXXXXX) || exit 1
    chmod 755 "$ROOTDIR"
    trap 'rm -rf "$ROOTDIR"' EXIT INT TERM
    VRAM_POLICY_TEST_INSIDE=1 VRAM_POLICY_TEST_ROOT=$ROOTDIR \
        unshare -m --propagation private sh "$SELF" "$@"
    exit $?
fi

# ---- inside ----
ROOTDIR=$VRAM_POLICY_TEST_ROOT
cp -a /etc "$ROOTDIR/etc" || exit 1
mount --bind "$ROOTDIR/etc" /etc || exit 1
mount -t tmpfs -o mode=1777 vram-test-shm /dev/shm || exit 1
TMPDIR=$ROOTDIR
. "$(dirname "$SELF")/../cli/lib.sh"
test_begin policy
chmod 755 "$TMP"

UA=vrampa$$
UB=vrampb$$
GROUP_ML=vrampml$$
PIDS=""
test_cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    remove_user "$UA"
    remove_user "$UB"
    groupdel "$GROUP_ML" 2>/dev/null
}

groupadd "$GROUP_ML" || exit 1
useradd -M -N -g users -G "$GROUP_ML" -s /bin/sh "$UA" || exit 1
useradd -M -N -g users -s /bin/sh "$UB" || exit 1
UIDA=$(id -u "$UA")
UIDB=$(id -u "$UB")

# A failure shows the command's output as well as its errors.
fail() {
    failed=$((failed + 1))
    echo "FAIL $1: $2"
    sed 's/^/     out: /' "$TMP/out" | head -n 8
    sed 's/^/     err: /' "$TMP/err" | head -n 5
}

# The fake's shared counts, so that processes of both users see one device.
SHARED=$TMP/fake.counts
: >"$SHARED"
chmod 666 "$SHARED"
LIBPATH="$FAKE:$BIN"
mkdir -p /etc/vram
chmod 755 /etc/vram

# ---- vram admin: /etc/ld.so.preload ----
ZLIB=$(ls /usr/lib/*/libz.so.1 /lib/*/libz.so.1 2>/dev/null | head -n 1)
printf '%s\n' "$ZLIB" >/etc/ld.so.preload
"$VRAM" admin enable --preload "$PRELOAD" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(cat /etc/ld.so.preload)" = "$(printf '%s\n%s' "$(readlink -f "$PRELOAD")" "$ZLIB")" ]; then
    pass "admin enable: the library first, the file's other line kept"
else
    fail "admin enable: the library first, the file's other line kept" "exit $rc"
fi
"$VRAM" admin enable --preload "$PRELOAD" >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "nothing to do" "$TMP/out"; then
    pass "admin enable twice: nothing to do"
else
    fail "admin enable twice: nothing to do" "$(cat "$TMP/out")"
fi
cp /etc/ld.so.preload "$TMP/preload.before"
"$VRAM" admin enable --preload "$ZLIB" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "is not vram's preload library" "$TMP/err" &&
    cmp -s /etc/ld.so.preload "$TMP/preload.before"; then
    pass "admin enable refuses a library that is not vram's, writes nothing"
else
    fail "admin enable refuses a library that is not vram's" "exit $rc"
fi
mkdir -m 755 "$TMP/userlib"
cp "$PRELOAD" "$TMP/userlib/libvram-preload.so"
chown "$UA" "$TMP/userlib"
"$VRAM" admin enable --preload "$TMP/userlib/libvram-preload.so" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "$TMP/userlib is owned by uid $UIDA, not root" "$TMP/err" &&
    cmp -s /etc/ld.so.preload "$TMP/preload.before"; then
    pass "admin enable refuses a library that a user could replace"
else
    fail "admin enable refuses a library that a user could replace" "exit $rc"
fi
printf 'default 32M\nuser %s 64Q\n' "$UA" >/etc/vram/policy.conf
"$VRAM" admin disable >"$TMP/out" 2>"$TMP/err"
"$VRAM" admin enable --preload "$PRELOAD" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "^vram: /etc/vram/policy.conf:2: user $UA: '64Q': unknown unit 'Q'" "$TMP/err" &&
    [ "$(cat /etc/ld.so.preload)" = "$ZLIB" ]; then
    pass "admin enable refuses while the policy does not pass, writes nothing"
else
    fail "admin enable refuses while the policy does not pass" "exit $rc"
fi
"$VRAM" admin check >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ]; then
    pass "admin check: a malformed policy is exit 2 and one line"
else
    fail "admin check: a malformed policy is exit 2 and one line" "exit $rc"
fi
rm /etc/vram/policy.conf
"$VRAM" admin enable --preload "$PRELOAD" >"$TMP/out" 2>"$TMP/err" || fail "admin enable" "$(cat "$TMP/err")"

policy() {
    printf '%s\n' "$@" >/etc/vram/policy.conf
    chmod 644 /etc/vram/policy.conf
}

# as USER VAR=VALUE... -- PROGRAM ARGS: run as USER (or root) with a clean
# environment plus those variables; stdout/stderr in $TMP/out, err.
as() {
    who=$1
    shift
    vars=""
    while [ "$1" != "--" ]; do
        vars="$vars $1"
        shift
    done
    shift
    if [ "$who" = root ]; then
        # shellcheck disable=SC2086
        env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$LIBPATH" FAKECUDA_SHARED="$SHARED" \
            $vars timeout 60 "$@" >"$TMP/out" 2>"$TMP/err"
    else
        # shellcheck disable=SC2086
        env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$LIBPATH" FAKECUDA_SHARED="$SHARED" \
            $vars timeout 60 setpriv --reuid="$who" --regid=users --init-groups \
            "$@" >"$TMP/out" 2>"$TMP/err"
    fi
    rc=$?
}

# hold USER MIB DEV STOP VAR...: a process of USER holding MIB on DEV
# until the file STOP exists; waits until it holds (or was refused).
hold() {
    who=$1 mib=$2 dev=$3 stop=$4
    shift 4
    out=$TMP/hold.$$.$mib.$(date +%s%N)
    # shellcheck disable=SC2086
    env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$LIBPATH" FAKECUDA_SHARED="$SHARED" "$@" \
        setpriv --reuid="$who" --regid=users --init-groups \
        "$PROBE" hold "$mib" "$dev" "$stop" >"$out" 2>&1 &
    PIDS="$PIDS $!"
    i=0
    while ! grep -q "held\|refused\|FAIL" "$out" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 600 ] && break
        sleep 0.1
    done
    HELD=$(head -n 1 "$out")
}

# expect_alloc NAME RC ERR_REGEX: the last `as` ran probe alloc ...
# expecting it to succeed, and its stderr is empty (ERR_REGEX "") or one
# line matching ERR_REGEX.
expect_run() {
    if [ "$rc" -ne 0 ]; then fail "$1" "exit $rc"; return; fi
    if [ -z "$2" ]; then
        if [ -s "$TMP/err" ]; then fail "$1" "unexpected stderr"; return; fi
    else
        n=$(wc -l <"$TMP/err")
        if [ "$n" -ne 1 ] || ! grep -q -E -- "$2" "$TMP/err"; then
            fail "$1" "stderr is not one line matching $2"
            return
        fi
    fi
    pass "$1"
}

OOM=2
UUID0=GPU-facecda0-0001-4000-8000-000000000000
PC=/etc/vram/policy.conf
BY_POLICY_A="^vram: out of GPU memory quota on $UUID0: cuMemAlloc_v2 of [0-9.]+ MiB refused by the policy $PC, user $UA \(line 2\); quota 64.00 MiB, user $UA uses [0-9.]+ [A-Za-z]+"

# ---- per-user quotas ----
policy "default 32M" "user $UA 64M" "group $GROUP_ML 48M"
as "$UA" -- "$PROBE" alloc 48 0 0
expect_run "$UA's own rule (64M) over the default and the group: 48 MiB granted" ""
as "$UA" -- "$PROBE" alloc 80 0 $OOM
expect_run "$UA: 80 MiB past 64M refused, the line names the policy rule" "$BY_POLICY_A"
as "$UB" -- "$PROBE" alloc 48 0 $OOM
expect_run "$UB gets the default (32M): 48 MiB refused" \
    "refused by the policy $PC, default \(line 1\); quota 32.00 MiB, user $UB uses 0 B"
as root -- "$PROBE" alloc 80 0 0
expect_run "root is exempt: 80 MiB granted" ""

# Many processes of one user share the user's quota, whatever their group.
STOP1=$TMP/stop1
hold "$UA" 16 0 "$STOP1"
h1=$HELD
hold "$UA" 16 0 "$STOP1" VRAM_GROUP=job1
h2=$HELD
hold "$UA" 16 0 "$STOP1" VRAM_LIMIT=1G
h3=$HELD
if [ "$h1 $h2 $h3" = "held held held" ]; then
    pass "three processes of $UA (no group, group job1, VRAM_LIMIT=1G) hold 16 MiB each"
else
    fail "three processes of $UA hold 16 MiB each" "$h1 / $h2 / $h3"
fi
as "$UA" VRAM_GROUP=other -- "$PROBE" alloc 32 0 $OOM
expect_run "a fourth process of $UA in another group: 32 MiB more refused (48 of 64 held)" \
    "$BY_POLICY_A"
as "$UA" -- "$PROBE" alloc 16 0 0
expect_run "a fifth: 16 MiB (up to 64) granted" ""
as "$UB" -- "$PROBE" alloc 32 0 0
expect_run "$UB's quota is not $UA's: 32 MiB granted" ""
touch "$STOP1"
sleep 0.3

# Lower, never raise.
as "$UA" VRAM_LIMIT=1G -- "$PROBE" alloc 80 0 $OOM
expect_run "VRAM_LIMIT=1G does not raise $UA's 64M" "$BY_POLICY_A"
as "$UA" VRAM_LIMIT=16M -- "$PROBE" alloc 32 0 $OOM
expect_run "VRAM_LIMIT=16M lowers it, and the line says so" \
    "refused by VRAM_LIMIT; quota 16.00 MiB, group pid-"
as "$UA" -- "$VRAM" run --limit 1G -- "$PROBE" alloc 80 0 $OOM
expect_run "vram run --limit 1G does not raise it" "$BY_POLICY_A"
as "$UA" -- "$VRAM" run --limit 16M -- "$PROBE" alloc 32 0 $OOM
expect_run "vram run --limit 16M lowers it, and the line says so" \
    "refused by vram run --limit; quota 16.00 MiB, group run-"
as "$UA" CUDA_DEVICE_MEMORY_LIMIT=16m -- "$PROBE" alloc 32 0 $OOM
expect_run "HAMi's CUDA_DEVICE_MEMORY_LIMIT lowers it" \
    "refused by HAMi's CUDA_DEVICE_MEMORY_LIMIT; quota 16.00 MiB"
as "$UA" VRAM_GROUP=user-$UIDA -- "$PROBE" alloc 16 0 0
if [ "$rc" -ne 0 ] && grep -q "^vram: VRAM_GROUP=user-$UIDA: that name is the user's account under $PC, not a job's; CUDA is disabled in this process$" "$TMP/err"; then
    pass "VRAM_GROUP=user-<uid> (the user's own account) fails closed"
else
    fail "VRAM_GROUP=user-<uid> fails closed" "exit $rc"
fi

# Host ordinals: the policy's GPU 1 is the host's, whatever
# CUDA_VISIBLE_DEVICES calls it.
policy "default 32M" "user $UA 0:64M,1:16M"
as "$UA" CUDA_VISIBLE_DEVICES=1 -- "$PROBE" alloc 32 0 $OOM
expect_run "CUDA_VISIBLE_DEVICES=1: its ordinal 0 is the host's GPU 1 (16M)" \
    "quota 16.00 MiB, user $UA"
as "$UA" CUDA_VISIBLE_DEVICES=1,0 -- "$PROBE" alloc 48 1 0
expect_run "CUDA_VISIBLE_DEVICES=1,0: its ordinal 1 is the host's GPU 0 (64M)" ""
as "$UA" CUDA_VISIBLE_DEVICES=$UUID0 -- "$PROBE" alloc 32 0 $OOM
expect_run "CUDA_VISIBLE_DEVICES by UUID: the smallest ordinal limit applies" \
    "quota 16.00 MiB, user $UA"

# ---- contexts count ----
policy "default 32M" "user $UA 64M"
as "$UA" FAKECUDA_CONTEXT_BYTES=16M -- "$PROBE" alloc 48 0 0
expect_run "a 16 MiB context and 48 MiB fit 64M" ""
as "$UA" FAKECUDA_CONTEXT_BYTES=16M -- "$PROBE" alloc 56 0 $OOM
expect_run "a 16 MiB context and 56 MiB do not: the line names the context" \
    "cuMemAlloc_v2 of 56.00 MiB \(with this process's context, 16.00 MiB\) refused by the policy $PC, user $UA \(line 2\); quota 64.00 MiB"
policy "default 32M" "user $UA 64M" "context off"
as "$UA" FAKECUDA_CONTEXT_BYTES=16M -- "$PROBE" alloc 56 0 0
expect_run "context off in the policy: 56 MiB granted" ""
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_CONTEXT=on -- "$PROBE" alloc 56 0 $OOM
expect_run "VRAM_CONTEXT=on counts it where the policy does not" "with this process's context, 16.00 MiB"
policy "default 32M" "user $UA 64M"
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_CONTEXT=off -- "$PROBE" alloc 56 0 $OOM
expect_run "VRAM_CONTEXT=off does not take the context out of the policy's account" \
    "cuMemAlloc_v2 of 56.00 MiB \(with this process's context, 16.00 MiB\) refused by the policy $PC, user $UA \(line 2\)"
rm -f $PC
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_LIMIT=64M -- "$PROBE" alloc 56 0 $OOM
expect_run "no policy: a job's quota counts the context too (the one rule)" \
    "with this process's context, 16.00 MiB\) refused by VRAM_LIMIT"
as "$UA" FAKECUDA_CONTEXT_BYTES=16M -- "$VRAM" run --limit 64M -- "$PROBE" alloc 56 0 $OOM
expect_run "vram run --limit counts the context" \
    "with this process's context, 16.00 MiB\) refused by vram run --limit"
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_LIMIT=64M VRAM_CONTEXT=off -- "$PROBE" alloc 56 0 0
expect_run "no policy, VRAM_CONTEXT=off: the job's quota leaves it out" ""
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_LIMIT=64M LD_LIBRARY_PATH="$FAKE" -- "$PROBE" alloc 56 0 $OOM
if [ "$rc" -eq 0 ] && [ "$(wc -l <"$TMP/err")" -eq 2 ] &&
    grep -q "^vram: context accounting: NVML (libnvidia-ml.so.1) is not available here; each limited GPU is charged 518.00 MiB for this process's context$" "$TMP/err" &&
    grep -q "(with this process's context, 518.00 MiB) refused by VRAM_LIMIT" "$TMP/err"; then
    pass "without NVML: one line, the context charged at 518 MiB (a context's measured size)"
else
    fail "without NVML: one line, the context charged at 518 MiB" "exit $rc"
fi
as "$UA" FAKECUDA_CONTEXT_BYTES=16M VRAM_GROUP=nolimit$$ LD_LIBRARY_PATH="$FAKE" -- "$PROBE" alloc 56 0 0
expect_run "without NVML and without a limit: nothing guessed, no line" ""

# ---- a process with raised privileges ignores the user's settings ----
# A setuid copy of the probe, owned by $UB, run by $UA: AT_SECURE. The
# dynamic loader then ignores LD_LIBRARY_PATH, so the fake driver's
# directory goes into this namespace's own /etc/ld.so.cache (ldconfig -X:
# the cache only, no link made anywhere).
if findmnt -n -o OPTIONS --target "$TMP" | grep -q nosuid; then
    echo "skip raised privileges: $TMP is mounted nosuid"
else
    printf "%s\n%s\n" "$FAKE" "$BIN" >/etc/ld.so.conf.d/zz-vram-fake.conf
    ldconfig -X 2>/dev/null
    cp "$PROBE" "$TMP/probe-suid"
    chown "$UB" "$TMP/probe-suid"
    chmod 4755 "$TMP/probe-suid"
    policy "default 32M"
    as "$UA" VRAM_LIMIT=16M VRAM_TRACE="$TMP/secure.csv" VRAM_CONTEXT=on -- "$TMP/probe-suid" alloc 24 0 0
    expect_run "setuid: VRAM_LIMIT=16M is ignored (24 MiB granted under $UB's policy of 32M)" \
        "^vram: VRAM_LIMIT, VRAM_CONTEXT, VRAM_TRACE ignored: this process runs with raised privileges \(setuid, setgid or file capabilities\); only the host's policy applies to it$"
    if [ ! -e "$TMP/secure.csv" ]; then
        pass "setuid: no trace file is opened with its privileges"
    else
        fail "setuid: no trace file is opened with its privileges" "$TMP/secure.csv exists"
    fi
    as "$UA" VRAM_LIMIT=1G -- "$TMP/probe-suid" alloc 48 0 $OOM
    if [ "$rc" -eq 0 ] && grep -q "refused by the policy $PC, default (line 1); quota 32.00 MiB, user $UB" "$TMP/err"; then
        pass "setuid: the policy of its owner applies"
    else
        fail "setuid: the policy of its owner applies" "exit $rc"
    fi
    rm -f /etc/ld.so.conf.d/zz-vram-fake.conf "$TMP/probe-suid"
    ldconfig -X 2>/dev/null
fi

# ---- vram admin check and status ----
policy "default 32M" "user $UA 0:64M,1:16M" "group $GROUP_ML 48M" "reader group $GROUP_ML"
env LD_LIBRARY_PATH="$LIBPATH" "$VRAM" admin check --user "$UA" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^/etc/vram/policy.conf: ok: default 32M, 1 user, 1 group, 0 exempt, 1 reader rules$" "$TMP/out" &&
    grep -q "^user $UA (uid $UIDA; groups users, $GROUP_ML): reader$" "$TMP/out" &&
    grep -q "^  rule: user $UA (line 2): 0:64M,1:16M$" "$TMP/out" &&
    grep -q "^  GPU 0 $UUID0 (1.00 GiB): 64.00 MiB$" "$TMP/out" &&
    grep -q "^  GPU 1 GPU-facecda0-0001-4000-8000-000000000001 (1.00 GiB): 16.00 MiB$" "$TMP/out"; then
    pass "admin check --user: the rules and each GPU's limit"
else
    fail "admin check --user: the rules and each GPU's limit" "exit $rc"
fi
# The policy's ordinals are the host's, whatever the caller's
# CUDA_VISIBLE_DEVICES: check lists the host's GPUs.
env LD_LIBRARY_PATH="$LIBPATH" CUDA_VISIBLE_DEVICES=1 "$VRAM" admin check --user "$UA" \
    >"$TMP/out" 2>"$TMP/err"
if grep -q "^  GPU 0 $UUID0 (1.00 GiB): 64.00 MiB$" "$TMP/out" &&
    grep -q "^  GPU 1 GPU-facecda0-0001-4000-8000-000000000001 (1.00 GiB): 16.00 MiB$" "$TMP/out"; then
    pass "admin check --user under CUDA_VISIBLE_DEVICES=1: the host's GPUs by host ordinal"
else
    fail "admin check --user under CUDA_VISIBLE_DEVICES=1: the host's GPUs" "$(cat "$TMP/out")"
fi
"$VRAM" admin check --user "$UB" >"$TMP/out" 2>"$TMP/err"
if grep -q "^  rule: default (line 1): 32M$" "$TMP/out"; then
    pass "admin check --user: the default for a user without a rule"
else
    fail "admin check --user: the default for a user without a rule" "$(cat "$TMP/out")"
fi
mkdir -p "$TMP/cg/sys/fs/cgroup"
echo "cpuset cpu io memory pids dmem" >"$TMP/cg/sys/fs/cgroup/cgroup.controllers"
printf 'drm/0000:18:00.0/vram0 150754820096\ndrm/0000:2a:00.0/vram0 150754820096\n' \
    >"$TMP/cg/sys/fs/cgroup/dmem.capacity"
"$VRAM" admin status --root "$TMP/cg" >"$TMP/out" 2>"$TMP/err"
if grep -q "^dmem: *cgroup v2 dmem controller present; dmem.capacity lists drm/0000:18:00.0/vram0 140.40 GiB, drm/0000:2a:00.0/vram0 140.40 GiB$" "$TMP/out"; then
    pass "admin status: the dmem controller and the GPUs dmem.capacity lists"
else
    fail "admin status: the dmem controller" "$(cat "$TMP/out")"
fi
echo "cpuset cpu io memory pids" >"$TMP/cg/sys/fs/cgroup/cgroup.controllers"
"$VRAM" admin status --root "$TMP/cg" >"$TMP/out" 2>"$TMP/err"
if grep -q "^dmem: *no cgroup v2 dmem controller" "$TMP/out"; then
    pass "admin status: no dmem controller"
else
    fail "admin status: no dmem controller" "$(cat "$TMP/out")"
fi
"$VRAM" admin status >"$TMP/out" 2>"$TMP/err"
if grep -q "^ld.so.preload: /etc/ld.so.preload names $(readlink -f "$PRELOAD"): enabled$" "$TMP/out" &&
    grep -q "^library: .* loads$" "$TMP/out" && grep -q "^policy: *$PC: 3 rules, default 32M$" "$TMP/out"; then
    pass "admin status: enabled, the library loads, the policy"
else
    fail "admin status" "$(cat "$TMP/out")"
fi

# ---- fail closed ----
# expect_closed NAME LINE: the last run stopped at cuInit (exit 1) and
# printed exactly LINE.
expect_closed() {
    if [ "$rc" -eq 1 ] && [ "$(cat "$TMP/err")" = "$2" ] &&
        grep -q "FAIL cuInit returned 3" "$TMP/out"; then
        pass "$1"
    else
        fail "$1" "exit $rc"
    fi
}

# ---- a per-GPU key that names no GPU of the host fails closed ----
UUID1=GPU-facecda0-0001-4000-8000-000000000001
GPUS="0: $UUID0, 1: $UUID1"
policy "default 16:4G"
env LD_LIBRARY_PATH="$LIBPATH" "$VRAM" admin check >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(cat "$TMP/err")" = "vram: $PC:1: default: GPU key '16' names no GPU of this host ($GPUS): it would limit nothing" ] &&
    ! grep -q ": ok:" "$TMP/out"; then
    pass "admin check: a key that names no GPU is exit 2, one line naming it and the GPUs"
else
    fail "admin check: a key that names no GPU is exit 2, one line" "exit $rc"
fi
env LD_LIBRARY_PATH="$LIBPATH" "$VRAM" admin status >"$TMP/out" 2>"$TMP/err"
if grep -q "^policy: *$PC:1: default: GPU key '16' names no GPU of this host" "$TMP/out"; then
    pass "admin status: the policy's key that names no GPU"
else
    fail "admin status: the policy's key that names no GPU" "$(grep policy "$TMP/out")"
fi
"$VRAM" admin disable >/dev/null 2>&1
env LD_LIBRARY_PATH="$LIBPATH" "$VRAM" admin enable --preload "$PRELOAD" >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ $rc -eq 2 ] && grep -q "^vram: $PC:1: default: GPU key '16' names no GPU" "$TMP/err" &&
    ! grep -q "libvram-preload" /etc/ld.so.preload; then
    pass "admin enable refuses a policy with a key that names no GPU, writes nothing"
else
    fail "admin enable refuses a policy with a key that names no GPU" "exit $rc"
fi
# Where no driver lists the GPUs (the fake's cuInit failing), the keys
# cannot be checked: said by check; each process checks them.
env LD_LIBRARY_PATH="$LIBPATH" FAKECUDA_FAIL=cuInit "$VRAM" admin enable --preload "$PRELOAD" \
    >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "libvram-preload" /etc/ld.so.preload; then
    pass "admin enable without a driver to list the GPUs: enabled (each process checks)"
else
    fail "admin enable without a driver to list the GPUs" "$(cat "$TMP/err")"
fi
env LD_LIBRARY_PATH="$LIBPATH" FAKECUDA_FAIL=cuInit "$VRAM" admin check >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q "^per-GPU keys not checked here: no CUDA driver" "$TMP/out"; then
    pass "admin check without a driver: ok, and says the keys were not checked"
else
    fail "admin check without a driver: says the keys were not checked" "$(cat "$TMP/out")"
fi
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a user's process under a default that names no GPU fails closed" \
    "vram: $PC:1: default: GPU key '16' names no GPU of this host ($GPUS): it would limit nothing; CUDA is disabled in this process"
as root -- "$PROBE" alloc 16 0 0
expect_run "root, exempt, is limited by no rule: its process runs" ""
# Only the processes of users a bad rule limits: bob's rule is not alice's.
policy "default 32M" "user $UB GPU-deadbeef:16M"
as "$UA" -- "$PROBE" alloc 16 0 0
expect_run "$UA is not limited by $UB's rule: runs" ""
as "$UB" -- "$PROBE" alloc 16 0 0
expect_closed "$UB's rule names no GPU: $UB's process fails closed" \
    "vram: $PC:2: user $UB: GPU key 'GPU-deadbeef' names no GPU of this host ($GPUS): it would limit nothing; CUDA is disabled in this process"
# Host ordinals and UUIDs are the host's whatever CUDA_VISIBLE_DEVICES
# hides: NVML lists them.
policy "default 32M" "user $UA 0:64M,1:16M"
as "$UA" CUDA_VISIBLE_DEVICES=0 -- "$PROBE" alloc 48 0 0
expect_run "CUDA_VISIBLE_DEVICES=0: the policy's GPU 1 is still the host's (NVML)" ""
policy "default 32M" "user $UA $UUID1:16M"
as "$UA" CUDA_VISIBLE_DEVICES=0 -- "$PROBE" alloc 24 0 0
expect_run "CUDA_VISIBLE_DEVICES=0: the policy's UUID of GPU 1 is still the host's" ""
# Without NVML, a process that sees one GPU cannot show the host has a
# second: the key fails closed rather than be trusted.
policy "default 32M" "user $UA 0:64M,1:16M"
as "$UA" CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH="$FAKE" -- "$PROBE" alloc 48 0 0
expect_closed "without NVML, a host ordinal past what the process can know fails closed" \
    "vram: $PC:2: user $UA: GPU key '1' names no GPU of this host (0: $UUID0): it would limit nothing; CUDA is disabled in this process"
rm -f $PC
policy "default 32M" "user $UA 64X"
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a malformed policy fails closed with PATH:LINE" \
    "vram: $PC:2: user $UA: '64X': unknown unit 'X' (expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G); CUDA is disabled in this process"
as root -- "$PROBE" alloc 16 0 0
expect_closed "... for root too" \
    "vram: $PC:2: user $UA: '64X': unknown unit 'X' (expected e.g. 6G, 50%, 0.5, 0:6G,1:4G or GPU-8c6f1e2a:6G); CUDA is disabled in this process"
# A program that never touches the driver does nothing of vram's, even
# with a broken policy: no line, no open of the policy file.
as "$UA" -- /bin/sh -c 'echo hello'
if [ "$rc" -eq 0 ] && [ ! -s "$TMP/err" ] && [ "$(cat "$TMP/out")" = hello ]; then
    pass "a non-CUDA program runs quietly under a broken policy"
else
    fail "a non-CUDA program runs quietly under a broken policy" "exit $rc"
fi
if command -v strace >/dev/null; then
    strace -f -e trace=open,openat,stat,newfstatat,statx -o "$TMP/strace" /bin/true
    if grep -q libvram-preload "$TMP/strace" && ! grep -q "policy.conf\|/dev/shm" "$TMP/strace"; then
        pass "a preloaded /bin/true never looks at the policy file or the ledgers"
    else
        failed=$((failed + 1))
        echo "FAIL a preloaded /bin/true looks at the policy file or the ledgers"
    fi
fi
policy "default 32M"
chmod 666 $PC
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a policy writable by others fails closed" \
    "vram: $PC: writable by others (mode 0666; expected e.g. 0644); CUDA is disabled in this process"
chmod 644 $PC
chown "$UA" $PC
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a policy owned by a user fails closed" \
    "vram: $PC: owned by uid $UIDA, not root; CUDA is disabled in this process"
chown root $PC
mv $PC /etc/vram/real.conf
ln -s /etc/vram/real.conf $PC
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a symbolic link fails closed" \
    "vram: $PC: is a symbolic link (it must be the file itself); CUDA is disabled in this process"
rm -f $PC /etc/vram/real.conf
chmod 777 /etc/vram
policy "default 32M"
as "$UA" -- "$PROBE" alloc 16 0 0
expect_closed "a directory writable by others fails closed" \
    "vram: $PC: its directory /etc/vram is writable by others (mode 0777); CUDA is disabled in this process"
chmod 755 /etc/vram
rm -f $PC
as "$UA" -- "$PROBE" alloc 80 0 0
expect_run "no policy file: no policy" ""

# ---- the admin sees everyone; users see only themselves ----
policy "default 64M" "reader group $GROUP_ML"
STOP2=$TMP/stop2
hold "$UA" 16 0 "$STOP2"
hA=$HELD
hold "$UB" 8 0 "$STOP2" VRAM_GROUP=jobb
hB=$HELD
"$VRAM" stat --json --no-nvml >"$TMP/out" 2>"$TMP/err"
rc=$?
if [ "$hA $hB" = "held held" ] && [ $rc -eq 0 ] &&
    python3 - "$TMP/out" "$UA" "$UB" "$UIDA" "$UIDB" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
a, b, ia, ib = sys.argv[2:6]
groups = {g["group"]: g for g in v["groups"]}
assert groups[f"{a}/user-{ia}"]["used_bytes"] == 16 << 20, groups
assert groups[f"{b}/user-{ib}"]["used_bytes"] == 8 << 20, groups
assert groups[f"{b}/jobb"]["used_bytes"] == 8 << 20, groups
procs = {(p["group"], p["uid"]) for p in v["processes"]}
assert (f"{a}/user-{ia}", int(ia)) in procs and (f"{b}/jobb", int(ib)) in procs, procs
PY
then
    pass "root's stat --json shows both users' accounts and groups, with their names"
else
    fail "root's stat --json shows both users" "exit $rc, holds $hA $hB"
fi
"$VRAM" stat --prometheus --no-nvml >"$TMP/out" 2>"$TMP/err"
if grep -q "group=\"$UB/jobb\"" "$TMP/out" && grep -q "group=\"$UA/user-$UIDA\"" "$TMP/out"; then
    pass "the exporter's metrics show both users"
else
    fail "the exporter's metrics show both users" "$(head -c 300 "$TMP/out")"
fi
as "$UB" -- "$VRAM" stat --json --no-nvml
if [ "$rc" -eq 0 ] && grep -q "jobb" "$TMP/out" && ! grep -q "user-$UIDA" "$TMP/out"; then
    pass "$UB's stat shows $UB's groups only"
else
    fail "$UB's stat shows $UB's groups only" "exit $rc"
fi
as "$UA" -- /bin/cat "/dev/shm/vram-$UIDB/jobb"
if [ "$rc" -ne 0 ] && grep -q "Permission denied" "$TMP/err"; then
    pass "$UA cannot read $UB's ledger"
else
    fail "$UA cannot read $UB's ledger" "exit $rc"
fi
as "$UA" -- /bin/sh -c "echo x >> /dev/shm/vram-$UIDB/jobb"
if [ "$rc" -ne 0 ]; then
    pass "$UA cannot change $UB's ledger"
else
    fail "$UA cannot change $UB's ledger" "exit $rc"
fi
# A file named as B's, made by A: nobody takes it for B's.
as "$UA" -- /bin/sh -c "umask 077; echo x > /dev/shm/vram-$UIDB-fake"
"$VRAM" stat --json --no-nvml >"$TMP/out" 2>"$TMP/err"
if ! grep -q "$UB/fake" "$TMP/out" && grep -q "$UB/jobb" "$TMP/out"; then
    pass "a file named as $UB's but $UA's is not $UB's ledger"
else
    fail "a file named as $UB's but $UA's is not $UB's ledger" ""
fi

# Hostile ledgers of A: root's monitor neither crashes, hangs nor slows.
SHM=/dev/shm/vram-$UIDA
REAL=$SHM/user-$UIDA
SIZE=$(stat -c %s "$REAL")
as "$UA" -- /bin/sh -c "umask 077
ln -s /etc/shadow $SHM/link
head -c 100 /dev/zero > $SHM/trunc
truncate -s 1G $SHM/huge
mkfifo $SHM/fifo
head -c $SIZE /dev/urandom > $SHM/random
umask 022; head -c $SIZE /dev/zero > $SHM/mode"
python3 - "$REAL" "$SHM/crafted" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
# keep the first 16 bytes (magic, version, size); every other byte 0x7f:
# counts past their arrays, strings without an end, pids that exist
# nowhere, huge sums
for i in range(16, len(data)):
    data[i] = 0x7f
open(sys.argv[2], "wb").write(data)
PY
chown "$UA" "$SHM/crafted"
chmod 600 "$SHM/crafted"
( env -i PATH=/usr/bin:/bin setpriv --reuid="$UA" --regid=users --init-groups \
    "$FILL" --stopped locked GPU-facecda0-0001-4000-8000-000000000000 4 >"$TMP/locked" 2>&1 & echo $! >"$TMP/locked.pid" )
PIDS="$PIDS $(cat "$TMP/locked.pid")"
i=0
while ! grep -q ready "$TMP/locked" 2>/dev/null && [ $i -lt 600 ]; do i=$((i + 1)); sleep 0.1; done
# The member stays stopped and the FIFO unwritten throughout: a stat that
# waited on either would never end (timeout 120 is the watchdog; the time
# is printed, not judged).
t0=$(date +%s%N)
timeout 120 "$VRAM" stat --json --no-nvml >"$TMP/out" 2>"$TMP/err"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $rc -eq 0 ] && grep -q "$UB/jobb" "$TMP/out" && grep -q "$UA/locked" "$TMP/out" &&
    ! grep -q "$UA/\(link\|trunc\|huge\|fifo\|random\|mode\)\"" "$TMP/out"; then
    pass "hostile ledgers (link, truncated, resized, FIFO, random, mode, crafted, a member stopped mid-reservation): root's stat in $ms ms"
else
    fail "hostile ledgers: root's stat" "exit $rc, $ms ms"
fi
python3 - "$TMP/out" "$UA" <<'PY' && pass "the crafted ledger shows bounded rows, no process" || fail "the crafted ledger" "see $TMP/out"
import json, re, sys
v = json.load(open(sys.argv[1]))
rows = [g for g in v["groups"] if g["group"] == sys.argv[2] + "/crafted"]
assert len(rows) <= 16, len(rows)
# A UUID's bytes are bounded; shown escaped (\xNN stands for one byte).
assert all(len(re.sub(r"\\x[0-9a-f]{2}", "x", g["uuid"])) < 48 for g in rows)
assert not [p for p in v["processes"] if p["group"] == sys.argv[2] + "/crafted"]
PY
touch "$STOP2"
kill -KILL "$(cat "$TMP/locked.pid")" 2>/dev/null
rm -f "$SHM/link" "$SHM/trunc" "$SHM/huge" "$SHM/fifo" "$SHM/random" "$SHM/mode" "$SHM/crafted"

# ---- HAMi: two "containers" on one device, vram in HAMi's place ----
# As HAMi's device plugin sets them: a limit per device index and one
# shared-cache file per container; the library comes from
# /etc/ld.so.preload (as HAMi's own does); root: not under the policy.
STOP3=$TMP/stop3
mkdir -p "$TMP/vgpu"
hold root 48 0 "$STOP3" CUDA_DEVICE_MEMORY_LIMIT_0=64m \
    CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/vgpu/c1.cache"
h1=$HELD
as root CUDA_DEVICE_MEMORY_LIMIT_0=64m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/vgpu/c1.cache" \
    -- "$PROBE" alloc 32 0 $OOM
expect_run "HAMi container 1: its second process is refused past the container's 64m ($h1 48)" \
    "refused by HAMi's CUDA_DEVICE_MEMORY_LIMIT; quota 64.00 MiB, group hami-[0-9a-f]{16} uses 48.00 MiB"
as root CUDA_DEVICE_MEMORY_LIMIT_0=64m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/vgpu/c2.cache" \
    -- "$PROBE" alloc 48 0 0
expect_run "HAMi container 2 on the same device has a quota of its own" ""
as root CUDA_DEVICE_MEMORY_LIMIT_0=64m CUDA_DEVICE_MEMORY_SHARED_CACHE="$TMP/vgpu/c1.cache" \
    -- "$PROBE" alloc 16 0 0
expect_run "container 1 may still take the 16 MiB left" ""
touch "$STOP3"
sleep 0.3

# ---- disable keeps the other lines ----
"$VRAM" admin disable >"$TMP/out" 2>"$TMP/err"
if [ $? -eq 0 ] && [ "$(cat /etc/ld.so.preload)" = "$ZLIB" ]; then
    pass "admin disable: only vram's line goes"
else
    fail "admin disable: only vram's line goes" "$(cat /etc/ld.so.preload)"
fi

test_end
