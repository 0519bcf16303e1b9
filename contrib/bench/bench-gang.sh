#!/usr/bin/env bash
# bench-gang: Storm's gang scheduling against stock Slurm's, side by side on
# the same virtual cluster of stock daemons (stock: sched/backfill,
# select/cons_tres, and for gang scheduling PreemptMode=GANG with the
# shortest SchedulerTimeSlice Slurm accepts, 5 s).  Virtual nodes have one
# CPU each; vn1 and vn2 share this machine's two cores.
#
#   sudo contrib/bench/bench-gang.sh [-p "mechanism overhead cosched delivery response"]
#                                    [-q "1 2 10 50"] [-n "8 64 256"] [-s SECONDS] [-k REPS]
#
#  overhead  a compute-bound job (one task on each of vn1, vn2) alone under
#            stock Slurm, then alone under Storm strobing at each quantum
#            (-q, ms) and at MPL 2 (two such jobs on the same cores), and
#            MPL 4 at 2 ms; at 2 ms once more with the agents stopping jobs
#            by signals (storm_gang_stop=signal) instead of the cgroup v2
#            freezer, and at MPL 2 and 4 without lending (storm_gang_lend=no:
#            a node idles in the slot of a job with nothing left to run
#            there); beside stock uncoordinated time sharing at MPL 2:
#            time against the ideal, MPL x the solo time measured beside it
#            (Storm's: the job in a partition of the same nodes without time
#            sharing, on the same cluster, before and after; stock's: stock
#            alone, just before).
#  cosched   two Open MPI jobs with a barrier every ~2 ms on the same two
#            nodes: makespan under stock gang (5 s slices), stock
#            uncoordinated sharing (OverSubscribe, no gang), and Storm at
#            2, 10 and 50 ms, against the ideal (2 x solo).
#  delivery  for each node count (-n): Storm's strobe delivery delay (issue
#            to each node's switch: the median node's p50, the worst node's
#            p99, over its last 4096 strobes within 30 s, at a quantum of N/8 ms but at
#            least 2 ms, the rate N agents on two cores carry) beside stock Slurm's
#            switch: `scontrol suspend` of a job on every node until all its
#            tasks are stopped (5 times: p50, max).  Storm runs twice:
#            strobes down the tree alone, and by multicast (MCAST below).
#  mechanism what one switch costs on a node by each way of stopping and
#            continuing a job's processes, outside Slurm and Storm
#            (contrib/bench/stop_probe): SIGSTOP/SIGCONT (the switcher's way,
#            and stock Slurm's suspend), the cgroup v1 freezer and cgroup v2
#            cgroup.freeze, each for 2000 switches at 2 ms between two jobs
#            of two spinning tasks under a parent that waits for them as
#            slurmstepd does, the switcher at real-time priority as the
#            node agent: the calls' wall time, the time until the outgoing
#            tasks are really stopped, and the CPU of the switcher and of
#            the parents' wake-ups per switch.
#  response  a 1-second job submitted to nodes already running a long job
#            in a partition with MPL 2: submission to completion, and the
#            job's own work time, under stock gang, stock uncoordinated
#            sharing and Storm at 10 ms.
#
# -s SECONDS: the solo time of the compute-bound and MPI jobs (default 5).
# -k REPS: overhead runs REPS rounds, each every configuration in turn,
# and prints the medians (default 1).
# MCAST (environment): the agents' multicast group, SwitchParameters
# storm_mcast (default 239.255.77.1:6831; strobes go to its PORT+1), with
# which Storm runs in every part (delivery: also down the tree alone); or
# "off": strobes down the tree alone.
# Times are of the work itself (the tasks print when they start and end),
# so job launch is not counted.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
GANG=$BUILD/tools/storm-gang
PROBE=$BUILD/contrib/bench/stop_probe
VC=$top/contrib/vcluster/storm-vcluster
PARTS="mechanism overhead cosched delivery response" QUANTA="1 2 10 50" NODES="8 64 256" SOLO=5 REPS=1
MCAST=${MCAST:-239.255.77.1:6831}
while getopts p:q:n:s:k: o; do
    case $o in
    p) PARTS=$OPTARG ;;
    q) QUANTA=$OPTARG ;;
    n) NODES=$OPTARG ;;
    s) SOLO=$OPTARG ;;
    k) REPS=$OPTARG ;;
    *) echo "usage: $0 [-p PARTS] [-q QUANTA_MS] [-n NODES] [-s SECONDS] [-k REPS]" >&2; exit 2 ;;
    esac
