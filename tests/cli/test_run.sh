#!/bin/sh
# SPDX-License-Identifier: MIT
# test_run.sh -- `vram run` as a user runs it: settings checked before
# anything runs (exit 2, one line), the environment the command gets
# (VRAM_LIMIT, VRAM_GROUP, LD_PRELOAD first with the library and the old
# entries kept, HAMi's limits carried over), the exit codes (the
# command's, 126, 127, 128+N) and --report. DUMMY_SO -- any loadable
# shared library that is not built with a sanitizer (a sanitized library
# cannot be preloaded into sh or env) -- stands in for the preload library
# through --preload. The default path (build/lib/libvram-preload.so, target
# vram_preload) is checked whether or not it exists yet; in a sanitizer
# build (SANITIZE not empty) without running anything under it. The last
# line is "N passed, M failed"; the exit status is 1 if anything failed.
# Usage: tests/cli/test_run.sh path/to/vram DUMMY_SO [SANITIZE]
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: test_run.sh VRAM_BINARY DUMMY_SO [SANITIZE]" >&2
    exit 2
fi
VRAM=$1
DUMMY=$2
SANITIZE=${3:-}
case $DUMMY in /*) ;; *) DUMMY=$(pwd)/$DUMMY ;; esac
case $VRAM in /*) ;; */*) VRAM=$(pwd)/$VRAM ;; esac

. "$(dirname "$0")/lib.sh"
test_begin run

# Another name of a loadable library, for "an LD_PRELOAD entry already there".
OTHER=$TMP/other.so
ln -s "$DUMMY" "$OTHER" || exit 1

# run VAR=VALUE... -- ARGS...: vram run (lib.sh's vram_cmd).
run() { vram_cmd run "$@"; }

# A sanitized vram started with an LD_PRELOAD of its own would refuse to run
# (the sanitizer's runtime must come first); that is not what is tested.
if [ -n "$SANITIZE" ]; then
    ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export ASAN_OPTIONS
fi

expect_rc() {
    if [ "$rc" -eq "$2" ]; then pass "$1"; else fail "$1" "exit $rc, expected $2"; fi
}

P="--preload $DUMMY"

# ---- usage ----
run -- --help
expect_rc "run --help" 0
for opt in --limit --group --report --preload "126" "127" "128+N"; do
    if grep -qF -- "$opt" "$TMP/out"; then pass "help names $opt"; else fail "help names $opt" "missing"; fi
done
run --
expect_error "no command" 2 "run: no command given"
run -- $P --
expect_error "no command after --" 2 "run: no command given"
run -- --bogus -- true
expect_error "unknown option" 2 "run: unknown option '--bogus'"
run -- $P --limit
expect_error "--limit without a value" 2 "run: option '--limit' needs a value"

# ---- settings are checked before anything runs ----
run -- $P --limit 6X -- touch "$TMP/ran"
expect_error "--limit 6X" 2 "run: --limit: VRAM_LIMIT='6X': '6X': unknown unit 'X' (expected"
if [ -e "$TMP/ran" ]; then fail "--limit 6X runs nothing" "the command ran"; else pass "--limit 6X runs nothing"; fi
for bad in 0 150% 1.5 "6G,4G" "0:6G,0:4G" "0:6G," "64:1G" "GPU-8c6f:1G" "6 " 80 "0:6G,1:4096"; do
    run -- $P --limit "$bad" -- true
    expect_error "--limit '$bad'" 2 "run: --limit: VRAM_LIMIT='$bad': "
done
# Empty limits (an unset shell variable) and HAMi names that limit nothing.
run -- $P --limit '' -- touch "$TMP/ran"
expect_error "--limit ''" 2 "run: --limit: VRAM_LIMIT is set but empty"
if [ -e "$TMP/ran" ]; then fail "--limit '' runs nothing" "the command ran"; else pass "--limit '' runs nothing"; fi
run VRAM_LIMIT= -- $P -- true
expect_error "VRAM_LIMIT=''" 2 "run: VRAM_LIMIT is set but empty"
run CUDA_DEVICE_MEMORY_LIMIT= -- $P -- true
expect_error "CUDA_DEVICE_MEMORY_LIMIT=''" 2 "run: CUDA_DEVICE_MEMORY_LIMIT is set but empty"
for name in CUDA_DEVICE_MEMORY_LIMIT_16 CUDA_DEVICE_MEMORY_LIMIT_00 CUDA_DEVICE_MEMORY_LIMIT_01; do
    run "$name=1G" -- $P -- true
    expect_error "$name" 2 "run: $name: HAMi's per-device limits are"
