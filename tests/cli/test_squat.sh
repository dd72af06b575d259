#!/bin/sh
# SPDX-License-Identifier: MIT
# test_squat.sh -- another user cannot block a group: two real Unix users,
# A and B (made here with useradd, removed at the end even on failure).
# B's files where A's ledgers used to live, or on A's directory's name
# (a directory, a symbolic link, a file), never make A use B's file: A
# gets one line naming the squatter's file and its owner, or, where B's
# name is not A's directory, simply works; B cannot create a ledger in
# A's directory. Needs root (useradd, setpriv); exit 77 otherwise.
# Usage: test_squat.sh LEDGER_FILL
set -u
FILL=$1
if [ "$(id -u)" -ne 0 ] || ! command -v useradd >/dev/null || ! command -v setpriv >/dev/null; then
    echo "skipped: needs root, useradd and setpriv"
    exit 77
fi
A="vrsqa$$"
B="vrsqb$$"
. "$(dirname "$0")/lib.sh"
test_begin squat
chmod 755 "$TMP"
test_cleanup() {
    [ -n "${HOLD:-}" ] && kill -9 "$HOLD" 2>/dev/null
    [ -n "${UA:-}" ] && rm -rf "/dev/shm/vram-$UA" "/dev/shm/vram-$UA-grp"
    [ -n "${UB:-}" ] && rm -rf "/dev/shm/vram-$UB"
    remove_user "$A"
    remove_user "$B"
}
useradd -M -s /bin/sh "$A" || exit 1
useradd -M -s /bin/sh "$B" || exit 1
UA=$(id -u "$A")
UB=$(id -u "$B")
# as USER CMD...: CMD as USER, exec'ed (no process left between, so a kill
# by pid reaches CMD).
as() { u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"; }
# spawn_as USER OUT CMD...: the same in the background (its pid in $LAST).
spawn_as() {
    u=$1; o=$2; shift 2
    setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@" >"$o" 2>"$o.err" &
    LAST=$!
}

# fill_once USER: join group grp and reserve 1 MiB (status 0 when it did),
# then killed; at most 60 s (a hang, not a slow machine).
fill_once() {
    rm -f "$TMP/out" "$TMP/out.err"
    spawn_as "$1" "$TMP/out" "$FILL" grp GPU-squat-0000 1 0
    p=$LAST
    i=0
    while [ $i -lt 600 ] && ! grep -q ready "$TMP/out" && kill -0 $p 2>/dev/null; do
        sleep 0.1; i=$((i + 1)); done
    grep -q ready "$TMP/out"
    r=$?
    kill -9 $p 2>/dev/null
    wait $p 2>/dev/null
    return $r
}

# B takes the name A's ledger of group grp had before ledgers moved into
# per-user directories: A is not affected.
as "$B" sh -c "umask 077; : > /dev/shm/vram-$UA-grp"
check "B's file /dev/shm/vram-$UA-grp does not block A" "fill_once $A"
rm -f "/dev/shm/vram-$UA-grp"
rm -rf "/dev/shm/vram-$UA"

# B makes A's directory name a directory of B's.
as "$B" mkdir -m 777 "/dev/shm/vram-$UA"
fill_once "$A"
check "B's directory /dev/shm/vram-$UA: A refused" "[ \$? -ne 0 ]"
check "... with one line naming it and its owner $B" \
    "[ \$(wc -l <$TMP/out.err) -eq 1 ] && grep -q \"/dev/shm/vram-$UA belongs to uid $UB ($B)\" $TMP/out.err"
check "... and nothing of A's was created in it" "[ -z \"\$(ls -A /dev/shm/vram-$UA)\" ]"
rmdir "/dev/shm/vram-$UA"

# B makes it a symbolic link to a directory of B's.
as "$B" mkdir -m 777 "/dev/shm/vram-$UB-x"
as "$B" ln -s "/dev/shm/vram-$UB-x" "/dev/shm/vram-$UA"
fill_once "$A"
check "B's symbolic link /dev/shm/vram-$UA: A refused, link not followed" \
    "[ \$? -ne 0 ] && [ -z \"\$(ls -A /dev/shm/vram-$UB-x)\" ]"
check "... with one line naming it a symbolic link of $B" \
    "[ \$(wc -l <$TMP/out.err) -eq 1 ] && grep -q \"/dev/shm/vram-$UA is a symbolic link of uid $UB ($B)\" $TMP/out.err"
rm -f "/dev/shm/vram-$UA"
rm -rf "/dev/shm/vram-$UB-x"

# B makes it a plain file.
as "$B" sh -c ": > /dev/shm/vram-$UA"
fill_once "$A"
check "B's file /dev/shm/vram-$UA: A refused with one line naming it" \
    "[ \$(wc -l <$TMP/out.err) -eq 1 ] && grep -q \"/dev/shm/vram-$UA is a file of uid $UB ($B)\" $TMP/out.err"
rm -f "/dev/shm/vram-$UA"

# Without squatters: A's directory is A's, 0700; B cannot add to it.
check "A joins its group" "fill_once $A"
spawn_as "$A" "$TMP/holder" "$FILL" grp GPU-squat-0000 1 0
HOLD=$LAST
i=0
while [ $i -lt 600 ] && ! grep -q ready "$TMP/holder"; do sleep 0.1; i=$((i + 1)); done
check "A's directory: owned by A, mode 0700" \
    "[ \"\$(stat -c '%U %a' /dev/shm/vram-$UA)\" = \"$A 700\" ]"
check "A's ledger: owned by A, mode 0600" \
    "[ \"\$(stat -c '%U %a' /dev/shm/vram-$UA/grp)\" = \"$A 600\" ]"
as "$B" sh -c ": > /dev/shm/vram-$UA/other" 2>/dev/null
check "B cannot create a name in A's directory" "[ \$? -ne 0 ]"
kill -9 $HOLD 2>/dev/null
wait $HOLD 2>/dev/null

test_end
