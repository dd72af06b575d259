#!/bin/sh
# SPDX-License-Identifier: MIT
# test_callsites.sh -- call sites in a recording (`vram record`, format 2
# of docs/TRACE_FORMAT.md) over the fake driver: a Python program without
# torch (Debian's /usr/bin/python3, the driver through ctypes) whose 1 MiB
# allocations must name the planted file:line:function, and whose
# allocations made without the GIL must say so and name their line (seen
# by the profile function at the call into native code); a C program whose native
# frames, symbolized after the run with addr2line, must name the planted
# line and function, with no Python frame; --no-sites records format 1.
# vram analyze (text, --json, --html) names the planted line as the top
# leak suspect and at the peak.
# The last line is "N passed, M failed"; exit 1 if any failed.
# Usage: test_callsites.sh VRAM PRELOAD_SO NATIVE_PROGRAM PY_SCRIPT FAKECUDA_DIR
set -u

if [ $# -ne 5 ]; then
    echo "usage: test_callsites.sh VRAM PRELOAD_SO NATIVE_PROGRAM PY_SCRIPT FAKECUDA_DIR" >&2
    exit 2
fi
VRAM=$1
LIB=$2
NATIVE=$3
SCRIPT=$4
FAKE=$5

. "$(dirname "$0")/lib.sh"
absolute VRAM LIB NATIVE SCRIPT FAKE
test_begin callsites

# rec TRACE ARGS...: `vram record -o TRACE ARGS` over the fake driver.
rec() {
    out=$1
    shift
    env LD_LIBRARY_PATH="$FAKE" "$VRAM" record --preload "$LIB" -o "$out" "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# first_frames TRACE SIZE: for each 'a' event of SIZE bytes, the first two
# frames of its site, as "FRAME1 | FRAME2" (the frame lines' text after
# the id), one line each; "none" for an event without a site.
first_frames() {
    awk -F, -v size="$2" '
        /^#@frame / { id = substr($1, 9); t = $2; for (i = 3; i <= NF; i++) t = t "," $i; fr[id] = t; next }
        /^#@site / { id = substr($1, 8); s1[id] = $2; s2[id] = (NF > 2 ? $3 : ""); next }
        /^#/ || /^t_us/ { next }
        $2 == "a" && $4 == size {
            if ($8 == "" || $8 == 0) { print "none"; next }
            print fr[s1[$8]] " | " fr[s2[$8]]
        }' "$1"
}

# site_has TRACE SIZE FRAME: "N of M": of the M 'a' events of SIZE bytes,
# the N whose site holds the frame line FRAME (its text after the id).
site_has() {
    awk -F, -v size="$2" -v want="$3" '
        /^#@frame / { id = substr($1, 9); t = $2; for (i = 3; i <= NF; i++) t = t "," $i; fr[id] = t; next }
        /^#@site / { id = substr($1, 8); has[id] = 0; for (i = 2; i <= NF; i++) if (fr[$i] == want) has[id] = 1; next }
        /^#/ || /^t_us/ { next }
        $2 == "a" && $4 == size { m++; if (has[$8]) n++ }
        END { printf "%d of %d\n", n, m }' "$1"
}

# ---- a Python program ----
if [ -x /usr/bin/python3 ]; then
    held=$(grep -n "# PLANTED held" "$SCRIPT" | cut -d: -f1)
    rec "$TMP/py.csv" -- /usr/bin/python3 "$SCRIPT"
    if [ "$rc" -eq 0 ] && sed -n 2p "$TMP/py.csv" | grep -qx "#@format 2"; then
        pass "python: a format-2 trace"
    else
        fail "python: a format-2 trace" "exit $rc: $(cat "$TMP/err")"
    fi
    first_frames "$TMP/py.csv" 1048576 >"$TMP/held"
    want="py,$SCRIPT,$held,leak_step"
    if [ "$(wc -l <"$TMP/held")" -eq 30 ] &&
        [ "$(cut -d'|' -f1 "$TMP/held" | sort -u)" = "$want " ]; then
        pass "python: each allocation with the GIL names $(basename "$SCRIPT"):$held in leak_step"
    else
        fail "python: the planted line" "want '$want', got: $(sort "$TMP/held" | uniq -c | head -3)"
    fi
    if cut -d'|' -f2 "$TMP/held" | sort -u | grep -qx " py,$SCRIPT,[0-9]*,main"; then
        pass "python: its caller, main, is the next frame"
    else
        fail "python: its caller" "$(sort -u "$TMP/held" | head -2)"
    fi
    first_frames "$TMP/py.csv" 4096 >"$TMP/released"
    note="note,ran without the GIL: the last Python call into native code seen on this thread"
    if [ "$(wc -l <"$TMP/released")" -eq 30 ] &&
        [ "$(cut -d'|' -f1 "$TMP/released" | sort -u)" = "$note " ]; then
        pass "python: an allocation without the GIL says so"
    else
        fail "python: without the GIL" "$(sort "$TMP/released" | uniq -c | head -3)"
    fi
    released=$(grep -n "# PLANTED released" "$SCRIPT" | cut -d: -f1)
    if [ "$(cut -d'|' -f2 "$TMP/released" | sort -u)" = " py,$SCRIPT,$released,released" ]; then
        pass "python: ... and names its line, $(basename "$SCRIPT"):$released in released (the profile function)"
    else
        fail "python: the line without the GIL" "$(sort "$TMP/released" | uniq -c | head -3)"
    fi
    # A helper reached from two lines: each allocation names its own caller.
    for which in a:16384 b:20480; do
        line=$(grep -n "# PLANTED from_${which%:*}" "$SCRIPT" | cut -d: -f1)
        n=$(site_has "$TMP/py.csv" "${which#*:}" "py,$SCRIPT,$line,from_${which%:*}")
        if [ "$n" = "30 of 30" ]; then
            pass "python: a shared helper's allocations name their caller, from_${which%:*}"
        else
            fail "python: a shared helper's caller, from_${which%:*}" "$n"
        fi
    done
    sites=$(grep -c "^#@site " "$TMP/py.csv")
    if [ "$sites" -le 6 ]; then
        pass "python: repeated stacks are interned ($sites sites for 60 allocations)"
    else
        fail "python: interned" "$sites sites"
    fi
    # vram analyze: the leak and the peak by call site, text, JSON, HTML.
    "$VRAM" analyze "$TMP/py.csv" >"$TMP/an" 2>&1
    line=$(sed -n '/^  suspects by call site:/{n;p;q}' "$TMP/an")
    case $line in
    *" per iteration from $(basename "$SCRIPT"):$held in leak_step, never freed, "*)
        n=$(echo "$line" | sed -n 's/.*never freed, \([0-9]*\) of \([0-9]*\) iterations.*/\1 \2/p')
        if [ -n "$n" ] && [ "${n% *}" = "${n#* }" ]; then
            pass "analyze: the top suspect is $(basename "$SCRIPT"):$held in leak_step, in every iteration"
        else
            fail "analyze: the top suspect in every iteration" "$line"
        fi ;;
    *) fail "analyze: the top suspect" "got '$line' ($(grep -c . "$TMP/an") lines)" ;;
    esac
    if grep -A1 "^  live then, by call site:" "$TMP/an" | grep -q "MiB in *30 allocations from $(basename "$SCRIPT"):$held in leak_step"; then
        pass "analyze: the peak's live set by call site"
    else
        fail "analyze: the peak by call site" "$(grep -A2 "by call site" "$TMP/an" | head -3)"
    fi
    "$VRAM" analyze --json "$TMP/py.csv" >"$TMP/json" 2>&1
    if /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
