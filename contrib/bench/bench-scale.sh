#!/usr/bin/env bash
# bench-scale: how Storm's costs grow with the number of nodes, each figure
# beside stock Slurm's and this machine's floor for the same work at the
# same N, on one virtual cluster per node count (Storm's suite on stock
# daemons, agents multicasting on -m GROUP:PORT, links unshaped).
#
#   sudo contrib/bench/bench-scale.sh [-n "64 256 512 1000"] [-s "12 100"]
#                                     [-k REPS] [-m GROUP:PORT] [-t SECONDS]
#                                     [-d DATAFILE] [-g yes|no] [-T DIR|none]
#                                     [-f TIMEOUT|0] [-x "launch sbcast copy"]
#
# For each node count N it prints one row:
#   start      seconds `storm-vcluster up N` took, and the memory the cluster
#              holds per node, two ways: "pss", the proportional set size of
#              its processes (slurmctld, munged, every slurmd with its agent)
#              over N, which other work on the machine does not disturb;
#              "avail", MemAvailable before minus after, over N, which also
#              counts the kernel's share (namespaces, links, sockets) but
#              moves with anything else running;
#   launch     `srun -N N /bin/true` (Slurm's own launch, Storm's plugins
#              loaded), the median of REPS;
#   ctx(B)     the bytes of a step's communication context (STORM_CTX, in
#              the switch info Slurm's launch carries through every hop);
#   MB storm / stock / floor
#              for each size (-s, MB): storm-bcast into a job on every node
#              (median of REPS, every copy's md5 checked on the first and
#              last node; each run, like srun's and sbcast's, at most -t
#              SECONDS, default 300, else "failed": at 1000 virtual nodes
#              on two cores a 12 MB storm-bcast takes 70-130 s, so give
#              -t 150 or more there), stock sbcast (once; it fails at
#              scale; skipped where N copies of the file
#              exceed the memory available: slurmd holds the file in
#              memory on its way), and the floor: the same file
#              multicast from vn1 by plain C (contrib/bench/floor_mcast), each
#              node writing its copy, nothing of Storm in it (the least
#              flow control: at most 4 MiB beyond the slowest node; each
#              node reads the data once a mark says a chunk of it came, as
#              Storm's agents read a chunk when its announcement comes), and the
#              sealed floor: the same, every byte sealed and checked by
#              AES-128-GCM as Storm seals its chunks, by the library its
#              agents choose (each node decrypts its copy, and here N
#              nodes do so on two cores);
#              and the copy limit: N copies of the file written on this
#              machine by two writers at once, no network, in plain C
#              (contrib/bench/floor_copy: no process per copy);
#              "storm/copy" and "storm/floor" are what carry over to a real
#              cluster: on one machine N nodes share two cores and one
#              page cache, so both grow with N, and their ratio should not;
#              "cpu/flr" and "cpu/sld": the same work counted in CPU-seconds,
#              storm's over the floor's (bare, sealed): the machine's busy
#              time over each run (/proc/stat: every process and the
#              kernel's softirqs and write-back, all cores), less what the
#              idle cluster costs it a second (measured for 10 s before the
#              broadcasts) times the run's length; wall time on N virtual
#              nodes also holds the waits of a run (a timer, the slowest
#              node), CPU-seconds only the work each node does, which is
#              what a real node does on its own cores;
#   strobe     with -g yes (default): two jobs alternating on every node
#              (storm_gang_quantum N/2 ms, at least 2 ms: N virtual
#              nodes strobed every N/2 ms cost this host's two cores the same
#              at every N; at N/8 ms, 1000 agents took 1.5 of them), each node's strobe
#              delivery delay over its last strobes, the median node's p50
#              and the worst node's p99 (storm-gang nodes), strobes by
#              multicast;
#   tree       with -T DIR (default /usr/share/zoneinfo, tzdata's tree of
#              files and symbolic links; none: skipped): storm-bcast of the
#              tree into the job (median of REPS, each copy's manifest of
#              names, kinds, sizes and link targets checked on the first
#              and last node; a hop may stay silent max(10, N/20) s, as
#              every node's files go to this machine's one disk) beside
#              this machine's floor for the same
#              files: N untars of the tree, two at once (no network), and
#              their ratio;
#   faults     with -f TIMEOUT (default max(5, N/50) s; 0: off): the cluster
#              runs with storm_fault_timeout=TIMEOUT (sched/gang beats every
#              agent; N virtual nodes share this machine's cores, and at
#              1000 of them a step's launch keeps agents from running for
#              more than 5 s, which a real node's agent never waits)
#              and sinfo is sampled every 2 s from start to end: the nodes
#              ever seen down, drained or not responding, which must be 0
#              (every node is alive) over the samples taken; nodes out of
#              service before the broadcasts' job and before the strobes'
#              jobs are named and resumed, so that those still get all N
#              nodes (a job that does not start in 300 s is reported, its
#              measurements "no job").
# -x leaves out the measurements it names, each shown "-": launch (srun
# /bin/true and ctx(B): at 1000 virtual nodes each srun takes 40 s or more,
# and a failed one the whole -t), sbcast, copy.  With -x "launch sbcast
# copy" -g no -T none, a node count costs its cluster's start and the
# broadcasts only.
# Every measurement also goes to DATAFILE (-d, default
# /var/tmp/storm-bench-scale/data.txt) as "nodes MB kind seconds" lines,
# which contrib/model/storm-model fits (kinds storm-mcast, sbcast, floor, floor-sealed,
# copy, launch, read, write, writeback-mb; also storm-mcast-cpu, floor-cpu,
# floor-sealed-cpu in CPU-seconds above idle, and idle-cpu-rate).  A failed run prints as "failed" and is not written
# there.  Clusters are brought down on exit, failed or not.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$top}
. "$top/contrib/bench/common.sh"
BCAST=$BUILD/tools/storm-bcast
GANG=$BUILD/tools/storm-gang
FLOORM=$BUILD/contrib/bench/floor_mcast
FLOORC=$BUILD/contrib/bench/floor_copy
FLOOR_GROUP=239.255.77.9 FLOOR_PORT=6839
VC=$top/contrib/vcluster/storm-vcluster
NODES="64 256 512 1000" SIZES="12 100" REPS=3 JOB_WAIT=300 MCAST=239.255.77.1:6831 STOCK_TIMEOUT=300 GANGS=yes
TREE=/usr/share/zoneinfo FAULT=auto SKIP=''
work=/var/tmp/storm-bench-scale
DATA=$work/data.txt
usage() { echo "usage: $0 [-n NODES] [-s SIZES_MB] [-k REPS] [-m GROUP:PORT] [-t SECONDS] [-d DATAFILE] [-g yes|no] [-T DIR|none] [-f TIMEOUT|0] [-x \"launch sbcast copy\"]" >&2; exit 2; }
while getopts n:s:k:m:t:d:g:T:f:x: o; do
    case $o in
    n) NODES=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    k) REPS=$OPTARG ;;
    m) MCAST=$OPTARG ;;
    t) STOCK_TIMEOUT=$OPTARG ;;
    d) DATA=$OPTARG ;;
    g) GANGS=$OPTARG ;;
    T) TREE=$OPTARG ;;
    f) FAULT=$OPTARG ;;
    x) SKIP=$OPTARG ;;
    *) usage ;;
    esac