done
check_reps bench-gang "$REPS"
[ "$(id -u)" = 0 ] || { echo "bench-gang: must run as root" >&2; exit 2; }
# Storm's strobes by multicast where MCAST names a group (as a site would
# set it up where the network carries multicast); delivery runs both ways.
MC_CONF=(); [ "$MCAST" = off ] || MC_CONF=("SwitchParameters=storm_mcast=$MCAST")
[ -x "$GANG" ] || { echo "bench-gang: $GANG not built (run contrib/storm-setup)" >&2; exit 2; }
[ -x "$PROBE" ] || { echo "bench-gang: $PROBE not built (run make)" >&2; exit 2; }
work=/var/tmp/storm-bench-gang
trap '"$VC" down > /dev/null 2>&1' EXIT
rm -rf "$work" && mkdir -p "$work" && chmod 755 "$work"
gcc -O2 -o "$work/spin" "$top/contrib/bench/spin.c" || exit 2
mpicc -O2 -o "$work/mpi_sync" "$top/contrib/bench/mpi_sync.c" || exit 2

# Calibrate: iterations for SOLO seconds of work on this machine.
t=$( { "$work/spin" 500; } | awk '{ printf "%.3f", ($4 - $2) / 1e9 }')
SPIN_M=$(awk -v t="$t" -v s="$SOLO" 'BEGIN { printf "%d", 500 * s / t }')
# mpi_sync: rounds of ~2 ms of work (WORK thousand iterations)
MPI_WORK=$(awk -v t="$t" 'BEGIN { printf "%d", 500000 * 0.002 / t }')
MPI_ITERS=$((SOLO * 500))
echo "bench-gang: $SPIN_M M iterations ~ ${SOLO}s; mpi_sync $MPI_ITERS rounds of $MPI_WORK k iterations (~2 ms) + barrier"

PART() { echo "PartitionName=gang Nodes=vn[1-2] OverSubscribe=FORCE:$1 MaxTime=INFINITE State=UP Default=NO"; }
# the same nodes without time sharing: a job there runs alone, unstrobed
PLAIN="PartitionName=plain Nodes=vn[1-2] MaxTime=INFINITE State=UP Default=NO"
STOCK_GANG=("PreemptMode=GANG" "SchedulerTimeSlice=5")
# run_jobs K CMD: K 2-node jobs in partition $P (default gang) at once; prints the
# makespan of their work (first START to last END, from every task's line)
run_jobs() {
    local k=$1 cmd=$2 i ids=()
    rm -f "$work"/out.*
    for ((i = 1; i <= k; i++)); do
        ids+=("$(sbatch --parsable -p "${P:-gang}" -N2 -w 'vn[1-2]' -o "$work/out.$i" -D "$work" --wrap "$cmd")")
    done
    local deadline=$(( $(date +%s) + 30 * SOLO * k + 120 ))
    while squeue -h -j "$(IFS=,; echo "${ids[*]}")" 2> /dev/null | grep -q .; do
        [ "$(date +%s)" -lt "$deadline" ] || { scancel "${ids[@]}"; echo failed; return; }
        sleep 0.2
    done
    local n; n=$(cat "$work"/out.* 2> /dev/null | grep -c '^START')
    local want=$((k * 2)); [[ $cmd == *mpi_sync* ]] && want=$k
    [ "$n" = "$want" ] || { echo failed; return; }
    cat "$work"/out.* | awk '/^START/ { if (!s || $2 < s) s = $2; if ($4 > e) e = $4 } END { printf "%.2f", (e - s) / 1e9 }'
}
pct() { awk -v t="$1" -v i="$2" 'BEGIN { if (t + 0 > 0 && i + 0 > 0) printf "%+.1f%%", 100 * (t / i - 1); else printf "-" }'; }
row() { printf "  %-36s %5s %9s %9s %9s\n" "$@"; }
SPIN="srun $work/spin $SPIN_M"
MPI="srun --mpi=pmix $work/mpi_sync $MPI_ITERS $MPI_WORK"

