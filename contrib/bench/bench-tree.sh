#!/usr/bin/env bash
# bench-tree: whole software trees to every node of a job, three ways side
# by side on one virtual cluster per node count, as the unprivileged user
# nobody: storm-bcast of the tree; storm-bcast of the tree's tarball plus
# untar on every node; and what a stock user does (tar, sbcast of the
# tarball, untar on every node).
#
#   sudo contrib/bench/bench-tree.sh [-n "16 32 64"] [-r "shaped unshaped"]
#                                    [-t "pystdlib gen50k large"] [-k REPS] [-C]
#                                    [-m GROUP:PORT|off]
#
# Trees: pystdlib, the system Python's standard library
# (/usr/lib/python3.11 on Debian 12; PYSTDLIB=DIR for another); gen50k, a
# generated tree of 50,000 files averaging 2 KB in 500 directories; large,
# a generated tree of a few large files (32, 16 and 8 MB, and a small one).
# For each node count, regime (links shaped to 100 Mbit/s by
# storm-vcluster, or unshaped) and tree it prints the tree's files and
# bytes, the link limit (the time one 100 Mbit/s link needs for the tree's
# bytes; shaped only), this machine's floor for writing the tree on that
# many nodes (untar of the tree N times, two at once, on this machine:
# every virtual node shares its disk and CPUs), and the time of each method
# (the median of REPS runs): "storm" (storm-bcast of the tree), "st+tar"
# (storm-bcast of the tarball, then srun tar -x on every node) and "stock"
# (sbcast of the tarball, then srun tar -x), with stock/storm and
# storm over the higher of the link limit and the floor; before each row, a
# "#" line a run gives the times of each method, and when storm-bcast's
# phases ended (storm-bcast -v: opened, sent, committed).  Every copy made
# by either Storm method is checked (a manifest of names, kinds, sizes,
# link targets and bytes) on the first and last node.
#
# -C adds both with compression on the wire: "st-C" (storm-bcast -C, lz4)
# and "stock-C" (the stock method with sbcast -C, lz4), with stock-C/st-C
# and st-C over the higher of the link limit and the floor; the "#" line
# then also gives the MB storm-bcast -C sent.
#
# Storm's agents carry the data by multicast on -m GROUP:PORT (default
# 239.255.77.1:6831; SwitchParameters storm_mcast), as a site whose
# network carries multicast sets them to, or through the tree of TCP
# connections alone with -m off.  The table's first line says which (and
# the AES-GCM implementation the agents chose).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
VC="$top/contrib/vcluster/storm-vcluster"
BCAST="$top/tools/storm-bcast"
nodes="16 32 64" regimes="shaped unshaped" trees="pystdlib gen50k large" reps=1 comp=0 mcast=239.255.77.1:6831
while getopts n:r:t:k:Cm: o; do
    case $o in
        n) nodes=$OPTARG ;; r) regimes=$OPTARG ;; t) trees=$OPTARG ;; k) reps=$OPTARG ;; C) comp=1 ;;
        m) mcast=$OPTARG ;;
        *) echo "usage: $0 [-n NODES] [-r REGIMES] [-t TREES] [-k REPS] [-C] [-m GROUP:PORT|off]" >&2; exit 2 ;;
    esac
