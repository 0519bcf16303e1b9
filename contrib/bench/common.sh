# shellcheck shell=bash
# Shell helpers the benchmarks share (sourced, not run).

# median VALUE...: the middle value, or of an even count the mean of the two
# middle ones (to as many decimals as they have); "failed" counts as the
# slowest (a mean with it is "failed"); any "corrupt" wins; "-" stays "-";
# "held" (not measured) is left out, and is the answer only if all are
median() {
    case " $* " in *" corrupt "*) echo corrupt; return ;; *" - "*) echo -; return ;; esac
    local v=() x
    for x in "$@"; do [ "$x" = held ] || v+=("$x"); done
    [ ${#v[@]} -gt 0 ] || { echo held; return; }
    printf '%s\n' "${v[@]}" | sed 's/^failed$/1e18/' | sort -g |
        awk 'function decimals(x) { return index(x, ".") ? length(x) - index(x, ".") : 0 }
            { v[NR] = $1 }
            END {
                lo = v[int((NR + 1) / 2)]; hi = v[int(NR / 2) + 1]
                if (hi + 0 >= 1e18) print "failed"
                else if (lo == hi) print lo
                else printf "%." (decimals(lo) > decimals(hi) ? decimals(lo) : decimals(hi)) "f\n", (lo + hi) / 2
            }'
}

# ratio A B [FORMAT]: A / B printed with FORMAT (default "%.1fx": "1.2x"),
# or "-" unless both are positive numbers
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.1fx}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf f, a / b; else printf "-" }'; }

# check_reps NAME VALUE: exits 2 unless VALUE is a positive whole number
check_reps() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$1: -k REPS must be a positive whole number, not \"$2\"" >&2; exit 2; }
}

# vc_up MODE(stock|storm) NODES CONF-LINE...: a fresh virtual cluster of
# NODES nodes, stock Slurm's plugins or Storm's, with CONF-LINEs appended to
# slurm.conf; its environment is exported. Needs VC and work; exits 1 (with
# the tool's output) when the cluster does not come up.
# shellcheck disable=SC2154 # VC and work are the calling benchmark's
vc_up() {
    local mode=$1 n=$2 l
    shift 2
    local -a args=()
    [ "$mode" = stock ] && args+=(--stock)
    for l in "$@"; do args+=(--conf "$l"); done
    "$VC" down > /dev/null 2>&1
    "$VC" up "$n" "${args[@]}" > "$work/up.out" 2>&1 || { cat "$work/up.out" >&2; exit 1; }
    eval "$("$VC" env)"
}

# agents_cipher STATE: the AES-GCM implementation the running cluster's
# agents chose for multicast, from vn1's start-up line ("" if none logged)
agents_cipher() {
    sed -n 's/.*multicast data path on group .*, AES-GCM by //p' "$1/log/slurmd-vn1.log" 2>/dev/null | tail -n 1
}

now() { date +%s.%N; }
# cpu_mark: this machine's busy CPU time so far, all cores together (user,
# nice, system, irq and softirq of /proc/stat, in clock ticks), its context
# switches so far, and the wall clock: a mark for cpu_since
cpu_mark() {
    echo "$(awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 } /^ctxt / { c = $2 } END { print b, c }' /proc/stat) $(now)"
}
# cpu_since MARK: "BUSY WALL SWITCHES" since MARK: the CPU-seconds the
# machine spent busy (all cores, every process and the kernel's own work:
# softirqs, write-back), the seconds that passed, and its context switches
cpu_since() {
    local m
    m=$(cpu_mark)
    awk -v a="$1" -v b="$m" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f %.2f %d\n", (y[1] - x[1]) / hz, y[3] - x[3], y[2] - x[2] }'
}
# cpu_above RATE BUSY WALL: BUSY less RATE CPU-seconds a second over WALL
# seconds (what the machine spends with nothing running: an idle cluster's
# agents and daemons), at least 0
cpu_above() { awk -v r="$1" -v b="$2" -v w="$3" 'BEGIN { v = b - r * w; printf "%.2f", (v > 0 ? v : 0) }'; }
# secs START END: END - START seconds, two decimals
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# timed OUTFILE CMD...: the seconds CMD took (its output to OUTFILE), or
# "failed" if it failed or outlasted the caller's STOCK_TIMEOUT seconds
# (the benchmark's -t; OUTFILE then ends by saying so)
# shellcheck disable=SC2154 # STOCK_TIMEOUT is the caller's
timed() {
    local out=$1 t0 rc
    shift
    t0=$(now)
    timeout "$STOCK_TIMEOUT" "$@" > "$out" 2>&1
    rc=$?
    if ((rc == 0)); then secs "$t0" "$(now)"; else
        ((rc != 124)) || echo "killed after ${STOCK_TIMEOUT} s, the benchmark's limit of a run (-t)" >> "$out"
        echo failed
    fi
}

