#!/usr/bin/env bash
# bench-switch: communication contexts and NIC-buffer swapping (seed 002's
# figures 5-7) on the virtual cluster, with stock Slurm side by side in the
# same run.  Virtual nodes have one CPU each and share this machine's two
# cores; "the NIC" is the node agent's pool of storm_pool_size bytes
# (default 1 MiB, 4 KiB packets) and the tasks' progress threads.
#
#   sudo contrib/bench/bench-switch.sh [-p "divided swapped quanta stages"]
#                                      [-n "2 8 64"] [-c COUNT] [-q "1 2 5 20 50"]
#
# COUNT (default 2000) messages per size in "divided"; ten times as many
# 65536-byte messages per job in "swapped".
#
#  divided  point-to-point bandwidth (libstormmsg's msg_bw: rank 0 on vn1
#           sends COUNT messages of each size to rank 1 on vn2) with the
#           pool divided among n = 1, 2, 4, 8 contexts (FM's division:
#           credits B_r / (n^2 p)), one job alone; beside Open MPI's
#           bandwidth (TCP) under stock Slurm.
#  swapped  total bandwidth of k = 1, 2, 4, 8 msg_bw jobs on the same two
#           nodes, gang-scheduled by Storm at 50 ms, with swapped pools
#           (each running job owns the whole pool: credits B_r / p) against
#           the same jobs with divided pools (n = 8), and k Open MPI
#           bandwidth jobs under stock Slurm's uncoordinated time sharing.
#           Total = the sum of the jobs' bandwidths, each over its own
#           elapsed time (seed 002 section 4.1).
#  quanta   total bandwidth of 2 such jobs with swapped pools at each
#           gang quantum (-q, ms), beside 2 Open MPI bandwidth jobs under
#           stock Slurm's uncoordinated time sharing.
#  stages   for each node count (-n): two all-to-all jobs gang-scheduled at
#           50 ms on every node; the time of each switch stage (halt:
#           strobe to every local task halted; swap: copying out and in;
#           release: release to every task ready) as the node agents
#           record them, median node's p50 and worst node's p99, copying
#           the valid packets only against whole windows
#           (storm_pool_swap=full), and the packets saved per swap.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
VC=$top/contrib/vcluster/storm-vcluster
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
PARTS="divided swapped quanta stages" NODES="2 8 64" COUNT=2000 QUANTA="1 2 5 20 50"
SIZES="64 256 1024 4096 16384 65536 262144"
while getopts p:n:c:q: o; do
    case $o in
    p) PARTS=$OPTARG ;;
    n) NODES=$OPTARG ;;
    c) COUNT=$OPTARG ;;
    q) QUANTA=$OPTARG ;;
    *) echo "usage: $0 [-p PARTS] [-n NODES] [-c COUNT] [-q QUANTA_MS]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-switch: must run as root" >&2; exit 2; }
make_var() { # a variable of the build's Makefile, fully expanded
    printf 'storm-print-var:\n\t@echo $(%s)\n' "$1" |
        make -s --no-print-directory -C "$BUILD" -f Makefile -f - storm-print-var
}
libdir=$(make_var libdir); incdir=$(make_var includedir)
[ -f "$incdir/storm/storm_msg.h" ] || { echo "bench-switch: libstormmsg not installed (run contrib/storm-setup)" >&2; exit 2; }
work=/var/tmp/storm-bench-switch
trap '"$VC" down > /dev/null 2>&1' EXIT
rm -rf "$work" && mkdir -p "$work" && chmod 755 "$work"
msgcc() { gcc -O2 -o "$work/$1" "$2" -I"$top" -L"$libdir" -lstormmsg -Wl,-rpath,"$libdir"; }
msgcc msg_bw "$top/contrib/bench/msg_bw.c" || exit 2
msgcc msg_alltoall "$top/tests/integration/msg_alltoall.c" || exit 2
mpicc -O2 -o "$work/mpi_bw" "$top/contrib/bench/mpi_bw.c" || exit 2

