#!/usr/bin/env bash
# t0009: implicit coscheduling inside the real slurmd.
# - the node agents start the local scheduler for partition "work" and say
#   so in their logs;
# - two communication-bound MPI jobs of nobody, launched with
#   --storm-cosched (the PMPI library preloaded by spank/storm), share the
#   cores of vn[1-2]: each node has one cpu cgroup per job under
#   storm-cosched-vnN, exactly one of them holds the big cpu.shares at a
#   time, both jobs are scheduled at some point, and both finish;
# - the tasks' arrivals reach the local schedulers, vn1 and vn2 hold the
#   same job most of the time (instants aligned on the wall clock), and
#   each job got at least a quarter of each node's CPU;
# - a job of partition "debug" with --storm-cosched is refused with the
#   reason on its stderr: slurmctld did not mark its steps coscheduled, so
#   slurmstepd gives its tasks STORM_COSCHED_REFUSED instead of the socket
#   and they never ask the node agent; it still runs;
# - a job cancelled while registered leaves no cgroup; at the end no job_*
#   group is left on any node;
# - with libstormmsg (the sender's status on every message): a node running
#   another job switches to an all-to-all job on the arrival of its
#   messages, before its next tick, and every message arrives.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
command -v mpicc > /dev/null || t_skip "needs Open MPI's mpicc"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
PKGLIBDIR=$(t_make_var pkglibdir)
[ -r "$PKGLIBDIR/libstorm_cosched_pmpi.so" ] ||
    t_bail "$PKGLIBDIR/libstorm_cosched_pmpi.so is not installed: run 'make install'"
# The host's cpu hierarchy: the one the agents use or mount in their nodes.
CPU=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") {
    if ($(i + 1) == "cgroup" && $4 == "/" && $(i + 3) ~ /(^|,)cpu(,|$)/) { print $5; exit }
    break } }' /proc/self/mountinfo)
[ -n "$CPU" ] || t_skip "no cgroup v1 cpu hierarchy on the host"
vc_up 3 --conf "PartitionName=work Nodes=vn[1-2] OverSubscribe=YES:2 MaxTime=INFINITE State=UP" \
    --conf "SwitchParameters=storm_cosched_partitions=work,storm_cosched_slice=2s,storm_cosched_gmet=500ms"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
mpicc -O2 -o "$T_WORK/pingpong" "$STORM_SRCDIR/tests/integration/mpi_pingpong.c" || t_bail "mpicc pingpong"

t_check "every node agent runs the local scheduler for partition work" \
    bash -c "for n in 1 2 3; do grep -q 'cosched: local scheduler for partitions work' '$STATE/log/slurmd-vn'\$n'.log' || exit 1; done"

job() { # PARTITION SECONDS [OPTIONS...]: a 2-node MPI job of nobody
    local p=$1 s=$2; shift 2
    as_user sbatch --parsable -p "$p" --oversubscribe -N2 -n2 -D "$T_WORK" -o "$T_WORK/%j.out" -e "$T_WORK/%j.err" "$@" \
        --wrap "srun --mpi=pmix ./pingpong $s"
}
A=$(job work 20 --storm-cosched); B=$(job work 20 --storm-cosched)
for _ in $(seq 100); do
    [ -d "$CPU/storm-cosched-vn1/job_$A" ] && [ -d "$CPU/storm-cosched-vn1/job_$B" ] &&
        [ -d "$CPU/storm-cosched-vn2/job_$A" ] && [ -d "$CPU/storm-cosched-vn2/job_$B" ] && break
    sleep 0.2
done
t_check "both jobs registered on both nodes (a cpu cgroup per job and node)" \
    [ -d "$CPU/storm-cosched-vn1/job_$A" -a -d "$CPU/storm-cosched-vn2/job_$B" ]
