#!/usr/bin/env bash
# bench-packing: select/gang's packing against plain select/cons_tres's
# placement on the same job stream, inside the real slurmctld, with
# sched/gang in both runs (its matrix, read with storm-gang, is what is
# measured).  One run per selector on a fresh virtual cluster of the same
# size.
#
#   sudo contrib/bench/bench-packing.sh [-n NODES] [-m MPL] [-j JOBS] [-r RUNNING] [-s SEED]
#
# The stream (drawn from SEED, the same for both selectors): JOBS jobs of 1
# to NODES/2 nodes arrive one at a time in a partition of all nodes with
# OverSubscribe=FORCE:MPL; each is submitted once the previous one runs.
# While RUNNING jobs run, one of them (drawn from SEED, by arrival order)
# ends before the next arrives.  After each arrival the matrix's slots and
# idle cells (cells of a slot where no job of that slot runs) are read.
# Prints, per selector, the mean slots and idle cells over the arrivals,
# and the jobs that could not start within MPL slots (they are cancelled;
# both runs then stop being comparable, and it says so).
# Defaults: 16 nodes, MPL 4, 60 jobs, 6 running, seed 1.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
VC=$top/contrib/vcluster/storm-vcluster
GANG=$BUILD/tools/storm-gang
NODES=16 MPL=4 JOBS=60 RUNNING=6 SEED=1
while getopts n:m:j:r:s: o; do
    case $o in
    n) NODES=$OPTARG ;;
    m) MPL=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    r) RUNNING=$OPTARG ;;
    s) SEED=$OPTARG ;;
    *) echo "usage: $0 [-n NODES] [-m MPL] [-j JOBS] [-r RUNNING] [-s SEED]" >&2; exit 2 ;;
    esac
done
for v in "$NODES" "$MPL" "$JOBS" "$RUNNING" "$SEED"; do check_reps bench-packing "$v"; done
[ "$NODES" -ge 2 ] && [ "$MPL" -ge 2 ] || { echo "bench-packing: needs -n >= 2 and -m >= 2" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-packing: must run as root" >&2; exit 2; }
[ -x "$GANG" ] || { echo "bench-packing: $GANG not built (run contrib/storm-setup)" >&2; exit 2; }
work=/var/tmp/storm-bench-packing
rm -rf "$work" && mkdir -p "$work"
trap '"$VC" down > /dev/null 2>&1' EXIT

# The stream: line k holds job k's node count and a draw in [0, 1) that
# picks which running job ends before job k arrives (if RUNNING run).
awk -v seed="$SEED" -v n="$JOBS" -v max=$((NODES / 2)) \
    'BEGIN { srand(seed); for (k = 0; k < n; k++) printf "%d %.6f\n", 1 + int(rand() * max), rand() }' > "$work/stream"

# running_now ID: whether job ID runs, within 10 s
runs() {
    local _
    for _ in $(seq 50); do [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = RUNNING ] && return 0; sleep 0.2; done
    return 1
}
# fresh_status ID: storm-gang's status once it shows job ID (it is rewritten every second)
fresh_status() {
    local _
    for _ in $(seq 30); do
        "$GANG" > "$work/status" 2>/dev/null && grep -q "^job $1: " "$work/status" && return 0
        sleep 0.2
    done
    return 1
}
gone() { local _; for _ in $(seq 50); do squeue -h -j "$1" 2>/dev/null | grep -q . || return 0; sleep 0.2; done; }

# run SELECTOR: the stream under SELECTOR; prints "mean_slots mean_idle refused arrivals"
run() {
    local sel=$1 k=0 size draw id pick slots idle refused=0 n=0 sum_slots=0 sum_idle=0
    local -a running=()
    # SelectType given twice: slurm.conf's later value wins ("specified more than once, latest value used")
    vc_up storm "$NODES" "PartitionName=gang Nodes=ALL OverSubscribe=FORCE:$MPL MaxTime=INFINITE State=UP" \
        "SchedulerParameters=storm_gang_quantum=1s" "SelectType=$sel"
    while read -r size draw; do
        if [ "${#running[@]}" -ge "$RUNNING" ]; then
            pick=$(awk -v d="$draw" -v c="${#running[@]}" 'BEGIN { print int(d * c) }')
            scancel "${running[$pick]}"
            gone "${running[$pick]}"
            running=("${running[@]:0:$pick}" "${running[@]:$((pick + 1))}")
        fi
        id=$(sbatch --parsable -p gang -N "$size" -o /dev/null --wrap "sleep 3600") || { echo "bench-packing: sbatch failed" >&2; return 1; }
        if ! runs "$id"; then
            refused=$((refused + 1))
            scancel "$id"
            gone "$id"
            continue
        fi
        running+=("$id")
        fresh_status "$id" || { echo "bench-packing: storm-gang never showed job $id" >&2; return 1; }
        slots=$(sed -n 's/^slots: //p' "$work/status")
        idle=$(awk '/^slot [0-9]+: / { sub(/.*idle_cells /, ""); s += $1 } END { print s + 0 }' "$work/status")
        echo "  $sel: job $k ($size nodes) as $id: $slots slots, $idle idle cells" >&2
        sum_slots=$((sum_slots + slots)); sum_idle=$((sum_idle + idle)); n=$((n + 1)); k=$((k + 1))
    done < "$work/stream"
    scancel -p gang 2>/dev/null
    "$VC" down > /dev/null 2>&1
    awk -v s="$sum_slots" -v i="$sum_idle" -v n="$n" -v r="$refused" 'BEGIN { printf "%.3f %.2f %d %d\n", s / n, i / n, r, n }'
}

read -r g_slots g_idle g_ref g_n < <(run select/gang) || exit 1
read -r c_slots c_idle c_ref c_n < <(run select/cons_tres) || exit 1
echo
echo "Packing on the real slurmctld: $NODES nodes, MPL $MPL, $JOBS jobs of 1-$((NODES / 2)) nodes, $RUNNING running, seed $SEED"
printf '%-18s %11s %17s %15s\n' selector "mean slots" "mean idle cells" "did not start"
printf '%-18s %11s %17s %15s\n' select/gang "$g_slots" "$g_idle" "$g_ref of $((g_n + g_ref))"
printf '%-18s %11s %17s %15s\n' select/cons_tres "$c_slots" "$c_idle" "$c_ref of $((c_n + c_ref))"
awk -v g="$g_idle" -v c="$c_idle" 'BEGIN { if (c > 0) printf "idle cells: select/gang leaves %.1f%% fewer than cons_tres\n", 100 * (c - g) / c }'
[ "$g_ref" = 0 ] && [ "$c_ref" = 0 ] || echo "(jobs that did not start make the two streams differ from there on)"
