#!/bin/sh
# SPDX-License-Identifier: MIT
# build-debs.sh -- the Debian packages of a build (cmake/Package.cmake says
# which and why): for each, its files installed alone (`cmake --install
# BUILD --component PACKAGE` into a staging root), then what Debian's
# tools would add (debhelper's dh_strip, dh_fixperms, dh_installdocs,
# dh_installchangelogs, dh_makeshlibs, dh_shlibdeps, dh_md5sums,
# dh_gencontrol), done here with dpkg's own tools so that the packages
# build from the CMake tree without a debian/ source directory:
#   - ELF files stripped as dh_strip does; shared objects mode 0644;
#   - /usr/share/doc/PACKAGE/copyright (the licence, in Debian's
#     machine-readable format) and changelog.gz (cmake/debian/changelog,
#     gzip -9n);
#   - Depends from dpkg-shlibdeps over the package's ELF files, plus the
#     packages of this build it needs (exact version);
#   - for a library in the linker's path: a shlibs file and the ldconfig
#     trigger (no maintainer script calls ldconfig), and where
#     cmake/debian/PACKAGE.symbols exists, the symbols file dpkg-gensymbols
#     makes from it (a symbol that disappears fails the build: an ABI
#     break needs a new SONAME; a new one gets this version);
#   - md5sums, Installed-Size, and dpkg-deb --root-owner-group.
# Usage: build-debs.sh BUILD_DIR OUTDIR
set -eu
if [ $# -ne 2 ]; then
    echo "usage: build-debs.sh BUILD_DIR OUTDIR" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd)
OUT=$2
[ -f "$BUILD/debian/settings.sh" ] || {
    echo "build-debs.sh: $BUILD/debian/settings.sh missing: configure $BUILD with CMake first" >&2
    exit 2
}
. "$BUILD/debian/settings.sh"
HERE=$SOURCE_DIR/cmake/debian
for t in dpkg-deb dpkg-shlibdeps dpkg-architecture strip gzip md5sum; do
    command -v $t >/dev/null 2>&1 || {
        echo "build-debs.sh: no $t (Debian: dpkg-dev, binutils; scripts/install-deps.sh --package)" >&2
        exit 2
    }
done
[ "$HAS_SLURM" = yes ] || {
    echo "build-debs.sh: the build has no Slurm plug-in (libslurm-dev; configure with -DVRAM_REQUIRE_SLURM=ON)" >&2
    exit 2
}
[ "$HAS_MAN" = yes ] || {
    echo "build-debs.sh: the build has no man pages (help2man; configure with -DVRAM_MAN=ON)" >&2
    exit 2
}
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/vram-debs.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT INT TERM

# ---- what each package is ----
# describe PACKAGE: its Section, Architecture, Multi-Arch, the Depends and
# other fields beyond those of dpkg-shlibdeps, and its Description.
describe() {
    case $1 in
    libvram0)
        section=libs arch=$ARCH multiarch=same
        depends="" extra=""
        summary="GPU memory allocator library for deep learning (runtime)"
        long="libvram is a GPU memory allocator with TensorFlow's strategies
(preallocation, a fixed fraction, an absolute limit, growth, logical
devices) and an expandable strategy that maps physical memory only where
live blocks are, usable from C, from Python and as PyTorch's CUDA
allocator. It loads the CUDA driver at run time and also offers a
simulated GPU.
.
This package holds the shared library."
        ;;
    libvram-dev)
        section=libdevel arch=$ARCH multiarch=same
        depends="libvram0 (= $VERSION), zlib1g-dev" extra="Suggests: pkg-config"
        summary="GPU memory allocator library for deep learning (development)"
        long="libvram is a GPU memory allocator with TensorFlow's strategies and an
expandable strategy, usable from C, from Python and as PyTorch's CUDA
allocator.
.
This package holds the header vram.h (the specification of the API; see
vram(3)), the static library, the pkg-config file and the CMake package
(find_package(vram))."
        ;;
    libvram-preload0)
        section=libs arch=$ARCH multiarch=same
        depends="" extra="Recommends: libunwind8"
        summary="GPU memory quota enforcer for unmodified CUDA programs"
        long="libvram-preload.so.0 is preloaded into CUDA programs (PyTorch, JAX,
