#!/usr/bin/env bash
# bench-primitives: STORM's primitives against stock Slurm's own fan-out,
# side by side on the same virtual cluster (stock slurmd and slurmctld with
# Storm's plugins installed; sbcast is stock Slurm's broadcast).
#
#   sudo contrib/bench/bench-primitives.sh [N...]      (default: 8 64 256)
#
# For each N: latency of a 64-byte XFER-AND-SIGNAL and of COMPARE-AND-WRITE
# to all N nodes (p50, p99 over REPS runs) against stock sbcast of a 64-byte
# file to the same nodes; time of a 12 MB XFER-AND-SIGNAL against sbcast of
# 12 MB; with links unshaped and, for N=64, shaped to 100 Mbit/s.  Prints
# one table with the ratios (stock / Storm: higher is better for Storm).
# Beside Storm's 64-byte latency it prints this machine's floor for the same
# round trip, measured on the same nodes in the same run: contrib/bench/
# floor_tree, plain C over a TCP tree of the same fanout (8), with no
# framing, authentication or event library.
# Storm and the floor are measured in turns, ROUNDS times each, every
# measurement once the machine is quiet (the cluster's start and the job's
# launch done), and the table gives the median of the rounds' p50 and p99:
# a measurement taken while the daemons still start, or while the host
# runs slower for a while, would otherwise weigh on one side only.
# Environment: REPS (default 200; sbcast runs REPS/10 times), ROUNDS
# (default 3), BUILD (the
# build tree with tools/storm-prim, default: this source tree), MCAST (the
# agents' multicast group, SwitchParameters storm_mcast, default
# 239.255.77.1:6831, or "off": transfers use the tree of TCP connections
# alone).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
PRIM=$BUILD/tools/storm-prim
FLOOR=$BUILD/contrib/bench/floor_tree
FLOOR_PORT=${FLOOR_PORT:-17779}
VC=$top/contrib/vcluster/storm-vcluster
REPS=${REPS:-200}
ROUNDS=${ROUNDS:-3}
MCAST=${MCAST:-239.255.77.1:6831}
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
cipher= # the AES-GCM implementation of the agents' multicast, once a cluster is up
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(8 64 256)
work=/var/tmp/storm-bench-prim
[ -x "$PRIM" ] || { echo "bench-primitives: $PRIM not built (run contrib/storm-setup)" >&2; exit 2; }
[ -x "$FLOOR" ] || { echo "bench-primitives: $FLOOR not built (run make)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-primitives: must run as root" >&2; exit 2; }
trap '"$VC" down > /dev/null 2>&1' EXIT
mkdir -p "$work"
head -c 64 /dev/urandom > "$work/f64"
head -c 12582912 /dev/urandom > "$work/f12m"

# pct FILE P: the P-th percentile (0-100) of the numbers in FILE, in ms.
pct() { sort -g "$1" | awk -v p="$2" '{ v[NR] = $1 } END { i = int(NR * p / 100); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.2f", v[i] }'; }

