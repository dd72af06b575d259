#!/bin/sh
# SPDX-License-Identifier: MIT
# run_slurm_test.sh -- the SPANK plug-in (slurm/spank_vram.c) on a real,
# single-node Slurm cluster started here on loopback: munged (its own key
# and socket in a temporary directory), slurmctld and slurmd. Jobs run the
# preload tests' probe (tests/preload/probe.c), which allocates through the
# fake CUDA driver (tests/fakecuda, 1 GiB per device), under
# srun/sbatch --gpu-mem. It checks: the quota reaches every task (total and
# refusals), the tasks of one job share it, two jobs get separate quotas,
# the user's VRAM_LIMIT/VRAM_GROUP/LD_PRELOAD cannot raise or escape it,
# default= and shard= of plugstack.conf, malformed or excessive --gpu-mem
# refused by srun and sbatch before anything runs, sbatch (#SBATCH
# --gpu-mem, and srun inside the batch script), and the job's ledger
# removed from /dev/shm at its end. Every daemon it started is stopped by
# pid on exit. The last line is "N passed, M failed"; exit 1 if anything
# failed, 77 (skipped) without root, the Slurm/munge packages
# (scripts/install-deps.sh) or the plug-in (built only with slurm/spank.h).
# Usage: run_slurm_test.sh SPANK_VRAM.so LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR
set -u

if [ $# -ne 4 ]; then
    echo "usage: run_slurm_test.sh SPANK_VRAM.so LIBVRAM_PRELOAD.so PROBE_DIR FAKECUDA_DIR" >&2
    exit 2
fi
# Absolute paths: slurmstepd runs the tasks elsewhere.
PLUGIN=$(realpath "$1")
PRELOAD=$(realpath "$2")
BIN=$(realpath "$3")
FAKE=$(realpath "$4")
PROBE=$BIN/preload_probe

skip() { echo "slurm: skipped: $1"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (slurmd and munged)"
for p in munged slurmctld slurmd srun sbatch sinfo squeue scancel; do
    command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] ||
        skip "$p not found (scripts/install-deps.sh installs munge, slurmctld, slurmd, slurm-client)"
done
id munge >/dev/null 2>&1 || skip "no user munge (package munge)"
[ -f "$PLUGIN" ] || skip "$PLUGIN not built (needs slurm/spank.h from libslurm-dev)"
[ -f /etc/munge/munge.key ] || skip "no /etc/munge/munge.key"
PATH=$PATH:/usr/sbin

# lib.sh drops every variable that could change what the preload library
# or the fake does; the jobs inherit this environment (srun --export=ALL).
. "$(dirname "$0")/../cli/lib.sh"
test_begin slurm
chmod 0711 "$TMP"
PIDS=""
# Job ids of this run (below MaxJobId, 67043328): away from those of a real
# cluster on this machine,
# whose jobs' ledgers (/dev/shm/vram-<uid>/slurm-<jobid>) must not be hit.
FIRSTJOB=$((50000000 + ($$ % 10000) * 100))
NOBODY=$(id -u nobody 2>/dev/null || echo 65534)

# Stop every daemon this script started, by pid, newest first; then the
# files. Jobs still running are cancelled first so that no slurmstepd stays.
test_cleanup() {
    if [ -n "$PIDS" ]; then
        timeout 10 scancel --quiet -u root >/dev/null 2>&1
        timeout 10 scancel --quiet -u nobody >/dev/null 2>&1
        # munged itself, a child of runuser (which forwards the signal too).
        m=$(cat "$TMP/munge/munged.pid" 2>/dev/null)
        case $m in *[!0-9]* | "") ;; *) PIDS="$PIDS $m" ;; esac
        for p in $PIDS; do
            kill "$p" 2>/dev/null
        done
        for p in $PIDS; do
            i=0
            while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do
                sleep 0.1
                i=$((i + 1))
            done
            kill -9 "$p" 2>/dev/null
        done
    fi
    # Ledgers a failed check may have left (job ids of this run only).
    j=$FIRSTJOB
    while [ $j -lt $((FIRSTJOB + 100)) ]; do
        rm -f "/dev/shm/vram-0/slurm-$j" "/dev/shm/vram-$NOBODY/slurm-$j"
        j=$((j + 1))
    done
}