# bw_jobs K CMD PART: K 2-task jobs on vn[1-2] at once; prints the sum of
# their bandwidths (MB/s, the last size's line of each), or "failed".
bw_jobs() {
    local k=$1 cmd=$2 part=$3 i ids=()
    rm -f "$work"/bw.*
    for ((i = 1; i <= k; i++)); do
        ids+=("$(sbatch --parsable -p "$part" -N2 -n2 -w 'vn[1-2]' -o "$work/bw.$i" -D "$work" --wrap "$cmd")")
    done
    local deadline=$(( $(date +%s) + 600 ))
    while squeue -h -j "$(IFS=,; echo "${ids[*]}")" 2> /dev/null | grep -q .; do
        [ "$(date +%s)" -lt "$deadline" ] || { scancel "${ids[@]}"; echo failed; return; }
        sleep 0.2
    done
    local n; n=$(cat "$work"/bw.* 2> /dev/null | grep -Ec '^[0-9]+ [0-9.]+$')
    [ "$n" = "$k" ] || { echo failed; return; }
    cat "$work"/bw.* | awk '/^[0-9]+ [0-9.]+$/ { s += $2 } END { printf "%.1f", s }'
}

for part in $PARTS; do
case $part in
divided)
    echo
    echo "== divided pools: point-to-point bandwidth (MB/s) vs message size, $COUNT messages, one job alone"
    vc_up stock 2 "PartitionName=p Nodes=vn[1-2] MaxTime=INFINITE State=UP Default=NO"
    srun -p p -N2 -n2 --mpi=pmix "$work/mpi_bw" "$COUNT" $SIZES > "$work/div.stock" 2> "$work/div.stock.err" ||
        cat "$work/div.stock.err" >&2
    parts=("PartitionName=n1 Nodes=vn[1-2] MaxTime=INFINITE State=UP Default=NO")
    for n in 2 4 8; do
        parts+=("PartitionName=n$n Nodes=vn[1-2] OverSubscribe=FORCE:$n MaxTime=INFINITE State=UP Default=NO")
    done
    vc_up storm 2 "${parts[@]}" "SwitchParameters=storm_pool_mode=divided"
    for n in 1 2 4 8; do
        srun -p "n$n" -N2 -n2 "$work/msg_bw" -n "$COUNT" $SIZES > "$work/div.$n" 2> "$work/div.$n.err" ||
            { head -3 "$work/div.$n.err" | sed "s/^/    n=$n: /"; }
        grep -h 'credits' "$work/div.$n.err" | head -1 | sed "s/^/    n=$n: /"
    done
    printf "  %8s %12s %10s %10s %10s %10s %12s\n" size "stock MPI" "n=1" "n=2" "n=4" "n=8" "n=8 / n=1"
    for s in $SIZES; do
        v() { awk -v s="$s" '$1 == s { print $2 }' "$1" 2> /dev/null; }
        a=$(v "$work/div.stock"); b=$(v "$work/div.1"); c=$(v "$work/div.2"); d=$(v "$work/div.4"); e=$(v "$work/div.8")
        printf "  %8s %12s %10s %10s %10s %10s %12s\n" "$s" "${a:--}" "${b:--}" "${c:--}" "${d:--}" "${e:--}" "$(ratio "${e:-0}" "${b:-0}" %.2f)"
    done
    ;;
swapped)
    echo
    echo "== total bandwidth (MB/s) of k gang-scheduled msg_bw jobs on vn[1-2], 65536-byte messages, quantum 50 ms"
    gp="PartitionName=g Nodes=vn[1-2] OverSubscribe=FORCE:8 MaxTime=INFINITE State=UP Default=NO"
    gq="SchedulerParameters=storm_gang_quantum=50ms"
    declare -A tot
    vc_up stock 2 "$gp"
    for k in 1 2 4 8; do tot[stock.$k]=$(bw_jobs "$k" "srun --mpi=pmix $work/mpi_bw $((COUNT * 10)) 65536" g); done
    vc_up storm 2 "$gp" "$gq"
    for k in 1 2 4 8; do tot[swap.$k]=$(bw_jobs "$k" "srun $work/msg_bw -n $((COUNT * 10)) 65536" g); done
    awk '{ print "    storm (swapped) vn1 pool: " $0 }' "$STATE/nodes/vn1/spool/storm-pool.stats" | grep -E 'swaps|failures|halt_p50|swap_p50|release_p50'
    vc_up storm 2 "$gp" "$gq" "SwitchParameters=storm_pool_mode=divided"
    for k in 1 2 4 8; do tot[div.$k]=$(bw_jobs "$k" "srun $work/msg_bw -n $((COUNT * 10)) 65536" g); done
    printf "  %4s %16s %18s %18s %14s %14s\n" jobs "stock MPI uncoord" "storm divided n=8" "storm swapped" "swapped/1 job" "swapped/divided"
    for k in 1 2 4 8; do
        printf "  %4s %16s %18s %18s %14s %14s\n" "$k" "${tot[stock.$k]}" "${tot[div.$k]}" "${tot[swap.$k]}" \
            "$(ratio "${tot[swap.$k]}" "${tot[swap.1]}" %.2f)" "$(ratio "${tot[swap.$k]}" "${tot[div.$k]}" %.2f)"
    done
    ;;
