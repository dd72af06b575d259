#!/bin/sh
# SPDX-License-Identifier: MIT
# test_install.sh -- vram as a user or an administrator gets it: the build
# is packaged (cmake/debian/build-debs.sh, the Debian packages `make
# package` makes: libvram0, libvram-dev, libvram-preload0, vram, vram-slurm,
# python3-vram), lintian passes them (no error, no warning but those listed
# below with their reasons), they are installed with apt-get, and then,
# from the installed paths only (nothing of the build or the checkout, no
# LD_LIBRARY_PATH, no MANPATH):
#   - each file in the package Debian would put it in; the ldconfig
#     trigger ran (ldconfig -p knows libvram.so.0);
#   - vram --version, vram run with the stand-in CUDA driver (the installed
#     vram finds the installed libvram-preload.so.0 by itself); vram admin
#     enable (under --root) names libvram-preload.so.0 and replaces an
#     unversioned entry of an earlier version;
#   - the README's C example, compiled with pkg-config and run; a CMake
#     project with find_package(vram) linking vram::vram and vram::vram_static;
#   - the Slurm plug-in in Slurm's plug-in directory, its default preload=
#     naming the installed library;
#   - man -w for vram, every subcommand, policy.conf(5) and vram(3), each
#     compressed; the bash completion;
#   - import vram with Debian's python3 (python3-vram), and pip install of
#     the Python package into a virtual environment (offline:
#     --no-build-isolation), then statistics of the simulated device, with
#     the installed libvram.so.0 found by the package;
#   - a policy file that this version refuses (a bare number, which earlier
#     versions read as bytes) is said when the vram package is installed.
#
# Where it installs: on this machine, inside a private mount namespace
# (unshare -m) in which /usr, /etc and /var are overlays whose changes go
# to a tmpfs. So apt-get and dpkg really install the package (its
# dependencies checked against the system, its ldconfig and man-db
# triggers run, the files at their real paths, as on a user's machine),
# and when the namespace ends nothing is left: the machine's own /usr,
# /etc/ld.so.cache and dpkg database are never written. An unpacked tree
# (dpkg -x) would need LD_LIBRARY_PATH, PKG_CONFIG_SYSROOT_DIR and MANPATH,
# which is what this test must show a user does not need.
#
# Exit 77 (skipped) without root, unshare, overlayfs or lintian, or when
# the build lacks the man pages (help2man) or the Slurm plug-in
# (libslurm-dev): scripts/install-deps.sh --test installs them all. The
# last line is "N passed, M failed"; the exit status is 1 if anything
# failed.
#
# lintian's warnings that are accepted, with the reason (none today; the
# info tags left are no-symbols-control-file for libvram-preload0, which no
# program links, and the hardening-no-bindnow / no-fortify-functions of a
# test build: `make package` builds with dpkg-buildflags).
LINTIAN_ACCEPTED=""
# Usage: test_install.sh BUILD_DIR SOURCE_DIR PROBE FAKECUDA_DIR PYTHON3
set -u