# 10 s of samples, every 0.2 s by the clock: which job holds the node (big
# cpu.shares) on each node.  The four files are read one after the other,
# so a sample can straddle a switch (one group's shares written, the
# other's not yet): a sample that does not show one job per node is taken
# again 50 ms later, and only the second reading counts.  Nothing is forked
# while a sample is read (bash's reads and t_nap): where forks are slow, a
# loop of cat and sleep outlasted the 20 s jobs, and read their groups
# after they had gone.
shares_sample() { # into SAMPLE
    local n j v
    SAMPLE=""
    for n in 1 2; do for j in "$A" "$B"; do
        read -r v 2> /dev/null < "$CPU/storm-cosched-vn$n/job_$j/cpu.shares" || v=0
        SAMPLE+="$v "
    done; done
}
# A sample's fields: vn1's A and B, vn2's A and B.  One job holds each node:
ONE_PER_NODE='($1 > 1024) + ($2 > 1024) == 1 && ($3 > 1024) + ($4 > 1024) == 1'
one_per_node() { awk "{ exit !($ONE_PER_NODE) }" <<< "$1"; }
: > "$T_WORK/shares"
end=$((${EPOCHREALTIME/./} + 10000000))
while ((${EPOCHREALTIME/./} < end)); do
    shares_sample
    if ! one_per_node "$SAMPLE"; then
        echo "$SAMPLE (straddled a switch? read again)" | t_diag
        t_nap 0.05
        shares_sample
    fi
    echo "$SAMPLE" >> "$T_WORK/shares"
    t_nap 0.2
done
t_diag < "$T_WORK/shares"
samples=$(wc -l < "$T_WORK/shares")
t_check "one job at a time holds each node (in all but at most 2 of $samples samples, at least 20)" \
    [ "$(awk "!($ONE_PER_NODE)" "$T_WORK/shares" | wc -l)" -le 2 -a "$samples" -ge 20 ]
t_check "both jobs were scheduled" \
    [ "$(awk '$1 > 1024' "$T_WORK/shares" | wc -l)" -gt 0 -a "$(awk '$2 > 1024' "$T_WORK/shares" | wc -l)" -gt 0 ]
# The local schedulers' statistics (storm-cosched.stats, rewritten every
# second): switches made by message arrivals, and each job's CPU time.
for n in 1 2; do
    cp "$STATE/nodes/vn$n/spool/storm-cosched.stats" "$T_WORK/stats.vn$n" 2> /dev/null || : > "$T_WORK/stats.vn$n"
    t_diag < "$T_WORK/stats.vn$n"
done
t_check "the tasks' arrivals reached the local schedulers (PMPI requests)" \
    [ "$(cat "$T_WORK/stats.vn1" "$T_WORK/stats.vn2" |
        awk '$1 == "request_switches" || $1 == "tick_held" || $1 == "early" { s += $2 } END { print s + 0 }')" -gt 0 ]
