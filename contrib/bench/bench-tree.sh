#!/usr/bin/env bash
# bench-tree: whole software trees to every node of a job, storm-bcast of
# the tree against what a stock user does (tar, sbcast of the tarball,
# untar on every node), side by side on one virtual cluster per node count,
# as the unprivileged user nobody.  A first, partial version of the
# benchmark of issue 40 (not yet: a tree of a few large files, storm-bcast
# of the tarball plus untar, 64 nodes).
#
#   sudo contrib/bench/bench-tree.sh [-n "8 16"] [-r "shaped unshaped"]
#                                    [-t "pystdlib gen50k"] [-k REPS]
#
# Trees: pystdlib, the system Python's standard library
# (/usr/lib/python3.11 on Debian 12; PYSTDLIB=DIR for another); gen50k, a generated tree of 50,000 files averaging 2 KB
# in 500 directories.  For each node count, regime (links shaped to
# 100 Mbit/s by storm-vcluster, or unshaped) and tree it prints the tree's
# files and bytes, the link limit (the time one 100 Mbit/s link needs for
# the tree's bytes; shaped only), this machine's floor for writing the
# tree on that many nodes (untar of the tree N times, two at once, on this
# machine: every virtual node shares its disk and CPUs), and the time of
# storm-bcast and of tar + sbcast + untar (the median of REPS runs), with
# the ratios.  Every Storm copy is checked (a manifest of names, sizes and
# links) on the first and last node.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
VC="$top/contrib/vcluster/storm-vcluster"
BCAST="$top/tools/storm-bcast"
nodes="8 16" regimes="shaped unshaped" trees="pystdlib gen50k" reps=1
while getopts n:r:t:k: o; do
    case $o in
        n) nodes=$OPTARG ;; r) regimes=$OPTARG ;; t) trees=$OPTARG ;; k) reps=$OPTARG ;;
        *) echo "usage: $0 [-n NODES] [-r REGIMES] [-t TREES] [-k REPS]" >&2; exit 2 ;;
    esac
done
# shellcheck source=contrib/bench/common.sh
. "$here/common.sh"
check_reps bench-tree "$reps"
[ "$(id -u)" = 0 ] || { echo "bench-tree: needs root (virtual clusters)" >&2; exit 2; }
W=$top/test-work/bench-tree # visible on every node (not /tmp)
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster} # the nodes' /tmp: $STATE/nodes/NODE/tmp
# shellcheck disable=SC2034 # read by common.sh (vc_up, untar_floor)
work=$W
rm -rf "$W" && mkdir -p "$W" && chmod 1777 "$W"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
# the system's Python (root's PATH may lead to a private one that nobody
# cannot read); PYSTDLIB=DIR chooses another
py=${PYSTDLIB:-$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])' 2> /dev/null)}
[ -d "${py:-}" ] || py=/usr/lib/python3.11
as_user test -r "$py" -a -x "$py" || { echo "bench-tree: nobody cannot read $py" >&2; exit 2; }
tree_dir() { # NAME: the tree's directory, made once
    case $1 in
        pystdlib) echo "$py" ;;
        gen50k)
            if [ ! -d "$W/gen50k" ]; then
                python3 - "$W/gen50k" << 'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(40)
for d in range(500):
    os.makedirs(f"{root}/d{d:03d}")
    for f in range(100):
        with open(f"{root}/d{d:03d}/f{f:03d}", "wb") as out:
            out.write(rng.randbytes(rng.randint(0, 4096)))
PY
                chown -R nobody:nogroup "$W/gen50k"
            fi
            echo "$W/gen50k" ;;
    esac
}
printf '%-6s %-8s %-9s %7s %8s %7s %7s %8s %8s %7s %7s\n' nodes regime tree files MB link floor storm stock \
    stock/st st/lim
for n in $nodes; do
    vc_up storm "$n"
    list=$("$VC" nodes | tr '\n' ' ')
    first=${list%% *} last=$(echo "$list" | awk '{print $NF}')
    cd "$W" || exit 1
    job=$(as_user sbatch --parsable -N "$n" -t 60 -o /dev/null --wrap "sleep 3600")
    for _ in $(seq 300); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
    for t in $trees; do
        src=$(tree_dir "$t")
        files=$(find "$src" -type f | wc -l)
        bytes=$(du -sb --apparent-size "$src" | cut -f1)
        tar -C "$(dirname "$src")" -cf "$W/$t.tar" "$(basename "$src")"
        chmod 644 "$W/$t.tar"
        ref=$(tree_manifest "$src")
        # the floor: N untars, two at once, on this machine's disk
        floor=$(untar_floor "$n" "$W/$t.tar" "$W/floor")
        for r in $regimes; do
            # shellcheck disable=SC2015 # (unshaped also where shaping fails)
            [ "$r" = shaped ] && "$VC" shape 100mbit > /dev/null || "$VC" shape off > /dev/null
            link=-
            [ "$r" = shaped ] && link=$(echo "scale=2; $bytes * 8 / 100000000" | bc)
            : > "$W/s" && : > "$W/k"
            for _ in $(seq "$reps"); do
                srun --jobid="$job" -N "$n" --overlap rm -rf /tmp/tree-storm /tmp/tree-stock /tmp/t.tar > /dev/null 2>&1
                t0=$(now)
                if as_user "$BCAST" -j "$job" "$src" /tmp/tree-storm > "$W/b.out" 2>&1; then
                    echo "$(now) - $t0" | bc >> "$W/s"
                else
                    cat "$W/b.out" >&2
                fi
                for x in $first $last; do
                    [ "$(tree_manifest "$STATE/nodes/$x/tmp/tree-storm")" = "$ref" ] ||
                        echo "bench-tree: $x: storm-bcast's copy of $t differs" >&2
                done
                t0=$(now)
                if as_user sbcast -j "$job" "$W/$t.tar" /tmp/t.tar > "$W/k.out" 2>&1 &&
                    as_user srun --jobid="$job" -N "$n" --overlap tar -C /tmp -xf /tmp/t.tar --transform s,^[^/]*,tree-stock, >> "$W/k.out" 2>&1; then
                    echo "$(now) - $t0" | bc >> "$W/k"
                else
                    cat "$W/k.out" >&2
                fi
                echo "# $n $r $t storm $(tail -1 "$W/s") stock $(tail -1 "$W/k")" >&2
            done
            # shellcheck disable=SC2046 # one time a line, split into arguments
            s=$(median $(cat "$W/s")) k=$(median $(cat "$W/k"))
            lim=$(echo "if ($floor > ${link/-/0}) $floor else ${link/-/0}" | bc)
            printf '%-6s %-8s %-9s %7s %8.1f %7s %7.2f %8s %8s %7s %7s\n' "$n" "$r" "$t" "$files" \
                "$(echo "$bytes / 1000000" | bc -l)" "$link" "$floor" "$s" "$k" "$(ratio "$k" "$s")" \
                "$(ratio "$s" "$lim" "%.2f")"
        done
        "$VC" shape off > /dev/null
    done
    scancel "$job"
    "$VC" down > /dev/null 2>&1
done