done
run -- $P --group "a b" -- true
expect_error "--group 'a b'" 2 "run: --group: VRAM_GROUP='a b': ' ' is not allowed"
run -- $P --group "$(printf 'g%.0s' $(seq 1 64))" -- true
expect_error "--group of 64 characters" 2 "run: --group: VRAM_GROUP='"
run VRAM_LIMIT=2X -- $P -- true
expect_error "inherited VRAM_LIMIT malformed" 2 "run: VRAM_LIMIT='2X': "
run CUDA_DEVICE_MEMORY_LIMIT=junk -- $P -- true
expect_error "HAMi's limit malformed" 2 "run: CUDA_DEVICE_MEMORY_LIMIT='junk': "
run -- --preload "$TMP/none.so" -- true
expect_error "--preload missing" 2 "run: --preload '$TMP/none.so': No such file or directory"
run VRAM_PRELOAD_LIBRARY=$TMP/none.so -- -- true
expect_error "VRAM_PRELOAD_LIBRARY missing" 2 "run: VRAM_PRELOAD_LIBRARY '$TMP/none.so': "

# ---- the environment the command gets ----
run -- $P --limit 4G -- env
expect_rc "--limit 4G -- env" 0
expect_line "VRAM_LIMIT as given" "VRAM_LIMIT=4G"
expect_match "a fresh group" "^VRAM_GROUP=run-[0-9]+-[0-9]+$"
expect_line "LD_PRELOAD is the library" "LD_PRELOAD=$DUMMY"

run LD_PRELOAD=$OTHER -- $P --limit 4G -- env
expect_line "LD_PRELOAD: library first, old entry kept" "LD_PRELOAD=$DUMMY:$OTHER"
run LD_PRELOAD=$DUMMY:$OTHER -- $P -- env
expect_line "LD_PRELOAD: no second copy" "LD_PRELOAD=$DUMMY:$OTHER"
run LD_PRELOAD=$OTHER:$DUMMY -- $P -- env
expect_line "LD_PRELOAD: already there after another entry, moved first" "LD_PRELOAD=$DUMMY:$OTHER"
env LD_PRELOAD="$OTHER $DUMMY  $OTHER" "$VRAM" run $P -- env >"$TMP/out" 2>"$TMP/err"
expect_line "LD_PRELOAD: spaces read as ld.so reads them" "LD_PRELOAD=$DUMMY:$OTHER:$OTHER"

run -- $P --limit 0:6G,GPU-8c6f1e2a:50% --group exp42 -- env
expect_line "--group" "VRAM_GROUP=exp42"
expect_line "per-device --limit" "VRAM_LIMIT=0:6G,GPU-8c6f1e2a:50%"

run VRAM_LIMIT=2G VRAM_GROUP=old -- $P -- env
expect_line "inherited VRAM_LIMIT kept" "VRAM_LIMIT=2G"
expect_match "inherited VRAM_GROUP replaced" "^VRAM_GROUP=run-"
run VRAM_LIMIT=2G -- $P --limit 1G -- env
expect_line "--limit wins over VRAM_LIMIT" "VRAM_LIMIT=1G"
run -- $P -- env
expect_no "no limit: VRAM_LIMIT stays unset" "^VRAM_LIMIT="

# HAMi's limits would be turned off by the group: they become VRAM_LIMIT.
run CUDA_DEVICE_MEMORY_LIMIT=6144m -- $P -- env
expect_line "HAMi's limit carried over" "VRAM_LIMIT=6G"
run CUDA_DEVICE_MEMORY_LIMIT_1=1g -- $P -- env
expect_line "HAMi's device limit carried over" "VRAM_LIMIT=1:1G"
# HAMi's bare numbers are bytes, carried over exactly.
run CUDA_DEVICE_MEMORY_LIMIT=6442450945 -- $P -- env
expect_line "HAMi's bare bytes carried over" "VRAM_LIMIT=6442450945B"
run CUDA_DEVICE_MEMORY_LIMIT=junk -- $P --limit 1G -- env
expect_line "HAMi's ignored under --limit" "VRAM_LIMIT=1G"

run VRAM_PRELOAD_LIBRARY=$DUMMY -- -- env
expect_line "VRAM_PRELOAD_LIBRARY" "LD_PRELOAD=$DUMMY"
(cd "$(dirname "$DUMMY")" && "$VRAM" run --preload "$(basename "$DUMMY")" -- env) >"$TMP/out" 2>"$TMP/err"
expect_line "a relative --preload is made absolute" "LD_PRELOAD=$DUMMY"

# The command's own options are its own, with or without "--".
run -- $P -- sh -c 'echo "$1"' sh --limit
expect_line "options after the command" "--limit"
run -- $P echo hello --report
expect_line "command without --" "hello --report"

