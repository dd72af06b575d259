#!/bin/sh
# SPDX-License-Identifier: MIT
# test_stat.sh -- `vram stat` against ledgers filled by ledger_fill (a
# stand-in for GPU jobs): the tables, --json keys and values (integer
# bytes), --prometheus names, --config, --metrics-markdown matching
# docs/METRICS.md, bad usage, and a killed process vanishing from the view.
# With FAKENVML_DIR (the fake libnvidia-ml.so.1 of tests/preload), the
# device totals from NVML too.
# Usage: test_stat.sh VRAM LEDGER_FILL REPO_ROOT [FAKENVML_DIR]
set -u
VRAM=$1
FILL=$2
ROOT=$3
NVML_DIR=${4:-}
G="st$$"
U="GPU-stat-test-0000"
. "$(dirname "$0")/lib.sh"
test_begin stat
pids=""
test_cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    [ -n "${stopped:-}" ] && kill -9 "$stopped" 2>/dev/null
    wait 2>/dev/null
    rm -f "/dev/shm/vram-$(id -u)/$G" "/dev/shm/vram-$(id -u)/${G}b" "/dev/shm/vram-$(id -u)/${G}s" \
        "/dev/shm/vram-$(id -u)/${G}e"
    rmdir "/dev/shm/vram-$(id -u)" 2>/dev/null
}

# start GROUP MIB LIMIT [GROW [REFUSE]]: a helper in the background, waits for "ready".
start() {
    g=$1
    shift
    "$FILL" "$g" "$U" "$@" >"$TMP/fill.$g.$1" 2>&1 &
    pids="$pids $!"
    last=$!
    i=0
    while [ $i -lt 600 ] && ! grep -q ready "$TMP/fill.$g.$1"; do sleep 0.1; i=$((i + 1)); done
}

start "$G" 64 256 0 512
p1=$last
start "$G" 32 256
p2=$last
start "${G}b" 16 0
p3=$last

# A member stopped for good inside the ledger's critical step: stat
# answers at once, showing what it holds.
"$FILL" --stopped "${G}s" "$U" 8 >"$TMP/fill.stopped" 2>&1 &
stopped=$!
pids="$pids $stopped"
i=0
while [ $i -lt 600 ] && ! grep -q ready "$TMP/fill.stopped"; do sleep 0.1; i=$((i + 1)); done
# The member stays stopped throughout: a stat that waited on it would
# never end (timeout 120 is the watchdog, not a bound of speed).
timeout 120 "$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"
check "stat answers despite a member stopped for good" "[ $? -eq 0 ]"
check "stat shows the stopped member's 8 MiB" "grep -Eq \"^ +- +$stopped .*8.00 MiB\" $TMP/out"

"$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"
check "stat exits 0" "[ $? -eq 0 ]"
# Rows start with the GPU's index ("-": a GPU only the ledgers know).
check "stat lists both groups" "grep -Eq \"^ +- +$G \" $TMP/out && grep -Eq \"^ +- +${G}b \" $TMP/out"
check "stat lists the three processes" "grep -Eq \"^ +- +$p1 \" $TMP/out && grep -Eq \"^ +- +$p2 \" $TMP/out && grep -Eq \"^ +- +$p3 \" $TMP/out"
check "stat prints the group's quota and use" "grep -E \"^ +- +$G \" $TMP/out | grep -q '256.00 MiB.*96.00 MiB'"
check "stat fits 80 columns" "! awk 'length > 80' $TMP/out | grep -q ."

"$VRAM" stat --json --no-nvml >"$TMP/json"
check "stat --json exits 0" "[ $? -eq 0 ]"
if command -v python3 >/dev/null; then
    python3 - "$TMP/json" "$G" "$p1" >"$TMP/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = [x for x in d["groups"] if x["group"] == sys.argv[2]][0]