if [ "${1:-}" != "--inside" ]; then
    if [ $# -ne 5 ]; then
        echo "usage: test_install.sh BUILD_DIR SOURCE_DIR PROBE FAKECUDA_DIR PYTHON3" >&2
        exit 2
    fi
    BUILD=$1
    SRC=$2
    skip() { echo "skipped: $1"; exit 77; }
    [ "$(id -u)" -eq 0 ] || skip "needs root (apt-get inside unshare -m)"
    for t in unshare apt-get dpkg-deb dpkg-shlibdeps pkg-config man lintian; do
        command -v $t >/dev/null 2>&1 || skip "no $t"
    done
    grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
        skip "no overlayfs"
    [ -f "$BUILD/man/stamp" ] || skip "the build made no man pages (help2man: scripts/install-deps.sh --test)"
    [ -f "$BUILD/lib/spank_vram.so" ] || skip "the build has no Slurm plug-in (libslurm-dev: scripts/install-deps.sh --test)"
    # The package installs under the build's prefix; Debian's layout (and
    # the dynamic linker's default path) is /usr, as `make test` builds.
    grep -qx 'CMAKE_INSTALL_PREFIX:PATH=/usr' "$BUILD/CMakeCache.txt" ||
        skip "the build's prefix is not /usr (make test-plain configures -DCMAKE_INSTALL_PREFIX=/usr)"

    . "$(dirname "$0")/../cli/lib.sh"
    test_begin install
    test_cleanup() { rm -f /dev/shm/vram-*/install$$*; }

    # ---- the packages ----
    start=$(date +%s)
    if ! sh "$SRC/cmake/debian/build-debs.sh" "$BUILD" "$TMP/pkg" >"$TMP/debs.log" 2>&1; then
        echo "FAIL packages: build-debs.sh failed"
        tail -n 20 "$TMP/debs.log"
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "ok   packages: $(cd "$TMP/pkg" && ls | tr '\n' ' ')($(($(date +%s) - start)) s)"
    # lintian as Debian runs it on uploads: no error, and no warning but
    # the accepted ones (above).
    lintian --no-tag-display-limit "$TMP"/pkg/*.deb >"$TMP/lintian" 2>&1
    errors=$(grep -c '^E: ' "$TMP/lintian")
    warnings=$(grep '^W: ' "$TMP/lintian" | sed 's/^W: [^:]*: \([^ ]*\).*/\1/' | sort -u |
        grep -vxF "$(printf '%s\n' $LINTIAN_ACCEPTED)" | grep -c .)
    if [ "$errors" -eq 0 ] && [ "$warnings" -eq 0 ]; then
        echo "ok   lintian: 0 errors, no warning but the accepted"
        lint_ok=1
    else
        echo "FAIL lintian: $errors errors, $warnings warnings not accepted"
        grep '^[EW]: ' "$TMP/lintian" | head -n 30 | sed 's/^/     /'
        lint_ok=0
    fi
    unshare -m --propagation private sh "$0" --inside "$TMP" "$TMP/pkg" "$lint_ok" "$@"
    exit $?
fi