# A failure shows the job's output as well as its errors.
fail() {
    failed=$((failed + 1))
    echo "FAIL $1: $2"
    sed 's/^/     out: /' "$TMP/out" 2>/dev/null | head -n 12
    sed 's/^/     err: /' "$TMP/err" 2>/dev/null | head -n 8
}
# wait_for FILE TEXT SECONDS: until FILE holds TEXT.
wait_for() {
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt $(($3 * 10)) ] && return 1
        sleep 0.1
    done
}

# ---- the plug-in exports only what SPANK looks up ----
if command -v nm >/dev/null 2>&1; then
    extra=$(nm -D --defined-only "$PLUGIN" | awk '{print $3}' |
        grep -v -E '^(slurm_spank_[a-z_]+|plugin_name|plugin_type|plugin_version|spank_plugin_version)$')
    if [ -z "$extra" ]; then
        pass "spank_vram.so exports only slurm_spank_* and the SPANK_PLUGIN symbols"
    else
        : >"$TMP/out"; : >"$TMP/err"
        fail "spank_vram.so exports only slurm_spank_* and the SPANK_PLUGIN symbols" "$(echo "$extra" | tr "\n" " ")"
    fi
fi

# ---- the cluster: munged, slurmctld, slurmd on loopback ----
HOST=$(hostname -s)
PORT=$((20000 + $$ % 20000))
mkdir -p "$TMP/munge" "$TMP/state" "$TMP/spool" "$TMP/work"
chmod 0777 "$TMP/work"
cp /etc/munge/munge.key "$TMP/munge/munge.key"
chown -R munge:munge "$TMP/munge"
# Readable by all (the key is 0600), so that another user's srun reaches
# the socket (scenario 8).
chmod 0755 "$TMP/munge"
chmod 0600 "$TMP/munge/munge.key"
SOCK=$TMP/munge/munge.socket
runuser -u munge -- munged -F --force -S "$SOCK" --key-file="$TMP/munge/munge.key" \
    --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/munge/munged.log" \
    --seed-file="$TMP/munge/munged.seed" >"$TMP/munged.out" 2>&1 &
PIDS="$!"
if ! wait_for "$TMP/munge/munged.log" "Starting" 5 || ! [ -S "$SOCK" ]; then
    sleep 1
fi
if ! [ -S "$SOCK" ]; then
    # The system's munged, if one runs.
    if [ -S /run/munge/munge.socket.2 ] && munge -n -S /run/munge/munge.socket.2 >/dev/null 2>&1; then
        SOCK=/run/munge/munge.socket.2
    else
        cat "$TMP/munged.out" "$TMP/munge/munged.log" 2>/dev/null
        echo "FAIL munged did not start"
        echo "$passed passed, $((failed + 1)) failed"
        exit 1
    fi
fi

CONF=$TMP/slurm.conf
cat >"$CONF" <<EOF
ClusterName=vramtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
ReturnToService=2
FirstJobId=$FIRSTJOB
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=10
PlugStackConfig=$TMP/plugstack.conf
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 Gres=gpu:1,shard:8 State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$TMP/gres.conf" <<EOF
Name=gpu File=/dev/tty0
Name=shard Count=8
EOF
cat >"$TMP/plugstack.conf" <<EOF
required $PLUGIN default=128M max=1G shard=16M preload=$PRELOAD ledger=/dev/shm
EOF
export SLURM_CONF="$CONF"

slurmctld -D -i -f "$CONF" >"$TMP/slurmctld.out" 2>&1 &
PIDS="$! $PIDS"
slurmd -D -f "$CONF" >"$TMP/slurmd.out" 2>&1 &
SLURMD=$!
PIDS="$SLURMD $PIDS"

