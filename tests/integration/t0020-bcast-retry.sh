#!/usr/bin/env bash
# t0020: a tree broadcast retried while the failed one is still being
# removed on a node (issue 42), on 4 real slurmd.  vn3's destination is an
# ext4 file system of its own (a loop device, in vn3's mount namespace)
# frozen with fsfreeze, so vn3's staging of the tree, then its removal,
# wait in the kernel:
#  - the broadcast fails after its timeout (5 s), naming vn3's file system
#    and the staging; the other nodes keep nothing;
#  - a retry to the same destination meanwhile is not taken on vn3, and
#    says why and when to retry (the earlier one's removal waits for that
#    file system); the other nodes keep nothing of it either;
#  - thawed, a retry at once (vn3's removal may still run) succeeds: every
#    node holds the whole tree, links as links.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
own_fs_require
N=4
vc_up "$N"
VCX() { "$VC" exec "$@"; }
BCAST="$STORM_BUILDDIR/tools/storm-bcast"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
D=/tmp/t0020
own_fs vn3 "$D"

# A tree of 600 entries: 300 small files, a link to each.
src=$T_WORK/tree
mkdir -p "$src/sub"
for i in $(seq 300); do
    echo "file $i" > "$src/sub/f$i"
    ln -s "sub/f$i" "$src/l$i"
done
chown -R nobody:nogroup "$src"
entries=$(cd "$src" && find . | wc -l)

job=$(as_user sbatch --parsable -N "$N" -t 5 -o /dev/null --wrap "sleep 600")
for _ in $(seq 100); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
t_check "a $N-node job of nobody runs ($job)" [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]

VCX vn3 fsfreeze -f "$D"
as_user timeout 60 "$BCAST" -j "$job" -t 5 "$src" "$D/tree" > "$T_WORK/first.out" 2>&1
rc=$?
t_check "the broadcast into the frozen file system fails (exit $rc)" [ "$rc" != 0 ]
t_check "  naming vn3's file system and its staging" \
    grep -q "vn3: the file system at $D did not answer within 5 s on vn3 (while staging $D/.tree.storm-" \
    "$T_WORK/first.out"
grep -q "did not answer within" "$T_WORK/first.out" || t_diag < "$T_WORK/first.out"

as_user timeout 60 "$BCAST" -j "$job" -t 5 "$src" "$D/tree" > "$T_WORK/retry.out" 2>&1
rc=$?
t_check "a retry while vn3 still removes the first fails (exit $rc)" [ "$rc" != 0 ]
t_check "  saying vn3 still removes the first one, and to retry once it is removed" \
    grep -q "vn3: $D/tree is being removed by broadcast [0-9a-f]* (job $job) on vn3, whose file system at $D did not answer within 5 s: one broadcast at a time per destination; retry once it is removed" \
    "$T_WORK/retry.out"
grep -q "retry once it is removed" "$T_WORK/retry.out" || t_diag < "$T_WORK/retry.out"
left=$(for n in vn1 vn2 vn4; do VCX "$n" sh -c "ls -A $D"; done | grep -c "tree")
t_check "the other nodes keep nothing of either ($left entries)" [ "$left" = 0 ]

VCX vn3 fsfreeze -u "$D"
t_check "thawed, a retry at once succeeds" as_user timeout 60 "$BCAST" -j "$job" -t 5 "$src" "$D/tree"
whole=0
for n in vn1 vn2 vn3 vn4; do
    got=$(VCX "$n" sh -c "cd $D/tree && find . | wc -l")
    link=$(VCX "$n" readlink "$D/tree/l300")
    [ "$got" = "$entries" ] && [ "$link" = sub/f300 ] && VCX "$n" cmp -s "$src/sub/f7" "$D/tree/sub/f7" &&
        whole=$((whole + 1))
done
t_check "  every node holds the whole tree of $entries entries, links as links ($whole of $N)" [ "$whole" = "$N" ]
t_check "  and nothing staged is left on vn3" [ -z "$(VCX vn3 sh -c "ls -A $D | grep 'storm-'")" ]
scancel "$job"
t_done
