#!/usr/bin/env bash
# t0013: the Slurm line this tree was built for (configure --with-slurm, or
# the system's) runs Storm: on a virtual cluster of that line's stock
# daemons, every plugin of the suite is loaded where it should be and names
# that Slurm, and an ordinary user's srun --bcast goes through Storm and
# runs the exact copy on every node.  storm-test --quick runs this on each
# line CI proves without the whole suite.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
N=4
want=$STORM_SLURM_VERSION
[ -n "$want" ] || t_bail "STORM_SLURM_VERSION is not set (run through make check)"
vc_up "$N"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
LOG=$STATE/log
nodes=$(seq -f 'vn%g' 1 "$N")

t_check "the cluster runs Slurm $want (slurmd -V)" bash -c "slurmd -V | grep -qw '$want'"
t_check "sinfo -V answers $want" bash -c "sinfo -V | grep -qw '$want'"

# --- slurmctld: the scheduler, selector and switch plugins, on this line --------
ctl=$LOG/slurmctld.log
for p in sched/gang select/gang switch/rdma; do
    t_check "slurmctld: $p loaded (Slurm $want)" grep -Eq "$p: Storm [0-9.]+ loaded.*\(Slurm $want\)" "$ctl"
done
t_check "slurmctld logged no fatal error" bash -c "! grep -q 'fatal' '$ctl'"

# --- every slurmd: the node agent, the SPANK plugin ------------------------------
agents=0 spank=0
for n in $nodes; do
    grep -q "switch/rdma: node agent started" "$LOG/slurmd-$n.log" && agents=$((agents + 1))
    grep -q "spank/storm: Storm [0-9.]* loaded in slurmd" "$LOG/slurmd-$n.log" && spank=$((spank + 1))
done
t_check "node agent started in all $N slurmd ($agents)" [ "$agents" = "$N" ]
t_check "spank/storm loaded in all $N slurmd ($spank)" [ "$spank" = "$N" ]

# --- an ordinary user's srun --bcast, through Storm ------------------------------
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 755 "$T_WORK"
printf '#!/bin/sh\necho "ok $(hostname) $(md5sum < "$0" | cut -c1-32)"\n' > "$T_WORK/prog"
head -c 3000000 /dev/urandom | base64 | sed 's/^/# /' >> "$T_WORK/prog"
chmod 755 "$T_WORK/prog"
sum=$(md5sum < "$T_WORK/prog" | cut -c1-32)
as_user srun -N "$N" -v --bcast=/tmp/t0013-prog "$T_WORK/prog" > "$T_WORK/srun.out" 2>&1
rc=$?
t_check "srun --bcast as nobody: exit 0 (rc $rc)" [ "$rc" = 0 ]
t_check "  every node ran the exact copy" \
    bash -c "[ \$(grep -c '^ok vn[0-9]* $sum\$' '$T_WORK/srun.out') = $N ] && [ \$(grep '^ok vn' '$T_WORK/srun.out' | sort -u | wc -l) = $N ]"
t_check "  sent through Storm, not srun's own broadcast" grep -q "prog -> /tmp/t0013-prog on $N nodes through Storm" "$T_WORK/srun.out"
owned=0
for n in $nodes; do
    [ "$("$VC" exec "$n" stat -c %U /tmp/t0013-prog 2> /dev/null)" = nobody ] && owned=$((owned + 1))
done
t_check "  the copies belong to the user on all $N nodes ($owned)" [ "$owned" = "$N" ]
[ $T_FAIL = 0 ] || t_diag < "$T_WORK/srun.out"
t_done