TensorFlow, CuPy, plain CUDA) to hold a process, a group of processes or
every process of a user to a GPU memory quota without code changes: the
program sees a GPU of the quota's size and gets the driver's out-of-memory
error past it. vram run, the Slurm plug-in and /etc/ld.so.preload (vram
admin enable, with the host's policy, policy.conf(5)) name this file.
libunwind8 makes the call sites of vram record cheaper."
        ;;
    vram)
        section=utils arch=$ARCH multiarch=foreign
        depends="libvram-preload0 (= $VERSION)"
        # vram plan --model runs the tracer of the Python package.
        extra="Recommends: python3-vram
Suggests: python3-torch, prometheus"
        summary="GPU memory management for deep learning: quotas, analysis, monitoring"
        long="The vram command runs programs under a GPU memory quota (vram run),
records and replays their allocations (record, replay), analyzes traces
for peaks, iterations and leaks (analyze, doctor), recommends a strategy
and a cap (tune), plans a training job's peak memory (plan), shows live
use per GPU, group and process (stat, top) and serves it to Prometheus
(exporter), and manages the host's quota policy (admin).
.
Includes man pages, bash completion, a Grafana dashboard, alert rules, a
systemd unit for the exporter and the documentation."
        ;;
    vram-slurm)
        section=admin arch=$ARCH multiarch=no
        depends="libvram-preload0 (= $VERSION)" extra="Enhances: slurm-client, slurmd"
        summary="Slurm SPANK plug-in for GPU memory quotas (srun --gpu-mem)"
        long="spank_vram.so adds --gpu-mem to srun, sbatch and salloc: every task of
a job runs under the vram quota enforcer, with one quota per GPU shared by
the job's tasks on a node, and the cluster's default and maximum set in
plugstack.conf. It links only the C library: on a machine without Slurm it
is an inert file. A plugstack.conf line is in /usr/share/vram/contrib/slurm."
        ;;
    python3-vram)
        section=python arch=all multiarch=foreign
        depends="python3:any, libvram0 (>= $VERSION)" extra="Suggests: python3-torch"
        summary="Python interface to libvram, and its PyTorch allocator plug-in"
        long="The vram Python package reads libvram's statistics and phase marks, makes
libvram PyTorch's CUDA allocator (vram.torch.use()), and traces a PyTorch
program's memory on a fake device for vram plan --model."
        ;;
    esac
}

# ---- the files ----
# stage PACKAGE: its files in $STAGE/PACKAGE, the way dh_strip, dh_fixperms,
# dh_installdocs and dh_installchangelogs leave them.
stage() {
    pkg=$1
    root=$STAGE/$pkg
    DESTDIR=$root cmake --install "$BUILD" --component "$pkg" >"$STAGE/$pkg.install.log" 2>&1 || {
        cat "$STAGE/$pkg.install.log" >&2
        echo "build-debs.sh: cmake --install --component $pkg failed" >&2
        exit 1
    }
    [ -d "$root" ] || { echo "build-debs.sh: component $pkg installed nothing" >&2; exit 1; }
    find "$root" -type f | while read -r f; do
        case $(file -b "$f") in
        *ELF*shared\ object*)
            strip --remove-section=.comment --remove-section=.note --strip-unneeded "$f"
            chmod 0644 "$f"
            ;;
        *ELF*executable*)
            strip --remove-section=.comment --remove-section=.note "$f"
            chmod 0755 "$f"
            ;;
        *ar\ archive*)
            strip --strip-debug --remove-section=.comment --remove-section=.note \
                --enable-deterministic-archives "$f"
            chmod 0644 "$f"
            ;;
        *)
            # Scripts keep their execute bit; everything else is data.
            if head -c 2 "$f" | grep -q '^#!'; then chmod 0755 "$f"; else chmod 0644 "$f"; fi
            ;;
        esac
    done
    find "$root" -type d -exec chmod 0755 {} +
    doc=$root/usr/share/doc/$pkg
    mkdir -p "$doc"
    gzip -9 -n -c "$HERE/changelog" >"$doc/changelog.gz"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: vram"
        echo
        echo "Files: *"
        sed -n 's/^Copyright (c) /Copyright: /p' "$SOURCE_DIR/LICENSE"
        echo "License: Expat"
        echo
        echo "License: Expat"
        # The licence's text after its copyright line, indented as the
        # format asks ("." for an empty line).
        awk 'on { print ($0 == "" ? " ." : " " $0) } /^Copyright/ { on = 1; getline }' \
            "$SOURCE_DIR/LICENSE"
    } >"$doc/copyright"
    chmod 0644 "$doc/copyright" "$doc/changelog.gz"
    # The licence is the copyright file: no second copy.
    rm -f "$doc/LICENSE"
}

