#!/usr/bin/env bash
# bench-cosched: Storm's implicit coscheduling against uncoordinated time
# sharing (stock Slurm, OverSubscribe without gang) and against Storm's gang
# scheduling, side by side on virtual clusters of stock daemons.
#
#   sudo contrib/bench/bench-cosched.sh [-p "mixes sweep"] [-m "heavy moderate light"]
#                                       [-k "2 3 4"] [-s SECONDS] [-c SLICE:GMET]
#
#  mixes  for each workload mix (-m) and each number of jobs per node (-k),
#         K 2-rank Open MPI jobs (one rank on each of vn1 and vn2) started
#         together, under: stock uncoordinated sharing; Storm gang
#         scheduling at 50 ms; Storm implicit coscheduling (`--storm-cosched`,
#         the PMPI hooks, SLICE:GMET from -c, default 500ms:100ms). Printed:
#         the mean response time (from the first job's start of work to each
#         job's end of work), the makespan, and the ratio to uncoordinated.
#  sweep  the heavy mix at 2 jobs per node under implicit coscheduling for
#         several time slices and GMETs.
#
# Workloads (contrib/bench/mpi_kernel.c, point-to-point halo exchanges with
# both ring neighbours; about -s SECONDS alone, default 3):
#   heavy     ~0.25 ms of work, then 4 exchanges of 1 KiB (LU/SP/BT-like)
#   moderate  ~2 ms of work, then 1 exchange of 16 KiB
#   light     ~100 ms of work, then 1 exchange of 8 bytes (EP-like)
#
# Every virtual node has one CPU: the bench pins vn1's slurmd (and so every
# process it starts) to CPU 0 and vn2's to CPU 1, so K jobs per node share
# one core per node, as on a cluster of single-core nodes.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
VC=$top/contrib/vcluster/storm-vcluster
. "$top/contrib/bench/common.sh"
PARTS="mixes sweep" MIXES="heavy moderate light" KS="2 3 4" SOLO=3 CS=500ms:100ms
while getopts p:m:k:s:c: o; do
    case $o in
    p) PARTS=$OPTARG ;;
    m) MIXES=$OPTARG ;;
    k) KS=$OPTARG ;;
    s) SOLO=$OPTARG ;;
    c) CS=$OPTARG ;;
    *) echo "usage: $0 [-p PARTS] [-m MIXES] [-k JOBS_PER_NODE] [-s SECONDS] [-c SLICE:GMET]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench-cosched: must run as root" >&2; exit 2; }
command -v mpicc > /dev/null || { echo "bench-cosched: needs Open MPI's mpicc" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "bench-cosched: needs 2 CPUs (one per virtual node)" >&2; exit 2; }
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
work=/var/tmp/storm-bench-cosched
trap '"$VC" down > /dev/null 2>&1' EXIT
rm -rf "$work" && mkdir -p "$work" && chmod 755 "$work"
gcc -O2 -o "$work/spin" "$top/contrib/bench/spin.c" || exit 2
mpicc -O2 -o "$work/mpi_kernel" "$top/contrib/bench/mpi_kernel.c" || exit 2

# Calibrate: thousand iterations per millisecond of work on this machine.
t=$( { taskset -c 0 "$work/spin" 300; } | awk '{ printf "%.3f", ($4 - $2) / 1e9 }')
KPM=$(awk -v t="$t" 'BEGIN { printf "%d", 300000 / t / 1000 }')
kernel() { # MIX: the kernel's arguments for about SOLO seconds alone
    case $1 in
    heavy) echo "$((SOLO * 2000)) $((KPM / 4)) 4 1024" ;;
    moderate) echo "$((SOLO * 400)) $((KPM * 2)) 1 16384" ;;
    light) echo "$((SOLO * 10)) $((KPM * 100)) 1 8" ;;
    *) echo "bench-cosched: unknown mix $1" >&2; exit 2 ;;
    esac
}
echo "bench-cosched: $KPM k iterations per ms; solo about ${SOLO}s per job; cosched slice:GMET $CS"