# shellcheck disable=SC2154 # VC, work, FLOORM, FLOOR_*, addrs, mtu are the caller's
# mcast_floor N FILE [sealed]: seconds of floor_mcast from vn1 to vn2..vnN
# (the node addresses in $addrs), bare or sealed (AES-GCM, as Storm's
# chunks); "lost" if a node lost a datagram (the floor has no repairs: such
# a run is left out of the median), "failed" otherwise.
# The machine's CPU from the sender's start to the receivers' end goes to
# $work/floor/cpu (cpu_since's "BUSY WALL").
# Needs VC, work, FLOORM, FLOOR_GROUP, FLOOR_PORT, addrs (vnI's address at
# index I), mtu (the links' MTU) and an array floor_pids (the receivers,
# for the caller's exit trap to kill)
mcast_floor() {
    local n=$1 f=$2 seal=${3:-} size i t0 t1 done_n ready last still c0
    size=$(stat -c %s "$f")
    rm -rf "$work/floor" && mkdir -p "$work/floor"
    floor_pids=()
    for ((i = 2; i <= n; i++)); do
        "$VC" exec "vn$i" "$FLOORM" recv "$FLOOR_GROUP" "$FLOOR_PORT" "${addrs[i]}" /tmp/bench.floor "$size" \
            "$mtu" "${addrs[1]}" $seal > "$work/floor/$i.out" 2>&1 &
        floor_pids+=($!)
    done
    # Until every receiver joined the group, as long as more keep joining:
    # on a slow 2-core machine, 511 receivers took more than the minute this
    # once waited in all, and the sender then ran with half of them absent.
    ready=0 last=0 still=0
    while [ "$ready" -lt $((n - 1)) ] && [ $still -lt 300 ]; do # 30 s with none more
        sleep 0.1
        ready=$(cat "$work"/floor/*.out 2> /dev/null | grep -c '^ready$')
        if [ "$ready" = "$last" ]; then still=$((still + 1)); else still=0 last=$ready; fi
    done
    if [ "$ready" -lt $((n - 1)) ]; then
        echo "  floor: $ready of $((n - 1)) receivers ready, none more for 30 s" >&2
        pkill -f "^$FLOORM recv $FLOOR_GROUP $FLOOR_PORT " 2> /dev/null
        for i in "${floor_pids[@]}"; do wait "$i" 2> /dev/null; done
        floor_pids=()
        echo failed
        return
    fi
    c0=$(cpu_mark)
    "$VC" exec vn1 "$FLOORM" send "$FLOOR_GROUP" "$FLOOR_PORT" "${addrs[1]}" "$f" /tmp/bench.floor "$mtu" \
        $((n - 1)) $seal > "$work/floor/1.out" 2>&1
    for i in "${floor_pids[@]}"; do wait "$i" 2> /dev/null; done # a receiver that lost one gives up at once or in 30 s
    cpu_since "$c0" > "$work/floor/cpu"
    floor_pids=()
    t0=$(sed -n 's/^start //p' "$work/floor/1.out")
    t1=$(cat "$work"/floor/*.out | sed -n 's/^\(done\|sent\) //p' | sort -n | tail -n 1)
    done_n=$(cat "$work"/floor/*.out | grep -c '^done ')
    if grep -q 'lost a datagram' "$work/floor/1.out"; then
        echo lost
        echo "  floor: $(grep -m 1 'lost a datagram' "$work/floor/1.out")" >&2
    elif [ -z "$t0" ] || ! grep -q '^sent ' "$work/floor/1.out"; then
        echo failed
        sed 's/^/  floor: /' "$work/floor/1.out" | tail -n 3 >&2
    elif [ "$done_n" != $((n - 1)) ]; then
        echo lost
        echo "  floor: $((n - 1 - done_n)) of $((n - 1)) nodes did not get the whole file:" \
            "$(cat "$work"/floor/*.out | grep -m 1 floor_mcast)" >&2
    else
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'
    fi
}

# shellcheck disable=SC2154 # STATE is the caller's (the cluster's state directory)
# write_copies N FILE cat|dd: a copy of FILE on each of vn1..vnN
# (/tmp/bench.copy), two writers at once, by cat or in writes of 63 pages
write_copies() {
    local n=$1 f=$2 how=$3 i
    write() { if [ "$how" = cat ]; then cat "$f" > "$1"; else dd if="$f" of="$1" bs=258048 status=none; fi; }
    for ((i = 1; i <= n; i += 2)); do write "$STATE/nodes/vn$i/tmp/bench.copy"; done &
    for ((i = 2; i <= n; i += 2)); do write "$STATE/nodes/vn$i/tmp/bench.copy"; done
    wait
}
# copy_limit N FILE cat|dd|c: seconds to write N copies of FILE, two
# writers at once, by cat or in writes of 63 pages (a process per copy), or
# by contrib/bench/floor_copy ("c": plain C, two threads, no process per
# copy: at hundreds of nodes the others measure their forks too; needs
# FLOORC, its path)
# shellcheck disable=SC2154 # FLOORC is the caller's
copy_limit() {
    local t0 t
    sync
    if [ "$3" = c ]; then
        t=$("$FLOORC" "$2" "$1" "$STATE/nodes/vn%d/tmp/bench.copy" 2) || t=failed
    else
        t0=$(now)
        write_copies "$@"
        t=$(secs "$t0" "$(now)")
    fi
    rm -f "$STATE"/nodes/vn*/tmp/bench.copy
    echo "$t"
}
# lower A B, higher A B: the lower or higher of two numbers
lower() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b) ? a : b }'; }
higher() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b) ? a : b }'; }