# ---- inside the private mount namespace ----
shift
TMP=$1
PKG=$2
LINT_OK=$3
BUILD=$4
SRC=$5
PROBE=$6
FAKE=$7
PYTHON3=$8
# The counters and pass/fail of lib.sh; $TMP is the outer run's. The
# packages and lintian were judged outside: counted here.
. "$(dirname "$0")/../cli/lib.sh"
passed=1
failed=0
if [ "$LINT_OK" = 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
# check NAME COMMAND...: pass if COMMAND succeeds (output in $TMP/out, $TMP/err).
check() {
    name=$1
    shift
    if "$@" >"$TMP/out" 2>"$TMP/err"; then pass "$name"; else fail "$name" "exit $?: $*"; fi
}

mkdir -p "$TMP/ovl"
mount -t tmpfs tmpfs "$TMP/ovl" || { echo "FAIL mount: tmpfs"; exit 1; }
for d in usr etc var; do
    mkdir -p "$TMP/ovl/$d.up" "$TMP/ovl/$d.work"
    if ! mount -t overlay overlay \
        -o "lowerdir=/$d,upperdir=$TMP/ovl/$d.up,workdir=$TMP/ovl/$d.work" "/$d"; then
        echo "FAIL mount: overlay on /$d"
        exit 1
    fi
done

# Nothing of the caller's settings or of the build may help (the outer run
# dropped lib.sh's list already).
scrub 'LD_LIBRARY_PATH\|PKG_CONFIG_[A-Z_]*\|CMAKE_PREFIX_PATH\|MANPATH\|PYTHONPATH'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DEB=$(ls "$PKG"/vram_*.deb)
VERSION=$(dpkg-deb -f "$DEB" Version)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
LIBDIR=/usr/lib/$MULTIARCH

# A policy this version refuses (a bare number: bytes in earlier versions),
# there before the upgrade: the vram package's installation says so.
mkdir -p /etc/vram
printf 'default 42949672960\n' >/etc/vram/policy.conf
chmod 0644 /etc/vram/policy.conf

# ---- install: apt resolves the packages' dependencies from the system ----
# man-db's trigger rebuilds the whole manual index (10 of the 14 s of dpkg -i
# here); man -w does not need the index, so it is off in this namespace, as
# in Debian's container images.
rm -f /var/lib/man-db/auto-update
start=$(date +%s)
if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "$PKG"/*.deb >"$TMP/out" 2>"$TMP/err"; then
    pass "apt-get install of the $(ls "$PKG" | wc -l) packages ($(($(date +%s) - start)) s)"
else
    fail "apt-get install" "exit $?"
    sed 's/^/     out: /' "$TMP/out" | tail -n 8
    echo "$passed passed, $failed failed"
    exit 1
fi
if grep -q "42949672960B for bytes (= 40G)" "$TMP/out" "$TMP/err"; then
    pass "installing vram names the policy line this version refuses, and how to write it"
else
    fail "installing vram names the policy line this version refuses"
fi
rm -f /etc/vram/policy.conf
for p in libvram0 libvram-dev libvram-preload0 vram vram-slurm python3-vram; do
    dpkg -L "$p" >"$TMP/files.$p"
done
cat "$TMP"/files.* >"$TMP/files"
# has PACKAGE PATH: PATH (a grep -x pattern) is a file of PACKAGE.
has() { if grep -qx "$2" "$TMP/files.$1"; then pass "$1 has $2"; else fail "$1 has $2"; fi; }
has libvram0 "$LIBDIR/libvram\.so\.0"
has libvram-dev "$LIBDIR/libvram\.so"
has libvram-dev /usr/include/vram\.h
has libvram-dev "$LIBDIR/libvram\.a"
has libvram-dev "$LIBDIR/pkgconfig/vram\.pc"
has libvram-dev /usr/share/man/man3/vram\.3\.gz
has libvram-preload0 "$LIBDIR/libvram-preload\.so\.0"
has vram /usr/bin/vram
has vram /usr/share/man/man5/policy\.conf\.5\.gz
has vram-slurm ".*/spank_vram\.so"
has python3-vram /usr/lib/python3/dist-packages/vram/__init__\.py
if grep -q "\.h\$\|\.a\$\|libvram\.so\$" "$TMP/files.libvram0" "$TMP/files.vram"; then
    fail "no development file outside libvram-dev"
else
    pass "no development file outside libvram-dev"
fi
check "no unversioned libvram-preload.so is installed" sh -c "! grep -q 'libvram-preload\.so\$' '$TMP/files'"
check "the ldconfig trigger ran: ldconfig -p lists libvram.so.0" sh -c "ldconfig -p | grep -q 'libvram\.so\.0 '"
check "libvram-preload.so.0's SONAME is its name" \
    sh -c "objdump -p $LIBDIR/libvram-preload.so.0 | grep -q 'SONAME *libvram-preload\.so\.0\$'"
# Their dependencies come from what the binaries link (dpkg-shlibdeps).
depends=$(dpkg-deb -f "$DEB" Depends)
for lib in libc6 libjson-c5 zlib1g libvram-preload0; do
    case ", $depends" in
    *", $lib "* | *", $lib,"*) ;;
    *) fail "vram Depends has $lib" "Depends: $depends" ;;
    esac
done

# ---- the command ----
check "vram on PATH" sh -c 'command -v vram'
VRAM=$(cat "$TMP/out")
case $VRAM in
"$BUILD"* | "$SRC"*) fail "vram on PATH" "$VRAM is the build's" ;;
esac
check "vram --version" vram --version
[ "$(cat "$TMP/out")" = "vram $VERSION" ] || fail "vram --version" "'$(cat "$TMP/out")', expected 'vram $VERSION'"

# vram run injects the installed preload library; the stand-in driver
# (libcuda.so.1 of the build's tests) then reports the quota as its total.
GROUP=install$$
check "vram run --limit 64M with the stand-in driver" \
    env LD_LIBRARY_PATH="$FAKE" vram run --limit 64M --group "$GROUP" -- "$PROBE" info 0 64 64
check "vram run preloads $LIBDIR/libvram-preload.so.0" \
    sh -c "vram run --limit 64M --group '$GROUP' -- sh -c 'echo \$LD_PRELOAD' | grep -qx '$LIBDIR/libvram-preload.so.0'"