# ---- the default library: ../lib/libvram-preload.so.0 beside the binary ----
DEFAULT=$(cd "$(dirname "$VRAM")/.." && pwd)/lib/libvram-preload.so.0
if [ -e "$DEFAULT" ] && [ -n "$SANITIZE" ]; then
    # Found (else exit 1), without loading it into an unsanitized program.
    run -- --limit 4G -- "$TMP/no-such-command"
    expect_error "default library" 127 "run: '$TMP/no-such-command': command not found"
elif [ -e "$DEFAULT" ]; then
    run -- -- env
    expect_line "default library" "LD_PRELOAD=$DEFAULT"
else
    run -- -- true
    expect_error "no default library" 1 "run: no preload library at $DEFAULT: not found"
fi

# ---- exit codes ----
run -- $P --limit 4G -- "$TMP/no-such-command"
expect_error "missing command" 127 "run: '$TMP/no-such-command': command not found"
run -- $P --limit 4G -- vram-no-such-command-on-path
expect_error "command not on PATH" 127 "run: 'vram-no-such-command-on-path': command not found"
printf 'not a program\n' >"$TMP/noexec"
chmod 644 "$TMP/noexec"
run -- $P --limit 4G -- "$TMP/noexec"
expect_error "not executable" 126 "run: cannot run '$TMP/noexec': Permission denied"
run -- $P -- sh -c 'exit 3'
expect_rc "the command's status" 3
run -- $P --limit 4G -- true
expect_rc "true" 0
if [ -s "$TMP/err" ]; then fail "nothing on stderr without --report" "stderr"; else pass "nothing on stderr without --report"; fi

# No limit from any source: one line says so, and the command runs.
run -- $P -- true
expect_rc "no limit: the command runs" 0
if [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "^vram: run: no GPU memory limit (no --limit, VRAM_LIMIT or CUDA_DEVICE_MEMORY_LIMIT)" "$TMP/err"; then
    pass "no limit: one line on stderr"
else
    fail "no limit: one line on stderr" "$(wc -l <"$TMP/err") lines"
fi
# VRAM_MEMORY_LIMIT (the allocator's cap) is not a quota: a second line.
run VRAM_MEMORY_LIMIT=1G -- $P -- true
if [ "$(wc -l <"$TMP/err")" -eq 2 ] && grep -q "^vram: run: VRAM_MEMORY_LIMIT is set, but it only caps the vram allocator" "$TMP/err"; then
    pass "VRAM_MEMORY_LIMIT without a quota: explained"
else
    fail "VRAM_MEMORY_LIMIT without a quota" "$(wc -l <"$TMP/err") lines"
fi
run VRAM_MEMORY_LIMIT=1G -- $P --limit 2G -- true
if [ -s "$TMP/err" ]; then fail "VRAM_MEMORY_LIMIT with a quota: nothing said" "stderr"; else pass "VRAM_MEMORY_LIMIT with a quota: nothing said"; fi

# ---- --report ----
run -- $P --report -- true
expect_rc "--report true" 0
if grep -qE "^vram: run: (no GPU memory used by group 'run-[0-9]+-[0-9]+'|GPU-)" "$TMP/err"; then
    pass "--report prints a line"
else
    fail "--report prints a line" "$(head -n 1 "$TMP/err")"
fi
if [ "$(grep -c '^vram: ' "$TMP/err")" -ge 1 ] && ! grep -qv '^vram: ' "$TMP/err"; then
    pass "--report lines start with 'vram: '"
else
    fail "--report lines start with 'vram: '" "other lines"
fi
run -- $P --report --group exp-report -- sh -c 'echo "$VRAM_GROUP"; exit 5'
expect_rc "--report keeps the command's status" 5
expect_line "--report: the command's output" "exp-report"
if grep -q "group 'exp-report'\|^vram: run: GPU-" "$TMP/err"; then pass "--report names the group"; else fail "--report names the group" "$(cat "$TMP/err")"; fi
run -- $P --report -- sh -c 'kill -TERM $$'
expect_rc "--report: killed by SIGTERM is 143" 143
run -- $P --limit 4G --report -- "$TMP/no-such-command"
expect_error "--report: missing command" 127 "run: '$TMP/no-such-command': command not found"
run -- $P --limit 4G --report -- "$TMP/noexec"
expect_error "--report: not executable" 126 "run: cannot run '$TMP/noexec'"

# A SIGTERM sent to vram reaches the command.
"$VRAM" run $P --report -- sh -c 'trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.05; done' \
    >"$TMP/out" 2>"$TMP/err" &
vpid=$!
i=0
while ! grep -q ready "$TMP/out" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM $vpid
wait $vpid
rc=$?
expect_rc "--report: SIGTERM forwarded, the command's status" 7
expect_line "--report: the command saw SIGTERM" "got-term"

test_end
