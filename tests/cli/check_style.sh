#!/bin/sh
# SPDX-License-Identifier: MIT
# check_style.sh -- the mechanical part of docs/STYLE.md: banned functions
# (habit 14), getenv only in the environment module (habit 6), no exit in
# the library (habit 7), no issue numbers anywhere (habit 16), an SPDX
# licence line in every source file (scripts/spdx.sh), no fuzzer artifacts
# in the tree.
# Usage: check_style.sh REPO_ROOT
set -u
cd "$1" || exit 2
bad=0
files=$(find include src tools -name '*.[ch]')
# Habit 14: banned functions.
if grep -nE '\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets)[[:space:]]*\(' $files; then
    echo "check_style: banned function above (use snprintf, memcpy with a length, strtol...)" >&2
    bad=1
fi
# Habit 6: one file reads the environment.
if grep -nE '\b(getenv|secure_getenv)[[:space:]]*\(' $files | grep -v '^src/config/env.c:'; then
    echo "check_style: getenv outside src/config/env.c" >&2
    bad=1
fi
# Habit 7: a library never terminates its host process (a child process
# it forked itself may end: such a line says "a fork child's end").
if grep -nE '\b(exit|_exit|abort)[[:space:]]*\(' $(find include src -name '*.[ch]') |
    grep -v "/\* a fork child's end \*/\$"; then
    echo "check_style: exit/abort in the library" >&2
    bad=1
fi
# Habit 16: say what a thing is, never which issue asked for it -- in code,
# comments, tests, scripts and docs (an issue number, in parentheses or not).
texts=$(find include src tools tests bench slurm python scripts docs contrib \
            -type f ! -name '*.gz' ! -name '*.pyc' ! -name check_style.sh 2>/dev/null)
texts="$texts $(ls ./*.md CMakeLists.txt Makefile 2>/dev/null)"
if grep -nIiE '\bissues? #?[0-9]|\(issue\b|\bthe issue'"'"'s\b' $texts; then
    echo "check_style: an issue is cited above (say what the thing is instead)" >&2
    bad=1
fi
# What a fuzzer writes where it is started (crash-<sha1>, leak-..., ...)
# belongs in the build directory: never in the tree. A found input worth
# keeping is a named entry of its target's corpus (tests/fuzz/corpus).
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
    if git ls-files | grep -E '(^|/)(crash|leak|timeout|oom|slow-unit)-[0-9a-f]{40}$'; then
        echo "check_style: fuzzer artifacts in the tree above (move them under the build" \
             "directory, or into tests/fuzz/corpus/NAME with a name)" >&2
        bad=1
    fi
fi
# Every source file names its licence (LICENSE, MIT) in an SPDX line:
# scripts/spdx.sh lists those that do not (and --add writes the line).
if ! sh scripts/spdx.sh .; then
    echo "check_style: source files without 'SPDX-License-Identifier: MIT' above" >&2
    bad=1
fi
[ $bad -eq 0 ] && echo "style: ok"
exit $bad
