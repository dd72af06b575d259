#!/bin/sh
# SPDX-License-Identifier: MIT
# test_outfiles.sh -- every file vram writes, written by root in a
# directory another user can write (sticky, as /tmp): a symbolic link the
# user planted under the name vram will write is not followed, and a file
# the user made there is not written over. For vram record (its default
# output, vram.trace.csv, in the current directory), VRAM_TRACE inside a
# traced process (the preload library), vram analyze --html, vram tune -o,
# VRAM_LOG_FILE (libvram's log) and the Python package's traces
# (vram.outfile: vram plan --trace, python -m vram.import_torch -o). Each is
# one line and exit status as documented, and the planted link's target
# (a root-only file) and the user's file are as they were. The user is a
# real Unix one (useradd), removed at the end. Exit 77 without root.
# Usage: test_outfiles.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR REPO_ROOT
set -u

if [ $# -ne 5 ]; then
    echo "usage: test_outfiles.sh VRAM PRELOAD_SO PROBE FAKECUDA_DIR REPO_ROOT" >&2
    exit 2
fi
VRAM=$1
LIB=$2
PROBE=$3
FAKE=$4
ROOT=$5
if [ "$(id -u)" -ne 0 ] || ! command -v useradd >/dev/null || ! command -v setpriv >/dev/null; then
    echo "skipped: needs root, useradd and setpriv"
    exit 77
fi
. "$(dirname "$0")/lib.sh"
absolute VRAM LIB PROBE FAKE ROOT
test_begin outf
chmod 755 "$TMP"
U=vramof$$
test_cleanup() { remove_user "$U"; }
useradd -M -N -g users -s /bin/sh "$U" || exit 1
UID_U=$(id -u "$U")

SHARED=$TMP/shared
mkdir -m 1777 "$SHARED"
SECRET=$TMP/root-only
echo secret >"$SECRET"
chmod 600 "$SECRET"
# as_user CMD...: run CMD as the user, in the shared directory.
as_user() { (cd "$SHARED" && setpriv --reuid="$U" --regid=users --init-groups "$@"); }
# plant NAME link|file: the user makes NAME a link to the root-only file,
# or a file of their own (mode 0666: root may write it, but must not).
plant() {
    rm -f "$SHARED/$1"
    if [ "$2" = link ]; then
        as_user ln -s "$SECRET" "$SHARED/$1"
    else
        as_user sh -c "echo mine >'$SHARED/$1' && chmod 666 '$SHARED/$1'"
    fi
}
# intact NAME KIND WHAT: the root-only file and the user's file unchanged.
intact() {
    if [ "$(cat "$SECRET")" = secret ] && { [ "$2" = link ] || [ "$(cat "$SHARED/$1")" = mine ]; }; then
        pass "$3: the $2 left as it was"
    else
        fail "$3: the $2 left as it was" "$(cat "$SECRET") / $(cat "$SHARED/$1" 2>&1)"
    fi
}
# why KIND: the reason outfile_open gives for a planted KIND.
why() {
    if [ "$1" = link ]; then
        echo "a symbolic link: not followed"
    else
        echo "owned by uid $UID_U, not by you (uid 0): not written over"
    fi
}
# one_line CODE TEXT WHAT: the last run exited CODE with one stderr line holding TEXT.
one_line() {
    if [ "$rc" -eq "$1" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qF -- "$2" "$TMP/err"; then
        pass "$3: exit $1, one line"
    else
        fail "$3: exit $1, one line" "exit $rc"
    fi
}

for kind in link file; do
    # vram record's default output, in the current directory.
    plant vram.trace.csv $kind
    (cd "$SHARED" && env LD_LIBRARY_PATH="$FAKE" "$VRAM" record --preload "$LIB" -- \
        "$PROBE" alloc 8 0 0 >"$TMP/out" 2>"$TMP/err")
    rc=$?
    one_line 2 "vram: record: --output 'vram.trace.csv': $(why $kind)" "record ($kind)"
    intact vram.trace.csv $kind "record ($kind)"

    # VRAM_TRACE, opened by the preload library inside the traced process
    # (no context accounting: without NVML here it would add a line of its own).
    plant vt.csv $kind
    env LD_LIBRARY_PATH="$FAKE" LD_PRELOAD="$LIB" VRAM_LIMIT=1G VRAM_CONTEXT=off VRAM_TRACE="$SHARED/vt.csv" \
        "$PROBE" alloc 8 0 0 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    one_line 0 "vram: VRAM_TRACE: $SHARED/vt.csv: $(why $kind)" "VRAM_TRACE in a process ($kind)"
    intact vt.csv $kind "VRAM_TRACE in a process ($kind)"

    # vram analyze --html.
    plant report.html $kind
    "$VRAM" analyze --html "$SHARED/report.html" "$ROOT/data/traces/leak_mlp.trace.csv.gz" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    one_line 1 "vram: $SHARED/report.html: $(why $kind)" "analyze --html ($kind)"
    intact report.html $kind "analyze --html ($kind)"

    # vram tune -o.
    plant tune.csv $kind
    env LD_LIBRARY_PATH="$FAKE" "$VRAM" tune --preload "$LIB" -o "$SHARED/tune.csv" -- \
        "$PROBE" alloc 8 0 0 >"$TMP/out" 2>"$TMP/err"
    rc=$?
    one_line 2 "vram: tune: --output '$SHARED/tune.csv': $(why $kind)" "tune -o ($kind)"
    intact tune.csv $kind "tune -o ($kind)"

    # VRAM_LOG_FILE, read by libvram in whatever program opens a context
    # from the environment: it logs to stderr instead, and says why.
    plant vram.log $kind
    env VRAM_BACKEND=sim VRAM_LOG=1 VRAM_LOG_FILE="$SHARED/vram.log" python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
ctx = ctypes.c_void_p()
assert lib.vram_open(None, ctypes.byref(ctx)) == 0
lib.vram_close(ctx)' "$(dirname "$LIB")/libvram.so" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq 0 ] && grep -F "VRAM_LOG_FILE: $SHARED/vram.log: $(why $kind)" "$TMP/err" |
        grep -q ": logging to stderr\$"; then
        pass "VRAM_LOG_FILE ($kind): refused, said, the log goes to stderr"
    else
        fail "VRAM_LOG_FILE ($kind): refused, said" "exit $rc"
    fi
    intact vram.log $kind "VRAM_LOG_FILE ($kind)"

    # The Python package's traces (vram plan --trace, vram.import_torch -o).
    plant py.csv.gz $kind
    env PYTHONPATH="$ROOT/python" python3 -c '
import sys
from vram.outfile import open_trace
try:
    open_trace(sys.argv[1])
except OSError as e:
    print("refused: %s" % e.strerror)' "$SHARED/py.csv.gz" >"$TMP/out" 2>"$TMP/err"
    if grep -qF "refused: $(why $kind)" "$TMP/out"; then
        pass "vram.outfile ($kind): refused"
    else
        fail "vram.outfile ($kind): refused" "$(cat "$TMP/out")"
    fi
    intact py.csv.gz $kind "vram.outfile ($kind)"
done

# Root's own file there is written as before (and a new one made).
rm -f "$SHARED/vram.trace.csv"
(cd "$SHARED" && env LD_LIBRARY_PATH="$FAKE" "$VRAM" record --preload "$LIB" -- \
    "$PROBE" alloc 8 0 0 >"$TMP/out" 2>"$TMP/err")
rc=$?
check "record writes a new file of root's in the shared directory" \
    "[ $rc -eq 0 ] && grep -q ',a,' '$SHARED/vram.trace.csv'"
(cd "$SHARED" && env LD_LIBRARY_PATH="$FAKE" "$VRAM" record --preload "$LIB" -- \
    "$PROBE" alloc 8 0 0 >"$TMP/out" 2>"$TMP/err")
check "and writes over its own file again" "[ $? -eq 0 ] && [ \$(grep -c ',a,' '$SHARED/vram.trace.csv') -eq 1 ]"

test_end
