#!/bin/sh
# SPDX-License-Identifier: MIT
# run_fuzzers.sh -- build the fuzz targets with clang's libFuzzer and run
# each for a while (docs/INTERNALS.md "Fuzzing"). `make fuzz` runs it with
# FUZZ_SECONDS (default 300) each; CTest's fuzz_libfuzzer with 10.
#
# Usage: run_fuzzers.sh SOURCE_DIR BUILD_DIR SECONDS [TARGET...]
#   TARGET: trace, config, plan, exporter (default: all that were built).
# Each target starts from its checked-in corpus (tests/fuzz/corpus/NAME,
# never written to) and keeps what it finds in BUILD_DIR/corpus/NAME, so
# that the next run goes on from there. A crash, leak, hang (-timeout) or
# broken invariant leaves its input in BUILD_DIR/artifacts/ and fails the
# run (exit 1); copy it into the target's corpus with the fix, and
# fuzz_NAME_replay keeps it as a regression test. Exit 77 (skipped) when
# clang or its libFuzzer runtime is missing: scripts/install-deps.sh --test
# installs them.
set -eu
SRC=$1
BUILD=$2
SECONDS_EACH=$3
shift 3
CC=${FUZZ_CC:-clang}

if ! command -v "$CC" >/dev/null 2>&1; then
    echo "run_fuzzers: no $CC (scripts/install-deps.sh --test installs clang): skipped" >&2
    exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    >"$probe/t.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe/t.c" -o "$probe/t" >/dev/null 2>&1; then
    echo "run_fuzzers: $CC has no libFuzzer runtime (Debian: libclang-rt-dev): skipped" >&2
    exit 77
fi

cmake -S "$SRC" -B "$BUILD" -DCMAKE_C_COMPILER="$CC" -DVRAM_SANITIZE=fuzzer \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$probe/configure.log" 2>&1 ||
    { cat "$probe/configure.log" >&2; exit 1; }
cmake --build "$BUILD" --target fuzzers -j "${FUZZ_JOBS:-2}" >"$probe/build.log" 2>&1 ||
    { tail -n 40 "$probe/build.log" >&2; exit 1; }

[ $# -gt 0 ] || set -- trace config plan exporter
mkdir -p "$BUILD/artifacts"
status=0
for name in "$@"; do
    bin=$BUILD/tests/fuzz_$name
    if [ ! -x "$bin" ]; then
        echo "fuzz_$name: not built (the exporter needs libmicrohttpd)"
        continue
    fi
    mkdir -p "$BUILD/corpus/$name"
    log=$BUILD/fuzz_$name.log
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a leak or
    # an allocation the size of a hostile number. One job: the CI machine
    # may have two cores for everything.
    start=$(date +%s)
    if "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/fuzz_$name-" \
        "$BUILD/corpus/$name" "$SRC/tests/fuzz/corpus/$name" >"$log" 2>&1; then
        result=ok
    else
        result="FAILED (log $log)"
        status=1
        grep -E "^==[0-9]+==|SUMMARY|invariant broken|Test unit written" "$log" | head -n 8 >&2
    fi
    took=$(($(date +%s) - start))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    echo "fuzz_$name: ${runs:-?} inputs in $took s (${rate:-?}/s), $cov, corpus" \
        "$(ls "$BUILD/corpus/$name" | wc -l) new: $result"
done
exit $status
