#!/usr/bin/env bash
# t0001: on a virtual cluster of stock Slurm daemons, every plugin of the
# suite is loaded by the daemons that should load it, and sbatch, srun and
# an Open MPI program under srun --mpi=pmix run across the nodes.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
N=4
vc_up "$N" --conf "SchedulerParameters=bf_interval=1"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
LOG=$STATE/log
# slurmd loads every select plugin before it daemonizes, on the terminal.
t_check "starting the daemons printed nothing of Storm's on the terminal" \
    bash -c "! grep 'Storm [0-9]' '$T_WORK/vcluster-up.out'"
nodes=$(seq -f 'vn%g' 1 "$N")

# --- configuration as slurmctld sees it ------------------------------------
scontrol show config > "$T_WORK/config" 2>&1
for kv in "SchedulerType *= sched/gang" "SelectType *= select/gang" "SwitchType *= switch/rdma" \
          "CliFilterPlugins *= cli_filter/storm"; do
    t_check "scontrol show config: $kv" grep -Eq "^$kv\$" "$T_WORK/config"
done

# --- slurmctld loaded sched/gang (wrapping backfill), select/gang, switch/rdma
ctl=$LOG/slurmctld.log
t_check "slurmctld: sched/gang loaded, wrapping backfill" grep -q "sched/gang: Storm [0-9.]* loaded (Slurm $STORM_SLURM_VERSION); wrapping sched/backfill" "$ctl"
t_check "slurmctld: select/gang loaded, delegating to cons_tres" grep -q "select/gang: Storm [0-9.]* loaded (Slurm $STORM_SLURM_VERSION); delegating to select/cons_tres" "$ctl"
t_check "slurmctld: switch/rdma loaded" grep -q "switch/rdma: Storm [0-9.]* loaded in slurmctld" "$ctl"

# --- every slurmd: node agent started, SPANK loaded --------------------------
agents=0 spank=0
for n in $nodes; do
    grep -q "switch/rdma: Storm [0-9.]* loaded in slurmd" "$LOG/slurmd-$n.log" &&
        grep -q "switch/rdma: node agent started (port 6830, fanout 8" "$LOG/slurmd-$n.log" && agents=$((agents + 1))
    grep -q "spank/storm: Storm [0-9.]* loaded in slurmd" "$LOG/slurmd-$n.log" && spank=$((spank + 1))
done
t_check "node agent started in all $N slurmd ($agents)" [ "$agents" = "$N" ]
t_check "spank/storm loaded in all $N slurmd ($spank)" [ "$spank" = "$N" ]
# the agent thread really exists inside each slurmd
threads_ok=0
for n in $nodes; do
    pid=$(cat "$STATE/run/slurmd-$n.pid" 2>/dev/null) || continue
    [ "$(ls "/proc/$pid/task" 2>/dev/null | wc -l)" -ge 2 ] && threads_ok=$((threads_ok + 1))
done
t_check "every slurmd runs more than one thread ($threads_ok/$N)" [ "$threads_ok" = "$N" ]

# --- srun: cli_filter/storm in srun, switch/rdma + SPANK in slurmstepd -------
srun -v -N "$N" -n "$N" hostname > "$T_WORK/srun.out" 2> "$T_WORK/srun.err"
t_check "srun -N$N hostname ran on every node" [ "$(sort -u "$T_WORK/srun.out" | tr '\n' ' ')" = "$(echo $nodes | tr ' ' '\n' | sort | tr '\n' ' ')" ]
t_check "srun: cli_filter/storm saw the step (srun -v)" grep -q "cli_filter/storm: Storm [0-9.]* (Slurm $STORM_SLURM_VERSION): step [0-9]*\.[0-9]* created\$" "$T_WORK/srun.err"
t_check "srun: spank/storm loaded in local context (srun -v)" grep -q "spank/storm: Storm [0-9.]* loaded in local (srun)" "$T_WORK/srun.err"
# Clients load every select and switch plugin: Storm's must stay quiet there.
for cmd in "srun -N1 true" "sinfo" "squeue" "sbatch --wrap true -o /dev/null"; do
    t_check "$cmd: nothing of Storm's on the terminal without -v" \
        bash -c "$cmd 2>&1 | { ! grep -qi storm; }"
done
stepd=0 remote=0
for n in $nodes; do
    grep -q "switch/rdma: Storm [0-9.]* loaded in slurmstepd" "$LOG/slurmd-$n.log" && stepd=$((stepd + 1))
    grep -q "spank/storm: Storm [0-9.]* loaded in remote (slurmstepd)" "$LOG/slurmd-$n.log" && remote=$((remote + 1))
done
t_check "switch/rdma loaded in slurmstepd on all $N nodes ($stepd)" [ "$stepd" = "$N" ]
t_check "spank/storm loaded in slurmstepd on all $N nodes ($remote)" [ "$remote" = "$N" ]

