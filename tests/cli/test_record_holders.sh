#!/bin/sh
# SPDX-License-Identifier: MIT
# test_record_holders.sh -- `vram record` names what holds a Python
# program's leaked memory: tests/preload/holders_prog.py on the fake driver
# keeps a 1 MiB buffer a step in a module's list, a list of main() (gone
# by exit: named when main() returns) or a list attribute of an object;
# the trace's "#@held" lines name it, `vram analyze` and `vram doctor` say
# "held by ... appended at LINE" beside the leak's call site; vram.mark()
# reaches the recording; --no-holders writes none; a holders module that
# fails to load is one line and the recording goes on.
# Usage: test_record_holders.sh VRAM PRELOAD_SO PROG FAKECUDA_DIR PYTHON_DIR
set -u

if [ $# -ne 5 ]; then
    echo "usage: test_record_holders.sh VRAM PRELOAD_SO PROG FAKECUDA_DIR PYTHON_DIR" >&2
    exit 2
fi
VRAM=$1
LIB=$2
PROG=$3
FAKE=$4
PYDIR=$5

. "$(dirname "$0")/lib.sh"
absolute VRAM LIB PROG FAKE PYDIR
test_begin record_holders
if ! command -v python3 >/dev/null 2>&1; then
    echo "python3 not found: skipped"
    exit 77
fi

run_env="LD_LIBRARY_PATH=$FAKE PYTHONPATH=$PYDIR VRAM_PYTHONPATH=$PYDIR"
rec() { vram_cmd record "$@"; }
P="--preload $LIB"

# line_of TAG: the line of PROG marked "# TAG", as the program prints it.
line_of() {
    sed -n "s/^$1 //p" "$TMP/out" | head -n 1
}

for case in global local attr; do
    rec -- $P -o "$TMP/$case.csv" -- python3 "$PROG" "$case" 30 --marks
    tag=$(echo "$case" | tr a-z A-Z)
    line=$(line_of "$tag")
    case $case in
    global) want="list \`history\` of module __main__; appended at holders_prog.py:$line" ;;
    local) want="list \`kept\` (local of main() in holders_prog.py); appended at holders_prog.py:$line" ;;
    attr) want="list \`trainer.buf\` (local of main() in holders_prog.py); appended at holders_prog.py:$line" ;;
    esac
    if [ "$rc" -eq 0 ] && grep -q "^#@held [0-9]*,$want\$" "$TMP/$case.csv"; then
        pass "$case: the trace names the holder"
    else
        fail "$case: the trace names the holder" "exit $rc: $(grep '^#@held' "$TMP/$case.csv" | head -n 3) $(cat "$TMP/err")"
    fi
    "$VRAM" analyze "$TMP/$case.csv" >"$TMP/a.txt" 2>&1
    if grep -q "^iterations 30, from the marks" "$TMP/a.txt" &&
        grep -qF "      held by $want (27 of 27)" "$TMP/a.txt"; then
        pass "$case: vram analyze: the marks, and the holder beside the leak"
    else
        fail "$case: vram analyze" "$(grep -E 'iterations|held' "$TMP/a.txt")"
    fi
done
"$VRAM" doctor "$TMP/global.csv" >"$TMP/d.txt" 2>&1
if grep -q "^\[problem\] leak: .*held by list \`history\` of module __main__" "$TMP/d.txt"; then
    pass "vram doctor names the holder"
else
    fail "vram doctor names the holder" "$(grep leak "$TMP/d.txt")"
fi
"$VRAM" analyze --json "$TMP/global.csv" >"$TMP/a.json" 2>&1
if python3 - "$TMP/a.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
top = j["leak_sites"][0]
assert top["held_by"].startswith("list `history` of module __main__"), top
assert top["held_count"] == 27, top
assert top["allocated_in"].startswith("holders_prog.py:"), top
PY
then pass "--json: held_by, held_count, allocated_in"; else fail "--json: held_by" "$(head -c 300 "$TMP/a.json")"; fi

# Without marks: named at exit (global) and when main() returns (local).
rec -- $P -o "$TMP/nomarks.csv" -- python3 "$PROG" local 30
if [ "$rc" -eq 0 ] && grep -q '^#@held [0-9]*,list `kept` (local of main()' "$TMP/nomarks.csv" &&
    ! grep -q ',m,' "$TMP/nomarks.csv"; then
    pass "no marks: the return of main() names its local list"
else
    fail "no marks: the return of main()" "exit $rc"
fi

# --no-holders: none, and nothing is loaded.
rec -- $P --no-holders -o "$TMP/off.csv" -- python3 "$PROG" global 10
if [ "$rc" -eq 0 ] && ! grep -q '^#@held' "$TMP/off.csv"; then
    pass "--no-holders: no held line"
else
    fail "--no-holders" "exit $rc"
fi

# A package without holders.py: said in one line, the recording goes on.
mkdir -p "$TMP/nopkg"
run_env="LD_LIBRARY_PATH=$FAKE PYTHONPATH=$PYDIR VRAM_PYTHONPATH=$TMP/nopkg"
rec -- $P -o "$TMP/nopkg.csv" -- python3 "$PROG" global 10
if [ "$rc" -eq 0 ] && grep -q "^vram: record: $TMP/nopkg/vram/holders.py: .*not named" "$TMP/err" &&
    grep -q ',a,' "$TMP/nopkg.csv" && ! grep -q '^#@held' "$TMP/nopkg.csv"; then
    pass "no holders.py: one line, the recording goes on"
else
    fail "no holders.py" "exit $rc: $(cat "$TMP/err")"
fi

# A holders.py that fails to load: one line from the library, the
# program and the recording go on.
mkdir -p "$TMP/bad/vram"
echo 'raise RuntimeError("planted failure")' >"$TMP/bad/vram/holders.py"
run_env="LD_LIBRARY_PATH=$FAKE PYTHONPATH=$PYDIR VRAM_PYTHONPATH=$TMP/bad"
rec -- $P -o "$TMP/bad.csv" -- python3 "$PROG" global 10
if [ "$rc" -eq 0 ] &&
    [ "$(grep -c "VRAM_TRACE_HOLDERS=$TMP/bad/vram/holders.py: cannot load it: planted failure" "$TMP/err")" -eq 1 ] &&
    grep -q ',a,' "$TMP/bad.csv"; then
    pass "a failing holders.py: one line, the recording goes on"
else
    fail "a failing holders.py" "exit $rc: $(cat "$TMP/err")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