for part in $PARTS; do
case $part in
mechanism)
    echo
    echo "== mechanism: one switch on a node (stop one job, continue the other; 2 spinning tasks each, under a"
    echo "   parent that waits for them as slurmstepd does), 2000 switches at 2 ms (contrib/bench/stop_probe)"
    printf "  %-12s %13s %13s %16s %14s %13s %11s\n" "way" "call p50(us)" "call p99(us)" "stopped p50(us)" "switcher(us)" "parents(us)" "CPU(us)"
    for m in signals freezer-v1 freeze-v2; do
        out=$("$PROBE" "$m" 2000 2000)
        if [ $? != 0 ]; then printf "  %-12s %s\n" "$m" "${out#stop_probe: }"; continue; fi
        read -r c50 c99 s50 sw pa < <(sed -n 's/.*call p50 \([0-9.]*\) us p99 \([0-9.]*\) us; stopped after p50 \([0-9.]*\) us.*; switcher \([0-9.]*\) us and parents \([0-9.]*\) us.*/\1 \2 \3 \4 \5/p' <<<"$out")
        printf "  %-12s %13s %13s %16s %14s %13s %11s\n" "$m" "$c50" "$c99" "$s50" "$sw" "$pa" "$(awk -v a="$sw" -v b="$pa" 'BEGIN { printf "%.1f", a + b }')"
    done
    echo "  CPU = switcher + parents, per switch; the switcher's includes waking for each quantum. stopped: from the"
    echo "  calls until the outgoing tasks are stopped or frozen (they must run to take it: on 2 cores, a scheduling matter)."
    ;;