done
# shellcheck source=contrib/bench/common.sh
. "$here/common.sh"
check_reps bench-tree "$reps"
[ "$(id -u)" = 0 ] || { echo "bench-tree: needs root (virtual clusters)" >&2; exit 2; }
W=$top/test-work/bench-tree # visible on every node (not /tmp)
# The nodes' file system: an ext4 of its own, with a journal, as a node's
# local disk has; the cluster's state (the nodes' /tmp is
# $STATE/nodes/NODE/tmp) and the floor's copies live in it.  This
# machine's root is an ext4 without a journal, whose inode allocator skips
# every inode freed in the last 60 s (recently_deleted(), for journal-less
# file systems only): right after the copies of a run were removed, each
# new file there cost about 250 us of CPU against 25 us, and the runs
# measured the removal before them (pystdlib on 32 nodes: the floor 1.2 s
# to 8.7 s, storm-bcast's staging 0.8 s to 18 s).
FS=$top/test-work/bench-tree-fs
IMG=$FS.img
STATE=$FS/state
teardown() {
    local dev
    STORM_VC_STATE=$STATE "$VC" down > /dev/null 2>&1
    if mountpoint -q "$FS"; then umount "$FS" || umount -l "$FS"; fi
    [ -e "$IMG" ] && for dev in $(losetup -j "$IMG" -O NAME -n); do losetup -d "$dev"; done
    rm -f "$IMG"
}
# shellcheck disable=SC2034 # read by common.sh (vc_up, untar_floor)
work=$W
"$VC" down > /dev/null 2>&1 # a cluster of the default state, left by another run
teardown                        # and one of a run of this benchmark that crashed
trap teardown EXIT
trap 'exit 1' INT TERM HUP
rm -rf "$W" && mkdir -p "$W" && chmod 1777 "$W"
# 4 KiB an inode: three copies of the 50,000-file tree on 64 nodes
# Its loop device writes to the image with direct I/O: the nodes' files
# are cached once, not again as the image's pages.
mkdir -p "$FS" && truncate -s 64G "$IMG" && mkfs.ext4 -q -F -i 4096 "$IMG" &&
    dev=$(losetup -f --show --direct-io=on "$IMG") && mount "$dev" "$FS" ||
    { echo "bench-tree: cannot make the nodes' file system in $IMG" >&2; exit 1; }