# Until the node is idle (120 s at most: a hang, not a slow machine).
i=0
state=""
while [ $i -lt 240 ]; do
    state=$(timeout 5 sinfo -h -N -o %T 2>/dev/null | head -n 1)
    [ "$state" = "idle" ] && break
    kill -0 "$SLURMD" 2>/dev/null || break
    sleep 0.5
    i=$((i + 1))
done
if [ "$state" != "idle" ]; then
    echo "FAIL the node is not idle after 120 s (state '$state')"
    tail -n 20 "$TMP/slurmctld.log" "$TMP/slurmd.log" "$TMP/slurmctld.out" "$TMP/slurmd.out" 2>/dev/null
    echo "$passed passed, $((failed + 1)) failed"
    exit 1
fi
echo "cluster up: node $HOST idle, slurmctld on 127.0.0.1:$PORT"

# ---- the jobs' payload ----
# task.sh MODE DIR: run by each task. Prints the quota settings the task
# got ("env ..." lines) and "MODE-ok" when its probes passed.
W=$TMP/work
cat >"$W/task.sh" <<'EOF'
#!/bin/sh
mode=$1
dir=$2
probe=$3
echo "env rank=${SLURM_PROCID:-?} job=$SLURM_JOB_ID VRAM_LIMIT=${VRAM_LIMIT-unset} VRAM_GROUP=${VRAM_GROUP-unset} LD_PRELOAD=${LD_PRELOAD-unset}"
case $mode in
info) # info MIB: the task sees a GPU of MIB MiB, and cannot pass it.
    "$probe" info 0 "$4" "$4" && "$probe" alloc $(($4 + 16)) 0 2 &&
        "$probe" alloc $(($4 - 16)) 0 0 && echo "info-ok" ;;
shared) # rank 0 holds 48 MiB; rank 1 is then refused 32 but granted 16.
    if [ "$SLURM_PROCID" = 0 ]; then
        "$probe" hold 48 0 "$dir/stop" >"$dir/hold" 2>&1 && echo "shared-ok"
    else
        i=0
        while ! grep -q held "$dir/hold" 2>/dev/null; do
            i=$((i + 1)); [ $i -gt 600 ] && break; sleep 0.1
        done
        "$probe" alloc 32 0 2 && "$probe" alloc 16 0 0 && echo "shared-ok"
        touch "$dir/stop"
    fi ;;
hold) # hold 48 MiB until DIR/stop exists.
    echo "$SLURM_JOB_ID" >"$dir/jobid"
    "$probe" hold 48 0 "$dir/stop" >"$dir/hold" 2>&1 && echo "hold-ok" ;;
killed) # a member killed by SIGKILL leaves the ledger behind (no atexit):
    # only the plug-in's exit hook can remove it.
    "$probe" hold 48 0 "$dir/never" >"$dir/killed.$SLURM_JOB_ID" 2>&1 &
    p=$!
    i=0
    while ! grep -q held "$dir/killed.$SLURM_JOB_ID" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 600 ] && break; sleep 0.1
    done
    kill -9 $p; wait $p
    [ -e "/dev/shm/vram-$(id -u)/$VRAM_GROUP" ] && echo "killed-ok" ;;
touch) touch "$dir/ran" ;;
esac
EOF
chmod 0755 "$W/task.sh"
TASK=$W/task.sh

export LD_LIBRARY_PATH="$FAKE:$BIN"
export FAKECUDA_SHARED="$W/fake-shared"