t_check "vn1 and vn2 hold the same job (aligned instants) in at least 80% of the samples" \
    [ "$(awk '{ n++ } (($1 > 1024) == ($3 > 1024)) && (($2 > 1024) == ($4 > 1024)) { same++ }
        END { print (n && same * 100 >= n * 80) ? "yes" : "no" }' "$T_WORK/shares")" = yes ]
t_check "no job starves: each got at least a quarter of each node's CPU time" \
    [ "$(awk -v a="$A" -v b="$B" '$1 == "job" { c[FILENAME, $2] = $6 }
        END { bad = 0; for (f = 1; f < ARGC; f++) { x = c[ARGV[f], a]; y = c[ARGV[f], b];
              if (x + y == 0 || x < (x + y) / 4 || y < (x + y) / 4) bad++ } print bad }' \
        "$T_WORK/stats.vn1" "$T_WORK/stats.vn2")" -eq 0 ]
wait_job "$A" 120; wait_job "$B" 120
t_check "both jobs finished (exit 0)" \
    bash -c "grep -q '^rounds [1-9]' '$T_WORK/$A.out' && grep -q '^rounds [1-9]' '$T_WORK/$B.out'"

D=$(job debug 3 --storm-cosched)
wait_job "$D" 60
t_check "a job outside the coscheduled partitions is refused, with the reason" \
    grep -q "refused coscheduling.*partition \"debug\" is not coscheduled" "$T_WORK/$D.err"
t_check "  without asking the node agent" \
    bash -c "! grep -q 'cannot register for job $D' '$STATE/log/slurmd-vn1.log'"
t_check "  and still runs" grep -q '^rounds [1-9]' "$T_WORK/$D.out"

C=$(job work 60 --storm-cosched)
for _ in $(seq 100); do [ -d "$CPU/storm-cosched-vn1/job_$C" ] && break; sleep 0.2; done
# The group must exist first: "no cgroup left" below means nothing otherwise.
t_check "a coscheduled job's tasks registered (job_$C's cgroup made on vn1)" test -n "$C" -a -d "$CPU/storm-cosched-vn1/job_$C"
scancel "$C"; wait_job "$C" 60
for _ in $(seq 50); do [ -d "$CPU/storm-cosched-vn1/job_$C" ] || break; sleep 0.2; done
if [ -d "$CPU/storm-cosched-vn1/job_$C" ]; then # what holds it
    for p in $(cat "$CPU/storm-cosched-vn1/job_$C/cgroup.procs"); do
        echo "in job_$C: $p $(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null)"
    done | t_diag
    grep -h 'cosched' "$STATE/log/slurmd-vn1.log" | tail -5 | t_diag
fi
t_check "a cancelled job's tasks are unregistered (no cgroup left)" [ ! -d "$CPU/storm-cosched-vn1/job_$C" ]
t_check "no job_* group is left on any node" \
    bash -c "! ls -d '$CPU'/storm-cosched-vn*/job_* 2> /dev/null | grep -q ."

# libstormmsg carries the sender's status on every message.  A job H of two
# tasks on vn2 alone holds vn2; then an all-to-all job M on vn1 and vn2
# starts.  vn1 schedules M at once (nothing else is there); on vn2, M's
# task gets messages from a scheduled sender and asks: vn2 switches to M on
# that arrival, long before its next tick (slice 60 s).
vc_up 3 --conf "PartitionName=work Nodes=vn[1-2] OverSubscribe=YES:4 MaxTime=INFINITE State=UP" \
    --conf "SwitchParameters=storm_cosched_partitions=work,storm_cosched_slice=60s,storm_cosched_gmet=200ms"
LIBDIR=$(t_make_var libdir)
A2A=$T_WORK/msg_alltoall
t_check "the all-to-all test builds against the installed library" \
    cc -O2 -o "$A2A" "$STORM_SRCDIR/tests/integration/msg_alltoall.c" -I"$STORM_SRCDIR" -L"$LIBDIR" -lstormmsg \
    -Wl,-rpath,"$LIBDIR"
sched_of() { awk '$1 == "scheduled" { print $2 }' "$STATE/nodes/$1/spool/storm-cosched.stats" 2> /dev/null; }
stat_of() { awk -v k="$2" '$1 == k { print $2 }' "$STATE/nodes/$1/spool/storm-cosched.stats" 2> /dev/null; }
H=$(as_user sbatch --parsable -p work --oversubscribe -N1 -n2 -O -w vn2 -D "$T_WORK" -o "$T_WORK/%j.out" \
    --wrap "srun -O $A2A 100000000 1000")
for _ in $(seq 150); do [ "$(sched_of vn2)" = "$H" ] && break; sleep 0.2; done
t_check "a libstormmsg job registers by itself and holds vn2" [ "$(sched_of vn2)" = "$H" ]
M=$(as_user sbatch --parsable -p work --oversubscribe -N2 -n2 -w 'vn[1-2]' -D "$T_WORK" -o "$T_WORK/%j.out" \
    -e "$T_WORK/%j.err" --wrap "srun $A2A 20000 1000")
wait_job "$M" 120
sleep 1.5 # the statistics are rewritten every second
t_diag < "$STATE/nodes/vn2/spool/storm-cosched.stats"
t_check "vn2 switched to the all-to-all job on message arrival (then back to H when it ended)" \
    [ "$(stat_of vn2 request_switches)" -ge 1 -a "$(sched_of vn2)" = "$H" ]
t_check "  every message arrived once and in order" [ "$(grep -c 'ok:' "$T_WORK/$M.out")" = 2 ]
scancel "$H"; wait_job "$H" 60; sleep 1
t_check "no job_* group is left" bash -c "! ls -d '$CPU'/storm-cosched-vn*/job_* 2> /dev/null | grep -q ."
t_done
