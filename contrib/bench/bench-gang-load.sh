#!/usr/bin/env bash
# bench-gang-load: what gang scheduling costs a node's Slurm daemons while it
# switches: two jobs of `srun sleep 900` on every node of a virtual cluster,
# strobed every N/8 ms (at least 2 ms), measured over one minute of steady
# switching (the tasks started, 20 s settled).
#
#   sudo contrib/bench/bench-gang-load.sh [-n NODES]     (default 256)
#
# Prints how long the two jobs' tasks took to start and the CPU time their
# slurmstepds had used by then, the CPU time the slurmstepds used in the
# window, the CPU time the whole machine used, the load average, and the
# strobe delivery delay (the median node's p50, the worst node's p99) with
# the number of nodes that answered.  The slurmstepds' part is what the gang
# switcher's listings of each step's processes cost them (sched_gang/README.md).
# Tasks sleep, so the rest is the switching itself and the daemons' own work.
# The cluster is brought down on exit, failed or not.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
GANG=$BUILD/tools/storm-gang
VC=$top/contrib/vcluster/storm-vcluster
N=256
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts n:h o; do
    case $o in
        n) N=$OPTARG ;;
        *) usage ;;
    esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "bench-gang-load: -n NODES must be a positive whole number, not \"$N\"" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-gang-load: run as root (it starts a virtual cluster)" >&2; exit 2; }
[ -x "$GANG" ] || { echo "bench-gang-load: $GANG not built (run contrib/storm-setup, then make)" >&2; exit 2; }
work=/var/tmp/storm-bench-gang-load
mkdir -p "$work"
trap '"$VC" down > /dev/null 2>&1' EXIT
trap 'exit 130' INT TERM

tasks() { pgrep -fc '^(/usr/bin/)?sleep 900$'; }
stepd_ticks() { for p in $(pgrep -x slurmstepd); do awk '{ print $14 + $15 }' "/proc/$p/stat" 2> /dev/null; done | awk '{ s += $1 } END { print s + 0 }'; }
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

"$VC" down > /dev/null 2>&1
dq=$((N / 8 > 2 ? N / 8 : 2))
hz=$(getconf CLK_TCK)
if ! "$VC" up "$N" --conf "SchedulerParameters=storm_gang_quantum=${dq}ms" \
    --conf "PartitionName=gang Nodes=ALL OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP Default=NO" > "$work/up.out" 2>&1; then
    tail -n 5 "$work/up.out" >&2
    exit 1
fi
eval "$("$VC" env)"
for i in 1 2; do sbatch -p gang -N "$N" -o /dev/null -D "$work" --wrap "srun sleep 900" > /dev/null || exit 1; done
t=$SECONDS
while [ "$(tasks)" -lt $((2 * N)) ]; do
    ((SECONDS - t < 300)) || { echo "bench-gang-load: the two jobs' $((2 * N)) tasks did not all start in 5 min ($(tasks) did)" >&2; exit 1; }
    sleep 2
done
# The slurmstepds are the jobs' own (started with them): their CPU time so
# far is what the launch cost them.
echo "$N nodes, quantum ${dq}ms: $((2 * N)) tasks started in $((SECONDS - t)) s;" \
    "slurmstepds $(stepd_ticks | awk -v hz="$hz" '{ printf "%.1f", $1 / hz }') CPU-s so far"
sleep 20
s0=$(stepd_ticks) b0=$(busy_ticks) w0=$(date +%s.%N)
sleep 60
s1=$(stepd_ticks) b1=$(busy_ticks) w1=$(date +%s.%N)
awk -v s0="$s0" -v s1="$s1" -v b0="$b0" -v b1="$b1" -v w0="$w0" -v w1="$w1" -v hz="$hz" -v ld="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN { printf "window %.1f s: slurmstepds %.1f CPU-s (%.0f%% of the CPU used), machine %.1f CPU-s, load %s\n",
             w1 - w0, (s1 - s0) / hz, 100 * (s1 - s0) / (b1 - b0 > 0 ? b1 - b0 : 1), (b1 - b0) / hz, ld }'
"$GANG" nodes 2>&1 | grep '^delivery' || echo "no delivery figures (storm-gang nodes failed)"
[ "$(tasks)" -eq $((2 * N)) ] || echo "bench-gang-load: $(tasks) of the $((2 * N)) tasks still run at the end" >&2
scancel -p gang
