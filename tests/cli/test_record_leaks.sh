#!/bin/sh
# SPDX-License-Identifier: MIT
# test_record_leaks.sh -- the GPU section "record" as a dry run on the fake
# driver: bench/gpu/record_checks.py --frameworks fake records each case of
# bench/gpu/record_train.py (a JIT-like warm-up, 40 steps, a teardown that
# frees everything) under `vram record`, and every check must hold: each
# planted leak found at the program's own rate within 5% with the planted
# size as the top suspect, no leak in the clean, bounded and varlen runs.
# Exit 0 when all hold, 1 otherwise, 77 without python3.
# Usage: test_record_leaks.sh VRAM FAKECUDA_DIR SOURCE_DIR
set -u

if [ $# -ne 3 ]; then
    echo "usage: test_record_leaks.sh VRAM FAKECUDA_DIR SOURCE_DIR" >&2
    exit 2
fi
command -v python3 >/dev/null 2>&1 || exit 77
. "$(dirname "$0")/lib.sh"
test_begin record-leaks

LD_LIBRARY_PATH="$2" python3 "$3/bench/gpu/record_checks.py" --vram "$1" --work "$TMP" \
    --frameworks fake --budget 240 >"$TMP/out.json" || exit 1
python3 - "$TMP/out.json" <<'PY'
import json
import sys

out = json.load(open(sys.argv[1]))
for c in out["cases"]:
    print("%-12s leak %-5s vram %s B/step, own %s, suspects %s" % (
        c.get("case"), c.get("leak"), c.get("leak_bytes_per_iteration"),
        c.get("truth_bytes_per_step"), (c.get("suspect_sizes") or [])[:2]))
bad = [k for k, v in out["checks"].items() if v is not True]
want = 9  # 3 checks for each leak case (rate, suspect, call site), 1 for each of the 3 others
if bad or len(out["checks"]) != want or out["skipped"]:
    print("FAIL: %s (checks %d of %d, skipped %s)" % (bad, len(out["checks"]), want,
                                                      out["skipped"]))
    sys.exit(1)
print("%d checks passed" % len(out["checks"]))
PY
