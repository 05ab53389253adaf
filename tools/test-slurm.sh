#!/usr/bin/env bash
# A one-node SLURM of the project's own for tests/slurm (munged, slurmctld, slurmd from `make deps`),
# with everything in one folder: config, a private munge key and socket, state, spool, logs and the
# daemons' pids. The system's /etc/slurm and /etc/munge are not touched.
#
#   tools/test-slurm.sh start   start the daemons (needs root), wait until the node is idle and the
#                               scheduler has run once, print "export SLURM_CONF=..." to eval
#   tools/test-slurm.sh stop    cancel its jobs, stop the daemons it recorded (by pid), remove the folder
#   tools/test-slurm.sh env     print the export line of a running cluster (exit 3 when none)
#
# FEDHET_TEST_SLURM_DIR: the folder (absolute; default /tmp/fedhet-test-slurm). Ports are the first free
# ones from 6817 up, so it can run beside another cluster. Slurm 22.05's slurmd needs /sys and a cgroup
# filesystem at /sys/fs/cgroup even with proctrack/linuxproc and task/none (no cgroup plugin is used).
set -euo pipefail

PATH=$PATH:/usr/sbin:/sbin
BASE=${FEDHET_TEST_SLURM_DIR:-/tmp/fedhet-test-slurm}
CONF=$BASE/etc/slurm.conf
SOCK=$BASE/run/munge.sock
PIDS=$BASE/run/pids
LOGD=$BASE/log
WAIT_S=60