overhead)
    echo
    echo "== overhead: compute-bound 2-task jobs on vn[1-2] (ideal: MPL x solo time, measured beside it)"
    echo "   Storm's ideal: the same job alone in a partition without time sharing on the same cluster, just"
    echo "   before and after (mean), no strobes; stock's: stock alone, just before"
    [ "$REPS" = 1 ] || echo "   medians of $REPS rounds, each every configuration in turn (this machine drifts by more than the overhead)"
    row "configuration" "jobs" "time(s)" "ideal(s)" "vs ideal"
    # Each measurement against a solo time taken right beside it: the same
    # stock job here took from 4.1 to 5.3 s within ten minutes.
    declare -A ot=() oi=() op=()
    configs=("stock 1" "stock 2")
    # Clusters: one per quantum, "2sig": 2 ms, stopping by signals, and
    # "2strict": 2 ms without lending (a node idles in a slot whose job has
    # nothing left to run there, as until the job leaves the matrix).
    variants=""
    for q in $QUANTA; do
        configs+=("$q 1" "$q 2")
        variants+=" $q"
        [ "$q" = 2 ] && configs+=("$q 4" "2sig 1" "2sig 2" "2strict 2" "2strict 4") && variants+=" 2sig 2strict"
    done
    # warm_up PARTITION: a short job, not measured.  In three tries by
    # hand, the first job on a cluster just started ran 0-7% slower than
    # the next ones.
    warm_up() { P=$1 run_jobs 1 "srun $work/spin $((SPIN_M / 4))" > /dev/null; }
    # add CONFIG TIME IDEAL: one round's measurement
    add() {
        ot[$1]+=" $2" oi[$1]+=" $3"
        op[$1]+=" $(awk -v t="$2" -v i="$3" 'BEGIN { if (t + 0 > 0 && i + 0 > 0) printf "%.2f", 100 * (t / i - 1); else print "failed" }')"
    }
    for ((rep = 1; rep <= REPS; rep++)); do
        vc_up stock 2 "$(PART 4)"
        warm_up gang
        solo=$(run_jobs 1 "$SPIN")
        add "stock 1" "$solo" "$solo"
        add "stock 2" "$(run_jobs 2 "$SPIN")" "$(awk -v s="$solo" 'BEGIN { print 2 * s }')"
        for v in $variants; do
            q=${v%sig}; q=${q%strict}
            sw=("${MC_CONF[@]}") extra=""
            case $v in *sig) extra=storm_gang_stop=signal ;; *strict) extra=storm_gang_lend=no ;; esac
            if [ -n "$extra" ]; then
                if [ ${#sw[@]} = 0 ]; then sw=("SwitchParameters=$extra"); else sw[0]+=",$extra"; fi
            fi
            vc_up storm 2 "$(PART 4)" "$PLAIN" "SchedulerParameters=storm_gang_quantum=${q}ms" "${sw[@]}"
            warm_up plain
            before=$(P=plain run_jobs 1 "$SPIN")
            declare -A now=()
            [ "$v" = 2strict ] || now[1]=$(run_jobs 1 "$SPIN")
            now[2]=$(run_jobs 2 "$SPIN")
            [ "$v" = 2 ] || [ "$v" = 2strict ] && now[4]=$(run_jobs 4 "$SPIN")
            "$GANG" | grep -E '^(strobe_rate|strobes_skipped|strobe_round_trip|strobe_multicast):' > "$work/gang.$v"
            after=$(P=plain run_jobs 1 "$SPIN")
            for m in "${!now[@]}"; do
                add "$v $m" "${now[$m]}" "$(awk -v a="$before" -v b="$after" -v m="$m" \
                    'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", m * (a + b) / 2; else print "failed" }')"
            done
            unset now
        done
        [ "$REPS" = 1 ] || for c in "${configs[@]}"; do
            echo "  round $rep: $c: $(awk '{ print $NF }' <<<"${ot[$c]}") s, ideal $(awk '{ print $NF }' <<<"${oi[$c]}") s" >&2
        done
    done
    for c in "${configs[@]}"; do
        read -r q m <<<"$c"
        case "$c" in
        "stock 1") name="stock, alone" ;;
        "stock 2") name="stock uncoordinated, MPL 2" ;;
        "2sig 1") name="storm 2 ms by signals, alone" ;;
        "2sig 2") name="storm 2 ms by signals, MPL 2" ;;
        "2strict "*) name="storm 2 ms without lending, MPL $m" ;;
        *" 1") name="storm $q ms, alone" ;;
        *) name="storm $q ms, MPL $m" ;;
        esac
        # shellcheck disable=SC2086 # one configuration's values, split
        v=$(median ${op[$c]})
        # shellcheck disable=SC2086
        row "$name" "$m" "$(median ${ot[$c]})" "$(median ${oi[$c]})" \
            "$(awk -v v="$v" 'BEGIN { if (v == "failed") print "-"; else printf "%+.1f%%", v }')"
        [ "$q" != stock ] && [ "$m" = "$([ "$q" = 2 ] && echo 4 || echo 2)" ] && sed 's/^/    /' "$work/gang.$q"
    done
    unset ot oi op
    ;;