done
check_reps bench-scale "$REPS"
for n in $NODES; do
    [[ $n =~ ^[1-9][0-9]*$ ]] && ((n >= 2)) || { echo "bench-scale: -n takes node counts of 2 or more, not \"$n\"" >&2; exit 2; }
done
for s in $SIZES; do [[ $s =~ ^[1-9][0-9]*$ ]] || { echo "bench-scale: -s takes whole MB, not \"$s\"" >&2; exit 2; }; done
[[ $STOCK_TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "bench-scale: -t takes whole seconds, not \"$STOCK_TIMEOUT\"" >&2; exit 2; }
[[ $MCAST =~ ^[0-9.]+:[0-9]+$ ]] || { echo "bench-scale: -m takes GROUP:PORT (the floor and Storm multicast), not \"$MCAST\"" >&2; exit 2; }
case $GANGS in yes | no) ;; *) usage ;; esac
[ "$TREE" = none ] || [ -d "$TREE" ] || { echo "bench-scale: -T takes a directory or none, not \"$TREE\"" >&2; exit 2; }
[[ $FAULT =~ ^(auto|0|[1-9][0-9]*(ms|s|min)?)$ ]] || { echo "bench-scale: -f takes storm_fault_timeout's value (5s; auto: max(5, N/50) s; 0 for off), not \"$FAULT\"" >&2; exit 2; }
for x in $SKIP; do
    case $x in launch | sbcast | copy) ;; *) echo "bench-scale: -x takes launch, sbcast and copy, not \"$x\"" >&2; exit 2 ;; esac
