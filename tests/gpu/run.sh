#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/gpu/run.sh -- every GPU check in one command, for a machine with an
# NVIDIA GPU, run from the repository root:
#
#     bash tests/gpu/run.sh
#
# 1. builds (Release, -DVRAM_WERROR=ON) into build-gpu and runs the CTest
#    tests labelled "gpu" against the real driver;
# 2. measures the driver's virtual-memory calls (vram_vmm_costs), then
#    replays the shared traces (data/traces) on the GPU through vram, each
#    strategy (`vram replay --backend cuda`), and through the CUDA
#    stream-ordered pool and cudaMalloc (vram_replay_peers): host ns per
#    operation, peak reserved, fragmentation -- same run, same GPU;
# 3. trains ResNet-50 and GPT-2 small (bench/gpu/train.py) with PyTorch's own
#    allocator and with vram plugged in (expandable), counting vram's driver
#    calls per step;
# 4. the quota enforcer's checks (bench/gpu/quota_checks.py, hook cost);
# 5. the Python package with PyTorch (bench/gpu/python_checks.py), PyTorch
#    when the plug-in is past its cap (bench/gpu/plugin_oom.py), and results
#    across streams and CUDA graphs against PyTorch's allocator
#    (bench/gpu/stream_checks.py);
# 6. prints one table last, with PASS/MISS against each target;
# 8. torchperf: vram inside PyTorch (bench/gpu/torchperf.py): past the cap
#    PyTorch raises torch.OutOfMemoryError with vram's line and training goes
#    on with the same losses; torch.cuda.empty_cache() gives idle memory back
#    (bytes_reserved, cudaMemGetInfo and `vram stat` show the drop; a side
#    stream's data stays right); then every trace cold and warm through
#    expandable and the cudaMallocAsync pool (whole cold trace no slower than
#    the pool's, fragmentation <= 1.02, steady state >= 10x the pool), and
#    the preload's cost per hooked call over the bare driver, paired in one
#    process (tests/preload/hook_cost.py; section hookcost alone). The
#    traces run in interleaved rounds (section traces alone).
#    JSON lines in $OUT/torchperf.jsonl.
# 9. record: `vram record` on real PyTorch (and JAX) training with planted
#    leaks and clean runs (bench/gpu/record_checks.py, under 3 minutes):
#    each leak found at the framework's own rate within 5%, the top leak
#    call site naming the planted line, no leak on the clean runs, the
#    recording's step-time cost (call sites included); traces in $OUT/record.
# 10. policy: two Unix users' PyTorch, JAX and CuPy processes under a 4 GiB host policy
#     through /etc/ld.so.preload in a private mount namespace
#     (bench/gpu/policy_checks.py): nvidia-smi's per-process used memory
#     within 4 GiB + 64 MiB, the OOM at the quota; the 64 MiB of host memory
#     the PyTorch and CuPy workers pin, and their resident sets, as root's
#     `vram stat --json` shows them. $WORK/policy.json.
# 11. tune: `vram tune` on a PyTorch (and JAX) training loop without end
#     (bench/gpu/tune_checks.py, under 3 minutes): stopped once steady with
#     10 % headroom, the recommended setting applied (PyTorch's fraction,
#     vram.torch.use, JAX's memory fraction) runs 300 steps without an OOM
#     while half the smallest cap fails; a leak stopped at --seconds, exit 3.
# 12. corpus: real allocation traces of some 30 workloads in 12 families
#     (bench/gpu/record_corpus.py, under 6 minutes): PyTorch's through its
#     allocation history, JAX's through `vram record` under cuda_async;
#     the traces, summary.jsonl and logs in one file, $OUT/corpus.tar,
#     summary.jsonl as $OUT/corpus.jsonl, and the traces copied to
#     $OUT/corpus unless VRAM_GPU_CORPUS_COPY=0 (the device tool brings
#     back 8 files at most: set it there). Runs only when named
#     (VRAM_GPU_SECTIONS=corpus): it makes data, it checks nothing.
# 13. planzoo: `vram plan --model` on every torchvision classification,
#     detection and segmentation model and Hugging Face configs under bf16
#     autocast (bench/gpu/plan_zoo.py, under 6 minutes): traced on the fake
#     CUDA device and on the meta device (vram's autocast) against
#     max_memory_allocated, median <= 2 %, worst <= 5 %; $OUT/plan_zoo.md.
# 14. quota_truth: every way of getting device memory (tiny, odd, 2 MiB +/- 1
#     and huge allocations, a fragmenting pattern, pitch, arrays, mipmapped
#     arrays, VMM, release after map, pools with a high release threshold,
#     a created pool, graphs, the dlvsym route) pushed against a 1 GiB quota
#     under `vram run --limit 1G` and under a 1 GiB host policy
#     (bench/gpu/quota_truth.py over tests/gpu/quota_truth.c, about 2
#     minutes): NVML's per-process used memory, sampled inside and by
#     nvidia-smi outside, never above the quota, the refusal
#     CUDA_ERROR_OUT_OF_MEMORY within 96 MiB of it. $WORK/quota_truth.jsonl.
# 15. torch: PyTorch's own memory API under vram.torch.use() against
#     vram.stats(), a --torch-snapshot in PyTorch's memory_viz, and real
#     training loops recorded with and without vram.mark
#     (bench/gpu/torch_api_checks.py, under 4 minutes): iterations agree with
#     the steps, leaks at their rate, the line that keeps them, their holder.
# 7. `vram plan` against measured peaks (bench/gpu/plan_measure.py, about 5
#    minutes: torchvision training, HF generation, LoRA; predictions traced
#    in CPU workers at the same time), errors per kind in $OUT/plan.txt and
#    $OUT/plan_measure.jsonl (bench/gpu/plan_compare.py).
#
# VRAM_GPU_SECTIONS picks sections (a comma list; default all): ctest (1),
# replay (2), train (3), quota (4), python (5, 5b), streams (5c), plan (7),
# torchperf (8; hookcost: its hook-cost step alone; traces: its trace
# rounds alone), record (9), policy (10),
# tune (11), corpus (12: only when named, never part of all), planzoo (13),
# quota_truth (14), torch (15).
# The build always runs. Device time is scarce: pick what a change needs,
# e.g. VRAM_GPU_SECTIONS=streams,plan bash tests/gpu/run.sh.
#
# Writes to $OUT (default ./gpu-out): gpu.log (every command and its
# output), results.json (every figure), table.txt (the table). A step that
# fails is recorded as FAILED and the rest still run; the whole stays under
# VRAM_GPU_DEADLINE seconds (default 540), steps past it are SKIPPED.
# Exit status: 0 when every step ran and every target passed, 1 otherwise.
#
# The build needs pkg-config, zlib, json-c and cmocka (top and the exporter,
# which need ncurses and libmicrohttpd, are left out: -DVRAM_LIVE_TOOLS=OFF).
# Where the machine
# lacks them and cannot download, put their Debian packages in .gpu-deps/
# (on a machine with a registry: `mkdir -p .gpu-deps && cd .gpu-deps &&
# apt-get download pkgconf pkgconf-bin libpkgconf3 zlib1g-dev libjson-c-dev
# libjson-c5 libcmocka-dev libcmocka0`); they are unpacked into
# build-gpu-sysroot, never into /.
set -u

cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
BUILD=$ROOT/build-gpu
WORK=$BUILD/gpu-results # intermediate JSON; only three files go to $OUT
LOG=$OUT/gpu.log
STATUS=$WORK/status.tsv
DEADLINE=${VRAM_GPU_DEADLINE:-540}
T0=$SECONDS
TRACES=(resnet50_fp32 gpt2_bf16_b16 gpt2m_generate leak_mlp)
MALLOC_MAX_EVENTS=200000 # cudaMalloc on gpt2m_generate: a prefix (43 us a pair)

