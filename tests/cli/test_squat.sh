#!/bin/sh
# SPDX-License-Identifier: MIT
# test_squat.sh -- another user cannot keep a user from the GPU by taking
# vram's names in /dev/shm first: two real Unix users, A and B (made here
# with useradd, removed at the end even on failure). B's directory, link or
# file on A's directory's name (/dev/shm/vram-<A>), and on its fallbacks
# (/dev/shm/vram-<A>.1, ...), never make A use B's file nor refuse A: A's
# processes use the lowest name that is a directory of A's, made when
# there is none, all of them the same one (processes starting at once
# included), and keep it when B's squat goes away; root's `vram stat`
# shows A's groups there (and removes a group of A's whose members are all
# gone), and never a ledger in a directory of B's on A's names; B cannot
# create a ledger in A's directory. Needs root (useradd,
# setpriv); exit 77 otherwise.
# Usage: test_squat.sh LEDGER_FILL VRAM
set -u
FILL=$1
VRAM=$2
if [ "$(id -u)" -ne 0 ] || ! command -v useradd >/dev/null || ! command -v setpriv >/dev/null; then
    echo "skipped: needs root, useradd and setpriv"
    exit 77
fi
A="vrsqa$$"
B="vrsqb$$"
. "$(dirname "$0")/lib.sh"
test_begin squat
chmod 755 "$TMP"
pids=""
test_cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${UA:-}" ] && rm -rf /dev/shm/vram-"$UA" /dev/shm/vram-"$UA".* "/dev/shm/vram-$UA-grp"
    [ -n "${UB:-}" ] && rm -rf /dev/shm/vram-"$UB" /dev/shm/vram-"$UB".* "/dev/shm/vram-$UB-x"
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
    pids="$pids $LAST"
}
# wait_ready FILE: until FILE says "ready" (60 s at most: a hang, not a
# slow machine); status 0 if it did.
wait_ready() {
    i=0
    while [ $i -lt 600 ] && ! grep -q ready "$1" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    grep -q ready "$1"
}
# hold USER NAME: A process of USER in group grp holding 1 MiB, in the
# background until killed (its pid in $LAST); status 0 once it holds it.
hold() {
    spawn_as "$1" "$TMP/$2" "$FILL" grp GPU-squat-0000 1 0
    wait_ready "$TMP/$2"
}
# stop_all: kill every process started here.
stop_all() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    pids=""
}
# reset: no process, no directory of A's or B's on A's names.
reset() {
    stop_all
    rm -rf /dev/shm/vram-"$UA" /dev/shm/vram-"$UA".*
}
# dir_of: the directory holding A's ledger grp (one line per such file).
dir_of() { for f in /dev/shm/vram-"$UA"/grp /dev/shm/vram-"$UA".*/grp; do [ -e "$f" ] && dirname "$f"; done; }
# a_grp_rows: root's `vram stat --json` rows of A's group grp, as
# "LABEL USED_BYTES" lines.
a_grp_rows() {
    "$VRAM" stat --json --no-nvml 2>"$TMP/err" | python3 -c '
import json, sys
for g in json.load(sys.stdin)["groups"]:
    if g["group"].startswith(sys.argv[1] + "/grp"):
        print(g["group"], g["used_bytes"])' "$A"
}

# B takes the name A's ledger of group grp had before ledgers moved into
# per-user directories: A is not affected.
as "$B" sh -c "umask 077; : > /dev/shm/vram-$UA-grp"
check "B's file /dev/shm/vram-$UA-grp does not block A" "hold $A old"
rm -f "/dev/shm/vram-$UA-grp"
reset

# B makes A's directory name a directory of B's: A works, in /dev/shm/vram-A.1.
as "$B" mkdir -m 777 "/dev/shm/vram-$UA"
check "B's directory /dev/shm/vram-$UA: A joins its group all the same" "hold $A d1"
check "... in /dev/shm/vram-$UA.1, a directory of A's, mode 0700" \
    "[ \"\$(dir_of)\" = /dev/shm/vram-$UA.1 ] && [ \"\$(stat -c '%U %a' /dev/shm/vram-$UA.1)\" = \"$A 700\" ]"
check "... its ledger A's, mode 0600, nothing of A's in B's directory" \
    "[ \"\$(stat -c '%U %a' /dev/shm/vram-$UA.1/grp)\" = \"$A 600\" ] && [ -z \"\$(ls -A /dev/shm/vram-$UA)\" ]"
check "... nothing said on stderr" "[ ! -s $TMP/d1.err ]"
check "root's vram stat shows A's group there, as $A/grp" "[ \"\$(a_grp_rows)\" = \"$A/grp 1048576\" ]"

# B's squat goes away while A's group lives in the fallback: A's next
# process joins the same ledger, not a new one under the freed name.
rmdir "/dev/shm/vram-$UA"
check "B's squat gone: a new process of A's joins the fallback's ledger" "hold $A d2"
check "... no directory made under the freed name" "[ ! -e /dev/shm/vram-$UA ]"
check "... one ledger holding both processes' 2 MiB" "[ \"\$(a_grp_rows)\" = \"$A/grp 2097152\" ]"
# A's processes killed (no exit handler removes the ledger): root's stat
# shows the group no more and removes its file, and the directory with it.
stop_all
check "A's members all killed: root's stat shows the group no more" "[ -z \"\$(a_grp_rows)\" ]"
check "... and removed its file and the emptied fallback directory" "[ ! -e /dev/shm/vram-$UA.1 ]"
reset

