#!/usr/bin/env bash
# bench-bcast: Storm's broadcast against stock Slurm's, side by side on the
# same virtual cluster of stock daemons (sbcast and srun --bcast with
# Slurm's own broadcast are stock Slurm's; storm-bcast and srun --bcast
# with cli_filter/storm are Storm's), with Slurm's default MessageTimeout (10 s).
#
#   sudo contrib/bench/bench-bcast.sh [-n "8 16 64 256"] [-s "4 12 100"]
#                                     [-r "unshaped shaped"] [-t SECONDS]
#                                     [-m GROUP:PORT|off] [-k REPS]
#
# For each node count, regime (links shaped to 100 Mbit/s, or unshaped) and
# file size (MB): the time of stock sbcast and of storm-bcast, and for 12 MB
# the time of `srun --bcast` launching a do-nothing 12 MB program, stock and
# Storm, and of Slurm's launch alone (`srun /bin/true`, nothing broadcast:
# both sruns pay it, so stock srun / launch bounds what any broadcast can
# gain on `srun --bcast` here); beside them the link limit (the time one 100 Mbit/s link needs for
# the file) and this machine's copy limit (the time to write N copies of
# the file, two writers at once: what any broadcast on this one machine
# must at least spend), measured twice where the guest hands freed memory
# back to its host: right after the previous copies were removed (their
# pages reused at once), and "cold", once the host has taken the freed
# memory back (the pages faulted in again from the host, as a broadcast
# that outlasts the guest's 2 s reporting delay meets them: measured by
# hand at 256 nodes, 0.66-0.92 s warm against 4.42-5.34 s cold).  Each is
# the lower of two ways to write the copies: cat's (128 KiB writes) and
# 63-page writes (dd), since on a guest that hands memory back, writes of
# a power-of-two number of pages at offsets aligned to it can cost the
# page cache twice as much (256 copies of 12 MB by hand: 1.41-1.60 s by
# cat, 0.75-0.84 s in 63-page writes).  Ratios
# are stock / Storm (higher is better for Storm); "storm/limit" divides
# Storm's time by the higher of the link and the copy limit, "/cold" by
# the higher of the link and the cold copy limit.  Where the agents
# multicast, each run also measures this machine's floor for the same
# broadcast (contrib/bench/floor_mcast, group 239.255.77.9:6839): plain C,
# the file multicast from vn1 to the other nodes, each writing its copy,
# with no encryption, checks, tree or repairs and the least flow control
# (at most 4 MiB beyond the slowest node; each node reads the data when a
# mark says a chunk of it came, as Storm's agents read a chunk at its
# announcement); the time from its first
# send to the last copy written.  It is what the
# kernel alone costs here to deliver the datagrams through the bridge and
# write every copy, and "storm/floor" divides Storm's time by it.  A floor
# run that lost a datagram (it has no repairs) is left out of the median
# (the cell shows "lost" if every run did).  A stock run that fails, or
# outlasts -t SECONDS (default 300), prints as failed.  Every
# Storm copy is checked (md5) on the first and last node.  Storm's
# agents carry the data by multicast on -m GROUP:PORT (default
# 239.255.77.1:6831; SwitchParameters storm_mcast), or through the tree of
# TCP connections alone with -m off.  With -k REPS (default 1), every
# measurement is taken REPS times, the four of a size in turn each time,
# and the table shows the median of each (every run's figures go to
# stderr as they come): on a machine whose timings wander, one run says
# little.  The order of the two broadcasts alternates: odd runs sbcast
# first, even runs storm-bcast first, so that neither always runs right
# after the other (the srun launches follow, Storm's, then the launch
# alone, then stock's last: a stock
# srun that fails can leave its step holding the nodes for minutes, and
# the next step could not start; before each srun, any step left is
# ended, and if one still holds the nodes after 3 min, that srun is not
# run and shows as "held", left out of the median: at 256 nodes a failed
# stock srun --bcast's step held every node for over 20 min): on a guest
# that hands freed memory back to its host, a broadcast that follows
# another one writing 64 copies can take twice as long (measured by hand:
# storm-bcast of 12 MB to 64 nodes 0.93-1.09 s right after an sbcast,
# 0.48-0.56 s right after another storm-bcast).  Where the guest counts
# the memory it hands back (/sys/module/page_reporting), each run's line
# on stderr says how many MiB it handed back during each measurement, and
# during the copy limit's: a measurement during which it handed back
# hundreds of MiB wrote into pages the host had to fault in again.  A copy
# that differs (md5) makes the whole cell "corrupt"; a failed run counts
# as the slowest.  The floor runs before Storm in even runs, after it in
# odd ones.  Before the first measurement on each cluster, both broadcasts
# run once, unshaped and not counted (their times go to stderr): the first
# writes on a fresh cluster fault in memory the guest had not touched, and
# they fell on whichever broadcast came first (storm-bcast of 12 MB to 256
# nodes, by hand: 6.8 s the first time, 1.9-2.5 s the next three).  Where
# the guest hands memory back, every measurement (stock and Storm alike)
# is preceded by as many copies of its file written and removed, not
# counted: the measurement then writes into memory the guest holds, as the
# copy limit does (see prewarm below).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
BCAST=$BUILD/tools/storm-bcast
FLOORM=$BUILD/contrib/bench/floor_mcast
FLOOR_GROUP=239.255.77.9 FLOOR_PORT=6839
VC=$top/contrib/vcluster/storm-vcluster
NODES="8 16 64 256" SIZES="4 12 100" REGIMES="unshaped shaped" STOCK_TIMEOUT=300 MCAST=239.255.77.1:6831 REPS=1
while getopts n:s:r:t:m:k: o; do
    case $o in
    n) NODES=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    r) REGIMES=$OPTARG ;;
    t) STOCK_TIMEOUT=$OPTARG ;;
    m) MCAST=$OPTARG ;;
    k) REPS=$OPTARG ;;
    *) echo "usage: $0 [-n NODES] [-s SIZES_MB] [-r REGIMES] [-t SECONDS] [-m GROUP:PORT|off] [-k REPS]" >&2; exit 2 ;;
    esac
