#!/usr/bin/env bash
# t0012: select/gang packs the jobs of a gang partition into the gang
# matrix's slots inside the real slurmctld (STORM's buddy allocation,
# sched_gang/packing.hpp), where plain cons_tres takes the lowest-numbered
# free nodes.  On 8 nodes in a partition with OverSubscribe=FORCE:2, one
# job at a time, each started before the next is submitted:
#   A, 1 node:  vn1 (either way)
#   B, 2 nodes: vn[3-4], the aligned pair whose parent block is the
#               busiest (cons_tres: vn[2-3], which splits two pairs)
#   C, 1 node:  vn2, the hole beside A (cons_tres: vn4)
#   D, 4 nodes: vn[5-8], the free aligned half
# so slot 0 is full with four jobs and no idle cell; then
#   E, 4 nodes: no room in slot 0: a second slot, on an aligned half
# (while two slots run, a job's end time moves on by the time it spends
# stopped, so its time limit counts the time it ran: A's, not D's, which
# also runs in slot 1 on the half E leaves free)
# and once C ended,
#   F, 1 node:  vn2 again, slot 0's only hole.
# sched/gang's matrix (storm-gang) agrees, and slurmctld logs each
# decision ("select/gang: JobId=N: packed on ...").
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
GANG=$STORM_BUILDDIR/tools/storm-gang
vc_up 8 --conf "PartitionName=gang Nodes=vn[1-8] OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP" \
    --conf "SchedulerParameters=storm_gang_quantum=100ms" --conf "SlurmctldDebug=debug"

# start N: submits an N-node job to the gang partition and waits until it
# runs; prints its id (empty if it did not start within 30 s).
start() {
    local id
    id=$(sbatch --parsable -p gang -N "$1" -t 10 -o /dev/null --wrap "sleep 600") || return 1
    for _ in $(seq 150); do
        [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] && { echo "$id"; return 0; }
        sleep 0.2
    done
    squeue -j "$id" -o '%i %T %r %N' | t_diag >&2
    echo "$id"
}
nodes_of() { squeue -h -j "$1" -o %N; }
# placed TAG ID EXPECTED...: one check that job ID runs on one of EXPECTED
placed() {
    local tag=$1 id=$2 got
    shift 2
    got=$(nodes_of "$id")
    local want ok=1 alts
    for want in "$@"; do [ "$got" = "$want" ] && ok=0; done
    alts=$(printf '%s or ' "$@")
    t_check "$tag runs on ${alts% or } (on ${got:-nothing})" [ "$ok" = 0 ]
}
logged() { # ID NODES: slurmctld logged select/gang's packing decision
    grep -q "select/gang: JobId=$1: packed on $2 " "$STATE/log/slurmctld.log"
}

A=$(start 1)
placed "A (1 node)" "$A" vn1
B=$(start 2)
placed "B (2 nodes): the aligned pair beside A's, not cons_tres's lowest free nodes" "$B" 'vn[3-4]'
t_check "  and slurmctld logged select/gang's decision for B" logged "$B" 'vn\[3-4\]'
C=$(start 1)
placed "C (1 node): the hole beside A" "$C" vn2
D=$(start 4)
placed "D (4 nodes): the free aligned half" "$D" 'vn[5-8]'

# sched/gang's matrix: one slot, full (the status is rewritten every second)
status_has() { for _ in $(seq 20); do "$GANG" > "$T_WORK/status" 2>&1 && grep -Eq "$1" "$T_WORK/status" && return 0; sleep 0.5; done; return 1; }
t_check "storm-gang: one slot holding A, B, C and D, with no idle cell" \
    status_has "^slot 0: jobs ($A|$B|$C|$D) ($A|$B|$C|$D) ($A|$B|$C|$D) ($A|$B|$C|$D);.* idle_cells 0 of 8"
t_check "  and only that one" grep -q '^slots: 1$' "$T_WORK/status"
t_diag < "$T_WORK/status"

E=$(start 4)
placed "E (4 nodes): a second slot, on an aligned half" "$E" 'vn[1-4]' 'vn[5-8]'
t_check "storm-gang: two slots" status_has '^slots: 2'
grep -E '^slot [0-9]+:' "$T_WORK/status" | t_diag

# Time limits count the time a job ran, as for a job Slurm suspends: A
# (slot 0 only) is stopped while slot 1 runs, so its end time moves on by
# about half the time that passes; D runs in slot 1 too (vn[5-8] are free
# there: alternative scheduling), so its end time stays.
# (E on vn[5-8] instead would swap the two roles.)
S=$A R=$D
[ "$(nodes_of "$E")" = 'vn[5-8]' ] && S=$D R=$A
end_of() { date -d "$(scontrol -o show job "$1" | sed -n 's/.* EndTime=\([^ ]*\).*/\1/p')" +%s; }
s0=$(end_of "$S"); r0=$(end_of "$R")
sleep 10
ds=$(( $(end_of "$S") - s0 )); dr=$(( $(end_of "$R") - r0 ))
t_check "in 10 s at two slots, job $S's end time moved on by the time it was stopped (${ds} s, about 5)" \
    [ "$ds" -ge 3 -a "$ds" -le 8 ]
t_check "  and job $R's, which ran in both slots, did not (${dr} s)" [ "$dr" -le 1 ]

scancel "$C"
wait_job "$C" 30
F=$(start 1)
placed "F (1 node), once C ended: slot 0's hole, where C was" "$F" vn2
t_check "  and slurmctld logged it as packed into slot 0" \
    grep -q "select/gang: JobId=$F: packed on vn2 (existing slot 0)" "$STATE/log/slurmctld.log"

grep 'select/gang: JobId=' "$STATE/log/slurmctld.log" | sed 's/^\[[^]]*\] //' | t_diag
scancel "$A" "$B" "$D" "$E" "$F"
for j in "$A" "$B" "$D" "$E" "$F"; do wait_job "$j" 30; done
t_check "all jobs ended (squeue answered, with no job of the partition)" \
    bash -c 'out=$(squeue -h -p gang) && [ -z "$out" ]'
t_done