# B makes it a symbolic link to a directory of B's: never followed.
as "$B" mkdir -m 777 "/dev/shm/vram-$UB-x"
as "$B" ln -s "/dev/shm/vram-$UB-x" "/dev/shm/vram-$UA"
check "B's symbolic link /dev/shm/vram-$UA: A joins in /dev/shm/vram-$UA.1" \
    "hold $A l1 && [ \"\$(dir_of)\" = /dev/shm/vram-$UA.1 ]"
check "... the link not followed" "[ -z \"\$(ls -A /dev/shm/vram-$UB-x)\" ]"
rm -f "/dev/shm/vram-$UA"
rm -rf "/dev/shm/vram-$UB-x"
reset

# B makes it a plain file.
as "$B" sh -c ": > /dev/shm/vram-$UA"
check "B's file /dev/shm/vram-$UA: A joins in /dev/shm/vram-$UA.1" \
    "hold $A f1 && [ \"\$(dir_of)\" = /dev/shm/vram-$UA.1 ]"
rm -f "/dev/shm/vram-$UA"
reset

# B takes the fallbacks too, each another way: A takes the next name.
as "$B" mkdir -m 700 "/dev/shm/vram-$UA"
as "$B" sh -c ": > /dev/shm/vram-$UA.1"
as "$B" ln -s /tmp "/dev/shm/vram-$UA.2"
as "$B" mkdir -m 777 "/dev/shm/vram-$UA.3"
check "B holds vram-$UA, .1, .2 and .3: A joins in /dev/shm/vram-$UA.4" \
    "hold $A s1 && [ \"\$(dir_of)\" = /dev/shm/vram-$UA.4 ]"
stop_all
rm -rf /dev/shm/vram-"$UA".4

# Processes of A starting at once, while B holds the name and no fallback
# exists yet: one directory, one ledger, every process in it (5 rounds).
rounds_ok=0
for round in 1 2 3 4 5; do
    rm -rf /dev/shm/vram-"$UA".4 /dev/shm/vram-"$UA".5
    k=0
    while [ $k -lt 6 ]; do
        spawn_as "$A" "$TMP/r$round.$k" "$FILL" grp GPU-squat-0000 1 0
        k=$((k + 1))
    done
    k=0
    all=1
    while [ $k -lt 6 ]; do wait_ready "$TMP/r$round.$k" || all=0; k=$((k + 1)); done
    dirs=$(ls -d /dev/shm/vram-"$UA".* 2>/dev/null | while read -r d; do
        [ -d "$d" ] && [ ! -L "$d" ] && [ "$(stat -c %U "$d")" = "$A" ] && echo "$d"; done)
    rows=$(a_grp_rows)
    [ $all -eq 1 ] && [ "$dirs" = /dev/shm/vram-"$UA".4 ] && [ "$rows" = "$A/grp 6291456" ] &&
        rounds_ok=$((rounds_ok + 1))
    stop_all
done
check "6 processes of A starting at once share one directory and one ledger (5 of 5 rounds)" \
    "[ $rounds_ok -eq 5 ]"
rm -rf /dev/shm/vram-"$UA".4

# A directory of B's on one of A's fallback names, holding a crafted
# ledger, is never shown as A's.
as "$B" mkdir -m 700 "/dev/shm/vram-$UA.9"
as "$B" sh -c "umask 077; head -c 400000 /dev/zero > /dev/shm/vram-$UA.9/evil"
check "A joins in /dev/shm/vram-$UA.4 beside B's /dev/shm/vram-$UA.9" \
    "hold $A e1 && [ \"\$(dir_of)\" = /dev/shm/vram-$UA.4 ]"
"$VRAM" stat --json --no-nvml >"$TMP/all.json" 2>"$TMP/err"
check "root's vram stat never shows B's directory on A's name as A's" \
    "! grep -q evil $TMP/all.json && grep -q '\"$A/grp\"' $TMP/all.json"
reset
rm -rf /dev/shm/vram-"$UA" /dev/shm/vram-"$UA".*

# Without squatters: A's directory is A's /dev/shm/vram-A, 0700; B cannot add to it.
check "A joins its group" "hold $A n1"
check "A's directory: /dev/shm/vram-$UA, owned by A, mode 0700" \
    "[ \"\$(dir_of)\" = /dev/shm/vram-$UA ] && [ \"\$(stat -c '%U %a' /dev/shm/vram-$UA)\" = \"$A 700\" ]"
check "A's ledger: owned by A, mode 0600" \
    "[ \"\$(stat -c '%U %a' /dev/shm/vram-$UA/grp)\" = \"$A 600\" ]"
as "$B" sh -c ": > /dev/shm/vram-$UA/other" 2>/dev/null
check "B cannot create a name in A's directory" "[ \$? -ne 0 ]"
stop_all

test_end
