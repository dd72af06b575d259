#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages vram needs, and only those missing. Safe to
# run again; does nothing when everything is present. Off Debian (no
# apt-get), it prints the packages to get instead.
# Usage: scripts/install-deps.sh [--package | --fuzz | --test]   (as root, or with sudo)
#   (none)     the build and `make demo`: a C compiler, CMake, pkg-config,
#              zlib, json-c, cmocka (the build configures the unit tests),
#              ncurses and libmicrohttpd (`vram top` and `vram exporter`,
#              built by default; -DVRAM_LIVE_TOOLS=OFF does without them).
#   --package  also what `make package` needs: help2man (the man pages are
#              made from the --help texts), libslurm-dev (the Slurm plug-in
#              needs slurm/spank.h), file and dpkg-dev (cmake/debian/
#              build-debs.sh: dpkg-deb, dpkg-shlibdeps, dpkg-gensymbols,
#              dpkg-buildflags).
#   --fuzz     also clang and its libFuzzer runtime (libclang-rt-14-dev on
#              Debian 12): `make fuzz` and CTest's fuzz_libfuzzer build the
#              fuzz targets with them (tests/fuzz/run_fuzzers.sh).
#   --test     also what only the tests need (`make test`; includes --package
#              and --fuzz, since one test builds and installs the package and
#              one runs the fuzzers):
#              - chromium, fonts-dejavu-core, python3: the HTML report's test
#                renders it headless and checks the screenshot; python3 reads
#                the page and the PNG there. Chromium is large: the first
#                install takes a while.
#              - munge, slurmctld, slurmd, slurm-client: the SPANK plug-in's
#                test on a single-node cluster (tests/slurm/run_slurm_test.sh).
#              - tmux, curl, prometheus (with promtool): the tests of top, the
#                exporter and the alert rules (tests/cli/test_top.sh,
#                test_exporter.sh, tests/prometheus/test_alerts.sh).
#              - bash-completion: the completion's test runs with its helpers
#                (tests/cli/test_completion.sh).
#              - lintian: the install test checks the Debian packages with it.
#              - python3-torch, python3-torchvision: `vram plan --model` traces
#                PyTorch programs; its tests run a CNN and a transformer on
#                PyTorch's fake device. libtorch-dev: PyTorch's C++ headers,
#                against which tests/python/test_torch_use.py builds the OOM
#                shim of python/vram/torch.py.
#              - python3-venv, python3-pip, python3-setuptools, python3-wheel,
#                man-db: the install test (tests/install) installs the Python
#                package into a virtual environment offline and asks `man -w`.
set -eu

PKGS="build-essential cmake pkg-config zlib1g-dev libjson-c-dev libcmocka-dev
      libncurses-dev libmicrohttpd-dev"
PACKAGE_PKGS="help2man libslurm-dev file dpkg-dev"
FUZZ_PKGS="clang libclang-rt-14-dev"
TEST_PKGS="chromium fonts-dejavu-core python3
      munge slurmctld slurmd slurm-client
      tmux curl prometheus bash-completion lintian
      python3-torch python3-torchvision libtorch-dev
      python3-venv python3-pip python3-setuptools python3-wheel man-db"
case "${1:-}" in
"") ;;
--package) PKGS="$PKGS $PACKAGE_PKGS" ;;
--fuzz) PKGS="$PKGS $FUZZ_PKGS" ;;
--test) PKGS="$PKGS $PACKAGE_PKGS $FUZZ_PKGS $TEST_PKGS" ;;
*)
    echo "usage: scripts/install-deps.sh [--package | --fuzz | --test]" >&2
    exit 2
    ;;
esac
# shellcheck disable=SC2086
PKGS=$(echo $PKGS)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
    echo "vram: no apt-get here, so nothing was installed. vram needs these Debian" >&2
    echo "packages, or your system's equivalents (a C11 compiler, CMake 3.20 or later," >&2
    echo "pkg-config and the development files of zlib, json-c, cmocka, ncurses and" >&2
    echo "libmicrohttpd for the build):" >&2
    echo "  $PKGS" >&2
    exit 0
fi

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "vram: missing Debian packages:$missing" >&2
        echo "vram: run as root: apt-get install$missing" >&2
        exit 1
    fi
    SUDO="sudo"
fi
echo "vram: installing Debian packages:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