done
# skipped WHAT: whether -x named WHAT
skipped() { [[ " $SKIP " == *" $1 "* ]]; }
# the fault timeout at N nodes
fault_at() { if [ "$FAULT" = auto ]; then echo "$(($1 / 50 > 5 ? $1 / 50 : 5))s"; else echo "$FAULT"; fi; }
[ "$(id -u)" = 0 ] || { echo "bench-scale: must run as root" >&2; exit 2; }
for x in "$BCAST" "$GANG" "$FLOORM" "$FLOORC"; do [ -x "$x" ] || { echo "bench-scale: $x not built (run contrib/storm-setup, then make)" >&2; exit 2; }; done
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
floor_pids=() watch_pid='' cipher=''
# The page cache may hold 60% of memory dirty (the kernel's default is 20%)
# while the benchmark runs: every node's copy lands in this one machine's
# page cache, and at hundreds of nodes the default limit would make the
# figures this machine's disk's, not Storm's (on a cluster each node writes
# to its own disk).  Storm, the floor and sbcast run under the same limit;
# the old one is put back on exit.
dirty=$(sysctl -n vm.dirty_ratio vm.dirty_background_ratio | tr '\n' ' ')
trap 'kill "${floor_pids[@]}" $watch_pid 2> /dev/null; "$VC" down > /dev/null 2>&1
      set -- $dirty; sysctl -qw vm.dirty_ratio="$1" vm.dirty_background_ratio="$2"' EXIT
sysctl -qw vm.dirty_ratio=60 vm.dirty_background_ratio=40
rm -rf "$work" && mkdir -p "$work" && chmod 755 "$work"
mkdir -p "$(dirname "$DATA")" && : >> "$DATA" || { echo "bench-scale: cannot write $DATA" >&2; exit 2; }
for s in $SIZES; do head -c $((s * 1000000)) /dev/urandom > "$work/f$s"; done
if [ "$TREE" != none ]; then
    tar -C "$TREE" -cf "$work/tree.tar" . || { echo "bench-scale: cannot read $TREE" >&2; exit 2; }
    tree_ref=$(tree_manifest "$TREE")
fi