rm -f /dev/shm/vram-*/"$GROUP"*
# vram admin enable names the versioned library, replacing an entry of an
# earlier version (a root of its own: the namespace's /etc is an overlay,
# but ld.so.preload is not the machine's business here).
mkdir -p "$TMP/root/etc"
printf '%s/libvram-preload.so /usr/lib/other.so\n' "$LIBDIR" >"$TMP/root/etc/ld.so.preload"
check "vram admin enable (--root)" vram admin enable --root "$TMP/root"
check "ld.so.preload names libvram-preload.so.0 once, the earlier entry replaced, the other kept" \
    sh -c "[ \"\$(tr ' ' '\n' <'$TMP/root/etc/ld.so.preload' | grep -c libvram-preload)\" -eq 1 ] && grep -q '^$LIBDIR/libvram-preload\.so\.0' '$TMP/root/etc/ld.so.preload' && grep -q /usr/lib/other.so '$TMP/root/etc/ld.so.preload'"

# vram plan --model runs its tracer from the installed Python package: a
# stand-in interpreter (VRAM_PYTHON) prints the PYTHONPATH it is given.
printf '#!/bin/sh\necho "$PYTHONPATH"\n' >"$TMP/fake-python"
chmod +x "$TMP/fake-python"
check "vram plan --model: the installed Python package" \
    env VRAM_PYTHON="$TMP/fake-python" vram plan --model "$TMP/model.py:f"
case $(cat "$TMP/out") in
/usr/lib/python3/dist-packages*) ;;
*) fail "vram plan --model: the installed Python package (python3-vram)" "PYTHONPATH=$(cat "$TMP/out")" ;;
esac

# ---- the library: the README's C example, with pkg-config ----
awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' "$SRC/README.md" >"$TMP/example.c"
check "pkg-config --modversion vram" pkg-config --modversion vram
[ "$(cat "$TMP/out")" = "$VERSION" ] || fail "pkg-config --modversion vram" "$(cat "$TMP/out")"
check "README's C example: cc \$(pkg-config --cflags --libs vram)" \
    sh -c "cc -std=c11 -Wall -Werror \"$TMP/example.c\" \$(pkg-config --cflags --libs vram) -o \"$TMP/example\""
check "README's C example runs (VRAM_BACKEND=sim), no LD_LIBRARY_PATH" \
    env VRAM_BACKEND=sim "$TMP/example"
grep -q "^in use 1048576 bytes" "$TMP/out" || fail "README's C example output" "$(cat "$TMP/out")"
PRELOAD=$(pkg-config --variable=preload vram)
check "pkg-config --variable=preload vram exists" test -f "$PRELOAD"

# ---- the library: a CMake project with find_package(vram) ----
mkdir -p "$TMP/cmake-app"
cp "$TMP/example.c" "$TMP/cmake-app/example.c"
cat >"$TMP/cmake-app/CMakeLists.txt" <<EOF2
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C)
find_package(vram $VERSION REQUIRED)
add_executable(app example.c)
target_link_libraries(app PRIVATE vram::vram)
add_executable(app_static example.c)
target_link_libraries(app_static PRIVATE vram::vram_static)
EOF2
check "find_package(vram): configure" cmake -S "$TMP/cmake-app" -B "$TMP/cmake-app/build"
check "find_package(vram): build vram::vram and vram::vram_static" \
    cmake --build "$TMP/cmake-app/build"
check "find_package(vram): vram::vram runs" env VRAM_BACKEND=sim "$TMP/cmake-app/build/app"
check "find_package(vram): vram::vram_static runs" \
    env VRAM_BACKEND=sim "$TMP/cmake-app/build/app_static"
# 0.x: another minor version is another API (SameMinorVersion).
mkdir -p "$TMP/cmake-other"
next=$(echo "$VERSION" | awk -F. '{print $1 "." $2 + 1}')
cat >"$TMP/cmake-other/CMakeLists.txt" <<EOF2
cmake_minimum_required(VERSION 3.20)
project(other NONE)
find_package(vram $next QUIET)
if(vram_FOUND)
  message(FATAL_ERROR "find_package(vram $next) accepted vram $VERSION")
endif()
EOF2
check "find_package(vram $next) refuses $VERSION" cmake -S "$TMP/cmake-other" -B "$TMP/cmake-other/build"

# ---- the Slurm plug-in ----
SPANK=$(grep '/spank_vram\.so$' "$TMP/files")
if [ -z "$SPANK" ]; then
    fail "Slurm plug-in installed" "spank_vram.so is not in the package"