done
check_reps bench-bcast "$REPS"
RATE_MBIT=100
work=/var/tmp/storm-bench-bcast
[ -x "$BCAST" ] || { echo "bench-bcast: $BCAST not built (run contrib/storm-setup)" >&2; exit 2; }
[ "$MCAST" = off ] || [ -x "$FLOORM" ] || { echo "bench-bcast: $FLOORM not built (run make)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-bcast: must run as root" >&2; exit 2; }
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
cipher= # the AES-GCM implementation of the agents' multicast, once a cluster is up
floor_pids=()
trap 'kill "${floor_pids[@]}" 2> /dev/null; "$VC" down > /dev/null 2>&1' EXIT
rm -rf "$work" && mkdir -p "$work" && chmod 755 "$work"
for s in $SIZES; do head -c $((s * 1000000)) /dev/urandom > "$work/f$s"; done
cp /bin/true "$work/prog" && head -c 12000000 /dev/urandom >> "$work/prog" && chmod 755 "$work/prog"

# KiB of freed guest memory handed back to the host so far, where the
# guest's page reporting counts it (empty elsewhere): a run during which
# the host takes memory back writes its copies into pages the host must
# fault in again, and can take twice as long
host_took() { cat /sys/module/page_reporting/parameters/reported_kib 2> /dev/null; }
# took_during NAME KIB-BEFORE: " NAME MiB" handed back since KIB-BEFORE, or nothing
took_during() {
    local now
    now=$(host_took)
    [ -n "$2" ] && [ -n "$now" ] && printf ' %s %d' "$1" $(((now - $2) / 1024))
}
# between runs: no copies left, and no write-back of earlier runs under way
clean_dest() { rm -f "$STATE"/nodes/vn*/tmp/bench.* "$STATE"/nodes/vn*/tmp/.bench.*; sync; }
# after an srun that failed or was stopped, and before each srun: end any
# step left, so the next one does not wait for the nodes (hundreds of
# nodes take a while: up to 3 min); false if one still holds them then.
# Steps that outlasted the wait once are not waited for again (held).
held=""
steps_left() { squeue -h -s -j "$1" -o %i 2>/dev/null | grep -v -e batch -e extern | sort | tr '\n' ' '; }
end_steps() {
    local s left
    left=$(steps_left "$1")
    [ -n "$left" ] || return 0
    [ "$left" = "$held" ] && return 1
    for s in $left; do scancel "$s" 2>/dev/null; done
    for _ in $(seq 1 900); do
        [ -n "$(steps_left "$1")" ] || return 0
        sleep 0.2
    done
    held=$(steps_left "$1")
    echo "bench-bcast: step(s) ${held% } of job $1 still hold nodes after 3 min: sruns are not run (held) while they do" >&2
    return 1
}
# timed_srun VAR show|quiet CONF ARGS...: into VAR, the seconds of
# `srun --jobid=$jid -N $n ARGS` with SLURM_CONF=CONF; "held" (not run)
# while an earlier step still holds the nodes; "failed", with srun's last
# lines on stderr where "show", and the step it left ended.  Not in a
# subshell: end_steps keeps what it found held in $held.
timed_srun() {
    local -n into=$1
    local show=$2 conf=$3
    shift 3
    if ! end_steps "$jid"; then
        into=held
        return
    fi
    into=$(SLURM_CONF=$conf timed "$work/srun.out" srun --jobid="$jid" -N "$n" "$@")
    if [ "$into" = failed ]; then
        [ "$show" = quiet ] || tail -n 5 "$work/srun.out" >&2
        end_steps "$jid"
    fi
}
# Before each measurement, where the guest hands freed memory back to its
# host: N copies of FILE written and removed, so that the measurement
# writes its copies into memory the guest holds, as every real node's
# memory is, and not into pages the host must fault in again first.  After
# a failed stock sbcast at 256 nodes (the slurmds' memory grew by 2-4 GB
# during it), storm-bcast took 2.4-4.5 s in ten runs without this (at
# once, after waiting 10 s or until the host took nothing back, or after
# restarting every slurmd), and 1.7 and 2.4 s in two with it (by hand,
# links shaped; 1.4-1.8 s on a fresh cluster).  In this benchmark (-n 256
# -r shaped -k 3), the Storm runs right after a failed sbcast took 3.13,
# 3.14, 3.90 and 3.98 s without it, 1.90 and 2.18 s with it.
prewarm() {
    [ -n "$(host_took)" ] || return 0
    write_copies "$1" "$2" dd
    rm -f "$STATE"/nodes/vn*/tmp/bench.copy
}
# until the host has taken back what the guest freed (its count of
# reported KiB held still for a second, after the 2 s the guest waits
# before it reports), at most 30 s; at once where the guest does not count it
settle_freed() {
    local k0 k1
    k0=$(host_took)
    [ -n "$k0" ] || return 0
    sleep 2
    for _ in $(seq 1 30); do
        sleep 1
        k1=$(host_took)
        [ "$k1" = "$k0" ] && return 0
        k0=$k1
    done
}

