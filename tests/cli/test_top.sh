#!/bin/sh
# SPDX-License-Identifier: MIT
# test_top.sh -- `vram top` driven in tmux (send-keys, capture-pane)
# against ledgers filled by ledger_fill: the processes, their group and
# quota show; a growing process gets a positive trend; sort keys switch;
# a killed process disappears; q quits and the terminal is restored (the
# shell prompt is back, the alternate screen left); a command name made
# of terminal escapes shows as text. Piped, and with --once (in tmux too),
# one plain snapshot: the same lines, every process, no escape code, exit 0
# at once. A terminal curses cannot use: one line, exit 1. Exit 77 without
# tmux.
# Usage: test_top.sh VRAM LEDGER_FILL
set -u
VRAM=$1
FILL=$2
command -v tmux >/dev/null || { echo "skipped: no tmux"; exit 77; }
G="tp$$"
U="GPU-top-test-0000"
S="vramtop$$"
. "$(dirname "$0")/lib.sh"
test_begin top
SOCK="$TMP/tmux.sock"
pids=""
test_cleanup() {
    tmux -S "$SOCK" kill-server 2>/dev/null
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -f "/dev/shm/vram-$(id -u)/$G" "/dev/shm/vram-$(id -u)/${G}d"
    rmdir "/dev/shm/vram-$(id -u)" 2>/dev/null
}
# A failure shows the screen it was judged on.
bad() {
    fail "$1"
    sed 's/^/     screen: /' "$TMP/screen" 2>/dev/null | head -n 20
}

