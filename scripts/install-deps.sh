#!/bin/sh
# Install the Debian packages vram needs to build and test, and only those
# missing. Safe to run again; does nothing when everything is present.
# Usage: scripts/install-deps.sh [--test]   (as root, or with sudo available)
#   --test  also what only the tests need: python3-torch and python3-torchvision
#           (`vram plan --model` traces PyTorch programs; its tests run a CNN and a
#           transformer on PyTorch's fake device) and libtorch-dev (PyTorch's C++
#           headers: tests/python/test_torch_use.py builds the OOM shim of
#           python/vram/torch.py against them). `make demo` does without them.
set -eu

# chromium and fonts-dejavu-core: the HTML report's test (tests/cli/test_html.sh)
# renders it headless and checks the screenshot; python3 reads the page and
# the PNG there. Chromium is large: the first install takes a while.
# munge, slurmctld, slurmd, slurm-client, libslurm-dev: the SPANK plug-in
# (slurm/spank_vram.c needs slurm/spank.h) and its test on a single-node
# cluster (tests/slurm/run_slurm_test.sh).
# libncurses-dev, libmicrohttpd-dev: `vram top` and `vram exporter`; tmux,
# curl, prometheus (with promtool): their tests (tests/cli/test_top.sh,
# test_exporter.sh), which drive top in tmux and let a real Prometheus scrape.
PKGS="build-essential cmake pkg-config zlib1g-dev libcmocka-dev libjson-c-dev
      chromium fonts-dejavu-core python3
      munge slurmctld slurmd slurm-client libslurm-dev
      libncurses-dev libmicrohttpd-dev tmux curl prometheus"
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS python3-torch python3-torchvision libtorch-dev"
fi

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "vram: installing Debian packages:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
