#!/usr/bin/env bash
# t0015: dead and hung nodes found by Storm in seconds and handled through
# Slurm (issue 39), on 4 virtual nodes of real slurmctld and slurmd with
# storm_fault_timeout=3s (sched/gang beats every node agent):
#  (a) vn2's slurmd killed (SIGKILL): vn2 is drained and down with Storm's
#      reason within the timeout and a margin, and the --requeue batch job
#      that ran on it is requeued (Restarts=1);
#  (b) vn3's slurmd frozen (SIGSTOP): drained and down within the timeout,
#      its --no-requeue job failed (NODE_FAIL); after SIGCONT and scontrol
#      update state=resume vn3 is back in service, runs a job, and is not
#      drained again over the next 4 timeouts;
#  (c) no other node is ever reported or taken out of service (slurmctld's
#      log names vn2 and vn3 once each, vn1 and vn4 never leave service).
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
TIMEOUT=3
MARGIN=2
vc_up 4 --conf "SchedulerParameters=storm_fault_timeout=${TIMEOUT}s"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
CTLD_LOG=$STATE/log/slurmctld.log
slurmd_pid() { cat "$STATE/run/slurmd-$1.pid"; }
node_state() { sinfo -h -N -n "$1" -o %T 2> /dev/null | head -n 1; }
node_reason() { sinfo -h -N -n "$1" -o %E 2> /dev/null | head -n 1; }
job_field() { scontrol show job "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
out_of_service() { case "$(node_state "$1")" in *down* | *drain*) return 0 ;; esac; return 1; }
# wait_out NODE: seconds until NODE is out of service (at most 20), on stdout.
wait_out() {
    local t0 t1
    t0=$(date +%s.%N)
    for _ in $(seq 200); do
        out_of_service "$1" && break
        sleep 0.1
    done
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'
}
in_service() { ! out_of_service "$1"; }
running() { [ "$(job_field "$1" JobState)" = RUNNING ]; }
wait_running() { for _ in $(seq 150); do running "$1" && return 0; sleep 0.2; done; return 1; }

# the line comes from the fault thread's first poll, which may follow the
# cluster's start by a moment: it has 10 s to appear
started="fault detection: a node whose agent answers no heartbeat for ${TIMEOUT}s"
for _ in $(seq 50); do grep -q "$started" "$CTLD_LOG" && break; sleep 0.2; done
t_check "slurmctld runs Storm's fault detection at ${TIMEOUT}s" grep -q "$started" "$CTLD_LOG"
for n in vn1 vn2 vn3 vn4; do out_of_service $n && echo "$n out of service at the start" | t_diag; done
t_check "every node in service at the start" \
    bash -c "! sinfo -h -N -o '%N %T' | grep -Eq 'down|drain'"
# vn1 and vn4 sampled every half second until the end.
(while :; do sinfo -h -N -n vn1,vn4 -o '%N %T' 2>&1 | tr '\n' ' '; echo; sleep 0.5; done) > "$T_WORK/others" &
SAMPLER=$!
trap 'rc=$?; kill "$SAMPLER" 2> /dev/null; (exit $rc); t_cleanup' EXIT
# Some seconds of beats with every node alive: nothing reported.
sleep $((TIMEOUT * 2))
t_check "no node reported while all are alive" bash -c "! grep -q 'storm: no heartbeat' '$CTLD_LOG'"

# --- (a) a killed slurmd -----------------------------------------------------
R=$(sbatch --parsable --requeue -N1 -w vn2 -o /dev/null --wrap "sleep 600")
F=$(sbatch --parsable --no-requeue -N1 -w vn3 -o /dev/null --wrap "sleep 600")
wait_running "$R"
wait_running "$F"
t_check "a --requeue job runs on vn2 ($R) and a --no-requeue job on vn3 ($F)" \
    bash -c "[ \"\$(squeue -h -j $R -o %T)\" = RUNNING ] && [ \"\$(squeue -h -j $F -o %T)\" = RUNNING ]"
kill -KILL "$(slurmd_pid vn2)"
took=$(wait_out vn2)
echo "vn2 killed: out of service after $took s: $(node_state vn2), reason '$(node_reason vn2)'" | t_diag
t_check "vn2's killed slurmd: vn2 out of service after $took s (at most $TIMEOUT + $MARGIN s)" \
    awk -v t="$took" -v m=$((TIMEOUT + MARGIN)) 'BEGIN { exit !(t <= m && t >= 1) }'
