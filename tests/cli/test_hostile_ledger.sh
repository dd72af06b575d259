#!/bin/sh
# SPDX-License-Identifier: MIT
# test_hostile_ledger.sh -- root's `vram stat`, `vram top` and `vram
# exporter` survive whatever a user does to the user's own ledger while
# they read it: a real Unix user B (made here with useradd, removed at the
# end even on failure), a member of B's group holding its entry, and B
# cutting the file to nothing, filling it with garbage, growing it,
# rewriting it, replacing it by another file and by a FIFO, over and over
# for a few seconds, while root runs stat again and again, scrapes the
# exporter (sampling at 10 Hz) and keeps `vram top -d 0.1` open (in tmux,
# where there is one). None of them may die (a mapping of a cut file
# faults with SIGBUS), hang or stop showing root's own group; a file that
# stays unreadable is said once by the exporter, not at every sample, and
# once by stat. Needs root, useradd, setpriv, curl and python3; exit 77
# otherwise.
# Usage: test_hostile_ledger.sh VRAM LEDGER_FILL
set -u
VRAM=$1
FILL=$2
if [ "$(id -u)" -ne 0 ] || ! command -v useradd >/dev/null || ! command -v setpriv >/dev/null ||
    ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    echo "skipped: needs root, useradd, setpriv, curl and python3"
    exit 77