top = d["leak_sites"][0]["stack"][0]
assert top["kind"] == "py" and top["file"] == sys.argv[2] and top["line"] == int(sys.argv[3]), top
assert top["function"] == "leak_step", top
s = d["leak_sites"][0]
assert s["iterations"] == s["of_iterations"] and s["bytes_per_iteration"] > 0, s
assert d["peak_sites"][0]["headline"].endswith(":" + sys.argv[3] + " in leak_step"), d["peak_sites"][0]
' "$TMP/json" "$SCRIPT" "$held"; then
        pass "analyze --json: leak_sites and peak_sites name the planted line"
    else
        fail "analyze --json" "$(head -c 300 "$TMP/json")"
    fi
    "$VRAM" analyze --html "$TMP/r.html" "$TMP/py.csv" >/dev/null 2>&1
    if grep -q 'id="leak-sites"' "$TMP/r.html" && grep -q 'id="peak-sites"' "$TMP/r.html" &&
        grep -q "<summary title=\"$SCRIPT:$held in leak_step&#10;" "$TMP/r.html" &&
        ! grep -q "<script src\|<link " "$TMP/r.html"; then
        pass "analyze --html: call-site sections, the stack on hover and click, self-contained"
    else
        fail "analyze --html" "$(grep -c "sites" "$TMP/r.html") lines with sites"
    fi
    rec "$TMP/no.csv" --no-sites -- /usr/bin/python3 "$SCRIPT"
    if [ "$rc" -eq 0 ] && ! grep -q "^#@" "$TMP/no.csv" &&
        sed -n 2p "$TMP/no.csv" | grep -qx "t_us,op,id,size,stream,device,label"; then
        pass "--no-sites: format 1, as before"
    else
        fail "--no-sites: format 1" "exit $rc: $(sed -n 2p "$TMP/no.csv")"
    fi