assert g["quota_bytes"] == 256 << 20, g
assert g["used_bytes"] == 96 << 20, g
assert g["refusals"] == 1, g
p = [x for x in d["processes"] if x["pid"] == int(sys.argv[3])][0]
assert p["used_bytes"] == 64 << 20 and p["peak_bytes"] == 64 << 20, p
assert p["quota_bytes"] == 256 << 20, p
assert "trend_bytes_per_minute" in p
dev = [x for x in d["devices"] if x["uuid"] == "GPU-stat-test-0000"][0]
assert dev["used_bytes"] >= 112 << 20, dev
print("json ok")
PY
    check "stat --json: keys and integer bytes" "grep -q 'json ok' $TMP/py || { cat $TMP/py; false; }"
fi

"$VRAM" stat --prometheus --no-nvml >"$TMP/prom"
for m in vram_device_memory_total_bytes vram_device_memory_used_bytes vram_group_quota_bytes \
         vram_group_used_bytes vram_process_used_bytes vram_process_peak_bytes \
         vram_oom_refusals_total vram_process_growth_bytes_per_minute; do
    check "prometheus output has $m" "grep -q '^# TYPE $m ' $TMP/prom"
done
check "counter typed as counter" "grep -q '^# TYPE vram_oom_refusals_total counter' $TMP/prom"
check "group used value" "grep -q 'vram_group_used_bytes{gpu=\"\",UUID=\"$U\",modelName=\"\",Hostname=\"[^\"]*\",group=\"$G\"} 100663296' $TMP/prom"

"$VRAM" stat --config >"$TMP/cfg"
check "stat --config prints the env table with sources" "grep -q '^VRAM_BACKEND .*default' $TMP/cfg"
VRAM_LOG=3 "$VRAM" stat --config >"$TMP/cfg2"
check "stat --config names the environment as source" "grep -q '^VRAM_LOG .*environment' $TMP/cfg2"

"$VRAM" stat --metrics-markdown >"$TMP/md"
check "docs/METRICS.md is the generated list" "cmp -s $TMP/md $ROOT/docs/METRICS.md"

"$VRAM" stat --bogus >/dev/null 2>"$TMP/err"
check "unknown option: exit 2, one line 'vram: '" "[ $? -eq 2 ] && [ \$(wc -l <$TMP/err) -eq 1 ] && grep -q '^vram: ' $TMP/err"

# NVML (the fake: two 1 GiB GPUs) adds the device totals; the ledger's
# device and processes stay.
if [ -n "$NVML_DIR" ]; then
    LD_LIBRARY_PATH="$NVML_DIR" "$VRAM" stat --json >"$TMP/nj"
    check "with NVML: nvml true and 1 GiB totals" "grep -q '\"nvml\":true' $TMP/nj && grep -q '\"total_bytes\":1073741824' $TMP/nj"
    check "with NVML: ledger processes still listed" "grep -q '\"pid\":$p1' $TMP/nj"
    check "with NVML: --json names the GPU by index and name" "grep -q '\"gpu\":0,' $TMP/nj && grep -q '\"name\":\"NVIDIA Fake GPU 0\"' $TMP/nj"
    LD_LIBRARY_PATH="$NVML_DIR" "$VRAM" stat >"$TMP/nt"
    check "with NVML: the table shows GPU 0 by index and name" "grep -Eq '^ +0 +NVIDIA Fake GPU 0 ' $TMP/nt"
    check "with NVML: the table fits 80 columns" "! awk 'length > 80' $TMP/nt | grep -q ."
    LD_LIBRARY_PATH="$NVML_DIR" "$VRAM" stat --prometheus >"$TMP/np"
    check "with NVML: series carry dcgm-exporter's labels" "grep -q '^vram_device_memory_total_bytes{gpu=\"0\",UUID=\"GPU-facecda0-0001-4000-8000-000000000000\",modelName=\"NVIDIA Fake GPU 0\",Hostname=\"$(hostname)\"} ' $TMP/np"
    "$VRAM" stat --json --no-nvml >"$TMP/nj2"
    check "--no-nvml: nvml false" "grep -q '\"nvml\":false' $TMP/nj2"
fi

