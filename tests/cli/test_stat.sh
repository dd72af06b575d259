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
    rm -f "/dev/shm/vram-$(id -u)/$G" "/dev/shm/vram-$(id -u)/${G}b" "/dev/shm/vram-$(id -u)/${G}s"
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
    while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.$g.$1"; do sleep 0.1; i=$((i + 1)); done
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
while [ $i -lt 50 ] && ! grep -q ready "$TMP/fill.stopped"; do sleep 0.1; i=$((i + 1)); done
# Within 1 s in one of 3 tries: a stat that waits on the member never
# does, while a busy machine does not delay all three.
k=0
until [ $k -eq 3 ] || timeout 1 "$VRAM" stat --no-nvml >"$TMP/out" 2>"$TMP/err"; do k=$((k + 1)); done
check "stat answers within 1 s despite a stopped member (in one of 3 tries)" "[ $k -lt 3 ]"
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

# A killed process disappears; the others stay.
kill -9 "$p2"
wait "$p2" 2>/dev/null
"$VRAM" stat --no-nvml >"$TMP/out2"
check "killed process gone from stat" "! grep -Eq \"^ +- +$p2 \" $TMP/out2 && grep -Eq \"^ +- +$p1 \" $TMP/out2"
check "group use drops by its 32 MiB" "grep -E \"^ +- +$G \" $TMP/out2 | grep -q '64.00 MiB  *1\$'"

test_end