rows=()
for n in $NODES; do
    "$VC" down > /dev/null 2>&1
    mc=()
    [ "$MCAST" = off ] || mc=(--conf "SwitchParameters=storm_mcast=$MCAST")
    "$VC" up "$n" --conf "MessageTimeout=10" "${mc[@]}" > "$work/up.out" 2>&1 ||
        { cat "$work/up.out"; echo "bench-bcast: cannot start $n nodes" >&2; continue; }
    eval "$("$VC" env)"
    # The AES-GCM implementation the agents chose (their start-up line).
    [ "$MCAST" = off ] || cipher=$(agents_cipher "$STATE")
    # the nodes' addresses (floor_mcast's interfaces) and their links' MTU
    addrs=()
    while read -r i a; do addrs[i]=$a; done < <(scontrol -o show node |
        sed -n 's/^NodeName=vn\([0-9]*\) .*NodeAddr=\([^ ]*\) .*/\1 \2/p')
    mtu=$("$VC" exec vn1 cat /sys/class/net/eth0/mtu)
    # srun with stock Slurm's broadcast: the same cluster, a client config
    # without cli_filter/storm.
    sed '/^CliFilterPlugins=/d' "$SLURM_CONF" > "$STATE/etc/slurm-stock-launch.conf"
    jid=$(sbatch --parsable -N "$n" -o /dev/null --wrap "sleep 7200")
    for _ in $(seq 1 300); do [ "$(squeue -h -j "$jid" -o %T)" = RUNNING ] && break; sleep 0.2; done
    last=vn$n
    # warm-up: both broadcasts once, not counted
    f=$work/f${SIZES%% *}
    "$VC" shape off > /dev/null
    clean_dest
    st=$(timed "$work/sbcast.out" sbcast -f -j "$jid" "$f" /tmp/bench.stock)
    clean_dest
    xt=$(timed "$work/storm.out" "$BCAST" -f -j "$jid" "$f" /tmp/bench.storm)
    clean_dest
    echo "  warm-up (not counted): $n nodes unshaped ${SIZES%% *} MB: sbcast $st storm $xt" >&2
    for regime in $REGIMES; do
        if [ "$regime" = shaped ]; then "$VC" shape ${RATE_MBIT}mbit > /dev/null; else "$VC" shape off > /dev/null; fi
        for s in $SIZES; do
            f=$work/f$s
            all_st=() all_xt=() all_sx=() all_ss=() all_fl=() all_sa=()
            for ((rep = 1; rep <= REPS; rep++)); do
                st=- xt=- ss=- sx=- fl=- sa=-
                if ((rep % 2)); then order="sbcast storm"; else order="storm sbcast"; fi
                if [ "$MCAST" != off ]; then
                    if ((rep % 2)); then order+=" floor"; else order="floor $order"; fi
                fi
                [ "$s" = 12 ] && order+=" srun_storm srun_alone srun_stock"
                took=""
                for what in $order; do
                    clean_dest
                    prewarm "$n" "$f"
                    k0=$(host_took)
                    case $what in
                    sbcast)
                        st=$(timed "$work/sbcast.out" sbcast -f -j "$jid" "$f" /tmp/bench.stock)
                        [ "$st" = failed ] && sed 's/^/  sbcast: /' "$work/sbcast.out" | tail -n 3 >&2
                        ;;
                    storm)
                        t0=$(now)
                        if "$BCAST" -f -j "$jid" "$f" /tmp/bench.storm > "$work/storm.out" 2>&1; then
                            xt=$(secs "$t0" "$(now)")
                            want=$(md5sum < "$f")
                            for node in vn1 "$last"; do
                                [ "$("$VC" exec "$node" sh -c 'md5sum < /tmp/bench.storm')" = "$want" ] ||
                                    { echo "bench-bcast: $node's copy differs ($n nodes, $s MB)" >&2; xt=corrupt; }
                            done
                        else
                            xt=failed
                            sed 's/^/  storm-bcast: /' "$work/storm.out" | tail -n 5 >&2
                        fi
                        ;;
                    floor) fl=$(mcast_floor "$n" "$f") ;;
                    srun_storm) timed_srun sx show "$SLURM_CONF" --bcast=/tmp/bench.prog "$work/prog" ;;
                    srun_alone) timed_srun sa show "$STATE/etc/slurm-stock-launch.conf" /bin/true ;;
                    # stock's failures are expected at scale: not shown
                    srun_stock) timed_srun ss quiet "$STATE/etc/slurm-stock-launch.conf" --bcast=/tmp/bench.prog "$work/prog" ;;
                    esac
                    took+=$(took_during "$what" "$k0")
                done
                clean_dest
                all_st+=("$st") all_xt+=("$xt") all_sx+=("$sx") all_ss+=("$ss") all_fl+=("$fl") all_sa+=("$sa")
                [ "$REPS" = 1 ] && [ -z "$took" ] ||
                    echo "  run $rep of $REPS: $n nodes $regime $s MB: sbcast $st storm $xt floor $fl srun stock $ss srun storm $sx launch $sa${took:+ (MiB the host took back during each:$took)}" >&2
            done
            st=$(median "${all_st[@]}") xt=$(median "${all_xt[@]}") sx=$(median "${all_sx[@]}") ss=$(median "${all_ss[@]}") sa=$(median "${all_sa[@]}")
            fl=$(median "${all_fl[@]/#lost/held}")
            [ "$fl" = held ] && fl=lost
            link=$(awk -v s="$s" -v r="$RATE_MBIT" 'BEGIN { printf "%.2f", s * 8 / r }')
            k0=$(host_took)
            copy_cat=$(copy_limit "$n" "$f" cat)
            copy_dd=$(copy_limit "$n" "$f" dd)
            copy=$(lower "$copy_cat" "$copy_dd")
            took=$(took_during copy "$k0")
            cold=-
            if [ -n "$took" ]; then # then into memory the host took back first
                settle_freed
                k0=$(host_took)
                cold_cat=$(copy_limit "$n" "$f" cat)
                settle_freed
                cold_dd=$(copy_limit "$n" "$f" dd)
                cold=$(lower "$cold_cat" "$cold_dd")
                echo "  copy limit $copy s (cat $copy_cat, 63-page writes $copy_dd), cold $cold s (cat $cold_cat," \
                    "63-page writes $cold_dd) (MiB the host took back during each:$took$(took_during cold "$k0"))" >&2
            fi
            limit=$copy limit_cold=$cold
            if [ "$regime" = shaped ]; then
                limit=$(higher "$link" "$copy")
                [ "$cold" = - ] || limit_cold=$(higher "$link" "$cold")
            fi
            rows+=("$(printf '%6s %-9s %6s %9s %9s %7s %10s %10s %7s %7s %7s %7s %7s %7s %12s %6s %6s %11s' "$n" "$regime" "$s" \
                "$st" "$xt" "$(ratio "$st" "$xt")" "$ss" "$sx" "$(ratio "$ss" "$sx")" "$sa" "$(ratio "$ss" "$sa")" \
                "$([ "$regime" = shaped ] && echo "$link" || echo -)" "$copy" "$cold" "$(ratio "$xt" "$limit")" \
                "$(ratio "$xt" "$limit_cold")" "$fl" "$(ratio "$xt" "$fl")")")
            echo "${rows[-1]}" >&2
        done
    done
    "$VC" shape off > /dev/null
    scancel "$jid"
