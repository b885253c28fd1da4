#!/bin/bash
# A one-node SLURM cluster on localhost for tests (root, Debian's slurm-wlm + munge), everything under DIR.
#   tests/support/slurm/localcluster.sh start DIR    # writes DIR/slurm.conf, starts munged, slurmctld, slurmd
#   tests/support/slurm/localcluster.sh stop DIR     # stops them by their PID files
# Use it with SLURM_CONF=DIR/slurm.conf. Known to work as root: munged as the munge user, SlurmUser=root,
# proctrack/linuxproc, task/none, no cgroup.conf.
set -euo pipefail
cmd=$1
dir=$(realpath -m "$2")
host=$(hostname -s)

stop() {
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        if [[ -f $pidfile ]]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
    done
    sleep 0.5
}

if [[ $cmd == stop ]]; then stop; exit 0; fi

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chown munge:munge "$dir/munge"
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=dali-stream-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CryptoType=crypto/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed"
/usr/sbin/slurmctld -f "$dir/slurm.conf"
/usr/sbin/slurmd -f "$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf
for _ in $(seq 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)'; then echo "slurm up: $(sinfo -h)"; exit 0; fi
    sleep 0.5
done
echo "slurm did not come up; logs in $dir" >&2
tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
stop
exit 1