say() { printf 'test-slurm: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# "pid starttime" of a live, non-zombie process (fields 22 and 3 of /proc/PID/stat)
start_time() {
    local stat rest
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    # shellcheck disable=SC2086
    set -- $rest
    [ "$1" != Z ] || return 1
    printf '%s\n' "${20}"
}

# the recorded pid of daemon $1 when that very process (same start time) still runs
alive() {
    local pid st
    read -r pid st 2>/dev/null <"$PIDS/$1" || return 1
    [ "$(start_time "$pid" 2>/dev/null)" = "$st" ] && printf '%s\n' "$pid"
}

port_free() {
    local hex
    hex=$(printf '%04X' "$1")
    ! awk -v h="$hex" 'FNR > 1 { n = split($2, a, ":"); if (a[n] == h && $4 == "0A") f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

free_port() {
    local p
    for p in $(seq "$1" $(($1 + 200))); do
        [ "$p" != "${2:-}" ] && port_free "$p" && { echo "$p"; return; }
    done
    die "no free TCP port in $1..$(($1 + 200))"
}

# launch NAME CMD...: a daemon in the foreground mode of its own session, output to its log; pid recorded
launch() {
    local name=$1 pid st=""
    shift
    setsid "$@" </dev/null >>"$LOGD/$name.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 50); do st=$(start_time "$pid" 2>/dev/null) && break; sleep 0.05; done
    [ -n "$st" ] || { tail -5 "$LOGD/$name.out" >&2; return 1; }
    echo "$pid $st" >"$PIDS/$name"
}

# until CMD succeeds (every 0.1 s), while daemon $1 lives, at most WAIT_S seconds
wait_until() {
    local daemon=$1 what=$2 until=$(($(date +%s) + WAIT_S))
    shift 2
    until "$@" >/dev/null 2>&1; do
        alive "$daemon" >/dev/null || { say "$daemon exited while waiting for $what"; return 1; }
        [ "$(date +%s)" -lt "$until" ] || { say "no $what after $WAIT_S s"; return 1; }
        sleep 0.1
    done
}

munge_ok() { munge -n -S "$SOCK" | unmunge -S "$SOCK"; }
ctld_up() { SLURM_CONF=$CONF scontrol ping | grep -q 'is UP'; }
node_idle() { [ "$(SLURM_CONF=$CONF sinfo -h -n "$1" -o %T | head -1)" = idle ]; }
# batch jobs wait for slurmctld's first scheduling cycle (about 3 s after it starts)
scheduled_once() {
    SLURM_CONF=$CONF sdiag | awk '/^Main schedule statistics/ { f = 1 } f && /Total cycles:/ { exit !($3 >= 1) }'
}

write_conf() {
    local node=$1 hw
    hw=$(slurmd -C | head -1)
    [ -n "$hw" ] || die "'slurmd -C' printed nothing"
    mkdir -p "$BASE/etc"
    cat >"$CONF" <<EOF
# one-node test cluster of tools/test-slurm.sh
ClusterName=fedhettest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$2
SlurmdPort=$3
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$LOGD/slurmctld.log
SlurmdLogFile=$LOGD/slurmd.log
TmpFS=$BASE/tmp
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
EnforcePartLimits=ALL
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=5
KillWait=2
Waittime=0
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 $(sed -e 's/^NodeName=[^ ]* //' <<<"$hw") State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

do_start() {
    [ "$(id -u)" = 0 ] || die "starting the test cluster needs root (slurmd runs jobs as their user)"
    local c missing=""
    for c in munged munge unmunge slurmctld slurmd scontrol sinfo squeue scancel sdiag sbatch setsid; do
        command -v "$c" >/dev/null 2>&1 || missing="$missing $c"
    done
    [ -z "$missing" ] || die "missing:$missing (make deps installs slurm-wlm and munge)"
    if alive munged >/dev/null && alive slurmctld >/dev/null && alive slurmd >/dev/null && ctld_up 2>/dev/null; then
        printf 'export SLURM_CONF=%q\n' "$CONF"
        return
    fi
    do_stop 2>/dev/null || true
    local node ctld slurmd_port
    node=$(uname -n)
    node=${node%%.*}
    ctld=$(free_port 6817)
    slurmd_port=$(free_port 6818 "$ctld")
    mkdir -p "$BASE/run" "$PIDS" "$LOGD" "$BASE/munge" "$BASE/state" "$BASE/spool" "$BASE/tmp"
    chmod 755 "$BASE" "$BASE/run" # munged: its socket's folder must be searchable by all
    chmod 700 "$BASE/munge"
    chmod 1777 "$BASE/tmp"
    dd if=/dev/urandom of="$BASE/munge/munge.key" bs=128 count=1 status=none
    chmod 400 "$BASE/munge/munge.key"
    write_conf "$node" "$ctld" "$slurmd_port"
    local fail=""
    launch munged munged -F --socket="$SOCK" --key-file="$BASE/munge/munge.key" --pid-file="$BASE/run/munged.pid" \
        --seed-file="$BASE/munge/seed" --log-file="$LOGD/munged.log" &&
        wait_until munged "munge answering" munge_ok || fail="munged"
    [ -n "$fail" ] || { launch slurmctld slurmctld -D -f "$CONF" && wait_until slurmctld "slurmctld answering" ctld_up; } ||
        fail="slurmctld"
    [ -n "$fail" ] || { launch slurmd slurmd -D -f "$CONF" -N "$node" && wait_until slurmd "node $node idle" node_idle "$node"; } ||
        fail="slurmd (it needs /sys and a cgroup filesystem at /sys/fs/cgroup)"
    [ -n "$fail" ] || wait_until slurmctld "first scheduling cycle" scheduled_once || fail="slurmctld's scheduler"
    if [ -n "$fail" ]; then
        for c in "$LOGD"/*; do [ -s "$c" ] && { say "--- $c"; tail -5 "$c" >&2; }; done
        do_stop 2>/dev/null || true
        die "$fail did not come up"
    fi
    say "up: node $node, slurmctld port $ctld, folder $BASE"
    printf 'export SLURM_CONF=%q\n' "$CONF"
}

do_stop() {
    [ -d "$BASE" ] || return 0
    local ids d pid p
    if alive slurmctld >/dev/null && alive munged >/dev/null; then
        ids=$(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null | tr '\n' ' ')
        if [ -n "${ids// /}" ]; then
            # shellcheck disable=SC2086
            SLURM_CONF=$CONF scancel $ids 2>/dev/null || true
            for _ in $(seq 1 100); do [ -z "$(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
        fi
    fi
    for d in slurmd slurmctld munged; do
        pid=$(alive "$d") || continue
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do alive "$d" >/dev/null || break; sleep 0.1; done
        alive "$d" >/dev/null && kill -KILL "$pid" 2>/dev/null
    done
    # job processes of this cluster left behind: their environment has its SLURM_CONF and a job id
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = $$ ] && continue
        grep -Fqsxz "SLURM_CONF=$CONF" "/proc/$p/environ" 2>/dev/null &&
            grep -qsz '^SLURM_JOB_ID=' "/proc/$p/environ" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$BASE"
}

case "$BASE" in /*) ;; *) die "FEDHET_TEST_SLURM_DIR must be an absolute path (got '$BASE')" ;; esac
case "${1:-}" in
    start) do_start ;;
    stop) do_stop ;;
    env) if alive slurmctld >/dev/null; then printf 'export SLURM_CONF=%q\n' "$CONF"; else exit 3; fi ;;
    *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