done
echo
echo "Broadcast: stock Slurm vs Storm ($([ "$MCAST" = off ] && echo "tree of TCP connections" || echo "multicast on $MCAST, AES-GCM by ${cipher:-?}")), seconds (ratio = stock / Storm; links shaped to ${RATE_MBIT} Mbit/s or unshaped;"
echo "srun = srun --bcast launch of a do-nothing 12 MB program; launch = srun /bin/true, Slurm's launch alone;"
echo "bound = srun stock / launch, the highest srun ratio any broadcast could give; link = one link's time for the file;"
echo "copy = N copies on this machine (the faster of cat and 63-page writes), right after the previous ones were removed;"
echo "cold = the same once the host has taken the freed memory back, where the guest hands it back (- elsewhere);"
echo "storm/limit and /cold: storm over the higher of link and copy, of link and cold;"
echo "floor = plain C multicast of the file from vn1 to every other node, each writing its copy, nothing of Storm in it;"
echo "storm/floor = storm over floor; - where the agents do not multicast, lost where the floor lost datagrams in every run)"
[ "$REPS" = 1 ] || echo "sbcast, storm, floor, srun and launch: the median of $REPS runs each (\"held\" runs, sruns not run while a failed one's step held the nodes, and floor runs that lost datagrams, left out)"
printf '%6s %-9s %6s %9s %9s %7s %10s %10s %7s %7s %7s %7s %7s %7s %12s %6s %6s %11s\n' nodes regime MB sbcast storm ratio \
    "srun stock" "srun storm" ratio launch bound link copy cold storm/limit /cold floor storm/floor
for r in "${rows[@]}"; do echo "$r"; done
