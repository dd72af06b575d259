#!/bin/sh
# SPDX-License-Identifier: MIT
# check_trampoline.sh -- the dlsym override's trampoline
# (src/preload/trampoline.h) keeps RTLD_NEXT meaning "after the caller":
# a library that overrides dlsym with it (tramp.c) is preloaded into a
# program (main.c) linked to a library that wraps getpid through
# dlsym(RTLD_NEXT, "getpid") (wrap.c); the trampoline's own answers and
# glibc's must come back, and the wrapper must find libc's getpid, not
# itself. Built and run natively (x86-64 assembly), for aarch64 with the
# cross compiler under qemu-aarch64 (Debian: gcc-aarch64-linux-gnu,
# qemu-user) when they are installed, and in C with musttail under clang
# when it is installed. The last line is "N passed, M failed"; exit 1 if
# anything failed.
# Usage: check_trampoline.sh SOURCE_DIR BINARY_DIR CC
set -u
if [ $# -ne 3 ]; then
    echo "usage: check_trampoline.sh SOURCE_DIR BINARY_DIR CC" >&2
    exit 2
fi
SRC=$1
BIN=$2
CC=$3
T=$SRC/tests/preload/trampoline
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vram-tramp.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
passed=0
failed=0

# one NAME CC RUNNER CFLAGS: build the three with CC (CFLAGS for the
# trampoline's library), run main under RUNNER ("" natively).
n=0
one() {
    name=$1 cc=$2 runner=$3 cflags=$4
    n=$((n + 1))
    d=$TMP/$n
    mkdir -p "$d"
    # shellcheck disable=SC2086
    if ! $cc -D_GNU_SOURCE -fPIC -shared -O0 $cflags -I"$SRC/src" -o "$d/libtramp.so" \
        "$T/tramp.c" -ldl 2>"$d/err" ||
        ! $cc -D_GNU_SOURCE -fPIC -shared -O2 -o "$d/libwrap.so" "$T/wrap.c" -ldl 2>>"$d/err" ||
        ! $cc -O2 -o "$d/main" "$T/main.c" -L"$d" -lwrap -ldl -Wl,-rpath,"$d" 2>>"$d/err"; then
        echo "FAIL $name: does not build"
        sed 's/^/     /' "$d/err" | head -n 5
        failed=$((failed + 1))
        return
    fi
    if [ -z "$runner" ]; then
        env LD_PRELOAD="$d/libtramp.so" "$d/main" >"$d/out" 2>&1
    else
        $runner -E LD_PRELOAD="$d/libtramp.so" "$d/main" >"$d/out" 2>&1
    fi
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^ok$' "$d/out"; then
        echo "ok   $name: RTLD_NEXT still after the caller, both answers come back"
        passed=$((passed + 1))
    else
        echo "FAIL $name: exit $rc (3: RTLD_NEXT found the wrapper itself)"
        sed 's/^/     /' "$d/out" | head -n 5
        failed=$((failed + 1))
    fi
}

case "$(uname -m)" in
x86_64 | aarch64) one "$(uname -m) assembly" "$CC" "" "" ;;
esac
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null &&
    [ -d /usr/aarch64-linux-gnu ]; then
    one "aarch64 assembly (qemu)" aarch64-linux-gnu-gcc "qemu-aarch64 -L /usr/aarch64-linux-gnu" ""
else
    echo "skip aarch64: no aarch64-linux-gnu-gcc or qemu-aarch64"
fi
if command -v clang >/dev/null; then
    one "C with musttail (clang, -O0)" clang "" "-DPRELOAD_TRAMPOLINE_FORCE_C"
else
    echo "skip musttail: no clang"
fi
# The preload library's own file, as it is built elsewhere: for aarch64,
# and with the overrides in C.
compiles() {
    name=$1
    shift
    if "$@" -std=c11 -D_GNU_SOURCE -fPIC -Wall -Wextra -Werror -c -I"$SRC/src" \
        -I"$SRC/include" -I"$BIN/include" -o "$TMP/interpose.o" "$SRC/src/preload/interpose.c" \
        >"$TMP/cc.err" 2>&1; then
        echo "ok   $name: src/preload/interpose.c compiles"
        passed=$((passed + 1))
    else
        echo "FAIL $name: src/preload/interpose.c does not compile"
        sed 's/^/     /' "$TMP/cc.err" | head -n 5
        failed=$((failed + 1))
    fi
}
command -v aarch64-linux-gnu-gcc >/dev/null && compiles aarch64 aarch64-linux-gnu-gcc
command -v clang >/dev/null && compiles "musttail C" clang -DPRELOAD_TRAMPOLINE_FORCE_C
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
