#!/bin/sh
# spdx.sh -- every source file of vram names its licence (LICENSE, MIT) with
# an "SPDX-License-Identifier: MIT" line among its first three lines.
# Usage: scripts/spdx.sh [--add] [ROOT]
#   (no option)  list the source files without one; exit 1 if there are any
#                (tests/cli/check_style.sh runs this);
#   --add        add the line to each of them, in its own comment syntax:
#                "/* ... */" first in C files, "# ..." first in the others
#                (after the #! line of a script).
# Source files: C, shell, Python, CMake, Makefile and the .in templates under
# the source directories, plus the extensionless scripts listed below.
set -eu
add=0
if [ "${1:-}" = "--add" ]; then
    add=1
    shift
fi
cd "${1:-$(dirname "$0")/..}"
LINE="SPDX-License-Identifier: MIT"

sources() {
    for d in include src tools tests slurm bench scripts python cmake contrib; do
        [ -d "$d" ] || continue
        find "$d" \( -name 'build*' -o -name __pycache__ -o -name '*.egg-info' \) -prune -o \
            -type f \( -name '*.[ch]' -o -name '*.sh' -o -name '*.py' -o -name '*.cmake' \
            -o -name '*.in' -o -name CMakeLists.txt -o -name pyproject.toml \) -print
    done
    for f in CMakeLists.txt Makefile .ci/run contrib/bash-completion/vram; do
        [ -f "$f" ] && echo "$f"
    done
}

missing=$(sources | sort | while read -r f; do
    head -n 3 "$f" | grep -q "$LINE" || echo "$f"
done)
[ -z "$missing" ] && exit 0
if [ $add -eq 0 ]; then
    echo "$missing" | sed 's/^/no SPDX line: /'
    echo "spdx: add '$LINE' to the files above (scripts/spdx.sh --add)" >&2
    exit 1
fi
echo "$missing" | while read -r f; do
    case $f in
    *.[ch] | *.h.in | *.map.in) comment="/* $LINE */" ;;
    *) comment="# $LINE" ;;
    esac
    tmp="$f.spdx.$$"
    if head -n 1 "$f" | grep -q '^#!'; then
        { head -n 1 "$f"; echo "$comment"; tail -n +2 "$f"; } >"$tmp"
    else
        { echo "$comment"; cat "$f"; } >"$tmp"
    fi
    chmod --reference="$f" "$tmp"
    mv "$tmp" "$f"
    echo "spdx: $f"
done