# pick p50|p99 OUTPUT: that figure of storm-prim bench's OUTPUT, or "failed".
pick() { local v; v=$(sed -n "s/.*$1 \([0-9.]*\) ms.*/\1/p" <<<"$2"); echo "${v:-failed}"; }
# quiet: until this machine's CPUs were at least 90% idle over a second, at
# most 30 s (then it says so and the measurement goes ahead).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 }' /proc/stat; }
quiet() {
    local a b
    for _ in $(seq 1 30); do
        read -ra a <<<"$(cpu_ticks)"
        sleep 1
        read -ra b <<<"$(cpu_ticks)"
        [ $(((b[1] - a[1]) - 9 * (b[0] - a[0]))) -ge 0 ] && return 0
    done
    echo "bench-primitives: the machine was not quiet within 30 s; measuring anyway" >&2
}
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) * 1000 }'; }
sbcast_times() { # JOBID FILE COUNT OUT: one sbcast per line, ms; a failed one is "failed"
    : > "$4"
    for _ in $(seq 1 "$3"); do
        t0=$(now)
        if sbcast -f -j "$1" "$2" /tmp/storm-bench.bin 2>> "$work/sbcast.err"; then
            echo "$(ms "$t0" "$(now)")" >> "$4"
        else
            echo failed >> "$4"
        fi
    done
}
# floor N: p50 of floor_tree's round trip over vn1..vnN (fanout 8), in ms,
# or "failed".
floor() {
    local n=$1 i addrs=() pids=() out
    for i in $(seq 1 "$n"); do
        addrs+=("$(scontrol -o show node "vn$i" | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p')")
    done
    for i in $(seq 0 $((n - 1))); do
        "$VC" exec "vn$((i + 1))" "$FLOOR" node "$i" 8 "$FLOOR_PORT" "${addrs[@]}" 2>> "$work/floor.err" &
        pids+=($!)
    done
    out=$(timeout 120 "$FLOOR" root "$REPS" "$FLOOR_PORT" "${addrs[0]}" 2>> "$work/floor.err")
    sleep 0.2 # the nodes exit as the tree closes; any left (a failed run) are ended
    kill "${pids[@]}" 2> /dev/null
    for i in "${pids[@]}"; do wait "$i" 2> /dev/null; done
    sed -n 's/.* p50 \([0-9.]*\) ms.*/\1/p' <<<"$out" | grep . || echo failed
}
rows=()
run_case() { # N SHAPE
    local n=$1 shape=$2 label
    label="$n nodes${shape:+, $shape}"
    "$VC" down > /dev/null 2>&1
    local mc=()
    [ "$MCAST" = off ] || mc=(--conf "SwitchParameters=storm_mcast=$MCAST")
    "$VC" up "$n" ${shape:+--rate "$shape"} --conf "MessageTimeout=10" "${mc[@]}" > "$work/up.out" 2>&1 ||
        { cat "$work/up.out"; echo "bench-primitives: cannot start $n nodes" >&2; return 1; }
    eval "$("$VC" env)"
    [ "$MCAST" = off ] || cipher=$(agents_cipher "$STATE")
    local jid
    jid=$(sbatch --parsable -N "$n" -o /dev/null --wrap "sleep 3600")
    for _ in $(seq 1 100); do [ "$(squeue -h -j "$jid" -o %T)" = RUNNING ] && break; sleep 0.2; done
    # Storm (bench warms up for 10 ops and 200 ms, then measures REPS ops)
    # and the floor (10 ops to warm up), in turns.
    local r x c xs50=() xs99=() cs50=() cs99=() fs50=()
    for ((r = 1; r <= ROUNDS; r++)); do
        quiet
        x=$("$PRIM" bench xfer "$REPS" 64); c=$("$PRIM" bench caw "$REPS" 0)
        xs50+=("$(pick p50 "$x")") xs99+=("$(pick p99 "$x")") cs50+=("$(pick p50 "$c")") cs99+=("$(pick p99 "$c")")
        quiet
        fs50+=("$(floor "$n")")
        echo "  round $r of $ROUNDS at $label: xfer64 p50 ${xs50[-1]} p99 ${xs99[-1]}, floor p50 ${fs50[-1]}, caw p50 ${cs50[-1]} p99 ${cs99[-1]} ms" >&2
    done
    local x50 x99 c50 c99 f50 # a failed round counts as the slowest (common.sh)
    x50=$(median "${xs50[@]}") x99=$(median "${xs99[@]}") c50=$(median "${cs50[@]}") c99=$(median "${cs99[@]}") f50=$(median "${fs50[@]}")
    sbcast_times "$jid" "$work/f64" $((REPS / 10)) "$work/s64"
    local s50 s99 sfail
    sfail=$(grep -c failed "$work/s64")
    grep -v failed "$work/s64" > "$work/s64.ok"
    s50=$(pct "$work/s64.ok" 50); s99=$(pct "$work/s64.ok" 99)
    [ "$sfail" = 0 ] || echo "bench-primitives: $sfail of $((REPS / 10)) 64-byte sbcasts failed at $label" >&2
    # 12 MB: best of 3 each.
    local best_x=999999 best_s=999999 t xfail=0 s12fail=0
    for _ in 1 2 3; do
        sync # no write-back of the previous run under way (either side)
        t=$("$PRIM" xfer big 12M | sed -n 's/.* in \([0-9.]*\) ms.*: ok$/\1/p')
        if [ -n "$t" ]; then best_x=$(awk -v a="$best_x" -v b="$t" 'BEGIN { print (b < a) ? b : a }'); else xfail=$((xfail + 1)); fi
        sync
        sbcast_times "$jid" "$work/f12m" 1 "$work/s12"
        t=$(cat "$work/s12")
        if [ "$t" = failed ]; then s12fail=$((s12fail + 1)); else best_s=$(awk -v a="$best_s" -v b="$t" 'BEGIN { print (b < a) ? b : a }'); fi
    done
    # A column with failures says how many of the 3 runs failed.
    [ "$xfail" = 0 ] || best_x="failed${xfail}/3"
    [ "$s12fail" = 0 ] || best_s="$([ "$s12fail" = 3 ] && echo failed || echo "$best_s")(${s12fail}/3 failed)"
    "$PRIM" verify big 12M > /dev/null || echo "bench-primitives: 12 MB verify failed at $label" >&2
    scancel "$jid"
    local link=""
    [ -n "$shape" ] && link=$(awk -v r="${shape%mbit}" 'BEGIN { printf "%.0f", 12582912 * 8 / (r * 1e6) * 1000 }')
    rows+=("$(printf '%-22s %9s %9s %9s %7s %9s %9s %11s %11s %8s %11s %11s %8s %9s' "$label" \
        "$x50" "$x99" "$f50" "$(ratio "$x50" "$f50")" "$c50" "$c99" "$s50" "$s99" "$(ratio "$s50" "$x50")" \
        "$best_x" "$best_s" "$(ratio "$best_s" "$best_x")" "${link:--}")")
}
for n in "${sizes[@]}"; do run_case "$n" ""; done
for n in "${sizes[@]}"; do [ "$n" = 64 ] && run_case 64 100mbit; done
echo
echo "STORM primitives vs stock Slurm (times in ms; ratio = stock / Storm; REPS=$REPS, sbcast $((REPS / 10)) runs; multicast: $MCAST${cipher:+, AES-GCM by $cipher})"
printf '%-22s %9s %9s %9s %7s %9s %9s %11s %11s %8s %11s %11s %8s %9s\n' "cluster" "xfer64p50" "xfer64p99" \
    "floor p50" "/floor" "caw p50" "caw p99" "sbcast64p50" "sbcast64p99" "ratio" "xfer 12MB" "sbcast12MB" "ratio" "link12MB"
for r in "${rows[@]}"; do echo "$r"; done
echo "xfer64, floor and caw: the median of $ROUNDS rounds' p50 and p99, Storm and the floor measured in turns on a quiet machine."
echo "floor p50: the same 64-byte round trip to every node in plain C over a TCP tree of fanout 8"
echo "(contrib/bench/floor_tree), on the same virtual nodes in the same run: what the kernel alone costs here;"
echo "/floor: Storm's xfer64 p50 over it."