mkdir -p "$OUT" "$BUILD" || exit 1
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
: >"$LOG"
: >"$STATUS"
export PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$LOG"; }

# want SECTION: whether VRAM_GPU_SECTIONS (empty: all) names SECTION.
want() {
    case ",${VRAM_GPU_SECTIONS:-all}," in
    *,all,* | *,"$1",*) return 0 ;;
    *) return 1 ;;
    esac
}

# run_step NAME LIMIT CMD...: run CMD with a time limit, its output to the
# log (stdout to $STEP_OUT instead when that is set), and record the
# outcome in status.tsv. Returns CMD's exit status.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - (SECONDS - T0)))
    if [ "$left" -le 15 ]; then
        printf '%s\tSKIPPED\t0\n' "$name" >>"$STATUS"
        say "-- $name: SKIPPED (past the ${DEADLINE}s deadline)"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name ($(date +%T), limit ${limit}s): $*" >>"$LOG"
    local t=$SECONDS rc
    if [ -n "${STEP_OUT:-}" ]; then
        timeout -k 10 "$limit" "$@" >"$STEP_OUT" 2>>"$LOG"
        rc=$?
    else
        timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
        rc=$?
    fi
    local st=ok
    [ $rc -ne 0 ] && st=FAILED
    [ $rc -eq 124 ] && st="FAILED(timeout)"
    printf '%s\t%s\t%d\n' "$name" "$st" $((SECONDS - t)) >>"$STATUS"
    say "-- $name: $st (exit $rc, $((SECONDS - t))s)"
    return $rc
}

