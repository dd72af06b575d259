#!/bin/sh
# check_style.sh -- the mechanical part of STYLE.md: banned functions, and
# getenv only in the environment module. Usage: check_style.sh REPO_ROOT
set -u
cd "$1" || exit 2
bad=0
files=$(find include src tools -name '*.[ch]')
# Functions that STYLE.md habit 14 bans.
if grep -nE '\b(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets)[[:space:]]*\(' $files; then
    echo "check_style: banned function above (use snprintf, memcpy with a length, strtol...)" >&2
    bad=1
fi
# Habit 6: one file reads the environment.
if grep -nE '\b(getenv|secure_getenv)[[:space:]]*\(' $files | grep -v '^src/config/env.c:'; then
    echo "check_style: getenv outside src/config/env.c" >&2
    bad=1
fi
# Habit 7: a library never terminates its host process.
if grep -nE '\b(exit|_exit|abort)[[:space:]]*\(' $(find include src -name '*.[ch]'); then
    echo "check_style: exit/abort in the library" >&2
    bad=1
fi
[ $bad -eq 0 ] && echo "style: ok"
exit $bad