# A group whose members are all killed (their preload library could not
# remove its file) disappears at the next sample, and the sample removes
# its file: the caller owns it.
kill -9 "$p3"
wait "$p3" 2>/dev/null
"$VRAM" stat --json --no-nvml >"$TMP/json2" 2>"$TMP/err"
check "a group whose members are all gone is not shown" \
    "[ \$? -eq 0 ] && ! grep -q '\"group\":\"${G}b\"' $TMP/json2 && grep -q '\"group\":\"$G\"' $TMP/json2"
check "... and its file is removed" "[ ! -e /dev/shm/vram-$(id -u)/${G}b ]"

# A killed process disappears; the others stay.
kill -9 "$p2"
wait "$p2" 2>/dev/null
"$VRAM" stat --no-nvml >"$TMP/out2"
check "killed process gone from stat" "! grep -Eq \"^ +- +$p2 \" $TMP/out2 && grep -Eq \"^ +- +$p1 \" $TMP/out2"
check "group use drops by its 32 MiB" "grep -E \"^ +- +$G \" $TMP/out2 | grep -q '64.00 MiB  *1\$'"

# ---- a hostile process: names no terminal, table, JSON or scrape may get raw ----
# Its command name (the file it runs, 15 bytes: "x", a clear-screen
# sequence, a window-title sequence ended by BEL, a line end, a byte that
# is not UTF-8 and the C1 control U+009B, a CSI) and the GPU UUID it
# writes into its ledger (a colour sequence, a line end, a stray byte).
BADNAME=$(printf 'x\033[2J\033]0;t\007\n\377\302\233')
BADUUID=$(printf 'GPU-\033[31mred\nx\377')
cp "$FILL" "$TMP/$BADNAME"
"$TMP/$BADNAME" "${G}e" "$BADUUID" 8 0 >"$TMP/fill.bad" 2>&1 &
pids="$pids $!"
pbad=$!
i=0
while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.bad"; do sleep 0.1; i=$((i + 1)); done
# clean FILE: valid UTF-8, no control character but the line end, no C1.
clean() {
    python3 - "$1" <<'PY'
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8")
bad = [c for c in t if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
sys.exit(1 if bad else 0)
PY
}
"$VRAM" stat --no-nvml >"$TMP/hout" 2>"$TMP/herr"
check "stat with a hostile name: no escape, control or stray byte reaches the terminal" \
    "clean $TMP/hout && clean $TMP/herr"
check "stat: the process is one row, its name escaped as \\\\xNN" \
    "[ \$(grep -c \" $pbad \" $TMP/hout) -eq 1 ] && grep -F \" $pbad \" $TMP/hout | grep -qF 'x\\x1b[2J\\x1b]'"
check "stat: the ledger's UUID escaped" "grep -qF 'GPU-\\x1b[31m' $TMP/hout"
"$VRAM" stat --json --no-nvml >"$TMP/hjson"
check "stat --json with a hostile name: valid JSON, the name escaped" \
    "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); p=[x for x in d[\"processes\"] if x[\"pid\"]==int(sys.argv[2])][0]; assert p[\"comm\"].startswith(\"x\\\\x1b[2J\\\\x1b]0;t\\\\x07\\\\x0a\\\\xff\\\\xc2\\\\x9b\"), p' $TMP/hjson $pbad"
"$VRAM" stat --prometheus --no-nvml >"$TMP/hprom"
check "stat --prometheus with a hostile name: UTF-8, no control character" "clean $TMP/hprom"
check "stat --prometheus: the label value escaped by the format's rules" \
    "grep -F \"pid=\\\"$pbad\\\"\" $TMP/hprom | grep -qF 'comm=\"x\\\\x1b[2J\\\\x1b]0;t\\\\x07\\\\x0a\\\\xff\\\\xc2\\\\x9b\"'"
"$VRAM" analyze "$TMP/$BADNAME.csv" >"$TMP/hout" 2>"$TMP/herr"
check "an error line naming a hostile path: escaped, one line" \
    "clean $TMP/herr && [ \$(wc -l <$TMP/herr) -eq 1 ] && grep -qF 'x\\x1b[2J' $TMP/herr"

test_end