fi
B="vrhob$$"
G="hg$$"
U="GPU-hostile-0000"
. "$(dirname "$0")/lib.sh"
test_begin hostile
chmod 755 "$TMP"
mkdir "$TMP/b"
SOCK="$TMP/tmux.sock"
pids=""
test_cleanup() {
    [ -n "${LOOP:-}" ] && kill -9 "$LOOP" 2>/dev/null
    tmux -S "$SOCK" kill-server 2>/dev/null
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -f "/dev/shm/vram-$(id -u)/$G"
    rmdir "/dev/shm/vram-$(id -u)" 2>/dev/null
    [ -n "${UB:-}" ] && rm -rf /dev/shm/vram-"$UB" /dev/shm/vram-"$UB".*
    remove_user "$B"
}
useradd -M -s /bin/sh "$B" || exit 1
UB=$(id -u "$B")
chown "$UB" "$TMP/b"
as() { u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"; }
wait_ready() {
    i=0
    while [ $i -lt 50 ] && ! grep -q ready "$1" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    grep -q ready "$1"
}

# Root's own group, which every view must keep showing.
"$FILL" "$G" "$U" 8 0 >"$TMP/good.out" 2>&1 &
pids="$pids $!"
wait_ready "$TMP/good.out" || { fail "root's group starts"; test_end; exit 1; }
# B's group, with a member that holds its entry and never touches the
# file again (it sleeps).
setpriv --reuid="$UB" --regid="$(id -g "$B")" --init-groups -- "$FILL" bad "$U" 4 0 \
    >"$TMP/bad.out" 2>"$TMP/bad.err" &
pids="$pids $!"
wait_ready "$TMP/bad.out" || { fail "B's group starts"; test_end; exit 1; }
F=/dev/shm/vram-$UB/bad
check "B's ledger is $F" "[ -f $F ]"
SIZE=$(stat -c %s "$F")
cp "$F" "$TMP/good.ledger"
chmod 644 "$TMP/good.ledger"
"$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"
check "root's stat shows B's group before anything" "grep -q '$B/bad' $TMP/out"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT/metrics"
"$VRAM" exporter --no-nvml --listen "127.0.0.1:$PORT" --interval 0.1 >"$TMP/exp.out" 2>"$TMP/exp.err" &
EXP=$!
pids="$pids $EXP"
i=0
while [ $i -lt 50 ] && ! curl -s -o /dev/null "$URL"; do sleep 0.1; i=$((i + 1)); done
TOP=0
if command -v tmux >/dev/null &&
    tmux -S "$SOCK" new-session -d -s top$$ -x 120 -y 40 \
        "'$VRAM' top --no-nvml -d 0.1; echo TOP-EXIT=\$?; sleep 600" 2>/dev/null; then
    TOP=1
fi

# B, for 6 s: every way of changing the file, each step a few ms apart.
cat >"$TMP/hostile.sh" <<EOF
F=$F
end=\$((\$(date +%s) + 6))
while [ \$(date +%s) -lt \$end ]; do
    truncate -s 0 \$F; sleep 0.01
    head -c $SIZE /dev/urandom >\$F; sleep 0.01
    cat $TMP/good.ledger >\$F; sleep 0.01
    truncate -s $((SIZE * 2)) \$F; sleep 0.01
    truncate -s 100 \$F; sleep 0.01
    cat $TMP/good.ledger >\$F.new; chmod 600 \$F.new; mv -f \$F.new \$F; sleep 0.01
    rm -f \$F; mkfifo -m 600 \$F; sleep 0.01
    rm -f \$F; cat $TMP/good.ledger >\$F; chmod 600 \$F; sleep 0.01
done
echo done >$TMP/b/hostile.done
EOF
chmod 644 "$TMP/hostile.sh"
as "$B" sh "$TMP/hostile.sh" &
LOOP=$!

# Root reads all the while.
stat_runs=0 stat_bad=0 stat_lost=0 scrapes=0 scrape_bad=0
while [ ! -e "$TMP/b/hostile.done" ] && kill -0 "$LOOP" 2>/dev/null; do
    timeout 20 "$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"
    rc=$?
    stat_runs=$((stat_runs + 1))
    [ $rc -ne 0 ] && { stat_bad=$((stat_bad + 1)); echo "stat exit $rc" >>"$TMP/stat.fails"; }
    grep -q " $G " "$TMP/out" || stat_lost=$((stat_lost + 1))
    code=$(curl -s -m 5 -o "$TMP/m" -w '%{http_code}' "$URL")
    scrapes=$((scrapes + 1))
    { [ "$code" = 200 ] && grep -q "group=\"$G\"" "$TMP/m"; } || scrape_bad=$((scrape_bad + 1))
done
wait "$LOOP"
LOOP=
check "B's loop ran" "[ -e $TMP/b/hostile.done ]"
check "root's stat ran $stat_runs times, each exit 0, no signal" "[ $stat_runs -ge 3 ] && [ $stat_bad -eq 0 ]"
check "... and showed root's group each time" "[ $stat_lost -eq 0 ]"
check "the exporter answered $scrapes scrapes with root's group" "[ $scrapes -ge 3 ] && [ $scrape_bad -eq 0 ]"
check "the exporter is still running" "kill -0 $EXP"
if [ $TOP -eq 1 ]; then
    tmux -S "$SOCK" capture-pane -p -t top$$ >"$TMP/screen" 2>/dev/null
    check "vram top is still running, showing root's group" \
        "! grep -q TOP-EXIT $TMP/screen && grep -q ' $G ' $TMP/screen"
fi

# A file that stays unreadable is said once: B's file back as it was (read
# at the next samples), then cut to nothing and left so for 2 s (about 20
# samples of the exporter).
cat "$TMP/good.ledger" >"$F.tmp" && chmod 600 "$F.tmp" && chown "$UB" "$F.tmp" && mv -f "$F.tmp" "$F"
sleep 1
before=$(grep -c "vram-$UB/bad" "$TMP/exp.err")
truncate -s 0 "$F"
sleep 2
after=$(grep -c "vram-$UB/bad" "$TMP/exp.err")
check "the exporter said the cut file once in 2 s, not at every sample ($before -> $after)" \
    "[ $((after - before)) -eq 1 ]"
check "... in one line naming it and its size" "grep 'vram-$UB/bad' $TMP/exp.err | tail -n 1 | grep -q '^vram: exporter: ledger /dev/shm/vram-$UB/bad has 0 bytes, not the'"
"$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"
check "stat: exit 0, one line about the cut file, the other groups shown" \
    "[ \$? -eq 0 ] && [ \$(grep -c 'vram-$UB/bad' $TMP/err) -eq 1 ] && grep -q ' $G ' $TMP/out"
check "the exporter is still running" "kill -0 $EXP"

test_end