else
    echo "skip python: no /usr/bin/python3"
fi

# ---- a call of a C callable that is not a builtin (3.12+) ----
# A ctypes function pointer, like a jitted JAX function, is no builtin:
# Python's profile function sees no call there; 3.12's sys.monitoring does.
# Found on PATH, or among pyenv's versions (pyenv's shims run only the
# version selected).
PY312=
PYENV_ROOT_DIR=$(pyenv root 2>/dev/null)
for py in $(command -v python3.13 python3.12) \
    ${PYENV_ROOT_DIR:+"$PYENV_ROOT_DIR"/versions/3.1[2-9]*/bin/python3}; do
    if [ -x "$py" ] && "$py" -c 'import ctypes, sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
        PY312=$py
        break
    fi
done
if [ -n "$PY312" ]; then
    rec "$TMP/py312.csv" -- "$PY312" "$SCRIPT"
    direct=$(grep -n "# PLANTED direct" "$SCRIPT" | cut -d: -f1)
    n8=$(site_has "$TMP/py312.csv" 8192 "py,$SCRIPT,$direct,direct")
    n9=$(site_has "$TMP/py312.csv" 8193 "py,$SCRIPT,$direct,direct")
    if [ "$rc" -eq 0 ] && [ "$n8" = "15 of 15" ] && [ "$n9" = "15 of 15" ]; then
        pass "python 3.12+: a ctypes function pointer's line, $(basename "$SCRIPT"):$direct (sys.monitoring)"
    else
        fail "python 3.12+: the C callable's line" "exit $rc, $n8, $n9"
    fi
else
    echo "skip python 3.12+: no python3.12 or python3.13 on PATH"
fi

# ---- a C program ----
planted=$(grep -n "/\* PLANTED \*/" "$(dirname "$SCRIPT")/callsite_native.c" | cut -d: -f1)
rec "$TMP/c.csv" -- "$NATIVE" 8
first_frames "$TMP/c.csv" 1048576 >"$TMP/c"
frame=$(cut -d'|' -f1 "$TMP/c" | sort -u)
case $frame in
"native,$NATIVE,0x"*) pass "C: each allocation names the program's own frame first" ;;
*) fail "C: the program's frame" "exit $rc, got '$frame' ($(cat "$TMP/err"))" ;;
esac
if grep -q "^#@frame [0-9]*,\(py\|note\)," "$TMP/c.csv"; then
    fail "C: no Python frame in a program without Python" "$(grep "^#@frame" "$TMP/c.csv" | head -3)"
else
    pass "C: no Python frame in a program without Python"
fi
if command -v addr2line >/dev/null 2>&1; then
    off=$(echo "$frame" | cut -d, -f3)
    sym=$(addr2line -f -e "$NATIVE" "$off" | tr '\n' ' ')
    case $sym in
    "leak_here "*"callsite_native.c:$planted"*) pass "C: addr2line names leak_here at callsite_native.c:$planted" ;;
    *) fail "C: symbolized after the run" "addr2line -f -e $NATIVE $off: '$sym' (want leak_here, line $planted)" ;;
    esac
else
    echo "skip symbolization: no addr2line"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