# --- sbatch with steps across nodes -------------------------------------------
cat > "$T_WORK/job.sh" <<'JOB'
#!/bin/bash
echo "batch host $(hostname)"
srun -N2 -n2 hostname | sort
JOB
jid=$(sbatch --parsable -N2 -o "$T_WORK/job.out" -D "$T_WORK" "$T_WORK/job.sh" 2> "$T_WORK/sbatch.err")
t_check "sbatch accepted ($jid)" [ -n "$jid" ]
t_check "batch job finished" wait_job "$jid" 60
t_check "batch job ran two steps on two nodes" \
    bash -c "grep -q '^batch host vn' '$T_WORK/job.out' && [ \$(grep -c '^vn' '$T_WORK/job.out') = 2 ] && [ \$(grep '^vn' '$T_WORK/job.out' | sort -u | wc -l) = 2 ]"
state=$(sacct -n -X -j "$jid" -o State 2>/dev/null | tr -d ' ')
[ -n "$state" ] || state=$(scontrol show job "$jid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z]*\).*/\1/p')
t_check "batch job completed (state ${state:-unknown})" [ "$state" = COMPLETED ]

# --- backfill still works under sched/gang ------------------------------------
# A holds 3 of the 4 nodes; B (first in line) needs all 4 and must wait for
# A; C needs one node for less time than A has left.  Slurm's main scheduler
# does not start C past the blocked B: only backfill does.
a=$(sbatch --parsable -N3 -t 5 -o /dev/null --wrap "sleep 60")
sleep 1
b=$(sbatch --parsable -N4 -t 5 -o /dev/null --wrap "true")
c=$(sbatch --parsable -N1 -t 1 -o /dev/null --wrap "sleep 1")
t_check "sbatch accepted the three backfill jobs ($a, $b, $c)" test -n "$a" -a -n "$b" -a -n "$c"
# -t all: a small job that already ended still shows (COMPLETED); a job
# squeue cannot show at all is not taken for started.
started=no st=
if [ -n "$c" ]; then
    for _ in $(seq 1 100); do
        st=$(squeue -h -t all -j "$c" -o %T 2>/dev/null)
        case "$st" in RUNNING|COMPLETING|COMPLETED) started=yes; break ;; esac
        sleep 0.2
    done
fi
bst=$(squeue -h -j "$b" -o %T 2>/dev/null)
t_check "backfill started the small job past the blocked one (C ${st:-unknown}, B ${bst:-unknown})" [ "$started" = yes ]
t_check "the wide job is still pending behind the running one" [ "$bst" = PENDING ]
scancel "$a" "$b" "$c" 2>/dev/null
for j in "$a" "$b" "$c"; do wait_job "$j" 30 || true; done

# --- Open MPI under srun --mpi=pmix across nodes -----------------------------
if mpicc -O2 -o "$T_WORK/mpi_ring" "$STORM_SRCDIR/tests/integration/mpi_ring.c" 2> "$T_WORK/mpicc.err"; then
    echo "# mpicc built the ring program" # set-up: its failure below is a check
    timeout 120 srun --mpi=pmix -N "$N" -n "$N" "$T_WORK/mpi_ring" > "$T_WORK/mpi.out" 2> "$T_WORK/mpi.err"
    rc=$?
    t_check "srun --mpi=pmix ring exited 0 (rc $rc)" [ "$rc" = 0 ]
    t_check "MPI ring token came back intact" grep -q "^ring ok: token" "$T_WORK/mpi.out"
    t_check "MPI ranks ran on $N distinct nodes" [ "$(grep '^rank' "$T_WORK/mpi.out" | awk '{print $NF}' | sort -u | wc -l)" = "$N" ]
    [ "$rc" = 0 ] || t_diag < "$T_WORK/mpi.err"
else
    t_diag < "$T_WORK/mpicc.err"
    t_fail "mpicc built the ring program"
fi

# --- fini: the node agents stop cleanly when slurmd stops ---------------------
# Each slurmd alone gets SIGTERM (its steps and tasks are not signalled at
# once, as 'down' does), and up to 10 s to shut down.
for n in $nodes; do kill -TERM "$(cat "$STATE/run/slurmd-$n.pid")" 2> /dev/null; done
for _ in $(seq 100); do
    left=0
    for n in $nodes; do kill -0 "$(cat "$STATE/run/slurmd-$n.pid" 2> /dev/null)" 2> /dev/null && left=$((left + 1)); done
    [ "$left" = 0 ] && break
    sleep 0.1
done
"$VC" down > "$T_WORK/down.out" 2>&1
T_CLUSTER=no
stopped=0
for n in $nodes; do
    grep -q "switch/rdma: node agent stopped" "$LOG/slurmd-$n.log" && stopped=$((stopped + 1))
done
t_check "node agent stopped cleanly in all $N slurmd at shutdown ($stopped)" [ "$stopped" = "$N" ]
t_done
