# SPDX-License-Identifier: MIT
# tests/cli/lib.sh -- what the shell tests of the command line share; a
# test sources it with `. "$(dirname "$0")/lib.sh"`.
#
#   test_begin NAME       a private $TMP (removed at exit), the counters,
#                         and none of the variables that could change what
#                         vram, the preload library, the frameworks or the
#                         fake driver do: each run sees only what it sets
#   absolute VAR...       each named variable's path made absolute
#   pass WHAT / fail WHAT WHY
#                         one line each, counted

test_begin() {
    passed=0
    failed=0
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-$1.XXXXXX") || exit 1
    trap 'rm -rf "$TMP"' EXIT INT TERM
    for v in $(env | sed -n 's/^\(VRAM_[A-Z_]*\|CUDA_DEVICE_MEMORY_LIMIT[0-9_]*\|LD_PRELOAD\|PYTORCH_CUDA_ALLOC_CONF\|TF_GPU_ALLOCATOR\|XLA_PYTHON_CLIENT_[A-Z]*\|FAKECUDA_[A-Z_]*\|CUDA_VISIBLE_DEVICES\)=.*/\1/p'); do
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
    echo "FAIL $1: $2"
}