t_check "  down or drained ($(node_state vn2))" out_of_service vn2
t_check "  with Storm's reason naming the missed heartbeats ($(node_reason vn2))" \
    bash -c "sinfo -h -N -n vn2 -o %E | grep -Eqx 'storm: no heartbeat for [0-9.]+ s'"
for _ in $(seq 50); do [ "$(job_field "$R" Restarts)" = 1 ] && break; sleep 0.2; done
echo "job $R: $(job_field "$R" JobState), Restarts=$(job_field "$R" Restarts), reason $(job_field "$R" Reason)" | t_diag
t_check "  its --requeue job was requeued by Slurm (Restarts=$(job_field "$R" Restarts), $(job_field "$R" JobState))" \
    bash -c "[ \"\$(scontrol show job $R | grep -o 'Restarts=[0-9]*')\" = Restarts=1 ] &&
             scontrol show job $R | grep -Eq 'JobState=(PENDING|REQUEUED|CONFIGURING|RUNNING)'"
scancel "$R"

# --- (b) a frozen slurmd -----------------------------------------------------
pid3=$(slurmd_pid vn3)
kill -STOP "$pid3"
took=$(wait_out vn3)
echo "vn3 stopped: out of service after $took s: $(node_state vn3), reason '$(node_reason vn3)'" | t_diag
t_check "vn3's frozen slurmd (SIGSTOP): vn3 out of service after $took s (at most $TIMEOUT + $MARGIN s)" \
    awk -v t="$took" -v m=$((TIMEOUT + MARGIN)) 'BEGIN { exit !(t <= m && t >= 1) }'
t_check "  with Storm's reason ($(node_reason vn3))" \
    bash -c "sinfo -h -N -n vn3 -o %E | grep -Eqx 'storm: no heartbeat for [0-9.]+ s'"
for _ in $(seq 50); do [ "$(job_field "$F" JobState)" = NODE_FAIL ] && break; sleep 0.2; done
t_check "  its --no-requeue job failed as Slurm fails it ($(job_field "$F" JobState))" \
    [ "$(job_field "$F" JobState)" = NODE_FAIL ]
kill -CONT "$pid3"
sleep 1
t_check "vn3 stays out of service once it answers again, until an administrator resumes it ($(node_state vn3))" \
    out_of_service vn3
scontrol update nodename=vn3 state=resume
for _ in $(seq 100); do out_of_service vn3 || break; sleep 0.2; done
t_check "after scontrol update state=resume vn3 is back in service ($(node_state vn3))" in_service vn3
# Responding again (no '*' after the state) before a job is sent there.
for _ in $(seq 100); do case "$(node_state vn3)" in *'*'*) sleep 0.2 ;; *) break ;; esac; done
timeout 60 srun -N1 -w vn3 hostname > "$T_WORK/srun.out" 2>&1
t_diag < "$T_WORK/srun.out"
t_check "  and runs a job ($(tail -n 1 "$T_WORK/srun.out" | head -c 80))" [ "$(tail -n 1 "$T_WORK/srun.out")" = vn3 ]
again=0
for _ in $(seq $((TIMEOUT * 4 * 2))); do
    out_of_service vn3 && again=1
    sleep 0.5
done
t_check "  and is not taken out of service again over $((TIMEOUT * 4)) s" [ "$again" = 0 ]
t_check "  nor reported again (one line for vn3 in slurmctld's log)" \
    [ "$(grep -c 'fault: node vn3: storm: no heartbeat' "$CTLD_LOG")" = 1 ]

# --- (c) nobody else ----------------------------------------------------------
grep 'fault: node' "$CTLD_LOG" | t_diag
t_check "slurmctld reported vn2 and vn3 alone, once each" \
    [ "$(grep -o 'fault: node vn[0-9]*' "$CTLD_LOG" | sort | tr '\n' ' ')" = "fault: node vn2 fault: node vn3 " ]
kill "$SAMPLER"
wait "$SAMPLER" 2> /dev/null
samples=$(grep -c 'vn1 .*vn4 ' "$T_WORK/others")
t_check "vn1 and vn4 in service in all $samples samples of sinfo (every 0.5 s)" \
    bash -c "[ $samples -ge 20 ] && ! grep -Eqv '^vn1 (idle|allocated|mixed|completing)[^ ]* vn4 (idle|allocated|mixed|completing)[^ ]* \$' '$T_WORK/others'"
grep -Ev '^vn1 (idle|allocated|mixed|completing)[^ ]* vn4 (idle|allocated|mixed|completing)[^ ]* $' "$T_WORK/others" | head -n 5 | t_diag
t_done