export STORM_VC_STATE=$STATE
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
        large)
            if [ ! -d "$W/large" ]; then
                mkdir -p "$W/large/lib" && head -c 32000000 /dev/urandom > "$W/large/lib/big.so" &&
                    head -c 16000000 /dev/urandom > "$W/large/data.bin" &&
                    head -c 8000000 /dev/urandom > "$W/large/lib/mid.so" &&
                    echo "a tree of a few large files" > "$W/large/README" &&
                    ln -s big.so "$W/large/lib/big.so.1" && chown -R nobody:nogroup "$W/large"
            fi
            echo "$W/large" ;;
        *) echo "bench-tree: unknown tree '$1' (pystdlib, gen50k, large)" >&2; exit 2 ;;
    esac
}
# timed RESULTS OUT CMD...: one run of a method.  It starts settled
# (common.sh), as the floor does, with the tree and its tarball read in:
# what the one before wrote does not slow it.  CMD's output goes to OUT;
# its seconds, or "failed" (and OUT to stderr), are appended to RESULTS.
timed() {
    local res=$1 out=$2 t0
    shift 2
    settle "$src" "$W/$t.tar"
    t0=$(now)
    if "$@" > "$out" 2>&1; then
        echo "$(secs "$t0" "$(now)")" >> "$res"
    else
        cat "$out" >&2
        echo failed >> "$res"
    fi
}
# untar TAR DIR: /tmp/TAR untarred into /tmp/DIR on every node of the job
untar() { as_user srun --jobid="$job" -N "$n" --overlap tar -C /tmp -xf "/tmp/$1" --transform "s,^[^/]*,$2,S"; }
# bcast_untar TAR DIR: storm-bcast of the tree's tarball to /tmp/TAR, untarred
bcast_untar() { as_user "$BCAST" -j "$job" "$W/$t.tar" "/tmp/$1" && untar "$1" "$2"; }
# sbcast_untar TAR DIR [SBCAST-OPTION...]: the same with stock sbcast
sbcast_untar() {
    local tar=$1 dir=$2
    shift 2
    as_user sbcast "$@" -j "$job" "$W/$t.tar" "/tmp/$tar" && untar "$tar" "$dir"
}
# copies_gone: every method's copies and tarballs gone from the nodes'
# /tmp, from here (root's srun into nobody's job removed nothing: a second
# regime or run found them there); each method's go once they are checked,
# so that they do not crowd the page cache of the next
copies_gone() {
    local x
    for x in $list; do
        rm -rf "$STATE/nodes/$x/tmp/tree-storm" "$STATE/nodes/$x/tmp/tree-tar" "$STATE/nodes/$x/tmp/tree-stock" \
            "$STATE/nodes/$x/tmp/t.tar" "$STATE/nodes/$x/tmp/s.tar" "$STATE/nodes/$x/tmp/tree-stormc" \
            "$STATE/nodes/$x/tmp/tree-stockc" "$STATE/nodes/$x/tmp/c.tar"
    done
}
# check_copy DIR WHAT: DIR in the first and last node's /tmp is the tree
# (its manifest is $ref); says which differs
check_copy() {
    local x
    for x in $first $last; do
        [ "$(tree_manifest "$STATE/nodes/$x/tmp/$1")" = "$ref" ] ||
            echo "bench-tree: $x: $2 of $t differs" >&2
    done
}
header=0
mc=()
[ "$mcast" = off ] || mc=("SwitchParameters=storm_mcast=$mcast")
for n in $nodes; do
    vc_up storm "$n" "${mc[@]}"
    if [ "$header" = 0 ]; then
        header=1
        if [ "$mcast" = off ]; then
            echo "# storm: the tree of TCP connections alone (-m off)"
        else
            echo "# storm: multicast on $mcast, AES-GCM by $(agents_cipher "$STATE")"
        fi
        printf '%-6s %-8s %-9s %7s %8s %7s %7s %8s %8s %8s %7s %7s %8s %8s %7s %7s\n' nodes regime tree files MB link floor \
            storm st+tar stock stock/st st/lim st-C stock-C skC/stC stC/lim
    fi
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
        # the floor: N untars, two at once, in the nodes' file system
        floor=$(untar_floor "$n" "$W/$t.tar" "$FS/floor")
        for r in $regimes; do
            if [ "$r" = shaped ]; then
                "$VC" shape 100mbit > "$W/shape.out" 2>&1 || {
                    echo "bench-tree: cannot shape the links, no shaped row:" >&2
                    cat "$W/shape.out" >&2
                    continue
                }
            else
                "$VC" shape off > /dev/null
            fi
            link=-
            [ "$r" = shaped ] && link=$(echo "scale=2; $bytes * 8 / 100000000" | bc)
            : > "$W/s" && : > "$W/p" && : > "$W/k" && : > "$W/sc" && : > "$W/kc"
            for _ in $(seq "$reps"); do
                copies_gone
                timed "$W/s" "$W/b.out" as_user "$BCAST" -v -j "$job" "$src" /tmp/tree-storm
                check_copy tree-storm "storm-bcast's copy"; copies_gone
                timed "$W/p" "$W/p.out" bcast_untar s.tar tree-tar
                check_copy tree-tar "the untarred copy"; copies_gone
                timed "$W/k" "$W/k.out" sbcast_untar t.tar tree-stock
                copies_gone
                cline=
                if [ "$comp" = 1 ]; then
                    timed "$W/sc" "$W/bc.out" as_user "$BCAST" -v -C -j "$job" "$src" /tmp/tree-stormc
                    check_copy tree-stormc "storm-bcast -C's copy"; copies_gone
                    timed "$W/kc" "$W/kc.out" sbcast_untar c.tar tree-stockc -C
                    copies_gone
                    cline=" st-C $(tail -1 "$W/sc") ($(sed -n 's/.* MB (\([0-9.]* MB sent\), .* s (\(opened.*\))$/\1; \2/p' "$W/bc.out")) stock-C $(tail -1 "$W/kc")"
                fi
                echo "# $n $r $t storm $(tail -1 "$W/s") ($(sed -n 's/.* s (\(opened.*\))$/\1/p' "$W/b.out")) st+tar $(tail -1 "$W/p") stock $(tail -1 "$W/k")$cline" >&2
            done
            mapfile -t vs < "$W/s" && mapfile -t vp < "$W/p" && mapfile -t vk < "$W/k"
            s=$(median "${vs[@]}") p=$(median "${vp[@]}") k=$(median "${vk[@]}")
            lim=$(echo "if ($floor > ${link/-/0}) $floor else ${link/-/0}" | bc)
            sc=- kc=- rc=- lc=-
            if [ "$comp" = 1 ]; then
                mapfile -t vsc < "$W/sc" && mapfile -t vkc < "$W/kc"
                sc=$(median "${vsc[@]}") kc=$(median "${vkc[@]}")
                rc=$(ratio "$kc" "$sc") lc=$(ratio "$sc" "$lim" "%.2f")
            fi
            printf '%-6s %-8s %-9s %7s %8.1f %7s %7.2f %8s %8s %8s %7s %7s %8s %8s %7s %7s\n' "$n" "$r" "$t" "$files" \
                "$(echo "$bytes / 1000000" | bc -l)" "$link" "$floor" "$s" "$p" "$k" "$(ratio "$k" "$s")" \
                "$(ratio "$s" "$lim" "%.2f")" "$sc" "$kc" "$rc" "$lc"
        done
        "$VC" shape off > /dev/null
    done
    scancel "$job"
    "$VC" down > /dev/null 2>&1
done
