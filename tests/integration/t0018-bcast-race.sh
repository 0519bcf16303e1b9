#!/usr/bin/env bash
# t0018: a symbolic link race against a tree's broadcast (issue 40), on 4
# real slurmd with links shaped to 40 Mbit/s, as the unprivileged user
# nobody.  The tree holds a 16 MB file first, then 70 small files and
# sub/ with 10 more (each made by its first bytes, beneath the staging
# directory, once the big file's are written).  While the big file is
# still on its way, nobody swaps the staged directory sub (in
# /tmp/.tree.storm-ID) for a symbolic link: on vn2 to
# /tmp/locked (root's, which nobody cannot write), on vn3 to /tmp/open
# (nobody's own, which a write through the link would reach).
#  - nothing is written outside the destination: both directories and
#    their files are as before (a listing with modes, owners, sizes and
#    the directories' mtimes, which any entry made or removed in them
#    changes, and the files' checksums; they hold files of the names in
#    sub/, so a write through the link would change one);
#  - the broadcast fails, naming the swapped path on the node, and no node
#    keeps a tree or a staging directory; or, had the swap come too late
#    to matter, it succeeded with an exact copy on every node;
#  - the same broadcast, untouched, then succeeds with an exact copy.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
N=4
vc_up "$N" --rate 40mbit
NODES=$("$VC" nodes | tr "\n" " ")
chmod 1777 "$T_WORK"
nobody_job "$N"

# snapshot NODE DIR: everything in DIR on NODE, and its files' checksums
snapshot() {
    "$VC" exec "$1" sh -c "find '$2' -printf '%y %m %u:%g %s %T@ %p\n' | sort && find '$2' -type f -exec md5sum {} + | sort"
}

# --- the tree, and the directories outside -------------------------------------------
T=$T_WORK/src/tree
as_user mkdir -p "$T/sub"
as_user sh -c "cd '$T' && head -c 16000000 /dev/urandom > a.big &&
    for i in \$(seq -w 0 69); do echo b\$i > b\$i; done &&
    for i in \$(seq 0 9); do echo f\$i > sub/f\$i; done"
python3 "$STORM_SRCDIR/tests/integration/bcast_manifest.py" "$T" > "$T_WORK/m.src"
t_check "(set-up) the source: $(wc -l < "$T_WORK/m.src") entries" [ "$(wc -l < "$T_WORK/m.src")" = 83 ]
# (each holds files of the names in sub/: a write that followed the link
# would land in them, not fail for want of a file)
"$VC" exec vn2 sh -c "mkdir -p /tmp/locked && cd /tmp/locked && for i in \$(seq 0 9); do echo root > f\$i; done && chmod 755 ."
"$VC" exec vn3 sh -c "mkdir -p /tmp/open && cd /tmp/open && for i in \$(seq 0 9); do echo mine > f\$i; done && chown -R nobody:nogroup . && chmod 755 ."
t_check "(set-up) nobody cannot write /tmp/locked on vn2" \
    fails "$VC" exec vn2 setpriv --reuid=nobody --regid=nogroup --clear-groups touch /tmp/locked/x
t_check "(set-up) nobody can write /tmp/open on vn3" \
    "$VC" exec vn3 setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c "touch /tmp/open/x && rm /tmp/open/x"
snapshot vn2 /tmp/locked > "$T_WORK/locked.before"
snapshot vn3 /tmp/open > "$T_WORK/open.before"
t_diag < "$T_WORK/open.before"

# --- the race ----------------------------------------------------------------------
# swap NODE TARGET: as nobody on NODE, waits for the staged sub/ and the
# big file's first bytes, then renames sub away and puts a symbolic link to
# TARGET in its place; prints the staging directory.
swap() {
    "$VC" exec "$1" setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c "
        for i in \$(seq 400); do
            t=\$(ls -d /tmp/.tree.storm-* 2> /dev/null | head -1)
            [ -n \"\$t\" ] && [ -d \"\$t/sub\" ] && [ -f \"\$t/a.big\" ] && break
            sleep 0.025
        done
        [ -n \"\$t\" ] && mv \"\$t/sub\" \"\$t/moved\" && ln -s '$2' \"\$t/sub\" && echo \"\$t\""
}
as_user "$STORM_BUILDDIR/tools/storm-bcast" -j "$job" -p "$T" /tmp/tree > "$T_WORK/race.out" 2>&1 &
bpid=$!
swap vn2 /tmp/locked > "$T_WORK/swap.vn2" 2>&1 &
s2=$!
swap vn3 /tmp/open > "$T_WORK/swap.vn3" 2>&1
s3rc=$?
wait "$s2"
s2rc=$?
running=no
kill -0 "$bpid" 2> /dev/null && running=yes
cat "$T_WORK/swap.vn2" "$T_WORK/swap.vn3" | t_diag
t_check "nobody swapped the staged sub/ for a link to /tmp/locked on vn2" [ "$s2rc" = 0 ]
t_check "  and for a link to /tmp/open on vn3" [ "$s3rc" = 0 ]
t_check "  while the broadcast ran, before its commit (storm-bcast still running: $running; no /tmp/tree on vn3)" \
    bash -c "[ $running = yes ] && ! '$VC' exec vn3 test -e /tmp/tree"
wait "$bpid"
rc=$?
t_diag < "$T_WORK/race.out"
snapshot vn2 /tmp/locked > "$T_WORK/locked.after"
snapshot vn3 /tmp/open > "$T_WORK/open.after"
t_check "nothing written in /tmp/locked on vn2 (listing, times and checksums as before)" \
    cmp -s "$T_WORK/locked.before" "$T_WORK/locked.after"
t_check "nothing written in /tmp/open on vn3 (listing, times and checksums as before)" \
    cmp -s "$T_WORK/open.before" "$T_WORK/open.after"
diff "$T_WORK/locked.before" "$T_WORK/locked.after" | t_diag
diff "$T_WORK/open.before" "$T_WORK/open.after" | t_diag
if [ "$rc" != 0 ]; then
    t_check "the broadcast failed (exit $rc), naming the swapped sub/ of the staging directory" \
        grep -qE "(vn2|vn3): .*/tmp/\.tree\.storm-[0-9a-f]+/sub" "$T_WORK/race.out"
    t_check "  no node keeps /tmp/tree or a staging directory" no_trace /tmp/tree
else
    t_check "the broadcast succeeded: every node has an exact copy" same_everywhere /tmp/tree "$T_WORK/m.src"
fi

# --- untouched, the same broadcast succeeds ----------------------------------------
for n in $NODES; do "$VC" exec "$n" sh -c "rm -rf /tmp/tree /tmp/.tree.storm-*"; done
t_check "the same broadcast, untouched, succeeds" b -p "$T" /tmp/tree
t_check "  every node has an exact copy" same_everywhere /tmp/tree "$T_WORK/m.src"
scancel "$job"
t_done