# record N MB KIND SECONDS: a measurement for the model (numbers only)
record() { [[ $4 =~ ^[0-9.]+$ ]] && echo "$1 $2 $3 $4" >> "$DATA"; }
clean_dest() { rm -f "$STATE"/nodes/vn*/tmp/bench.*; sync; }
mem_avail_mb() { awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo; }
# MB of proportional set size of the cluster's processes (their command
# lines name its state directory)
cluster_pss_mb() {
    local p
    for p in $(pgrep -f -- "$STATE/"); do cat "/proc/$p/smaps_rollup" 2> /dev/null; done |
        awk '/^Pss:/ { k += $2 } END { printf "%.1f", k / 1024 }'
}
# storm_once N FILE: seconds of one storm-bcast, "corrupt" if a copy
# differs; the machine's CPU over it to $work/storm.cpu ("BUSY WALL")
storm_once() {
    local n=$1 f=$2 t want node c0
    c0=$(cpu_mark)
    t=$(timed "$work/storm.out" "$BCAST" -f -j "$jid" "$f" /tmp/bench.storm)
    cpu_since "$c0" > "$work/storm.cpu"
    if [ "$t" = failed ]; then
        sed 's/^/  storm-bcast: /' "$work/storm.out" | tail -n 5 >&2
    else
        want=$(md5sum < "$f")
        for node in vn1 "vn$n"; do
            [ "$("$VC" exec "$node" sh -c 'md5sum < /tmp/bench.storm')" = "$want" ] ||
                { echo "bench-scale: $node's copy differs ($n nodes)" >&2; t=corrupt; }
        done
    fi
    echo "$t"
}
# run_cpu SECONDS FILE: the CPU-seconds above idle of a run that took
# SECONDS (a number, else "held": not measured), from its FILE of
# cpu_since, less the idle cluster's $idle_rate
run_cpu() {
    local busy wall
    if [[ $1 =~ ^[0-9.]+$ ]] && { read -r busy wall _ < "$2"; } 2> /dev/null; then cpu_above "$idle_rate" "$busy" "$wall"; else echo held; fi
}
# run_switches SECONDS FILE: the context switches over such a run, in
# thousands (not less the idle cluster's), or "held"
run_switches() {
    local switches
    if [[ $1 =~ ^[0-9.]+$ ]] && { read -r _ _ switches < "$2"; } 2> /dev/null && [ -n "$switches" ]; then
        awk -v c="$switches" 'BEGIN { printf "%.1f", c / 1000 }'
    else echo held; fi
}
# tree_once N: seconds of one storm-bcast of the tree, "corrupt" if a copy
# differs from the source
tree_once() {
    local n=$1 t node
    t=$(timed "$work/tree.out" "$BCAST" -f -t $((n / 20 > 10 ? n / 20 : 10)) -j "$jid" "$TREE" /tmp/bench.tree)
    if [ "$t" = failed ]; then
        sed 's/^/  storm-bcast (tree): /' "$work/tree.out" | tail -n 5 >&2
    else
        for node in vn1 "vn$n"; do
            [ "$(tree_manifest "$STATE/nodes/$node/tmp/bench.tree")" = "$tree_ref" ] ||
                { echo "bench-scale: $node's copy of $TREE differs ($n nodes)" >&2; t=corrupt; }
        done
    fi
    echo "$t"
}
# watch_faults FILE: every 2 s, the nodes sinfo has down, drained, failing
# or not responding, appended to FILE (one sample a line: a count, then
# NAME:STATE of each; "?" where sinfo got no answer from slurmctld: that
# sample says nothing, and an empty answer is not a sample of none); runs
# until killed
watch_faults() {
    while :; do
        local out
        if out=$(sinfo -h -N -t down,drain,fail,no_respond -o %N:%T 2> /dev/null | sort -u | tr '\n' ' '); then
            echo "$(wc -w <<< "$out") $out" >> "$1"
        else
            echo "? sinfo failed" >> "$1"
        fi
        sleep 2
    done
}
# faults FILE: "0/SAMPLES" or "K!/SAMPLES" with K the nodes ever out of
# service, and "+F?" for the F samples sinfo could not take
faults() {
    awk '$1 == "?" { f++; next } { n++; for (i = 2; i <= NF; i++) seen[substr($i, 1, index($i, ":") - 1)] = 1 }
        END { k = length(seen); printf "%s/%d", k ? k "!" : 0, n; if (f) printf "+%d?", f }' "$1"
}
# resume_drained N: nodes out of service now are named (the faults column
# counts them) and resumed, so that the measurements after still get all N
resume_drained() {
    local out
    out=$(sinfo -h -N -t down,drain,fail -o '%N' 2> /dev/null | sort -u | paste -sd, -)
    [ -n "$out" ] || return 0
    echo "  $1 nodes: out of service before a job of all of them: $out ($(sinfo -h -R -o '%E' | sort -u | paste -sd ';' -)); resumed" >&2
    scontrol update nodename="$out" state=resume 2> /dev/null
}
# The gang quantum at N nodes: N/2 ms, at least 2 ms.  Every strobe wakes
# every agent, and N agents share this host's two cores: at N/2 ms the host
# carries 2,000 node-strobes a second at every N (at N/8 ms, 8,000: at 1000
# nodes the agents alone took 1.5 of the two cores, and the jobs' launch
# no longer fit).
quantum_ms() { echo $(($1 / 2 > 2 ? $1 / 2 : 2)); }
# Slurm's MessageTimeout at N nodes: max(10, N/16) s.  At 1000 nodes each
# task's slurmstepd answers srun's launch on a host running N slurmd and
# 2N slurmstepd; at 10 s those answers time out ("Failed to send
# RESPONSE_LAUNCH_TASKS: Socket timed out") and srun fails the step.
message_timeout() { echo $(($1 / 16 > 10 ? $1 / 16 : 10)); }
# the median node's p50 and the worst node's p99 of strobe delivery (us)
strobes() {
    local n=$1 dq=$(quantum_ms "$1") i launch_wait=$(($1 / 4 > 180 ? $1 / 4 : 180))
    # One job after the other: Slurm's launch of 2N tasks at once on this
    # machine's cores (2N slurmstepd starting together) overloads it so far
    # that munge credentials expire on the way (at 1000 nodes: load 2,200,
    # "Expired credential" 7 minutes on).  Each launch gets max(180, N/4) s;
    # pgrep itself is slow with thousands of processes: a deadline, not a count.
    for i in 1 2; do
        sbatch -p gang -N "$n" -o /dev/null -D "$work" --wrap "srun sleep 900" > /dev/null
        local deadline=$((SECONDS + launch_wait))
        while [ "$(pgrep -fc '^(/usr/bin/)?sleep 900$')" -lt $((i * n)) ]; do
            ((SECONDS < deadline)) || { echo "bench-scale: job $i's $n tasks did not all start in $launch_wait s" >&2; break; }
            sleep 2
        done
    done
    sleep 40 # each node's window (its last strobes within 30 s) holds the steady state
    "$GANG" nodes > "$work/nodes.$n" 2>&1
    scancel -p gang
    awk -v q="${dq}ms" '/^delivery over/ { for (i = 1; i <= NF; i++) { if ($i == "p50") a = $(i + 1); if ($i == "p99") b = $(i + 1) } }
        END { if (a != "" && b != "") printf "%s/%s@%s", a, b, q; else printf "failed" }' "$work/nodes.$n"
}

