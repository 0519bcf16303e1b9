#!/usr/bin/env bash
# bench-launch: what installing Storm costs a plain job step launch, against
# stock Slurm in the same run.
#
#   sudo contrib/bench/bench-launch.sh [-n "8 64"] [-r REPS] [-k ROUNDS]
#
# For each node count N: a virtual cluster with stock Slurm's plugins
# (storm-vcluster up --stock: sched/backfill, select/cons_tres, switch/none,
# launch/slurm, no plugstack) and one with Storm's suite (sched/gang,
# select/gang, switch/rdma with its node agents, cli_filter/storm, spank/storm),
# brought up in turn ROUNDS times (default 2; this machine drifts), each
# running `srun -N N true` REPS times (default 5) after one launch that is
# not measured, each once the nodes are idle again (a job's nodes stay
# COMPLETING for a while after its tasks end). Every srun here gets a
# communication context from switch/rdma, which slurmstepd opens on the
# node agent before the task starts. Prints the median launch time of each
# and Storm / stock (1.00: Storm costs nothing; above: slower).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/contrib/bench/common.sh"
VC=$top/contrib/vcluster/storm-vcluster
NODES="8 64" REPS=5 ROUNDS=2
while getopts n:r:k: o; do
    case $o in
    n) NODES=$OPTARG ;;
    r) REPS=$OPTARG ;;
    k) ROUNDS=$OPTARG ;;
    *) echo "usage: $0 [-n NODES] [-r REPS] [-k ROUNDS]" >&2; exit 2 ;;
    esac
done
check_reps bench-launch "$REPS"
check_reps bench-launch "$ROUNDS"
for n in $NODES; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "bench-launch: -n takes node counts, not \"$n\"" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "bench-launch: must run as root" >&2; exit 2; }
work=/var/tmp/storm-bench-launch
trap '"$VC" down > /dev/null 2>&1' EXIT
rm -rf "$work" && mkdir -p "$work"

# all_idle N: waits (at most 60 s) until the cluster's N nodes are idle:
# a job's nodes stay COMPLETING for a while after its tasks end (here
# seconds at times, the same with either suite), and a launch started then
# would measure that wait, not the launch.
all_idle() {
    local _
    for _ in $(seq 300); do
        [ "$(sinfo -h -t idle -o %D 2> /dev/null)" = "$1" ] && [ -z "$(squeue -h 2> /dev/null)" ] && return
        sleep 0.2
    done
}
# launches N: REPS timed `srun -N N true`, seconds each, "failed" for one
# that did not exit 0 within 120 s
launches() {
    local n=$1 i t0
    timeout 120 srun -N "$n" true > /dev/null 2>&1 # not measured
    for ((i = 0; i < REPS; i++)); do
        all_idle "$n"
        t0=$(date +%s.%N)
        if timeout 120 srun -N "$n" true > "$work/srun.out" 2>&1; then
            awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }'
        else
            echo failed
            sed 's/^/  srun: /' "$work/srun.out" >&2
        fi
    done
}

echo "== a plain step launch, srun -N N true: stock Slurm's plugins against Storm's suite"
echo "   (medians of $ROUNDS rounds x $REPS launches, each round both clusters in turn)"
printf "  %6s %12s %12s %13s\n" "nodes" "stock(s)" "storm(s)" "storm/stock"
for n in $NODES; do
    declare -A t=([stock]="" [storm]="")
    for ((round = 1; round <= ROUNDS; round++)); do
        for mode in stock storm; do
            vc_up "$mode" "$n"
            got=$(launches "$n" | tr '\n' ' ')
            echo "  round $round, $n nodes, $mode: $got" >&2
            t[$mode]+=" $got"
        done
    done
    # shellcheck disable=SC2086 # one cluster's times, split
    s=$(median ${t[stock]}) x=$(median ${t[storm]})
    printf "  %6s %12s %12s %13s\n" "$n" "$s" "$x" \
        "$(awk -v s="$s" -v x="$x" 'BEGIN { if (s + 0 > 0 && x + 0 > 0) printf "%.2f", x / s; else printf "-" }')"
    unset t
done
