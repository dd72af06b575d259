#!/bin/sh
# SPDX-License-Identifier: MIT
# test_prefix.sh -- an installation is relocatable: `cmake --install BUILD
# --prefix DIR` (staged under DESTDIR, so that nothing can land outside the
# test's directory), then the tree moved elsewhere, and from there, with
# pkg-config alone (PKG_CONFIG_PATH the one setting):
#   - vram.pc's version, its include and library directories and the
#     preload library exist in the moved tree (paths from ${pcfiledir});
#   - the README's C example builds with $(pkg-config --cflags --libs vram)
#     and runs on the simulated device;
#   - a CMake project finds vram with CMAKE_PREFIX_PATH alone;
#   - the moved vram command finds its own preload library.
# Needs no root and no network. Exit 77 without cc or pkg-config.
# Usage: test_prefix.sh BUILD_DIR SOURCE_DIR
set -u
BUILD=$1
SRC=$2
for t in cc pkg-config cmake; do
    command -v $t >/dev/null 2>&1 || { echo "skipped: no $t"; exit 77; }
done
. "$(dirname "$0")/../cli/lib.sh"
test_begin prefix
scrub 'LD_LIBRARY_PATH\|PKG_CONFIG_[A-Z_]*\|CMAKE_PREFIX_PATH\|C_INCLUDE_PATH\|CPATH\|LIBRARY_PATH'
PREFIX=/opt/vram-prefix-test$$
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")

if DESTDIR="$TMP/stage" cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1; then
    pass "cmake --install --prefix $PREFIX (DESTDIR=\$TMP/stage)"
else
    fail "cmake --install --prefix" "$(tail -n 5 "$TMP/install.log")"
    test_end
    exit 1
fi
# Moved after installing: nothing may point back at $PREFIX or the build.
mv "$TMP/stage$PREFIX" "$TMP/moved"
PC=$(find "$TMP/moved" -name vram.pc | head -n 1)
check "vram.pc installed under the prefix" "[ -n '$PC' ]"
check "vram.pc names no absolute directory (relative to \${pcfiledir})" \
    "! grep -qE '^(prefix|libdir|includedir)=/' '$PC' && grep -q '^prefix=\${pcfiledir}/' '$PC'"
export PKG_CONFIG_PATH="$(dirname "$PC")"

check "pkg-config --modversion vram: $VERSION" "[ \"\$(pkg-config --modversion vram)\" = '$VERSION' ]"
inc=$(pkg-config --variable=includedir vram)
lib=$(pkg-config --variable=libdir vram)
pre=$(pkg-config --variable=preload vram)
check "includedir holds vram.h, in the moved tree" \
    "[ -f '$inc/vram.h' ] && [ -f '$inc/vram_version.h' ] && [ \"\$(cd '$inc' && pwd -P)\" = \"\$(cd '$TMP/moved/include' && pwd -P)\" ]"
check "libdir holds libvram.so" "[ -e '$lib/libvram.so' ]"
check "the preload variable names the installed library" "[ -f '$pre' ]"

awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' "$SRC/README.md" >"$TMP/example.c"
check "README's C example: cc \$(pkg-config --cflags --libs vram), nothing else" \
    "cc -std=c11 -Wall -Werror '$TMP/example.c' \$(pkg-config --cflags --libs vram) -o '$TMP/example' 2>'$TMP/err'"
check "the example runs on the simulated device" \
    "env LD_LIBRARY_PATH='$lib' VRAM_BACKEND=sim '$TMP/example' >'$TMP/out' 2>&1 && grep -q '^in use 1048576 bytes' '$TMP/out'"

mkdir -p "$TMP/app"
cp "$TMP/example.c" "$TMP/app/example.c"
cat >"$TMP/app/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C)
find_package(vram $VERSION REQUIRED)
add_executable(app example.c)
target_link_libraries(app PRIVATE vram::vram)
EOF
check "find_package(vram) from the moved tree (CMAKE_PREFIX_PATH)" \
    "cmake -S '$TMP/app' -B '$TMP/app/build' -DCMAKE_PREFIX_PATH='$TMP/moved' >'$TMP/out' 2>&1 && cmake --build '$TMP/app/build' >>'$TMP/out' 2>&1"
check "the CMake app runs" \
    "env VRAM_BACKEND=sim '$TMP/app/build/app' | grep -q '^in use 1048576 bytes'"

# The command finds the preload library of its own tree.
"$TMP/moved/bin/vram" run --limit 64M --group "prefix$$" -- sh -c 'echo "$LD_PRELOAD"' >"$TMP/out" 2>"$TMP/err"
check "the moved vram run preloads the moved library" \
    "grep -q \"^\$(cd '$TMP/moved' && pwd -P)/\\|^$TMP/moved/\" '$TMP/out'"
rm -f /dev/shm/vram-"$(id -u)"/"prefix$$"*
test_end