rows=()
for n in $NODES; do
    "$VC" down > /dev/null 2>&1
    sysctl -qw net.ipv4.neigh.default.gc_thresh1=16384 net.ipv4.neigh.default.gc_thresh2=65536 net.ipv4.neigh.default.gc_thresh3=262144
    dq=$(quantum_ms "$n") ft=$(fault_at "$n")
    m0=$(mem_avail_mb) t0=$(now)
    if ! "$VC" up "$n" --conf "MessageTimeout=$(message_timeout "$n")" --conf "SwitchParameters=storm_mcast=$MCAST" \
        --conf "SchedulerParameters=storm_gang_quantum=${dq}ms,storm_fault_timeout=$ft" \
        --conf "PartitionName=gang Nodes=ALL OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP Default=NO" \
        > "$work/up.out" 2>&1; then
        tail -n 5 "$work/up.out" >&2
        rows+=("$(printf '%6s %s' "$n" "cluster did not start")")
        continue
    fi
    start=$(secs "$t0" "$(now)")
    sleep 5 # the agents' start-up settles
    cipher=$(agents_cipher "$STATE")
    per_node=$(awk -v p="$(cluster_pss_mb)" -v a="$m0" -v b="$(mem_avail_mb)" -v n="$n" \
        'BEGIN { printf "%.1f/%.1f", p / n, (a - b) / n }')
    eval "$("$VC" env)"
    : > "$work/faults.$n"
    if [ "$FAULT" != 0 ]; then
        watch_faults "$work/faults.$n" &
        watch_pid=$!
    fi
    addrs=()
    while read -r i a; do addrs[i]=$a; done < <(scontrol -o show node |
        sed -n 's/^NodeName=vn\([0-9]*\) .*NodeAddr=\([^ ]*\) .*/\1 \2/p')
    mtu=$("$VC" exec vn1 cat /sys/class/net/eth0/mtu)
    # this machine's read and write for the model (one node, page cache),
    # and how much the page cache takes dirty before the kernel starts
    # writing back (dirty_background_ratio of the memory available): past
    # it every virtual node's copy goes to the one shared disk
    record "$n" 0 writeback-mb "$(awk -v r="$(sysctl -n vm.dirty_background_ratio)" \
        '/^MemAvailable:/ { print int($2 / 1024 * r / 100) }' /proc/meminfo)"
    for s in $SIZES; do
        record "$n" "$s" read "$(timed /dev/null cat "$work/f$s")"
        sync
        record "$n" "$s" write "$(timed /dev/null cp "$work/f$s" "$STATE/nodes/vn1/tmp/bench.w")"
        rm -f "$STATE/nodes/vn1/tmp/bench.w"
    done
    launch=(-) ctx=-
    if ! skipped launch; then
        launch=()
        for ((r = 0; r < REPS; r++)); do
            t=$(timed "$work/srun.out" srun -N "$n" /bin/true)
            [ "$t" = failed ] && tail -n 3 "$work/srun.out" >&2
            record "$n" 0 launch "$t"
            launch+=("$t")
        done
        # the step's communication context: what Slurm carries in the switch
        # info to every node, through every hop of its launch tree
        ctx=$(timeout "$STOCK_TIMEOUT" srun -N "$n" -n "$n" sh -c '[ "$SLURM_NODEID" = 0 ] && printf %s "$STORM_CTX"' 2> /dev/null | wc -c)
        record "$n" 0 context-bytes "$ctx"
    fi
    row=$(printf '%6s %6s %11s %7s %6s' "$n" "$start" "$per_node" "$(median "${launch[@]}")" "$ctx")
    resume_drained "$n"
    jid=$(sbatch --parsable -N "$n" -o /dev/null -D "$work" --wrap "sleep 7200")
    started=no
    for _ in $(seq "$JOB_WAIT"); do
        [ "$(squeue -h -j "$jid" -o %T)" = RUNNING ] && { started=yes; break; }
        sleep 1
    done
    if [ $started = no ]; then
        echo "bench-scale: the $n-node job did not start in $JOB_WAIT s ($(squeue -h -j "$jid" -o %r)): no broadcast measured" >&2
        for s in $SIZES; do row+=$(printf ' %7s %7s %6s %6s %5s %6s %5s %6s %5s %7s %7s' "no job" - - - - - - - - - -); done
        [ "$TREE" != none ] && row+=$(printf ' %6s %6s %5s' "no job" - -)
    fi
    # what the idle cluster costs the machine (its agents' and daemons'
    # timers), taken out of each broadcast's CPU-seconds
    idle_rate=0
    if [ $started = yes ]; then
        c0=$(cpu_mark)
        sleep 10
        idle_rate=$(cpu_since "$c0" | awk '{ printf "%.3f", ($2 > 0 ? $1 / $2 : 0) }')
        record "$n" 0 idle-cpu-rate "$idle_rate"
    fi
    for s in $SIZES; do
        [ $started = yes ] || break
        f=$work/f$s xs=() fs=() ss=() xc=() fc=() sc=() xw=() fw=() sw=()
        clean_dest
        storm_once "$n" "$f" > /dev/null # warm-up: the first writes on a fresh cluster fault in memory
        # Each repetition runs the three in turn, starting one further
        # along each time: at hundreds of nodes a run costs more or less
        # depending on what the run before it left (the page cache it
        # filled and freed, memory the host took back), and no one of the
        # three should always follow the same other.
        for ((r = 0; r < REPS; r++)); do
            for ((k = 0; k < 3; k++)); do
                clean_dest
                case $(((r + k) % 3)) in
                0)
                    t=$(storm_once "$n" "$f")
                    record "$n" "$s" storm-mcast "$t"
                    xs+=("$t")
                    xc+=("$(run_cpu "$t" "$work/storm.cpu")")
                    record "$n" "$s" storm-mcast-cpu "${xc[-1]}"
                    xw+=("$(run_switches "$t" "$work/storm.cpu")")
                    ;;
                1)
                    t=$(mcast_floor "$n" "$f")
                    record "$n" "$s" floor "$t"
                    fs+=("${t/#lost/held}")
                    fc+=("$(run_cpu "$t" "$work/floor/cpu")")
                    record "$n" "$s" floor-cpu "${fc[-1]}"
                    fw+=("$(run_switches "$t" "$work/floor/cpu")")
                    ;;
                2)
                    t=$(mcast_floor "$n" "$f" sealed)
                    record "$n" "$s" floor-sealed "$t"
                    ss+=("${t/#lost/held}")
                    sc+=("$(run_cpu "$t" "$work/floor/cpu")")
                    record "$n" "$s" floor-sealed-cpu "${sc[-1]}"
                    sw+=("$(run_switches "$t" "$work/floor/cpu")")
                    ;;
                esac
            done
        done
        clean_dest
        # Stock sbcast holds the file in slurmd's memory on its way down
        # slurmd's tree: at 1000 nodes, a 48 MB sbcast stopped at 90 s left
        # 22.9 GB in 976 slurmd, still growing after sbcast was gone, and
        # the kernel killed slurmd on 24 nodes (every later measurement on
        # that cluster then lacked them).  It runs only where N copies of
        # the file fit in the memory available (slurmd held about half of
        # them there); else "skipped".
        avail=$(mem_avail_mb)
        if skipped sbcast; then
            st=-
        elif ((n * s <= avail)); then
            st=$(timed "$work/sbcast.out" sbcast -f -j "$jid" "$f" /tmp/bench.stock)
        else
            st=skipped
            echo "bench-scale: stock sbcast of $s MB to $n nodes skipped: $((n * s)) MB of copies, $avail MB available" >&2
        fi
        record "$n" "$s" sbcast "$st"
        clean_dest
        copy=-
        skipped copy || copy=$(copy_limit "$n" "$f" c)
        record "$n" "$s" copy "$copy"
        x=$(median "${xs[@]}") fl=$(median "${fs[@]}") sl=$(median "${ss[@]}")
        [ "$fl" = held ] && fl=lost
        [ "$sl" = held ] && sl=lost
        xcm=$(median "${xc[@]}") fcm=$(median "${fc[@]}") scm=$(median "${sc[@]}")
        echo "  $n nodes $s MB: storm ${xs[*]} floor ${fs[*]} sealed floor ${ss[*]} copy $copy sbcast $st" >&2
        echo "  $n nodes $s MB, CPU-seconds above idle ($idle_rate a second): storm ${xc[*]} floor ${fc[*]} sealed floor ${sc[*]}" >&2
        echo "  $n nodes $s MB, thousands of context switches: storm ${xw[*]} floor ${fw[*]} sealed floor ${sw[*]}" >&2
        row+=$(printf ' %7s %7s %6s %6s %5s %6s %5s %6s %5s %7s %7s' "$x" "$st" "$(ratio "$st" "$x")" "$fl" "$(ratio "$x" "$fl" "%.2f")" \
            "$sl" "$(ratio "$x" "$sl" "%.2f")" "$copy" "$(ratio "$x" "$copy" "%.2f")" \
            "$(ratio "$xcm" "$fcm" "%.2f")" "$(ratio "$xcm" "$scm" "%.2f")")
    done
    if [ "$TREE" != none ] && [ $started = yes ]; then
        xs=()
        rm -rf "$STATE"/nodes/vn*/tmp/bench.tree
        for ((r = 0; r < REPS; r++)); do
            t=$(tree_once "$n")
            record "$n" 0 tree "$t"
            xs+=("$t")
            rm -rf "$STATE"/nodes/vn*/tmp/bench.tree
        done
        tf=$(untar_floor "$n" "$work/tree.tar" "$work/untar")
        record "$n" 0 tree-floor "$tf"
        x=$(median "${xs[@]}")
        echo "  $n nodes tree: storm ${xs[*]} untar floor $tf" >&2
        row+=$(printf ' %6s %6s %5s' "$x" "$tf" "$(ratio "$x" "$tf" "%.2f")")
    fi
    scancel "$jid"
    g=-
    if [ "$GANGS" = yes ]; then
        for _ in $(seq 300); do [ -z "$(squeue -h -j "$jid" 2> /dev/null)" ] && break; sleep 0.2; done
        resume_drained "$n"
        g=$(strobes "$n")
    fi
    row+=$(printf ' %18s' "$g")
    if [ -n "$watch_pid" ]; then
        kill "$watch_pid" 2> /dev/null
        wait "$watch_pid" 2> /dev/null
        watch_pid=
        row+=$(printf ' %12s' "$(faults "$work/faults.$n")")
        grep -v '^0 \|^? ' "$work/faults.$n" | head -n 3 | cut -c 1-300 | sed "s/^/  out of service ($n nodes): /" >&2
    fi
    # what slurmctld said of nodes (Storm's fault detection and its own)
    grep -E 'storm|not responding|NODE_FAIL|set node|drain' "$STATE/log/slurmctld.log" > "$work/slurmctld.$n.log" 2> /dev/null
    rows+=("$row")
    echo "${rows[-1]}" >&2