# tree_manifest DIR: one checksum of the tree under DIR, never following a
# link: its names, kinds, file sizes and link targets (a directory's size
# depends on its file system), then its files' bytes in name order
tree_manifest() {
    (
        cd "$1" || exit 1
        find . -type d -printf '%y 0 %p\n' -o -printf '%y %s %l %p\n' | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0r cat | md5sum
    ) | md5sum
}
# settle [PATH...]: the disks written back and the page cache dropped, then
# each PATH (a file or a tree: what the next run reads) read back into it.
# A run that starts so has nothing to write back or reclaim from the one
# before: 64 copies of a 50 MB tree are 3.4 GB of page cache, and a run
# that must reclaim memory as it writes is slower (bench-tree's runs of
# one method on 64 nodes varied from 6.9 s to 8.8 s).  Needs root.
settle() {
    local p
    sync
    echo 3 > /proc/sys/vm/drop_caches
    for p in "$@"; do tar -cf - "$p" 2> /dev/null | cat > /dev/null; done
}

# untar_floor N TARBALL DIR: seconds this machine takes to untar TARBALL N
# times, two at once, into DIR/1..DIR/N (removed after): the floor for
# writing a tree's files on N nodes that share its disk and CPUs
untar_floor() {
    local n=$1 tar=$2 dir=$3 t0
    rm -rf "$dir" && mkdir -p "$dir" && settle "$tar"
    t0=$(now)
    seq 1 "$n" | xargs -P 2 -I{} sh -c 'mkdir "$1/$2" && tar -C "$1/$2" -xf "$3"' sh "$dir" {} "$tar"
    secs "$t0" "$(now)"
    rm -rf "$dir"
}
