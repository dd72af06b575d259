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

test_begin() {
    passed=0
    failed=0
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-$1.XXXXXX") || exit 1
    trap test_exit EXIT
    trap 'exit 1' INT TERM HUP
    scrub 'VRAM_[A-Z_]*\|CUDA_DEVICE_MEMORY_LIMIT[0-9_]*\|LD_PRELOAD\|PYTORCH_CUDA_ALLOC_CONF\|TF_[A-Z_]*\|XLA_PYTHON_CLIENT_[A-Z_]*\|FAKECUDA_[A-Z_]*\|CUDA_VISIBLE_DEVICES'
}

test_exit() {
    if command -v test_cleanup >/dev/null 2>&1; then
        test_cleanup
    fi
    rm -rf "$TMP"
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