done
"$VC" down > /dev/null 2>&1
echo
echo "Scale: Storm's suite on stock Slurm daemons, multicast on $MCAST, links unshaped, $(nproc) cores shared by every node"
echo "start = storm-vcluster up (s); MB/node = memory the cluster holds per node, pss/avail (its processes' PSS; MemAvailable's drop); launch = srun /bin/true (s, median of $REPS);"
echo "ctx(B) = bytes of a step's context (STORM_CTX), which Slurm's launch carries through every hop;"
echo "for each size: storm = storm-bcast (median of $REPS, a run failed past ${STOCK_TIMEOUT} s), stock = sbcast (once, failed past ${STOCK_TIMEOUT} s; skipped where N copies exceed the memory available), ratio = stock / storm,"
echo "floor = plain C multicast of the file to every node, flow-controlled (median of $REPS; lost: it lost datagrams, it has no repairs), /flr = storm / floor;"
echo "sealed = the same floor with every byte sealed by AES-128-GCM as Storm's chunks, by ${cipher:-?} as the agents (each node decrypts its copy on these shared cores), /sld = storm / sealed;"
echo "copy = N copies of the file written on this machine by two writers (no network), /copy = storm / copy (flat as N grows: the cost per node is flat);"
echo "cpu/flr, cpu/sld = storm's CPU-seconds over the floor's, bare and sealed (the machine's busy time over each run, all cores, less the idle cluster's; medians of $REPS);"
echo "strobe = two jobs alternating on every node: delivery p50/p99 (us) @ quantum;"
[ "$TREE" != none ] && echo "tree = storm-bcast of $TREE (median of $REPS, s), untar = N untars of it on this machine (two at once), /untar = tree / untar;"
[ "$FAULT" != 0 ] && echo "faults = nodes ever out of service in sinfo (every node is alive: 0 expected)/samples taken, +F? samples sinfo could not take, storm_fault_timeout=$(if [ "$FAULT" = auto ]; then echo "max(5, N/50) s"; else echo "$FAULT"; fi);"
echo "measurements for contrib/model/storm-model: $DATA"
hdr=$(printf '%6s %6s %11s %7s %6s' nodes start MB/node launch 'ctx(B)')
for s in $SIZES; do hdr+=$(printf ' %7s %7s %6s %6s %5s %6s %5s %6s %5s %7s %7s' "${s}MB" stock ratio floor /flr sealed /sld copy /copy cpu/flr cpu/sld); done
[ "$TREE" != none ] && hdr+=$(printf ' %6s %6s %5s' tree untar /untar)
hdr+=$(printf ' %18s' strobe)
[ "$FAULT" != 0 ] && hdr+=$(printf ' %12s' faults)
echo "$hdr"
for r in "${rows[@]}"; do echo "$r"; done
