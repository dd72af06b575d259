#!/bin/sh
# SPDX-License-Identifier: MIT
# test_alerts.sh -- the Prometheus side of vram, checked with promtool
# (Debian's prometheus package): the alert rules of contrib/prometheus
# load (`promtool check rules`) and each behaves as
# tests/prometheus/vram-alerts.test.yml says (`promtool test rules`:
# fires, stays quiet, its labels and summary), every alert of the file
# having a test that fires and one that does not; and the PromQL examples
# of docs/MONITORING.md run on series shaped like dcgm-exporter's and
# vram's and give the values of tests/prometheus/monitoring-joins.test.yml.
# Exit 77 (skipped) without promtool or python3.
# Usage: test_alerts.sh REPO_ROOT
set -u
ROOT=$1
for t in promtool python3; do
    command -v $t >/dev/null || { echo "skipped: no $t (scripts/install-deps.sh --test)"; exit 77; }
done
. "$ROOT/tests/cli/lib.sh"
test_begin alerts
RULES=$ROOT/contrib/prometheus/vram-alerts.yml
TESTS=$ROOT/tests/prometheus

check "promtool check rules vram-alerts.yml" "promtool check rules '$RULES' >'$TMP/check' 2>&1"
# promtool resolves rule_files from the test file's directory.
if (cd "$TESTS" && promtool test rules vram-alerts.test.yml) >"$TMP/unit" 2>&1; then
    pass "promtool test rules vram-alerts.test.yml"
else
    fail "promtool test rules vram-alerts.test.yml" "$(head -c 3000 "$TMP/unit")"
fi

# Every alert has a case that fires (exp_alerts with labels) and one that
# does not (exp_alerts: []).
for a in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$RULES"); do
    fires=$(awk -v a="$a" '/alertname:/ { cur = $2 } /exp_labels:/ && cur == a { n++ } END { print n + 0 }' "$TESTS/vram-alerts.test.yml")
    quiet=$(awk -v a="$a" '/alertname:/ { cur = $2 } /exp_alerts: \[\]/ && cur == a { n++ } END { print n + 0 }' "$TESTS/vram-alerts.test.yml")
    check "$a: tested firing ($fires) and quiet ($quiet)" "[ $fires -ge 1 ] && [ $quiet -ge 1 ]"
done

# docs/MONITORING.md's PromQL examples, in the joins test in their order.
python3 - "$ROOT/docs/MONITORING.md" "$TESTS/monitoring-joins.test.yml" \
    "$TMP/joins.test.yml" >"$TMP/extract" 2>&1 <<'PY'
import re, sys
doc, template, out = sys.argv[1:]
blocks = re.findall(r"^```promql\n(.*?)^```$", open(doc).read(), re.S | re.M)
text = open(template).read()
want = sorted(set(int(n) for n in re.findall(r"@EXAMPLE_(\d+)@", text)))
if want != list(range(1, len(blocks) + 1)):
    sys.exit("the document has %d promql examples, the test expects %s" % (len(blocks), want))
for i, b in enumerate(blocks, 1):
    expr = " ".join(b.split())
    if "'" in expr:
        sys.exit("example %d has a quote" % i)
    text = text.replace("@EXAMPLE_%d@" % i, expr)
open(out, "w").write(text)
print(len(blocks))
PY
check "docs/MONITORING.md's PromQL examples found ($(cat "$TMP/extract"))" "grep -qx '[1-9][0-9]*' '$TMP/extract'"
if (cd "$TMP" && promtool test rules joins.test.yml) >"$TMP/joins" 2>&1; then
    pass "docs/MONITORING.md's joins with dcgm-exporter give the right values"
else
    fail "docs/MONITORING.md's joins with dcgm-exporter" "$(head -c 3000 "$TMP/joins")"
fi
test_end