else
    pass "Slurm plug-in installed: $SPANK"
    # Debian's Slurm packages load plug-ins from /usr/lib/<multiarch>/slurm-wlm.
    slurmdir=$(dpkg -L slurm-wlm-basic-plugins 2>/dev/null | grep '/slurm-wlm/[a-z_]*\.so$' | head -n 1)
    if [ -n "$slurmdir" ] && [ "$(dirname "$SPANK")" != "$(dirname "$slurmdir")" ] &&
        [ "$(dirname "$(dirname "$(dirname "$SPANK")")")" = /usr ]; then
        fail "Slurm plug-in in Slurm's plug-in directory" "$SPANK, Slurm's are in $(dirname "$slurmdir")"
    fi
    default=$(tr -c '[:print:]' '\n' <"$SPANK" | grep '^/.*/libvram-preload\.so\.0$' | head -n 1)
    # vram.pc's paths go through its own directory: compared resolved.
    if [ -n "$default" ] && [ -f "$default" ] && [ "$default" = "$(realpath "$PRELOAD")" ]; then
        pass "Slurm plug-in's default preload= is installed: $default"
    else
        fail "Slurm plug-in's default preload=" "'$default' (installed: $PRELOAD)"
    fi
fi

# ---- man pages, bash completion ----
check "man -w vram" man -w vram
for cmd in $(vram help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on && /^  [a-z]/ {print $1}'); do
    check "man -w vram-$cmd" man -w "vram-$cmd"
done
check "man -w 5 policy.conf" man -w 5 policy.conf
check "man -w 3 vram" man -w 3 vram
check "every man page installed compressed" sh -c "! grep -q '^/usr/share/man/man[0-9]/.*\.[0-9]\$' '$TMP/files'"
COMPLETION=$(grep '/bash-completion/completions/vram$' "$TMP/files")
check "bash completion of 'vram r'" bash -c ". '$COMPLETION'; COMP_WORDS=(vram r); COMP_CWORD=1; _vram; echo \${COMPREPLY[*]}"
# Every subcommand that starts with r, as `vram help` lists them.
want=$(vram help | awk '/^Commands:/ {on = 1; next} on && /^$/ {exit} on && /^  r/ {print $1}' | sort | tr '\n' ' ')
got=$(tr ' ' '\n' <"$TMP/out" | grep . | sort | tr '\n' ' ')
[ -n "$want" ] && [ "$got" = "$want" ] || fail "bash completion of 'vram r'" "'$got' (vram help lists '$want')"

# ---- Python: Debian's python3 and python3-vram ----
cd / || exit 1
check "python3-vram: import vram with Debian's python3; statistics of the simulated device" \
    env VRAM_BACKEND=sim /usr/bin/python3 -c "
import vram
assert vram.__file__.startswith('/usr/lib/python3/dist-packages/'), vram.__file__
assert vram.__version__ == '$VERSION', vram.__version__
path = vram._library_path()
assert path.startswith('/usr/') and '$BUILD' not in path, path
s = vram.stats(0)
assert s['bytes_limit'] > 0, s
"

# ---- Python: pip into a virtual environment, offline ----
# --system-site-packages: Debian's setuptools and wheel build the package
# (no PyPI); --without-pip: the system's pip installs into the environment.
cp -r "$SRC/python" "$TMP/python"
rm -rf "$TMP/python/build" "$TMP/python"/*.egg-info
check "python3 -m venv" "$PYTHON3" -m venv --without-pip --system-site-packages "$TMP/venv"
check "pip install --no-build-isolation ./python" \
    "$TMP/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$TMP/python"
cd / || exit 1
check "import vram; statistics of the simulated device" env VRAM_BACKEND=sim \
    "$TMP/venv/bin/python" -c "
import vram
assert vram.__file__.startswith('$TMP/venv/'), vram.__file__
assert vram.__version__ == '$VERSION', vram.__version__
path = vram._library_path()
assert path.startswith('/usr/') and '$BUILD' not in path, path
s = vram.stats(0)
assert s['bytes_limit'] > 0 and s['num_allocs'] == 0, s
print(path, vram.get_memory_info(0))
"
sed 's/^/     /' "$TMP/out"

test_end
