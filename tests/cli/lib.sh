# SPDX-License-Identifier: MIT
# tests/cli/lib.sh -- what the shell tests share; a test sources it with
# `. "$(dirname "$0")/lib.sh"` (or the path to tests/cli from elsewhere).
#
#   test_begin NAME       a private $TMP (removed at exit, after the test's
#                         own test_cleanup function if it defines one), the
#                         counters, and none of the variables that could
#                         change what vram, the preload library, the
#                         frameworks or the fake driver do: each run sees
#                         only what it sets
#   scrub PATTERN         unset every variable whose name matches PATTERN
#                         (a sed basic regular expression), for a test that
#                         must also drop others
#   absolute VAR...       each named variable's path made absolute
#   pass WHAT / fail WHAT [WHY]
#                         one line each, counted; a failure also shows the
#                         first lines of $TMP/err, where the tests keep the
#                         last command's standard error
#   check WHAT EXPR       pass if the shell expression EXPR (eval'ed) is
#                         true, fail otherwise
#   test_end              "N passed, M failed"; its status is the test's
#                         (last line of a test)
#   remove_user NAME      for a test_cleanup: userdel NAME, its processes
#                         killed first, retried for up to 5 s (a process
#                         just killed, or another test's useradd holding
#                         the password file's lock, makes userdel fail for
#                         a moment); a user that stays is said on stderr
#                         and fails the test
#
# Running vram and judging what it did:
#   vram_cmd SUB VAR=VALUE... -- ARGS...
#                         `$VRAM SUB ARGS` (no SUB when it is "") with
#                         those variables set, by env so that nothing leaks
#                         into the next run, and the test's $run_env (more
#                         variables) and $run_wrap (a command that runs it,
#                         e.g. "timeout 120"); stdout in $TMP/out, stderr
#                         in $TMP/err, status in $rc
#   expect_ok NAME        exit 0 and nothing on stderr
#   expect_error NAME CODE [PREFIX]
#                         exit CODE, exactly one stderr line, which starts
#                         with "vram: PREFIX", and nothing on stdout
#   expect_line NAME TEXT stdout has the line TEXT exactly
#   expect_match NAME RE  stdout has a line matching RE (grep -E)
#   expect_no NAME RE     stdout has no line matching RE

test_begin() {
    passed=0
    failed=0
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-$1.XXXXXX") || exit 1
    trap test_exit EXIT
    trap 'exit 1' INT TERM HUP
    scrub 'VRAM_[A-Z_]*\|CUDA_DEVICE_MEMORY_LIMIT[0-9_]*\|LD_PRELOAD\|PYTORCH_CUDA_ALLOC_CONF\|TF_[A-Z_]*\|XLA_PYTHON_CLIENT_[A-Z_]*\|FAKECUDA_[A-Z_]*\|CUDA_VISIBLE_DEVICES'
}

test_exit() {
    te_rc=$?
    if command -v test_cleanup >/dev/null 2>&1; then
        test_cleanup
    fi
    rm -rf "$TMP"
    [ -n "${users_left:-}" ] && te_rc=1
    exit $te_rc
}

remove_user() {
    id "$1" >/dev/null 2>&1 || return 0
    ru_i=0
    while :; do
        pkill -KILL -u "$1" 2>/dev/null
        ru_err=$(userdel "$1" 2>&1) && return 0
        ru_i=$((ru_i + 1))
        if [ $ru_i -ge 50 ]; then
            echo "test user $1 left behind: $ru_err" >&2
            users_left=1
            return 1
        fi
        sleep 0.1
    done
}

scrub() {
    for v in $(env | sed -n "s/^\\($1\\)=.*/\\1/p"); do
        unset "$v"
    done
}

absolute() {
    for v in "$@"; do
        eval "val=\$$v"
        case $val in /*) ;; *) eval "$v=\$(pwd)/\$val" ;; esac
    done
}

pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() {
    failed=$((failed + 1))
    echo "FAIL $1${2:+: $2}"
    if [ -s "$TMP/err" ]; then sed 's/^/     stderr: /' "$TMP/err" | head -n 5; fi
}
check() { if eval "$2"; then pass "$1"; else fail "$1" "false: $2"; fi; }

test_end() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

vram_cmd() {
    sub=$1
    shift
    vars=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        vars="$vars $1"
        shift
    done
    shift
    # shellcheck disable=SC2086
    env $vars ${run_env:-} ${run_wrap:-} "$VRAM" ${sub:+"$sub"} "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

expect_ok() {
    if [ "$rc" -ne 0 ]; then fail "$1" "exit $rc, expected 0"; return; fi
    if [ -s "$TMP/err" ]; then fail "$1" "unexpected stderr"; return; fi
    pass "$1"
}

expect_error() {
    if [ "$rc" -ne "$2" ]; then fail "$1" "exit $rc, expected $2"; return; fi
    nl=$(wc -l <"$TMP/err")
    case $(head -n 1 "$TMP/err") in
    "vram: ${3:-}"*) ;;
    *) fail "$1" "stderr does not start with 'vram: ${3:-}'"; return ;;
    esac
    if [ "$nl" -ne 1 ]; then fail "$1" "$nl stderr lines, expected 1"; return; fi
    if [ -s "$TMP/out" ]; then fail "$1" "unexpected stdout"; return; fi
    pass "$1"
}

expect_line() {
    if grep -qxF -- "$2" "$TMP/out"; then pass "$1"; else fail "$1" "no line '$2' in the output"; fi
}

expect_match() {
    if grep -qE -- "$2" "$TMP/out"; then pass "$1"; else fail "$1" "no line matching '$2'"; fi
}

expect_no() {
    if grep -qE -- "$2" "$TMP/out"; then fail "$1" "a line matches '$2'"; else pass "$1"; fi
}