# ---- the control files ----
# shlibdeps PACKAGE: dpkg-shlibdeps's Depends for the package's ELF files.
shlibdeps() {
    root=$STAGE/$1
    elves=$(find "$root" -type f \( -name '*.so*' -o -perm -0100 \) -exec sh -c \
        'file -b "$1" | grep -q "^ELF" && echo "$1"' sh {} \; | sort)
    [ -n "$elves" ] || return 0
    mkdir -p "$STAGE/src/debian"
    printf 'Source: vram\n\nPackage: %s\nArchitecture: any\n' "$1" >"$STAGE/src/debian/control"
    # shellcheck disable=SC2086
    (cd "$STAGE/src" && dpkg-shlibdeps -O -e $elves 2>"$STAGE/$1.shlibdeps.log") |
        sed -n 's/^shlibs:Depends=//p'
}

control() {
    pkg=$1
    root=$STAGE/$pkg
    describe "$pkg"
    auto=$(shlibdeps "$pkg")
    all=$(printf '%s\n%s\n' "$auto" "$depends" | tr ',' '\n' | sed 's/^ *//; s/ *$//' |
        grep . | sort -u | paste -sd, - | sed 's/,/, /g')
    size=$(du -sk --apparent-size "$root" | cut -f1)
    mkdir -p "$root/DEBIAN"
    {
        echo "Package: $pkg"
        echo "Source: vram"
        echo "Version: $VERSION"
        echo "Architecture: $arch"
        echo "Maintainer: $MAINTAINER"
        echo "Installed-Size: $size"
        [ -n "$all" ] && echo "Depends: $all"
        [ -n "$extra" ] && echo "$extra"
        [ "$multiarch" != no ] && echo "Multi-Arch: $multiarch"
        echo "Section: $section"
        echo "Priority: optional"
        echo "Description: $summary"
        echo "$long" | sed 's/^/ /'
    } >"$root/DEBIAN/control"
    # A library in the dynamic linker's path: shlibs and the ldconfig trigger.
    libs=$(find "$root/usr/lib/$MULTIARCH" -maxdepth 1 -name '*.so.[0-9]*' -type f 2>/dev/null || true)
    if [ -n "$libs" ]; then
        : >"$root/DEBIAN/shlibs"
        for lib in $libs; do
            soname=$(objdump -p "$lib" | sed -n 's/^ *SONAME *//p')
            name=${soname%%.so.*}
            echo "$name ${soname##*.so.} $pkg (>= $VERSION)" >>"$root/DEBIAN/shlibs"
        done
        echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
        if [ -f "$HERE/$pkg.symbols" ]; then
            mkdir -p "$STAGE/src/debian"
            printf 'Source: vram\n\nPackage: %s\nArchitecture: any\n' "$pkg" \
                >"$STAGE/src/debian/control"
            (cd "$STAGE/src" && dpkg-gensymbols -p"$pkg" -P"$root" -v"$VERSION" -c1 \
                -I"$HERE/$pkg.symbols" -O"$root/DEBIAN/symbols" >"$STAGE/$pkg.symbols.log" 2>&1) || {
                cat "$STAGE/$pkg.symbols.log" >&2
                echo "build-debs.sh: $pkg: symbols of cmake/debian/$pkg.symbols are gone (an ABI break)" >&2
                exit 1
            }
        fi
    fi
    if [ -f "$HERE/$pkg.postinst" ]; then
        cp "$HERE/$pkg.postinst" "$root/DEBIAN/postinst"
        chmod 0755 "$root/DEBIAN/postinst"
    fi
    (cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\n' | LC_ALL=C sort |
        xargs -d '\n' md5sum) >"$root/DEBIAN/md5sums"
    chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
    for f in shlibs triggers symbols; do
        [ -f "$root/DEBIAN/$f" ] && chmod 0644 "$root/DEBIAN/$f"
    done
    return 0
}

for pkg in libvram0 libvram-dev libvram-preload0 vram vram-slurm python3-vram; do
    stage "$pkg"
    control "$pkg"
    describe "$pkg"
    deb=$OUT/${pkg}_${VERSION}_${arch}.deb
    dpkg-deb --root-owner-group -Zxz --build "$STAGE/$pkg" "$deb" >/dev/null
    echo "$deb"
done