# Make pkg-config, zlib, json-c and cmocka available (see the top).
provide_deps() {
    if command -v pkg-config >/dev/null 2>&1 &&
        pkg-config --exists zlib json-c cmocka 2>/dev/null; then
        return 0
    fi
    if ! ls .gpu-deps/*.deb >/dev/null 2>&1; then
        echo "vram: pkg-config, zlib, json-c or cmocka missing, and no .gpu-deps/*.deb"
        return 1
    fi
    local root=$ROOT/build-gpu-sysroot f
    rm -rf "$root" && mkdir -p "$root" || return 1
    for f in .gpu-deps/*.deb; do
        dpkg -x "$f" "$root" || return 1
    done
    for f in "$root"/usr/lib/*/pkgconfig/*.pc "$root"/usr/share/pkgconfig/*.pc; do
        [ -f "$f" ] && sed -i "s|=/usr|=$root/usr|g" "$f"
    done
    local multi link so sys
    multi=$(ls -d "$root"/usr/lib/*-linux-gnu 2>/dev/null | head -n 1)
    # Development symlinks that point at an absolute path (zlib's libz.so ->
    # /lib/.../libz.so.1.2.13) dangle here: point them at the machine's own
    # library of the same soname, so the shared library is linked, not the
    # non-PIC static archive, and drop static archives that shadow them.
    for link in "$multi"/*.so; do
        [ -L "$link" ] && [ ! -e "$link" ] || continue
        so=$(basename "$link").1
        sys=$(ls /lib/*-linux-gnu/"$so" /usr/lib/*-linux-gnu/"$so" 2>/dev/null | head -n 1)
        [ -n "$sys" ] && ln -sf "$sys" "$link" && rm -f "${link%.so}.a"
    done
    export PATH=$root/usr/bin:$PATH
    export PKG_CONFIG_PATH=$multi/pkgconfig:$root/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export LD_LIBRARY_PATH=$multi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "vram: using pkg-config, zlib, json-c and cmocka from .gpu-deps ($root)"
    pkg-config --exists zlib json-c cmocka
}

say "vram GPU checks, $(date -u +%FT%TZ), in $ROOT; output in $OUT"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -n 2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >>"$LOG" 2>&1

# ---- 1. build and the gpu-labelled tests ----
deps=ok
provide_deps >>"$LOG" 2>&1 || deps=FAILED
printf 'deps\t%s\t0\n' "$deps" >>"$STATUS"
say "-- deps: $deps"
if run_step configure 180 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DVRAM_WERROR=ON \
    -DVRAM_LIVE_TOOLS=OFF; then
    # If the whole build fails (a test that does not compile, say), still
    # build what the measurements need, so that they can run.
    if ! run_step build 300 cmake --build "$BUILD" -j "$(nproc)"; then
        keep_going=-k
        [ -f "$BUILD/build.ninja" ] && keep_going="-k 0"
        # shellcheck disable=SC2086 # two words for ninja
        run_step "build (keep going: all that compiles)" 300 cmake --build "$BUILD" \
            -j "$(nproc)" -- $keep_going
    fi
    want ctest &&
        (cd "$BUILD" && run_step "ctest -L gpu" 180 ctest -L gpu --no-tests=error --output-on-failure)
    [ -x "$BUILD/bin/vram_replay_peers" ] ||
        say "-- vram_replay_peers was not built (no CUDA toolkit found by CMake)"
fi
VRAM=$BUILD/bin/vram
PEERS=$BUILD/bin/vram_replay_peers
LIB=$BUILD/lib/libvram.so

# ---- 2. the driver's virtual-memory calls, then the shared traces ----
if want replay; then
STEP_OUT=$WORK/vmm_costs.json run_step "driver call costs" 60 "$BUILD/bin/vram_vmm_costs" --json
# One process per trace and strategy, so that one failure loses one row.
strategies=$("$VRAM" replay --help 2>/dev/null | sed -n "s/^Strategies: \(.*\) (or 'all')$/\1/p")
[ -n "$strategies" ] || strategies="preallocate growth growth:tf-compat expandable"
for t in "${TRACES[@]}"; do
    f=data/traces/$t.trace.csv.gz
    for s in $strategies; do
        STEP_OUT=$WORK/replay_${t}_${s//:/_}.jsonl \
            run_step "replay $t $s" 120 "$VRAM" replay --backend cuda --strategy "$s" \
            --repeat 3 --json "$f"
    done
    STEP_OUT=$WORK/peers_${t}_pool.jsonl \
        run_step "peers $t cudaMallocAsync" 120 "$PEERS" --allocator cudaMallocAsync \
        --repeat 3 --json "$f"
    # Steady state: a second pass on a warm allocator, as in a long run.
    for s in growth expandable; do
        STEP_OUT=$WORK/warm_${t}_${s}.jsonl \
            run_step "replay $t $s --warm" 120 "$VRAM" replay --backend cuda --strategy "$s" \
            --repeat 3 --warm --json "$f"
    done
    STEP_OUT=$WORK/warmpeers_${t}_pool.jsonl \
        run_step "peers $t cudaMallocAsync --warm" 120 "$PEERS" --allocator cudaMallocAsync \
        --repeat 3 --warm --json "$f"
    max=()
    [ "$t" = gpt2m_generate ] && max=(--max-events "$MALLOC_MAX_EVENTS")
    STEP_OUT=$WORK/peers_${t}_malloc.jsonl \
        run_step "peers $t cudaMalloc" 150 "$PEERS" --allocator cudaMalloc \
        --repeat 3 "${max[@]}" --json "$f"
done
fi # replay

# ---- 3. training with PyTorch's allocator and with vram ----
if want train; then
for m in resnet50 gpt2; do
    for a in torch vram; do
        run_step "train $m $a" 240 python3 bench/gpu/train.py --model "$m" \
            --allocator "$a" --lib "$LIB" --out "$WORK/train_${m}_${a}.json"
    done
done

fi # train

# ---- 4. the quota enforcer with real frameworks ----
if ! want quota; then
    :
elif [ -f "$BUILD/lib/libvram-preload.so" ]; then
    run_step "quota checks (torch, jax, cupy, groups, gpt2)" 400 python3 bench/gpu/quota_checks.py \
        --vram "$VRAM" --out "$WORK/quota.json"
    if [ -x "$BUILD/tests/preload/bench_hook" ]; then
        STEP_OUT=$WORK/hook_bare.txt run_step "hook cost: bare driver" 60 \
            "$BUILD/tests/preload/bench_hook"
        STEP_OUT=$WORK/hook_preload.txt run_step "hook cost: preloaded, quota set" 60 \
            env LD_PRELOAD="$BUILD/lib/libvram-preload.so" VRAM_LIMIT=100G "$BUILD/tests/preload/bench_hook"
    fi
else
    say "-- quota checks: SKIPPED (no libvram-preload.so was built)"
fi

# ---- 5. the Python package with PyTorch through the plug-in ----
if want python; then
    STEP_OUT=$WORK/python.json run_step "python package with PyTorch" 300 \
        python3 bench/gpu/python_checks.py --lib "$LIB"
    # 5b. PyTorch when vram, plugged in, refuses an allocation
    STEP_OUT=$WORK/plugin_oom.json run_step "plug-in out of memory" 200 \
        python3 bench/gpu/plugin_oom.py --lib "$LIB"
fi

# ---- 5c. results across streams and CUDA graphs, vram vs PyTorch's allocator ----
want streams && STEP_OUT=$WORK/streams.json run_step "streams and graphs vs torch" 300 \
    python3 bench/gpu/stream_checks.py --lib "$LIB"

# ---- 8. torchperf: OOM exception, empty_cache, cold start ----
if want torchperf; then
    STEP_OUT=$WORK/torchperf.json run_step "torchperf: OOM and empty_cache in PyTorch" 240 \
        python3 bench/gpu/torchperf.py --lib "$LIB" --vram "$VRAM"
fi
# Every trace cold and warm, expandable against the pool, in interleaved
# rounds (VRAM_GPU_ROUNDS, default 3): each round runs all four of a trace
# back to back, so a ratio compares figures of the same minute; the
# verdicts take the median of the rounds' ratios. Part of torchperf;
# VRAM_GPU_SECTIONS=traces runs it alone.
if want torchperf || want traces; then
    for r in $(seq 1 "${VRAM_GPU_ROUNDS:-3}"); do
        for f in data/traces/*.trace.csv.gz; do
            t=$(basename "$f" .trace.csv.gz)
            STEP_OUT=$WORK/tp_cold_${t}_expandable_r$r.jsonl \
                run_step "torchperf: $t expandable cold, round $r" 90 \
                "$VRAM" replay --backend cuda --strategy expandable --repeat 3 --json "$f"
            STEP_OUT=$WORK/tp_cold_${t}_pool_r$r.jsonl \
                run_step "torchperf: $t pool cold, round $r" 90 \
                "$PEERS" --allocator cudaMallocAsync --repeat 3 --json "$f"
            STEP_OUT=$WORK/tp_warm_${t}_expandable_r$r.jsonl \
                run_step "torchperf: $t expandable warm, round $r" 90 \
                "$VRAM" replay --backend cuda --strategy expandable --repeat 3 --warm --json "$f"
            STEP_OUT=$WORK/tp_warm_${t}_pool_r$r.jsonl \
                run_step "torchperf: $t pool warm, round $r" 90 \
                "$PEERS" --allocator cudaMallocAsync --repeat 3 --warm --json "$f"
        done
    done
fi
# The preload's cost per hooked call over the bare driver: hooked and bare
# calls alternate batch by batch in one process, the paired differences'
# median with the sign test's 95 % interval, for cuMemGetInfo_v2, the
# cuMemAlloc_v2 + cuMemFree_v2 pair and the stream-ordered pair (the same
# hooks' work over a cheaper, steadier driver call); then the same with both sides
# bare (must report no cost) and with 300 ns planted before each hooked
# call (must be found); and each hook's own time outside the driver call,
# under the measurement build libvram-preload-timing.so, without the
# driver's microseconds of noise; and the same calls with 8 other members
# of the quota group alive (shown, not judged): tests/preload/hook_cost.py,
# five runs of at most 25 s. Part of torchperf; VRAM_GPU_SECTIONS=hookcost runs it alone.
if { want torchperf || want hookcost; } && [ -x "$BUILD/tests/preload/hook_cost" ] &&
    [ -f "$BUILD/lib/libvram-preload.so" ]; then
    STEP_OUT=$WORK/hook_cost.json run_step "torchperf: hook cost (paired in one process, 95% CI)" 240 \
        python3 tests/preload/hook_cost.py --bin "$BUILD/tests/preload/hook_cost" \
        --preload "$BUILD/lib/libvram-preload.so" --batches 20000 --seconds 25 \
        --env VRAM_LIMIT=100G --validate --members 8 --json \
        --timing-preload "$BUILD/lib/libvram-preload-timing.so"
fi
if want torchperf || want hookcost || want traces; then
    {
        cat "$WORK"/torchperf.json "$WORK"/hook_cost.json 2>/dev/null
        for f in "$WORK"/tp_*_r*.jsonl; do
            [ -f "$f" ] || continue
            r=${f##*_r}
            sed "s/^{/{\"round\": ${r%.jsonl}, /" "$f"
        done
    } | grep '^{' >"$OUT/torchperf.jsonl"
fi

# ---- 9. `vram record` on real training: planted leaks at the framework's rate ----
# PyTorch (and JAX when importable): a kept-logits leak (250 KB a step), a
# per-step cache (1 MiB a step), a clean run, a bounded cache, variable
# lengths, and JAX's kept logits once more under its cuda_async allocator;
# the traces and the frameworks' own figures stay in $OUT/record. The table
# gives the driver's figure (device used bytes per step) and each trace's
# share of 2 MiB-multiple allocations (1.0: the allocator rounds every array
# up to the driver's granularity) beside the framework's.
want record && STEP_OUT=$WORK/record.json run_step "record: planted leaks in real training" 200 \
    python3 bench/gpu/record_checks.py --vram "$VRAM" --work "$OUT/record" --budget 170

# ---- 15. torch: PyTorch's memory API over vram, snapshots, loops recorded ----
# bench/gpu/torch_api_checks.py (under 4 minutes): torch.cuda's memory
# functions under vram.torch.use() equal vram.stats() at every step of a
# training loop, memory_stats' keys, memory_summary, reset_peak, the default
# strategy's first tensor; a recording's --torch-snapshot in PyTorch's
# memory_viz (stats, trace, trace_plot, segment_plot); real loops recorded
# with and without vram.mark: iterations agree with the steps, leaks at
# their rate, the line that keeps them, what holds them. Traces in
# $OUT/torch. The CPU dry run is CTest gpu_torch_dryrun.
want torch && STEP_OUT=$WORK/torch.json run_step "torch: memory API, snapshots, loops" 260 \
    python3 bench/gpu/torch_api_checks.py --vram "$VRAM" --lib "$LIB" --work "$OUT/torch" --budget 200

# ---- 10. policy: two users' PyTorch processes under a 4 GiB host policy ----
# In a private mount namespace (the machine's /etc never changes):
# /etc/vram/policy.conf "default 4096M", the library in /etc/ld.so.preload,
# each user's process allocates until PyTorch's OOM; nvidia-smi's
# per-process used memory must stay within 4 GiB + 64 MiB (the context is
# counted), and each must have reached 3 GiB first.
if want policy && [ -f "$BUILD/lib/libvram-preload.so" ]; then
    STEP_OUT=$WORK/policy.json run_step "policy: two users under a 4 GiB policy" 180 \
        python3 bench/gpu/policy_checks.py --preload "$BUILD/lib/libvram-preload.so"
fi

# ---- 11. `vram tune` on real training, its recommendation applied ----
# The recordings stay in $OUT/tune. A CPU dry run of the same logic, the
# fake driver's probe loop standing in for training:
#   LD_LIBRARY_PATH=build/tests/fakecuda FAKECUDA_MEMORY=64G python3 \
#     bench/gpu/tune_checks.py --vram build/bin/vram --work /tmp/t --dry-run build/tests/preload/preload_probe
want tune && STEP_OUT=$WORK/tune.json run_step "tune: real training, the setting applied" 200 \
    python3 bench/gpu/tune_checks.py --vram "$VRAM" --lib "$LIB" --work "$OUT/tune" --budget 170

# ---- 12. corpus: record real allocation traces ----
# Only when named: VRAM_GPU_SECTIONS=corpus. The recording gets what is left
# of the deadline after the build, at most VRAM_GPU_CORPUS_BUDGET seconds
# (default 330), and a minute to drain.
case ",${VRAM_GPU_SECTIONS:-all}," in
*,corpus,*)
    left=$((DEADLINE - (SECONDS - T0) - 75))
    budget=${VRAM_GPU_CORPUS_BUDGET:-330}
    [ "$budget" -gt "$left" ] && budget=$left
    if [ "$budget" -lt 60 ]; then
        printf '%s\tSKIPPED\t0\n' "corpus: record real traces" >>"$STATUS"
        say "-- corpus: SKIPPED (${budget}s left of the deadline; raise VRAM_GPU_DEADLINE)"
    else
        rm -rf "$WORK/corpus"
        run_step "corpus: record real traces" $((budget + 60)) \
            python3 bench/gpu/record_corpus.py --out "$WORK/corpus" --vram "$VRAM" \
            --budget "$budget"
        tail -n 40 "$WORK/corpus/table.txt" 2>/dev/null | tee -a "$LOG"
        cp "$WORK/corpus/summary.jsonl" "$OUT/corpus.jsonl" 2>>"$LOG"
        tar -C "$WORK" -cf "$OUT/corpus.tar" corpus 2>>"$LOG" &&
            say "-- corpus: $(ls "$WORK"/corpus/*.trace.csv.gz 2>/dev/null | wc -l) traces in $OUT/corpus.tar ($(du -k "$OUT/corpus.tar" | cut -f1) KiB)"
        if [ "${VRAM_GPU_CORPUS_COPY:-1}" != 0 ]; then
            rm -rf "$OUT/corpus" && mkdir -p "$OUT/corpus" &&
                cp "$WORK"/corpus/*.trace.csv.gz "$OUT/corpus/" 2>>"$LOG"
        fi
    fi
    ;;
esac

# ---- 14. quota_truth: the ground truth of the quota is the GPU ----
# Needs root and unshare for the policy route (else that route is skipped
# and said so in the table).
if want quota_truth && [ -f "$BUILD/lib/libvram-preload.so" ] &&
    [ -x "$BUILD/tests/preload/quota_truth" ]; then
    run_step "quota_truth: every path against a 1 GiB quota, NVML the judge" 360 \
        python3 bench/gpu/quota_truth.py --vram "$VRAM" --preload "$BUILD/lib/libvram-preload.so" \
        --truth "$BUILD/tests/preload/quota_truth" --out "$WORK/quota_truth.jsonl"
fi

# ---- 7. `vram plan` against measured peaks ----
if want plan; then
    run_step "plan: measure and predict" 420 python3 bench/gpu/plan_measure.py \
        --out "$OUT" --vram "$VRAM" --budget 270
    STEP_OUT=$OUT/plan.txt run_step "plan: errors per kind" 30 \
        python3 bench/gpu/plan_compare.py "$OUT/plan_measure.jsonl" --table
    cat "$OUT/plan.txt" 2>/dev/null | tee -a "$LOG"
fi

# ---- 13. `vram plan` on the whole zoo, mixed precision ----
# Every torchvision classification, detection and segmentation model and
# four Hugging Face configs, bf16 autocast + AdamW, two steps: measured,
# traced on the fake CUDA device (PyTorch's autocast) and on the meta
# device as a CPU-only PyTorch traces (vram's autocast table), in 14 CPU
# workers beside the measurements; PASS/MISS per predictor (median <= 2%,
# worst <= 5%), the autocast table against this PyTorch's kernels,
# quantized layers refused by name. $OUT/plan_zoo.txt, plan_zoo.md (the
# table for BENCHMARKS.md), plan_zoo.jsonl. Split across runs with
# VRAM_PLAN_ZOO_ARGS (e.g. "--kinds detection,segmentation,hf").
if want planzoo; then
    # shellcheck disable=SC2086
    STEP_OUT=$OUT/plan_zoo.txt run_step "plan: the zoo, mixed precision" 400 \
        python3 bench/gpu/plan_zoo.py --out "$OUT" --budget 330 ${VRAM_PLAN_ZOO_ARGS:-}
    cat "$OUT/plan_zoo.txt" 2>/dev/null | tee -a "$LOG"
fi

# ---- 6. the table ----
python3 - "$WORK" "$OUT" "${TRACES[@]}" <<'PY' 2>>"$LOG"
import glob, json, os, re, sys

work, out, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
MiB, GiB = 2.0**20, 2.0**30

def jsonl(pattern):
    rows = []
    for path in sorted(glob.glob(os.path.join(work, pattern))):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    return rows

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

steps = []
with open(os.path.join(work, "status.tsv")) as f:
    for line in f:
        p = line.rstrip("\n").split("\t")
        if len(p) == 3:
            steps.append({"step": p[0], "status": p[1], "seconds": int(p[2])})
replay = jsonl("replay_*.jsonl")
peers = jsonl("peers_*.jsonl")
warm = jsonl("warm_*.jsonl")
warmpeers = jsonl("warmpeers_*.jsonl")
train = {m: {a: load(os.path.join(work, "train_%s_%s.json" % (m, a)))
             for a in ("torch", "vram")} for m in ("resnet50", "gpt2")}
gpu = ""
for m in train.values():
    for r in m.values():
        if r and r.get("gpu"):
            gpu = r["gpu"]

def row(rows, trace, key, value):
    for r in rows:
        if r.get("trace") == trace and r.get(key) == value:
            return r
    return None

targets = []  # (what, PASS|MISS|FAILED)
def verdict(ok):
    return "FAILED" if ok is None else ("PASS" if ok else "MISS")

lines = []
# A section that did not run (VRAM_GPU_SECTIONS) has no rows and no targets.
have_replay = bool(replay or peers or warm or warmpeers)
have_train = any(r is not None for m in train.values() for r in m.values())
def cell(r, width):
    if r is None:
        return "FAILED".rjust(width)
    return ("%.1f (%.3f)" % (r["ns_per_op"], r["fragmentation"])).rjust(width)

lines.append("vram GPU checks%s -- host ns/op (fragmentation = peak reserved / peak live)"
             % (" on " + gpu if gpu else ""))
if not have_replay:
    traces = []  # the replay section did not run
hdr = "%-15s %17s %17s %17s %19s %9s %9s %10s %9s" % (
    "trace", "vram growth", "vram expandable", "cudaMallocAsync", "cudaMalloc",
    "pool/grow", "pool/exp", "ns<=1/10", "frag<=1.02")
lines.append(hdr)
notes = []
for t in traces:
    g = row(replay, t, "strategy", "growth")
    e = row(replay, t, "strategy", "expandable")
    p = row(peers, t, "allocator", "cudaMallocAsync")
    m = row(peers, t, "allocator", "cudaMalloc")
    def ratio(v):
        if v is None or p is None or v["ns_per_op"] <= 0:
            return None
        return p["ns_per_op"] / v["ns_per_op"]
    rg, re_ = ratio(g), ratio(e)
    ns_ok = None if re_ is None else re_ >= 10.0
    frag_ok = None if e is None else e["fragmentation"] <= 1.02
    targets.append(("%s: expandable ns/op <= pool/10 (whole trace, cold)" % t, verdict(ns_ok)))
    targets.append(("%s: expandable fragmentation <= 1.02" % t, verdict(frag_ok)))
    mc = cell(m, 18) + ("*" if m is not None and m.get("prefix") else " ")
    if m is not None and m.get("prefix"):
        notes.append("* %s cudaMalloc: first %d of %d events" % (t, m["ops"], m["trace_events"]))
    lines.append("%-15s %17s %17s %17s %19s %9s %9s %10s %9s" % (
        t, cell(g, 17), cell(e, 17), cell(p, 17), mc,
        "-" if rg is None else "%.1fx" % rg, "-" if re_ is None else "%.1fx" % re_,
        verdict(ns_ok), verdict(frag_ok)))
notes.append("cudaMalloc's peak reserved is its peak live bytes (fragmentation 1 by construction)")
lines.extend("  " + n for n in notes)
lines.append("")

lines.append("steady state (--warm: the timed pass finds the allocator warm) -- host ns/op")
lines.append("%-15s %17s %17s %17s %9s %9s %10s" % (
    "trace", "vram growth", "vram expandable", "cudaMallocAsync", "pool/grow", "pool/exp",
    "ns<=1/10"))
for t in traces:
    g = row(warm, t, "strategy", "growth")
    e = row(warm, t, "strategy", "expandable")
    p = row(warmpeers, t, "allocator", "cudaMallocAsync")
    def wratio(v):
        if v is None or p is None or v["ns_per_op"] <= 0:
            return None
        return p["ns_per_op"] / v["ns_per_op"]
    rg, re_ = wratio(g), wratio(e)
    ns_ok = None if re_ is None else re_ >= 10.0
    targets.append(("%s: expandable ns/op <= pool/10 (steady state)" % t, verdict(ns_ok)))
    lines.append("%-15s %17s %17s %17s %9s %9s %10s" % (
        t, cell(g, 17), cell(e, 17), cell(p, 17),
        "-" if rg is None else "%.1fx" % rg, "-" if re_ is None else "%.1fx" % re_,
        verdict(ns_ok)))
lines.append("")

lines.append("training: peak reserved by the allocator [whole device used], median step "
             "(first 3 excluded)")
lines.append("%-9s %24s %24s %10s %10s %7s %11s %9s %9s %7s" % (
    "model", "torch reserved", "vram reserved", "torch ms", "vram ms", "diff",
    "max|dloss|", "reserved", "step<=2%", "losses"))
train_summary = {}
for m in (("resnet50", "gpt2") if have_train else ()):
    tr, vr = train[m]["torch"], train[m]["vram"]
    ok_t = tr is not None and "error" not in tr
    ok_v = vr is not None and "error" not in vr
    def res(r, ok):
        if not ok:
            return "FAILED"
        return "%.2f GiB [%.2f]" % (r["peak_reserved_bytes"] / GiB, r["device_used_bytes"] / GiB)
    diff = dloss = None
    res_ok = step_ok = loss_ok = None
    if ok_t and ok_v:
        diff = vr["median_step_s"] / tr["median_step_s"] - 1.0
        lt, lv = tr["losses"], vr["losses"]
        n = min(len(lt), len(lv))
        dloss = max(abs(a - b) for a, b in zip(lt[:n], lv[:n])) if n else None
        scale = max([1.0] + [abs(x) for x in lt[:n]])
        res_ok = vr["peak_reserved_bytes"] <= tr["peak_reserved_bytes"]
        step_ok = diff <= 0.02
        loss_ok = dloss is not None and n == len(lt) == len(lv) and dloss <= 1e-3 * scale
    train_summary[m] = {"step_time_diff": diff, "max_abs_loss_diff": dloss}
    targets.append(("%s: vram reserves no more than torch" % m, verdict(res_ok)))
    targets.append(("%s: vram step time within 2%%" % m, verdict(step_ok)))
    targets.append(("%s: losses match (|d| <= 1e-3 x max(1,|loss|))" % m, verdict(loss_ok)))
    lines.append("%-9s %24s %24s %10s %10s %7s %11s %9s %9s %7s" % (
        m, res(tr, ok_t), res(vr, ok_v),
        "%.1f" % (tr["median_step_s"] * 1e3) if ok_t else "FAILED",
        "%.1f" % (vr["median_step_s"] * 1e3) if ok_v else "FAILED",
        "-" if diff is None else "%+.1f%%" % (diff * 100),
        "-" if dloss is None else "%.2g" % dloss,
        verdict(res_ok), verdict(step_ok), verdict(loss_ok)))
    if ok_v and "vram_steady_calls" in vr:
        lines.append("%-9s vram's driver calls in the timed steps: %d (unmaps %d)" % (
            "", vr["vram_steady_calls"], vr["vram_steady_unmaps"]))
lines.append("")

vmm = load(os.path.join(work, "vmm_costs.json"))
if vmm is not None:
    u8 = [u for u in vmm["units"] if u["unit_mib"] == 8]
    ob = {(o["unit_mib"], o["set_access"]): o["obtain_ms"] for o in vmm["obtain_8gib"]}
    if u8:
        u = u8[0]
        lines.append("driver calls (median us): 8 MiB create %.1f, map %.1f, set access %.1f, "
                     "unmap %.1f, release %.1f; idle synchronize %.1f" % (
                         u["create_us"], u["map_us"], u["set_access_us"], u["unmap_us"],
                         u["release_us"], vmm["sync_idle_us"]))
    lines.append("8 GiB mapped in units of 2/8/32/128/512 MiB: " + " / ".join(
        "%.1f" % ob.get((m, "per unit"), float("nan")) for m in (2, 8, 32, 128, 512)) + " ms")
    lines.append("")

quota = load(os.path.join(work, "quota.json"))
if quota is not None:
    lines.append("quota enforcer under `vram run --limit 4G`")
    def q(name, key="pass"):
        r = quota.get(name) or {}
        return r.get(key)
    tt = quota.get("torch_total") or {}
    tres = tt.get("result") or {}
    items = [
        ("torch: mem_get_info total = quota", tt.get("pass_total"),
         "%s" % tres.get("total")),
        ("torch: past the quota -> OutOfMemoryError", tt.get("pass_oom"), tres.get("error", "")[:60]),
        ("torch expandable_segments counted", q("torch_expandable"), ""),
        ("jax: default preallocation = 75% of quota", q("jax_prealloc"),
         "ratio %s" % (quota.get("jax_prealloc") or {}).get("ratio")),
        ("cupy: total = quota, OOM past it", q("cupy"), ""),
        ("two processes in one group share it", q("group_share"), ""),
    ]
    g = quota.get("gpt2_overhead") or {}
    d = g.get("diff")
    rounds = ", rounds " + " / ".join("-" if x is None else "%+.2f%%" % (x * 100)
                                      for x in g.get("diffs") or []) if g.get("diffs") else ""
    items.append(("gpt2 step time with preload < 1% (median)", g.get("pass"),
                  ("-" if d is None else "%+.2f%%" % (d * 100)) + rounds))
    for what, ok, detail in items:
        targets.append((what, verdict(ok)))
        lines.append("  %-46s %-6s %s" % (what, verdict(ok), detail))
    def hook_ns(name):
        try:
            with open(os.path.join(work, name)) as f:
                for tok in f.read().split():
                    try:
                        return float(tok)
                    except ValueError:
                        pass
        except OSError:
            return None
        return None
    bare, pre = hook_ns("hook_bare.txt"), hook_ns("hook_preload.txt")
    if bare is not None and pre is not None:
        ok = pre - bare <= 200
        targets.append(("hooked alloc+free <= bare + 200 ns", verdict(ok)))
        lines.append("  %-46s %-6s bare %.0f ns, preloaded %.0f ns (+%.0f)" % (
            "hooked alloc+free <= bare + 200 ns", verdict(ok), bare, pre, pre - bare))
    lines.append("")

pyres = None
try:
    with open(os.path.join(work, "python.json")) as f:
        for line in f:
            if line.strip().startswith("{"):
                pyres = json.loads(line)
except (OSError, ValueError):
    pyres = None
if pyres is not None:
    ok = bool(pyres.get("ok", pyres.get("pass")))
    targets.append(("python package: stats, marks, hooks with PyTorch", verdict(ok)))
    lines.append("python package with PyTorch through the plug-in: %s" % verdict(ok))
poom = load(os.path.join(work, "plugin_oom.json"))
if poom is not None:
    for strat, r in sorted(poom.get("strategies", {}).items()):
        res = r.get("result") or {}
        ref = res.get("refused") or {}
        lines.append("plug-in past its cap (%s): %s -- PyTorch raised %s%s; vram said %r; "
                     "then a new 768 MiB tensor: %s" % (
                         strat, verdict(r.get("ok")), ref.get("exception"),
                         " (the tensor's pointer is NULL)" if ref.get("data_ptr_is_null") else "",
                         (r.get("vram_stderr") or ["nothing"])[0][:90],
                         "ok" if res.get("recovers") else "FAILED"))
    # PyTorch's behaviour, not a target of vram's: CUDAPluggableAllocator
    # (2.11) does not check for NULL, so vram cannot make it raise.
    lines.append("  (PyTorch turns the plug-in's NULL into an exception: %s)" % (
        "yes" if poom.get("pytorch_raises") else "no -- see the README's PyTorch section"))
    targets.append(("plug-in past its cap: vram's one line, the process goes on",
                    verdict(poom.get("ok"))))
    lines.append("")

streams = None
try:
    with open(os.path.join(work, "streams.json")) as f:
        for line in f:
            if line.strip().startswith("{"):
                streams = json.loads(line)
except (OSError, ValueError):
    streams = None
if streams is not None:
    lines.append("results across streams and CUDA graphs, bit for bit against PyTorch's "
                 "allocator (same run)")
    lines.append("  %-14s %8s %11s %8s %15s" % ("scenario", "expand.", "growth", "torch x2",
                                                "without hooks"))
    for s, r in sorted((streams.get("scenarios") or {}).items()):
        for m in ("vram_expandable", "vram_growth"):
            targets.append(("%s: %s == torch" % (s, m), verdict(r.get(m))))
        lines.append("  %-14s %8s %11s %8s %15s" % (
            s, verdict(r.get("vram_expandable")), verdict(r.get("vram_growth")),
            "same" if r.get("torch_repeats") else "DIFFERS",
            "differs (caught)" if r.get("caught_without_hooks") else "same"))
    for m, calls in sorted((streams.get("steady_backend_calls") or {}).items()):
        targets.append(("train_overlap %s: 0 driver calls in steady steps" % m,
                        verdict(None if calls is None else calls == 0)))
    cost = streams.get("cost_ns") or {}
    step = streams.get("step_ms") or {}
    lines.append("  alloc+record_stream+free host ns: " + ", ".join(
        "%s %.0f" % (m, v) for m, v in sorted(cost.items()) if isinstance(v, (int, float))))
    lines.append("  train_overlap mean step ms: " + ", ".join(
        "%s %.2f" % (m, v) for m, v in sorted(step.items()) if isinstance(v, (int, float))))
    for m, e in sorted((streams.get("errors") or {}).items()):
        lines.append("  %s: %s" % (m, e))
    lines.append("")

tperf = None
try:
    with open(os.path.join(work, "torchperf.json")) as f:
        for line in f:
            if line.strip().startswith("{"):
                tperf = json.loads(line)
except (OSError, ValueError):
    tperf = None
def jsonl_rounds(pattern):
    """The rows of PATTERN's files, each with "_round" from its name (..._rN.jsonl)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(work, pattern))):
        m = re.search(r"_r(\d+)\.jsonl$", path)
        for r in jsonl(os.path.basename(path)):
            r["_round"] = int(m.group(1)) if m else 1
            rows.append(r)
    return rows
tp_cold, tp_warm = jsonl_rounds("tp_cold_*.jsonl"), jsonl_rounds("tp_warm_*.jsonl")
if tperf is not None or tp_cold or tp_warm or load(os.path.join(work, "hook_cost.json")):
    lines.append("torchperf: vram inside PyTorch (vram.torch.use, cap 6 GiB)")
    what = {"oom_raised": "past the cap: torch.OutOfMemoryError raised",
            "oom_message": "  its message carries vram's line",
            "oom_survives": "  the process trains on",
            "oom_losses": "  losses = the run without the OOM",
            "release_drop": "empty_cache: reserved and cudaMemGetInfo drop",
            "release_stat": "  `vram stat` (NVML) shows the drop",
            "release_stream": "  side stream's data intact",
            "release_losses": "  losses = the run without empty_cache"}
    for strat, checks in sorted(((tperf or {}).get("checks") or {}).items()):
        fig = ((tperf or {}).get("figures") or {}).get(strat) or {}
        for k, label in what.items():
            v = checks.get(k)
            targets.append(("torchperf %s: %s" % (strat, label.strip()), verdict(v)))
            detail = ""
            if k == "oom_message":
                detail = (fig.get("oom_message") or "")[:100]
            if k == "release_drop":
                detail = "reserved -%.2f GiB, device free +%.2f GiB, %.3f s" % (
                    (fig.get("reserved_drop_bytes") or 0) / GiB,
                    (fig.get("device_free_rise_bytes") or 0) / GiB,
                    fig.get("empty_cache_seconds") or 0)
            if k == "release_stat":
                detail = "NVML used -%.2f GiB" % ((fig.get("stat_used_drop_bytes") or 0) / GiB)
            lines.append("  %-10s %-46s %-6s %s" % (strat, label, verdict(v), detail))
    for r in ((tperf or {}).get("runs") or {}).values():
        if isinstance(r, dict) and (r.get("error") or r.get("stderr_tail")):
            lines.append("  child: %s" % (r.get("error") or r.get("stderr_tail")))
    lines.append("  %-15s %5s %13s %13s %8s %8s %13s %13s %8s" % (
        "trace", "round", "exp cold", "pool cold", "pool/exp", "frag", "exp warm", "pool warm",
        "pool/exp"))
    f1 = lambda v: "FAILED" if v is None else "%.1f" % v
    fx = lambda v, fmt: "-" if v is None else fmt % v
    def ratio(pool, exp):
        if pool is None or exp is None or exp["ns_per_op"] <= 0:
            return None
        return pool["ns_per_op"] / exp["ns_per_op"]
    def med(v):
        v = sorted(x for x in v if x is not None)
        if not v:
            return None
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    for t in sorted({r.get("trace") for r in tp_cold + tp_warm if r.get("trace")}):
        colds, warms, frags = [], [], []
        for rnd in sorted({r.get("_round") for r in tp_cold + tp_warm if r.get("trace") == t}):
            pick = lambda rows, k, v: row([r for r in rows if r.get("_round") == rnd], t, k, v)
            ec, pc = pick(tp_cold, "strategy", "expandable"), pick(tp_cold, "allocator", "cudaMallocAsync")
            ew, pw = pick(tp_warm, "strategy", "expandable"), pick(tp_warm, "allocator", "cudaMallocAsync")
            cold, warm = ratio(pc, ec), ratio(pw, ew)
            frag = None if ec is None else ec["fragmentation"]
            colds.append(cold)
            warms.append(warm)
            frags.append(frag)
            lines.append("  %-15s %5s %13s %13s %8s %8s %13s %13s %8s" % (
                t, rnd, f1(None if ec is None else ec["ns_per_op"]),
                f1(None if pc is None else pc["ns_per_op"]), fx(cold, "%.2fx"),
                fx(frag, "%.3f"), f1(None if ew is None else ew["ns_per_op"]),
                f1(None if pw is None else pw["ns_per_op"]), fx(warm, "%.1fx")))
        cold, warm = med(colds), med(warms)
        frag = None if not frags or None in frags else max(frags)
        lines.append("  %-15s %5s %13s %13s %8s %8s %13s %13s %8s" % (
            t, "med", "", "", fx(cold, "%.2fx"), fx(frag, "%.3f"), "", "", fx(warm, "%.1fx")))
        targets.append(("torchperf %s: expandable cold no slower than the pool (median of %d "
                        "rounds)" % (t, len(colds)), verdict(None if cold is None else cold >= 1.0)))
        targets.append(("torchperf %s: expandable fragmentation <= 1.02" % t,
                        verdict(None if frag is None else frag <= 1.02)))
        targets.append(("torchperf %s: expandable steady state >= 10x the pool (median of %d "
                        "rounds)" % (t, len(warms)), verdict(None if warm is None else warm >= 10.0)))
    lines.append("  (host ns/op, median of 3 a run; the four of a trace run back to back in each "
                 "round; cold = whole trace from an empty allocator; med = median of the "
                 "rounds' ratios, frag the largest)")
    hc = load(os.path.join(work, "hook_cost.json"))
    if hc is not None and hc.get("kinds"):
        lines.append("  preload hook cost over the bare driver (%d paired batches in one process, "
                     "median and 95%% CI; bare cuCtxGetCurrent %.1f ns, cuCtxGetDevice %.1f ns):"
                     % (hc.get("batches", 0), hc.get("ctx_get_current_ns") or 0,
                        hc.get("ctx_get_device_ns") or 0))
        val = hc.get("validation") or {}
        grp = hc.get("members") or {}
        for label, kinds in (("", hc["kinds"]), ("A/A ", val.get("same") or {}),
                             ("+%.0f ns " % (val.get("plant_ns") or 0), val.get("planted") or {}),
                             ("%s members " % grp.get("n"), grp.get("kinds") or {})):
            for what, k in sorted(kinds.items()):
                if not label:
                    targets.append(("torchperf hook cost %s: CI upper end <= %.0f ns"
                                    % (what, k["limit_ns"]), verdict(k.get("pass"))))
                lines.append("    %-36s bare %.1f ns, hooked %.1f ns: %+.1f ns [%.1f, %.1f]  %s" % (
                    label + what, k["bare_median_ns"], k["hooked_median_ns"], k["diff_median_ns"],
                    k["ci95"][0], k["ci95"][1], "" if label else verdict(k.get("pass"))))
        methods = val.get("methods")
        if methods:
            for what, m in sorted(methods.items()):
                targets.append(("torchperf hook cost method, %s: CI < limit/2 wide, A/A shows "
                                "none, +300 ns found" % what, verdict(m.get("ok"))))
        else:
            targets.append(("torchperf hook cost method: CI < limit/2 wide, A/A shows none, "
                            "+300 ns found", verdict(hc.get("method_ok"))))
        if hc.get("self"):
            lines.append("  each hook's own time outside the driver call (measurement build, "
                         "median and 95%% CI, %.1f ns of timing taken off):"
                         % (hc.get("self_overhead_ns") or 0))
            for what, k in sorted(hc["self"].items()):
                targets.append(("torchperf hook self time %s: CI upper end <= %.0f ns"
                                % (what, k["limit_ns"]), verdict(k.get("pass"))))
                lines.append("    %-36s %.1f ns [%.1f, %.1f], p90 %.1f  %s" % (
                    what, k["median_ns"], k["ci95"][0], k["ci95"][1], k["p90_ns"],
                    verdict(k.get("pass"))))
    elif hc is not None:
        lines.append("  hook cost: %s" % hc.get("error"))
    lines.append("")

rec = load(os.path.join(work, "record.json"))
if rec is not None:
    lines.append("vram record: planted leaks in real training (vram analyze on the trace)")
    lines.append("  %-28s %6s %12s %12s %12s %9s %6s %5s %s" % (
        "framework case", "leak", "vram B/step", "framework", "driver", "planted",
        "2MiB", "P", "suspect sizes"))
    for c in rec.get("cases") or []:
        lines.append("  %-28s %6s %12s %12s %12s %9s %6s %5s %s" % (
            "%s %s" % (c.get("framework"), c.get("case")),
            {True: "yes", False: "no"}.get(c.get("leak"), "FAILED"),
            c.get("leak_bytes_per_iteration"),
            "-" if c.get("truth_bytes_per_step") is None else "%.0f" % c["truth_bytes_per_step"],
            "-" if c.get("device_bytes_per_step") is None else "%.0f" % c["device_bytes_per_step"],
            c.get("planted_bytes") or "-", c.get("rounded_2mib_share"),
            c.get("period_events"), (c.get("suspect_sizes") or [])[:3]))
        if c.get("top_site"):
            lines.append("    top call site: %s per step from %s (%s iterations)" % (
                c.get("top_site_rate"), c.get("top_site"), c.get("top_site_iterations")))
            lines.append("      stack: %s" % " < ".join(c.get("top_site_stack") or [])[:300])
        if c.get("error") or c.get("analyze_error"):
            lines.append("    %s" % (c.get("error") or c.get("analyze_error")).strip()[-200:])
    seen = set()
    for c in rec.get("cases") or []:  # what each run saw: version, allocator settings
        env = sorted((k, v) for k, v in (c.get("env") or {}).items() if v and k != "VRAM_TRACE")
        key = (c.get("framework"), c.get("version"), tuple(env))
        if c.get("version") and key not in seen:
            seen.add(key)
            lines.append("  %s %s: %s" % (c.get("framework"), c.get("version"),
                                          ", ".join("%s=%s" % kv for kv in env)))
    for what, ok in sorted((rec.get("checks") or {}).items()):
        targets.append(("record " + what, verdict(ok)))
    for fw, o in sorted((rec.get("overhead") or {}).items()):
        lines.append("  %s clean step: %s ms plain, %s ms recorded (x%s)" % (
            fw, o.get("step_ms_plain"), o.get("step_ms_recorded"),
            "-" if o.get("ratio") is None else "%.2f" % o["ratio"]))
    for s in rec.get("skipped") or []:
        lines.append("  skipped: %s" % s)
tor = load(os.path.join(work, "torch.json"))
if tor is not None:
    lines.append("PyTorch's memory API under vram.torch.use(), snapshots, loops recorded")
    api = tor.get("api") or {}
    if api.get("steps"):
        s = api["steps"][-1]
        lines.append("  last step: max_memory_allocated %s, vram peak %s; memory_reserved %s, "
                     "vram reserved %s; first 1 MiB tensor reserved %s" % (
                         s.get("torch_peak"), s.get("vram_peak"), s.get("torch_reserved"),
                         s.get("vram_reserved"), api.get("first_tensor_reserved")))
    elif api.get("error"):
        lines.append("  api: %s" % api.get("error"))
    for r in tor.get("runs") or []:
        lines.append("  %-28s %s iterations (%s, P %s) for %s steps; leak %s at %s B; top: %s; held by %s" % (
            r.get("loop"), r.get("iterations"), r.get("iterations_from"), r.get("period_events"),
            r.get("steps"), r.get("leak"), r.get("rate"), (r.get("top_headline") or "-")[:80],
            (r.get("held_by") or "-")[:80]))
        if r.get("error"):
            lines.append("    %s" % str(r.get("error"))[-200:])
    snap = tor.get("snapshot") or {}
    if snap.get("cli_errors"):
        lines.append("  memory_viz errors: %s" % snap["cli_errors"])
    if tor.get("error"):
        lines.append("  %s" % tor["error"])
    for what, ok in sorted((tor.get("checks") or {}).items()):
        targets.append(("torch " + what, verdict(ok)))
    lines.append("")
tun = load(os.path.join(work, "tune.json"))
if tun is not None:
    lines.append("vram tune: real training until steady, the recommendation applied")
    for c in tun.get("cases") or []:
        trec = c.get("recommended") or {}
        sm = c.get("summary") or {}
        lines.append("  %-18s exit %s in %ss: %s, %s complete iterations, peak %s MiB, "
                     "%s, smallest cap %s MiB, cap %s MiB (%s)" % (
                         "%s %s" % (c.get("framework"), c.get("case")), c.get("rc"),
                         c.get("seconds"), sm.get("stopped"), sm.get("complete_iterations"),
                         (sm.get("peak_in_use_bytes") or 0) >> 20, trec.get("strategy"),
                         (trec.get("min_limit_bytes") or 0) >> 20,
                         (trec.get("cap_bytes") or 0) >> 20, trec.get("headroom")))
        for k in sorted(k for k in c if k.startswith("apply_")):
            lines.append("    %s: exit %s %s" % (k[6:], c[k].get("rc"),
                                                  (c[k].get("stderr") or "").strip()[-120:]))
        if c.get("json") is None:
            lines.append("    %s" % (c.get("stderr") or "").strip()[-200:])
    for what, ok in sorted((tun.get("checks") or {}).items()):
        targets.append(("tune " + what, verdict(ok)))
    lines.append("")
truth = []
try:
    with open(os.path.join(work, "quota_truth.jsonl")) as f:
        truth = [json.loads(l) for l in f if l.strip().startswith("{")]
except (OSError, ValueError):
    truth = []
truth_rows = [r for r in truth if r.get("case") and r.get("route")]
truth_skips = [r for r in truth if r.get("skipped") or r.get("error")]
if truth_rows or truth_skips:
    q = next((r.get("quota") for r in truth_rows if r.get("quota")), 1 << 30)
    lines.append("quota_truth: each way of getting memory against a %d MiB quota (NVML's "
                 "per-process figure, the context counted)" % (q >> 20))
    lines.append("  %-18s %-6s %10s %10s %12s %10s %-26s %s" % (
        "path", "route", "NVML peak", "smi peak", "at refusal", "quota", "refusal", "verdict"))
    mib = lambda v: "-" if v is None or v < 0 else "%d MiB" % (v >> 20)
    for r in truth_rows:
        v = verdict(r.get("pass"))
        targets.append(("quota_truth %s %s: NVML within the quota, OOM at it" % (
            r["case"], r["route"]), v))
        lines.append("  %-18s %-6s %10s %10s %12s %10s %-26s %s" % (
            r["case"], r["route"], mib(r.get("nvml_peak")),
            "-" if r.get("smi_peak_mib") is None else "%d MiB" % r["smi_peak_mib"],
            mib(r.get("nvml_at_refusal")), mib(r.get("quota")), r.get("refusal"), v))
        for x in (r.get("vram_lines") or [])[:1]:
            if not r.get("pass"):
                lines.append("      %s" % x[:200])
    for r in truth_skips:
        lines.append("  %s: %s" % (r.get("route"), r.get("skipped") or r.get("error")))
    lines.append("")
pol_path = os.path.join(work, "policy.json")
if os.path.exists(pol_path):
    try:
        pol = json.loads(open(pol_path).read().strip().splitlines()[-1])
    except Exception:
        pol = {"ok": None, "users": []}
    lines.append("Host policy, 4 GiB per user (two users at once, each framework):")
    for run in pol.get("runs", []):
        fw = run.get("framework")
        if run.get("skipped"):
            lines.append("  %s: skipped (%s)" % (fw, run["skipped"]))
            continue
        for u in run.get("users", []):
            lines.append("  %-5s %s: held %s MiB, nvidia-smi %s MiB, OOM: %s" % (
                fw, u.get("user"), u.get("tensors_mib"), u.get("nvidia_smi_mib"),
                (u.get("oom") or "")[:90]))
            lines.append("        host memory (vram stat): pinned %s MiB, resident %s MiB" % (
                u.get("pinned_mib"), u.get("rss_mib")))
            for x in (u.get("vram_lines") or [])[:1] + (u.get("stderr_tail") or []):
                lines.append("      %s" % x[:200])
            targets.append(("policy %s %s: nvidia-smi <= 4096 + 64 MiB" % (fw, u.get("user")),
                            verdict(u.get("within_quota"))))
            targets.append(("policy %s %s: OOM at the quota (>= 3 GiB held)" % (
                fw, u.get("user")), verdict(u.get("oom_at_quota"))))
            if u.get("pinned_shown") is not None:
                targets.append(("policy %s %s: vram stat shows its 64 MiB pinned" % (
                    fw, u.get("user")), verdict(u.get("pinned_shown"))))
    if not pol.get("runs"):
        targets.append(("policy: two users under a 4 GiB policy", verdict(None)))
    lines.append("")

corpus = jsonl("corpus/summary.jsonl")
if corpus:
    lines.append("corpus: real allocation traces (bench/gpu/record_corpus.py)")
    lines.append("  %-20s %-15s %-8s %8s %10s %7s  %s" % (
        "trace", "family", "status", "events", "peak MiB", "wall s", "note"))
    for c in corpus:
        lines.append("  %-20s %-15s %-8s %8s %10s %7s  %s" % (
            c.get("name"), c.get("family"), c.get("status"), c.get("events", "-"),
            "-" if not c.get("peak_live_bytes") else "%.1f" % (c["peak_live_bytes"] / MiB),
            c.get("wall_s", "-"), (c.get("reason") or c.get("error") or "")[:90]))
    got = [c for c in corpus if c.get("status") == "ok" and c.get("file")]
    fams = sorted({c.get("family") for c in got})
    lines.append("  %d traces from %d families: %s" % (len(got), len(fams), ", ".join(fams)))
    targets.append(("corpus: >= 20 traces from >= 8 families",
                    verdict(len(got) >= 20 and len(fams) >= 8)))
    lines.append("")

failed = [s["step"] for s in steps if s["status"] != "ok"]
n_pass = sum(1 for _, v in targets if v == "PASS")
lines.append("steps: %d ok, %d not ok%s" % (len(steps) - len(failed), len(failed),
             (" (" + ", ".join(failed) + ")") if failed else ""))
lines.append("targets: %d of %d PASS%s" % (n_pass, len(targets),
             "" if n_pass == len(targets) else
             " -- not PASS: " + "; ".join("%s %s" % (w, v) for w, v in targets if v != "PASS")))

table = "\n".join(lines) + "\n"
with open(os.path.join(out, "table.txt"), "w") as f:  # the table, for the report
    f.write(table)
results = {"gpu": gpu, "steps": steps, "replay_vram": replay, "replay_peers": peers,
           "replay_vram_warm": warm, "replay_peers_warm": warmpeers, "quota": quota,
           "python": pyres,
           "train": train, "train_summary": train_summary, "vmm_costs": vmm,
           "plugin_oom": poom, "streams": streams, "torchperf": tperf,
           "torchperf_cold": tp_cold, "torchperf_warm": tp_warm, "record": rec, "tune": tun,
           "corpus": corpus,
           "quota_truth": truth_rows,
           "targets": [{"target": w, "result": v} for w, v in targets]}
with open(os.path.join(out, "results.json"), "w") as f:  # every figure
    json.dump(results, f, indent=1)
    f.write("\n")
sys.stdout.write(table)
sys.exit(0 if not failed and n_pass == len(targets) else 1)
PY
rc=$?
cat "$OUT/table.txt" >>"$LOG" 2>/dev/null
exit $rc