start() {
    "$FILL" "$G" "$U" "$@" >"$TMP/fill.$1" 2>&1 &
    pids="$pids $!"
    last=$!
    i=0
    while [ $i -lt 600 ] && ! grep -q ready "$TMP/fill.$1"; do sleep 0.1; i=$((i + 1)); done
}
# wait_for PATTERN: capture the pane until PATTERN shows (at most 60 s:
# a hang, not a slow machine).
wait_for() {
    i=0
    while [ $i -lt 300 ]; do
        tmux -S "$SOCK" capture-pane -p -t "$S" >"$TMP/screen" 2>/dev/null
        grep -qE "$1" "$TMP/screen" && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
check() { if wait_for "$2"; then pass "$1"; else bad "$1"; fi; }

start 48 512 0
still=$last
start 16 512 1
grower=$last
start 24 512
victim=$last
# A process whose command name is a clear-screen and a window-title
# sequence and a line end: shown as text, the screen left as it is.
BADNAME=$(printf 'x\033[2J\033]0;t\007\nz')
cp "$FILL" "$TMP/$BADNAME"
"$TMP/$BADNAME" "$G" "$U" 8 512 >"$TMP/fill.bad" 2>&1 &
pids="$pids $!"
hostile=$!
i=0
while [ $i -lt 600 ] && ! grep -q ready "$TMP/fill.bad"; do sleep 0.1; i=$((i + 1)); done

tmux -S "$SOCK" new-session -d -s "$S" -x 80 -y 40 "sh" || { echo "skipped: tmux cannot start"; exit 77; }
tmux -S "$SOCK" send-keys -t "$S" "PS1='READY> '; export TERM=xterm" Enter
tmux -S "$SOCK" send-keys -t "$S" "clear; '$VRAM' top --no-nvml --interval 0.3; echo TOP-EXIT=\$?" Enter
check "top shows the header" "vram top -- "
check "top shows the group and its quota" "group $G +quota +512.0 MiB"
# Process rows start with the GPU's index ("-": a GPU only the ledgers know).
check "top lists the still process" "^ +- +$still .* $G .* 48.0 .*512.0"
check "top lists the victim" "^ +- +$victim "
check "growing process gets a positive trend" "^ +- +$grower .* $G .* [1-9][0-9]*\.[0-9] +[^ ]*\$"
check "top shows the GPU table by index and name" "^GPU NAME +TOTAL MiB +USED MiB +UUID"
check "top shows a hostile command name as text, escaped" "^ +- +$hostile .* x.x1b\\[2J.x1b\\]0;"
if grep -q "vram top -- " "$TMP/screen" && grep -qE "^ +- +$still " "$TMP/screen"; then
    pass "the hostile name cleared nothing"
else
    bad "the hostile name cleared nothing"
fi
# In an 80-column terminal nothing is cut: no line reaches the last column.
if awk 'length >= 80' "$TMP/screen" | grep -q .; then bad "top fits 80 columns"; else pass "top fits 80 columns"; fi
tmux -S "$SOCK" send-keys -t "$S" "i"
check "sort key switches to pid" "sort: pid"
tmux -S "$SOCK" send-keys -t "$S" "r"
check "sort reverses" "sort: pid \(reversed\)"
kill -9 "$victim"
wait "$victim" 2>/dev/null
# Gone at its next judgment (each process is judged at most once a
# second, the screen drawn every 0.3 s): looked for until then (at most
# 60 s, a hang: a loaded machine delays top's samples).
i=0
while :; do
    tmux -S "$SOCK" capture-pane -p -t "$S" >"$TMP/screen"
    grep -qE "^ +- +$victim " "$TMP/screen" || break
    i=$((i + 1))
    [ $i -ge 300 ] && break
    sleep 0.2
done
if grep -qE "^ +- +$victim " "$TMP/screen"; then bad "killed process disappears"; else pass "killed process disappears"; fi
# A group whose members are all killed leaves the screen, and top's sample
# removes its file.
"$FILL" "${G}d" "$U" 16 512 >"$TMP/fill.dead" 2>&1 &
dead=$!
pids="$pids $dead"
i=0
while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.dead"; do sleep 0.1; i=$((i + 1)); done
check "top shows a group of one member" "group ${G}d +quota"
kill -9 "$dead"
wait "$dead" 2>/dev/null
i=0
while [ $i -lt 50 ]; do
    tmux -S "$SOCK" capture-pane -p -t "$S" >"$TMP/screen"
    grep -qE "group ${G}d +quota" "$TMP/screen" || break
    sleep 0.2
    i=$((i + 1))
done
if grep -qE "group ${G}d +quota" "$TMP/screen"; then bad "a group whose members are all gone leaves the screen"; else pass "a group whose members are all gone leaves the screen"; fi
if [ -e "/dev/shm/vram-$(id -u)/${G}d" ]; then fail "... and its file is removed"; else pass "... and its file is removed"; fi
tmux -S "$SOCK" send-keys -t "$S" "q"
check "q quits with status 0" "TOP-EXIT=0"
check "terminal restored: the prompt is back" "^READY> ?$"
if grep -q "vram top -- " "$TMP/screen"; then bad "the screen of top is gone"; else pass "the screen of top is gone"; fi

# SIGTERM also quits cleanly.
tmux -S "$SOCK" send-keys -t "$S" "clear; sh -c 'echo \$\$ >$TMP/top.pid; exec \"$VRAM\" top --no-nvml -d 0.3'; echo TERM-EXIT=\$?" Enter
wait_for "vram top -- " >/dev/null
kill -TERM "$(cat "$TMP/top.pid")"
check "SIGTERM quits with status 0" "TERM-EXIT=0"
tmux -S "$SOCK" send-keys -t "$S" "'$VRAM' top --interval 0 ; echo BAD-EXIT=\$?" Enter
check "bad interval: exit 2" "BAD-EXIT=2"

# --once on the terminal: the snapshot, then the prompt at once.
tmux -S "$SOCK" send-keys -t "$S" "clear; '$VRAM' top --once --no-nvml --sort pid; echo ONCE-EXIT=\$?" Enter
check "--once in a terminal: exits 0 by itself" "ONCE-EXIT=0"
check "--once: the snapshot's process rows" "^ +- +$still .* $G .* 48.0 .*512.0"
check "--once: its header, without the keys line" "^vram top -- .*sort: pid\$"
if grep -q "^keys:" "$TMP/screen"; then bad "--once: no keys line"; else pass "--once: no keys line"; fi
# A terminal curses cannot use: one line that points at --once, exit 1.
tmux -S "$SOCK" send-keys -t "$S" "clear; TERM=no-such-terminal '$VRAM' top --no-nvml 2>'$TMP/noterm'; echo NOTERM-EXIT=\$?" Enter
check "an unusable terminal: exit 1" "NOTERM-EXIT=1"
if [ "$(wc -l <"$TMP/noterm")" -eq 1 ] && grep -q "^vram: top: cannot use this terminal .*--once" "$TMP/noterm"; then
    pass "an unusable terminal: one line naming --once"
else
    fail "an unusable terminal: one line naming --once" "$(cat "$TMP/noterm")"
fi

# Piped: one plain snapshot (a process that waited for keys would be cut
# by timeout: exit 124).
timeout 20 "$VRAM" top --no-nvml >"$TMP/piped" 2>"$TMP/err"
rc=$?
check_file() { if eval "$2"; then pass "$1"; else fail "$1" "false: $2"; sed 's/^/     out: /' "$TMP/piped" | head -n 12; fi; }
check_file "piped: exit 0 at once (exit $rc)" "[ $rc -eq 0 ]"
check_file "piped: no escape code" "! grep -q \"\$(printf '\\033')\" '$TMP/piped'"
check_file "piped: the header and the tables" "grep -q '^vram top -- ' '$TMP/piped' && grep -q '^GPU NAME ' '$TMP/piped' && grep -q '^GPU  *PID USER' '$TMP/piped'"
check_file "piped: the group with its quota" "grep -qE '^    group $G +quota +512.0 MiB' '$TMP/piped'"
check_file "piped: every process, the trend '-' (one sample)" \
    "grep -qE '^ +- +$still .* 48.0 .* - ' '$TMP/piped' && grep -qE '^ +- +$grower ' '$TMP/piped'"
check_file "piped: no trailing spaces" "! grep -q ' \$' '$TMP/piped'"
timeout 20 "$VRAM" top --no-nvml 2>"$TMP/err" | head -n 1 >"$TMP/piped"
check_file "vram top | head -n 1: the header" "grep -q '^vram top -- ' '$TMP/piped'"

test_end