up() { # MODE(stock|storm) CONF-LINE...: a 2-node cluster, vn1 on CPU 0, vn2 on CPU 1
    local mode=$1 i p; shift
    vc_up "$mode" 2 "$@"
    for i in 1 2; do
        read -r p < "$STATE/run/slurmd-vn$i.pid" && taskset -a -pc $((i - 1)) "$p" > /dev/null ||
            { echo "bench-cosched: cannot pin vn$i's slurmd" >&2; exit 1; }
    done
}
PART() { echo "PartitionName=work Nodes=vn[1-2] OverSubscribe=$1 MaxTime=INFINITE State=UP Default=NO"; }
COSCHED() { # SLICE GMET
    echo "SwitchParameters=storm_cosched_partitions=work,storm_cosched_slice=$1,storm_cosched_gmet=$2"
}
# run_jobs K MIX [SBATCH-OPTIONS...]: K jobs at once; prints
# "<mean response> <makespan>" in seconds, or "failed"
run_jobs() {
    local k=$1 mix=$2 i ids=(); shift 2
    rm -f "$work"/out.*
    for ((i = 1; i <= k; i++)); do
        ids+=("$(sbatch --parsable -p work -N2 -n2 --ntasks-per-node=1 -w 'vn[1-2]' -o "$work/out.$i" -D "$work" "$@" \
            --wrap "srun --mpi=pmix $work/mpi_kernel $(kernel "$mix")")")
    done
    local deadline=$(( $(date +%s) + 40 * SOLO * k + 120 ))
    while squeue -h -j "$(IFS=,; echo "${ids[*]}")" 2> /dev/null | grep -q .; do
        [ "$(date +%s)" -lt "$deadline" ] || { scancel "${ids[@]}"; echo failed; return; }
        sleep 0.2
    done
    [ "$(cat "$work"/out.* 2> /dev/null | grep -c '^START')" = "$k" ] || { echo failed; return; }
    cat "$work"/out.* | awk '/^START/ { s[NR] = $2; e[NR] = $4; if (!t0 || $2 < t0) t0 = $2 }
        END { for (i in e) { r += e[i] - t0; if (e[i] > m) m = e[i] }
              printf "%.2f %.2f", r / length(e) / 1e9, (m - t0) / 1e9 }'
}
row() { printf "  %-9s %4s  %-28s %10s %10s %10s %12s\n" "$@"; }
cosched_stats() { # the local schedulers' switch counts, summed over vn1 and vn2
    cat "$STATE"/nodes/vn[12]/spool/storm-cosched.stats 2> /dev/null |
        awk '$1 ~ /switches|requests|early|tick_held/ { s[$1] += $2 } END { for (k in s) printf "%s %d  ", k, s[k] }'
}

declare -A solo resp span
for part in $PARTS; do
case $part in
mixes)
    echo
    echo "== mean response time of K jobs per node (one rank on each of vn1, vn2), started together"
    echo "   ideal: solo x (K+1)/2 for the mean response, solo x K for the makespan"
    row mix K configuration "mean(s)" "span(s)" "ideal(s)" "vs uncoord"
    up stock "$(PART FORCE:4)"
    for mix in $MIXES; do
        read -r solo[$mix] _ <<< "$(run_jobs 1 "$mix")"
        row "$mix" 1 "alone (stock)" "${solo[$mix]}" "${solo[$mix]}" "${solo[$mix]}" ""
        for k in $KS; do
            read -r resp[$mix,$k,unc] span[$mix,$k,unc] <<< "$(run_jobs "$k" "$mix")"
        done
    done
    up storm "$(PART FORCE:4)" "SchedulerParameters=storm_gang_quantum=50ms"
    for mix in $MIXES; do for k in $KS; do
        read -r resp[$mix,$k,gang] span[$mix,$k,gang] <<< "$(run_jobs "$k" "$mix")"
    done; done
    up storm "$(PART YES:4)" "$(COSCHED "${CS%%:*}" "${CS##*:}")"
    for mix in $MIXES; do for k in $KS; do
        read -r resp[$mix,$k,cos] span[$mix,$k,cos] <<< "$(run_jobs "$k" "$mix" --oversubscribe --storm-cosched)"
        echo "    $mix K=$k cosched: $(cosched_stats)" >> "$work/cosched-stats"
    done; done
    for mix in $MIXES; do for k in $KS; do
        ideal=$(awk -v s="${solo[$mix]}" -v k="$k" 'BEGIN { if (s + 0 > 0) printf "%.2f", s * (k + 1) / 2; else print "-" }')
        u=${resp[$mix,$k,unc]}
        row "$mix" "$k" "stock uncoordinated" "$u" "${span[$mix,$k,unc]:--}" "$ideal" "1.00"
        row "$mix" "$k" "storm gang 50 ms" "${resp[$mix,$k,gang]}" "${span[$mix,$k,gang]:--}" "$ideal" "$(ratio "${resp[$mix,$k,gang]}" "$u" %.2f)"
        row "$mix" "$k" "storm cosched $CS" "${resp[$mix,$k,cos]}" "${span[$mix,$k,cos]:--}" "$ideal" "$(ratio "${resp[$mix,$k,cos]}" "$u" %.2f)"
    done; done
    echo "  local schedulers during the cosched runs (cumulative over the cluster's life, vn1 + vn2):"
    sed 's/^/  /' "$work/cosched-stats"
    ;;
sweep)
    echo
    echo "== heavy mix, 2 jobs per node: implicit coscheduling's time slice and GMET"
    row mix K configuration "mean(s)" "span(s)" "" "vs uncoord"
    if [ -z "${resp[heavy,2,unc]:-}" ]; then
        up stock "$(PART FORCE:4)"
        read -r "resp[heavy,2,unc]" "span[heavy,2,unc]" <<< "$(run_jobs 2 heavy)"
    fi
    row heavy 2 "stock uncoordinated" "${resp[heavy,2,unc]}" "${span[heavy,2,unc]:--}" "" "1.00"
    for sg in 100ms:20ms 500ms:20ms 500ms:100ms 2s:100ms 2s:500ms 5s:1s; do
        up storm "$(PART YES:4)" "$(COSCHED "${sg%%:*}" "${sg##*:}")"
        read -r r s <<< "$(run_jobs 2 heavy --oversubscribe --storm-cosched)"
        row heavy 2 "cosched slice ${sg%%:*} GMET ${sg##*:}" "$r" "${s:--}" "" "$(ratio "$r" "${resp[heavy,2,unc]}" %.2f)"
        echo "    $(cosched_stats)"
    done
    ;;
*) echo "bench-cosched: unknown part $part" >&2; exit 2 ;;
esac
done