# job ARGS...: srun ARGS (120 s at most), stdout in $TMP/out, stderr in
# $TMP/err, status in $rc.
job() {
    timeout 120 srun --quiet "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
# The quota as the plug-in writes VRAM_LIMIT: exact, with its unit (a
# number without one is refused there).
MIB64=64M
jobid() { sed -n 's/^env rank=[0-9?]* job=\([0-9]*\) .*/\1/p' "$TMP/out" | head -n 1; }
# ledger_gone JOBID: the job's ledger leaves /dev/shm (60 s at most).
ledger_gone() {
    i=0
    while [ -e "/dev/shm/vram-0/slurm-$1" ]; do
        i=$((i + 1)); [ $i -gt 600 ] && return 1; sleep 0.1
    done
}

# ---- 1. the quota reaches the task ----
job -n1 --gpu-mem=64M "$TASK" info "$W" "$PROBE" 64
J=$(jobid)
if [ $rc -eq 0 ] && grep -q '^info-ok$' "$TMP/out" &&
    grep -q "VRAM_LIMIT=$MIB64 VRAM_GROUP=slurm-$J LD_PRELOAD=$PRELOAD\$" "$TMP/out"; then
    pass "srun --gpu-mem=64M: the task sees a 64 MiB GPU and cannot pass it"
else
    fail "srun --gpu-mem=64M: the task sees a 64 MiB GPU and cannot pass it" "exit $rc"
fi
# A bare number is MiB, as with Slurm's own --mem (never a byte count).
job -n1 --gpu-mem=64 "$TASK" info "$W" "$PROBE" 64
if [ $rc -eq 0 ] && grep -q '^info-ok$' "$TMP/out" && grep -q "VRAM_LIMIT=$MIB64 " "$TMP/out"; then
    pass "srun --gpu-mem=64 means 64 MiB, as --mem=64 does"
else
    fail "srun --gpu-mem=64 means 64 MiB" "exit $rc"
fi
job -n1 --gpu-mem=64Mi "$TASK" info "$W" "$PROBE" 64
if [ $rc -eq 0 ] && grep -q "VRAM_LIMIT=$MIB64 " "$TMP/out"; then
    pass "srun --gpu-mem=64Mi is 64 MiB"
else
    fail "srun --gpu-mem=64Mi" "exit $rc"
fi
if [ -n "$J" ] && ledger_gone "$J"; then
    pass "the job's ledger is removed from /dev/shm at its end"
else
    ls -l /dev/shm >"$TMP/out" 2>&1; : >"$TMP/err"
    fail "the job's ledger is removed from /dev/shm at its end" "/dev/shm/vram-0/slurm-$J"
fi

job -n1 --gpu-mem=64M "$TASK" killed "$W" "$PROBE"
J=$(jobid)
if [ $rc -eq 0 ] && grep -q '^killed-ok$' "$TMP/out" && [ -n "$J" ] && ledger_gone "$J"; then
    pass "a ledger left by a member killed with SIGKILL is removed at the job's end"
else
    fail "a ledger left by a member killed with SIGKILL is removed at the job's end" "exit $rc, job '$J'"
fi

# ---- 2. shared by the tasks of one job ----
mkdir -p "$W/s2"
job -n2 --gpu-mem=64M "$TASK" shared "$W/s2" "$PROBE"
J=$(jobid)
if [ $rc -eq 0 ] && [ "$(grep -c '^shared-ok$' "$TMP/out")" -eq 2 ] &&
    grep -q "out of GPU memory quota .* group slurm-$J uses 48.00 MiB" "$TMP/err"; then
    pass "two tasks of one job share its quota (48 + 32 MiB refused, 48 + 16 granted)"
else
    fail "two tasks of one job share its quota" "exit $rc"
fi

# ---- 3. two jobs, two quotas ----
mkdir -p "$W/s3"
timeout 120 srun --quiet -n1 --gpu-mem=64M "$TASK" hold "$W/s3" "$PROBE" \
    >"$TMP/outA" 2>"$TMP/errA" &
jobA=$!
if wait_for "$W/s3/hold" held 30; then
    JA=$(cat "$W/s3/jobid")
    job -n1 --gpu-mem=64M "$PROBE" alloc 48 0 0
    if [ -e "/dev/shm/vram-0/slurm-$JA" ]; then held_ledger=1; else held_ledger=0; fi
    touch "$W/s3/stop"
    wait $jobA
    rcA=$?
    if [ $held_ledger -eq 1 ] && ledger_gone "$JA"; then
        pass "a running job's ledger /dev/shm/vram-0/slurm-$JA exists, and goes at its end"
    else
        fail "a running job's ledger exists, and goes at its end" "present while held: $held_ledger"
    fi
    if [ $rc -eq 0 ] && [ $rcA -eq 0 ] && grep -q '^hold-ok$' "$TMP/outA"; then
        pass "two jobs have separate quotas (48 MiB each under 64 MiB, at once)"
    else
        fail "two jobs have separate quotas" "second job exit $rc, first $rcA"
    fi
else
    touch "$W/s3/stop"
    wait $jobA
    cp "$TMP/outA" "$TMP/out"; cp "$TMP/errA" "$TMP/err"
    fail "two jobs have separate quotas" "the first job did not start holding"
fi

# ---- 4. the user's environment cannot raise or escape the quota ----
# A user's own preload entry: any harmless library (zlib).
ZLIB=/nonexistent
for z in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 \
    /lib/aarch64-linux-gnu/libz.so.1 /lib64/libz.so.1 /usr/lib64/libz.so.1; do
    if [ -f "$z" ]; then ZLIB=$z; break; fi
done
VRAM_LIMIT=1G VRAM_GROUP=mine LD_PRELOAD="$ZLIB" job -n1 --gpu-mem=64M "$TASK" info "$W" "$PROBE" 64
J=$(jobid)
if [ $rc -eq 0 ] && grep -q '^info-ok$' "$TMP/out" &&
    grep -q "VRAM_LIMIT=$MIB64 VRAM_GROUP=slurm-$J LD_PRELOAD=$PRELOAD:$ZLIB\$" "$TMP/out"; then
    pass "VRAM_LIMIT=1G VRAM_GROUP=mine in the user's environment are overwritten; LD_PRELOAD kept after the library"
else
    fail "the user's environment cannot raise the quota" "exit $rc"
fi
VRAM_LIMIT=1G job -n1 "$TASK" info "$W" "$PROBE" 128
if [ $rc -eq 0 ] && grep -q '^info-ok$' "$TMP/out"; then
    pass "without --gpu-mem: default=128M of plugstack.conf, not the user's VRAM_LIMIT"
else
    fail "without --gpu-mem: default=128M" "exit $rc"
fi

# ---- 5. shard=16M: the cap follows the job's shards ----
job -n1 --gres=shard:2 "$TASK" info "$W" "$PROBE" 32
if [ $rc -eq 0 ] && grep -q '^info-ok$' "$TMP/out"; then
    pass "--gres=shard:2 with shard=16M: a 32 MiB quota"
else
    fail "--gres=shard:2 with shard=16M: a 32 MiB quota" "exit $rc"
fi

# ---- 6. a bad --gpu-mem is refused before the job starts ----
for bad in 6X 0 2G -1G ""; do
    rm -f "$W/ran"
    job -n1 --gpu-mem="$bad" "$TASK" touch "$W" "$PROBE"
    if [ $rc -ne 0 ] && [ ! -e "$W/ran" ] && grep -q "vram: --gpu-mem" "$TMP/err"; then
        pass "srun --gpu-mem='$bad' is refused with a message, nothing runs"
        grep -m 1 "vram:" "$TMP/err" | sed 's/^/     /'
    else
        fail "srun --gpu-mem='$bad' is refused" "exit $rc, ran: $([ -e "$W/ran" ] && echo yes || echo no)"
    fi
done
if grep -q "above this cluster's maximum of 1G per GPU" "$TMP/err" 2>/dev/null ||
    { job -n1 --gpu-mem=2G true; grep -q "above this cluster's maximum of 1G per GPU" "$TMP/err"; }; then
    pass "the message for --gpu-mem=2G names the maximum (max=1G)"
else
    fail "the message for --gpu-mem=2G names the maximum" "no such line"
fi

# ---- 7. sbatch ----
cat >"$W/batch.sh" <<EOF
#!/bin/sh
#SBATCH --gpu-mem=64M
#SBATCH -n 1
#SBATCH -o $W/batch.out
#SBATCH -e $W/batch.err
"$TASK" info "$W" "$PROBE" 64
srun --quiet "$TASK" info "$W" "$PROBE" 64
EOF
timeout 180 sbatch --quiet --wait "$W/batch.sh" >"$TMP/out" 2>"$TMP/err"
rc=$?
cat "$W/batch.out" >>"$TMP/out" 2>/dev/null
cat "$W/batch.err" >>"$TMP/err" 2>/dev/null
J=$(jobid)
if [ $rc -eq 0 ] && [ "$(grep -c '^info-ok$' "$TMP/out")" -eq 2 ] &&
    [ "$(grep -c "VRAM_LIMIT=$MIB64 VRAM_GROUP=slurm-$J LD_PRELOAD=$PRELOAD\$" "$TMP/out")" -eq 2 ]; then
    pass "#SBATCH --gpu-mem=64M: the batch script and an srun step in it, library listed once"
else
    fail "#SBATCH --gpu-mem=64M" "exit $rc"
fi
rm -f "$W/ran"
printf '#!/bin/sh\ntouch %s/ran\n' "$W" >"$W/batch2.sh"
timeout 120 sbatch --quiet --gpu-mem=6X "$W/batch2.sh" >"$TMP/out" 2>"$TMP/err"
rc=$?
sleep 1
if [ $rc -ne 0 ] && grep -q "vram: --gpu-mem" "$TMP/err" && [ ! -e "$W/ran" ] &&
    [ -z "$(squeue -h -o %i 2>/dev/null)" ]; then
    pass "sbatch --gpu-mem=6X is refused, no job submitted"
else
    fail "sbatch --gpu-mem=6X is refused" "exit $rc"
fi

# ---- 8. plugstack.conf arguments that are refused ----
# srun reads plugstack.conf itself: a second slurm.conf names a bad one.
for arg in ledger=/var/tmp default=6X max=1G\ default=2G preload=relative.so bogus=1; do
    sed "s|^PlugStackConfig=.*|PlugStackConfig=$TMP/plugstack-bad.conf|" "$CONF" >"$TMP/slurm-bad.conf"
    echo "required $PLUGIN $arg" >"$TMP/plugstack-bad.conf"
    rm -f "$W/ran"
    SLURM_CONF=$TMP/slurm-bad.conf job -n1 --gpu-mem=64M "$TASK" touch "$W" "$PROBE"
    if [ $rc -ne 0 ] && [ ! -e "$W/ran" ] && grep -q "vram: plugstack.conf: spank_vram.so" "$TMP/err"; then
        pass "plugstack.conf '$arg' is refused with a message, nothing runs"
        grep -m 1 "vram:" "$TMP/err" | sed 's/^/     /'
    else
        fail "plugstack.conf '$arg' is refused" "exit $rc"
    fi
done

# ---- 9. a job of another user: its ledger, a file of that user, goes too ----
# (a member killed with SIGKILL, so that only the plug-in removes it;
# slurmstepd removes it as root by taking on the user's effective ids).
if command -v runuser >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
    (cd "$W" && timeout 120 runuser -u nobody -- env SLURM_CONF="$CONF" \
        LD_LIBRARY_PATH="$LD_LIBRARY_PATH" FAKECUDA_SHARED="$W/fake-shared-nobody" \
        srun --quiet -n1 --gpu-mem=64M "$TASK" killed "$W" "$PROBE") >"$TMP/out" 2>"$TMP/err"
    rc=$?
    J=$(jobid)
    U=$(id -u nobody)
    if [ $rc -eq 0 ] && grep -q '^killed-ok$' "$TMP/out" && [ -n "$J" ] &&
        { i=0; while [ -e "/dev/shm/vram-$U/slurm-$J" ] && [ $i -lt 600 ]; do
            sleep 0.1; i=$((i + 1)); done; [ ! -e "/dev/shm/vram-$U/slurm-$J" ]; }; then
        pass "a job of user nobody killed with SIGKILL: its ledger vram-$U-slurm-$J removed at the end"
    else
        fail "a job of user nobody killed with SIGKILL: its ledger removed" "exit $rc, job '$J'"
    fi
fi

test_end