quanta)
    echo
    echo "== total bandwidth (MB/s) of 2 gang-scheduled msg_bw jobs on vn[1-2] with swapped pools, by quantum"
    gp="PartitionName=g Nodes=vn[1-2] OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP Default=NO"
    vc_up stock 2 "$gp"
    stock=$(bw_jobs 2 "srun --mpi=pmix $work/mpi_bw $((COUNT * 10)) 65536" g)
    printf "  %10s %14s %10s %10s %12s\n" quantum "total MB/s" switches swaps "vs stock"
    printf "  %10s %14s %10s %10s %12s\n" "stock MPI" "$stock" - - 1.00
    for q in $QUANTA; do
        vc_up storm 2 "$gp" "SchedulerParameters=storm_gang_quantum=${q}ms"
        t=$(bw_jobs 2 "srun $work/msg_bw -n $((COUNT * 10)) 65536" g)
        st() { awk -v k="$1" '$1 == k { print $2 }' "$STATE/nodes/vn1/spool/storm-pool.stats"; }
        printf "  %10s %14s %10s %10s %12s\n" "${q} ms" "$t" "$(st switches)" "$(st swaps)" "$(ratio "$t" "$stock" %.2f)"
    done
    ;;
stages)
    echo
    echo "== switch stages (us): two all-to-all jobs gang-scheduled at 50 ms on every node"
    printf "  %6s %6s %10s %10s %10s %10s %10s %10s %12s %10s\n" nodes copy "halt p50" "halt p99" "swap p50" "swap p99" \
        "rel p50" "rel p99" "pkts/swap" "% of 50ms"
    for n in $NODES; do
        for copy in valid full; do
            vc_up storm "$n" "PartitionName=g Nodes=ALL OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP Default=NO" \
                "SchedulerParameters=storm_gang_quantum=50ms" "SwitchParameters=storm_pool_swap=$copy"
            for i in 1 2; do
                sbatch -p g -N "$n" -n "$n" -o "$work/a2a.$i" -D "$work" --wrap "srun $work/msg_alltoall 100000000 2000" > /dev/null
            done
            for _ in $(seq 600); do [ "$(pgrep -fc "^$work/msg_alltoall ")" -ge $((2 * n)) ] && break; sleep 0.2; done
            sleep 22 # the agents write their statistics every second
            # per node: halt/swap/release p50 and p99, swaps, packets saved
            # (read before the jobs are cancelled: cancelling fails contexts)
            for f in "$STATE"/nodes/*/spool/storm-pool.stats; do
                awk '{ v[$1] = $2 } END { print v["halt_p50_us"], v["halt_p99_us"], v["swap_p50_us"], v["swap_p99_us"],
                      v["release_p50_us"], v["release_p99_us"], v["swaps"], v["packets_saved"], v["failures"] }' "$f"
            done > "$work/stages.$n.$copy"
            scancel -p g; sleep 2
            med() { sort -n | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : "-" }'; }
            mx() { sort -n | tail -1; }
            h50=$(awk '{print $1}' "$work/stages.$n.$copy" | med); h99=$(awk '{print $2}' "$work/stages.$n.$copy" | mx)
            s50=$(awk '{print $3}' "$work/stages.$n.$copy" | med); s99=$(awk '{print $4}' "$work/stages.$n.$copy" | mx)
            r50=$(awk '{print $5}' "$work/stages.$n.$copy" | med); r99=$(awk '{print $6}' "$work/stages.$n.$copy" | mx)
            pk=$(awk '{ s += $7; p += $8 } END { printf "%.1f", s ? p / s : 0 }' "$work/stages.$n.$copy")
            fails=$(awk '{ f += $9 } END { print f + 0 }' "$work/stages.$n.$copy")
            pctq=$(awk -v a="$h50" -v b="$s50" -v c="$r50" 'BEGIN { printf "%.2f%%", (a + b + c) / 50000 * 100 }')
            printf "  %6s %6s %10s %10s %10s %10s %10s %10s %12s %10s\n" "$n" "$copy" "$h50" "$h99" "$s50" "$s99" "$r50" "$r99" "$pk" "$pctq"
            [ "$fails" = 0 ] || echo "    ($fails contexts failed on $n nodes)"
        done
    done
    ;;
*) echo "bench-switch: unknown part $part" >&2; exit 2 ;;
esac
done