cosched)
    echo
    echo "== coscheduling: two Open MPI jobs (barrier every ~2 ms) on vn[1-2], MPL 2 (ideal: 2 x solo)"
    row "configuration" "jobs" "makespan" "ideal(s)" "vs ideal"
    vc_up stock 2 "$(PART 2)"
    solo=$(run_jobs 1 "$MPI"); row "stock, alone" 1 "$solo" "$solo" "-"
    ideal=$(awk -v s="$solo" 'BEGIN{print 2*s}')
    vc_up stock 2 "$(PART 2)" "${STOCK_GANG[@]}"
    t=$(run_jobs 2 "$MPI"); row "stock gang, 5 s slices" 2 "$t" "$ideal" "$(pct "$t" "$ideal")"; stock_gang=$t
    vc_up stock 2 "$(PART 2)"
    t=$(run_jobs 2 "$MPI"); row "stock uncoordinated" 2 "$t" "$ideal" "$(pct "$t" "$ideal")"; stock_unc=$t
    for q in 2 10 50; do
        vc_up storm 2 "$(PART 2)" "SchedulerParameters=storm_gang_quantum=${q}ms" "${MC_CONF[@]}"
        t=$(run_jobs 2 "$MPI")
        row "storm ${q} ms" 2 "$t" "$ideal" "$(pct "$t" "$ideal")"
        echo "    stock gang / storm: $(awk -v a="$stock_gang" -v b="$t" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.1fx", a/b; else print "-" }');" \
            "uncoordinated / storm: $(awk -v a="$stock_unc" -v b="$t" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.1fx", a/b; else print "-" }')"
    done
    ;;
delivery)
    echo
    echo "== strobe delivery (Storm, 2 jobs on every node) vs stock switch (scontrol suspend until every task stopped)"
    echo "   quantum: N/8 ms, at least 2 ms (every strobe wakes N agents sharing this machine's 2 cores)"
    printf "  %6s %8s %10s %14s %14s %16s %16s %10s\n" nodes quantum strobes "storm p50(us)" "storm p99(us)" "stock p50(ms)" "stock max(ms)" "p50 ratio"
    for n in $NODES; do
        sysctl -qw net.ipv4.neigh.default.gc_thresh1=16384 net.ipv4.neigh.default.gc_thresh2=65536 net.ipv4.neigh.default.gc_thresh3=262144
        all="PartitionName=gang Nodes=ALL OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP Default=NO"
        dq=$(( n / 8 > 2 ? n / 8 : 2 ))
        paths=(tree); [ "$MCAST" = off ] || paths+=(multicast)
        declare -A sp50 sp99
        for path in "${paths[@]}"; do
            mc=(); [ "$path" = multicast ] && mc=("SwitchParameters=storm_mcast=$MCAST")
            vc_up storm "$n" "$all" "SchedulerParameters=storm_gang_quantum=${dq}ms" "${mc[@]}"
            for i in 1 2; do sbatch -p gang -N "$n" -o /dev/null -D "$work" --wrap "srun sleep 900" > /dev/null; done
            for _ in $(seq 300); do [ "$(pgrep -fc '^(/usr/bin/)?sleep 900$')" -ge $((2 * n)) ] && break; sleep 0.2; done
            sleep 40 # the nodes' windows (their last 4096 strobes within 30 s) hold the steady state
            "$GANG" | grep -E '^(strobe_rate|strobes_skipped|strobe_round_trip|strobe_multicast):' | sed "s/^/    storm ($path): /"
            "$GANG" nodes > "$work/nodes.$n.$path" 2>&1
            sp50[$path]=$(awk '/^delivery over/ { for (i = 1; i <= NF; i++) if ($i == "p50") print $(i + 1) }' "$work/nodes.$n.$path")
            sp99[$path]=$(awk '/^delivery over/ { for (i = 1; i <= NF; i++) if ($i == "p99") print $(i + 1) }' "$work/nodes.$n.$path")
            scancel -p gang
        done
        vc_up stock "$n" "PartitionName=gang Nodes=ALL MaxTime=INFINITE State=UP Default=NO"
        job=$(sbatch --parsable -p gang -N "$n" -o /dev/null -D "$work" --wrap "srun sleep 300")
        # srun runs the program by its full path: /usr/bin/sleep
        task='^(/usr/bin/)?sleep 300$'
        for _ in $(seq 300); do [ "$(pgrep -fc "$task")" -ge "$n" ] && break; sleep 0.2; done
        mapfile -t pids < <(pgrep -f "$task")
        : > "$work/stock.$n"
        # without the tasks there is nothing to wait for: no figure
        [ "${#pids[@]}" -ge "$n" ] || echo "bench-gang: found ${#pids[@]} of the stock job's $n tasks" >&2
        for _ in 1 2 3 4 5; do
            [ "${#pids[@]}" -ge "$n" ] || break
            t0=$(date +%s%N)
            scontrol suspend "$job"
            while :; do
                stopped=0
                for p in "${pids[@]}"; do
                    read -r st < "/proc/$p/stat" 2> /dev/null || continue
                    st=${st##*) }; [ "${st%% *}" = T ] && stopped=$((stopped + 1))
                done
                [ "$stopped" -ge "${#pids[@]}" ] && break
                [ $(( $(date +%s%N) - t0 )) -lt 60000000000 ] || break
            done
            echo $(( ($(date +%s%N) - t0) / 1000000 )) >> "$work/stock.$n"
            scontrol resume "$job"; sleep 1
        done
        scancel "$job"
        st50=$(sort -n "$work/stock.$n" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
        stmax=$(sort -n "$work/stock.$n" | tail -1)
        [ -s "$work/stock.$n" ] || st50=failed stmax=failed
        for path in "${paths[@]}"; do
            printf "  %6s %8s %10s %14s %14s %16s %16s %10s\n" "$n" "${dq}ms" "$path" "${sp50[$path]:-failed}" \
                "${sp99[$path]:-failed}" "$st50" "$stmax" \
                "$(awk -v a="$st50" -v b="${sp50[$path]:-0}" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.0fx", a*1000/b; else print "-" }')"
        done
        unset sp50 sp99
    done
    ;;
response)
    echo
    echo "== responsiveness: a 1-second job sent to vn[1-2] already running a long job (MPL 2)"
    echo "   (done in: submission to completion, with Slurm's own start and end latency; work: the tasks' own time)"
    row "configuration" "" "done in(s)" "work(s)" "work/alone"
    short=$((SPIN_M / SOLO))
    for cfg in "stock gang" "stock uncoordinated" "storm 10 ms"; do
        case $cfg in
        "stock gang") up stock 2 "$(PART 2)" "${STOCK_GANG[@]}" ;;
        "stock uncoordinated") up stock 2 "$(PART 2)" ;;
        *) up storm 2 "$(PART 2)" "SchedulerParameters=storm_gang_quantum=10ms" "${MC_CONF[@]}" ;;
        esac
        long=$(sbatch --parsable -p gang -N2 -w 'vn[1-2]' -o /dev/null -D "$work" --wrap "srun $work/spin $((SPIN_M * 10))")
        for _ in $(seq 100); do [ "$(pgrep -fc "spin $((SPIN_M * 10))\$")" -ge 2 ] && break; sleep 0.1; done
        sleep 1
        rm -f "$work/short.out"
        t0=$(date +%s%N)
        j=$(sbatch --parsable -p gang -N2 -w 'vn[1-2]' -o "$work/short.out" -D "$work" --wrap "srun $work/spin $short")
        while squeue -h -j "$j" 2> /dev/null | grep -q .; do sleep 0.05; done
        t=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
        w=$(awk '/^START/ { if (!s || $2 < s) s = $2; if ($4 > e) e = $4 } END { if (s) printf "%.2f", (e - s) / 1e9; else printf "failed" }' "$work/short.out" 2> /dev/null)
        scancel "$long"
        row "$cfg" "" "$t" "${w:-failed}" "$(awk -v w="${w:-0}" 'BEGIN { if (w + 0 > 0) printf "%.1fx", w; else printf "-" }')"
    done
    ;;
*) echo "bench-gang: unknown part $part" >&2; exit 2 ;;
esac
done
