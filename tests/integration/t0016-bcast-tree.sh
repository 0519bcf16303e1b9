#!/usr/bin/env bash
# t0016: whole trees through storm-bcast on 4 real slurmd, as the
# unprivileged user nobody.  A tree holding symbolic links (relative,
# absolute, dangling, pointing outside it), hard links, an empty directory
# and odd names (a space, a newline, bytes that are not UTF-8) arrives on
# every node as an exact copy with --preserve: the same manifest (kind,
# mode, owner, size, links, mtime, link target, SHA-256, inode groups:
# bcast_manifest.py) as the source; so does a copy of Python's asyncio sent
# compressed (-C), in less than half its bytes.  A FIFO or a device in the source is
# refused, naming it, before anything is sent.  A failure mid-tree leaves
# no partial tree anywhere, and with --force the tree that was there stays
# (a full disk on one node; one node killed mid-transfer) or is put back
# (one node cannot swap the new tree in after the others did).
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
MANIFEST="$STORM_SRCDIR/tests/integration/bcast_manifest.py"
N=4
vc_up "$N"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
chmod 1777 "$T_WORK"
nobody_job "$N"

# --- an exact copy ---------------------------------------------------------------
SRC=$T_WORK/src
T=$SRC/tree
as_user mkdir -p "$T/sub/deeper" "$T/empty" "$T/bin"
as_user sh -c "cd '$T' && head -c 300000 /dev/urandom > lib.so.1.2 && echo hi > 'with space' &&
    printf x > \"\$(printf 'new\nline')\" && printf y > \"\$(printf 'bad\377\376')\" &&
    echo deep > sub/deeper/f && ln lib.so.1.2 sub/hard && ln sub/deeper/f bin/hard2 &&
    ln -s lib.so.1.2 lib.so.1 && ln -s lib.so.1 lib.so && ln -s ../lib.so.1.2 sub/up &&
    ln -s /etc/hostname abs && ln -s nowhere dangling && ln -s ../../../../etc/passwd outside &&
    ln -s ../empty sub/dirlink && chmod 750 bin && chmod 600 'with space' && chmod 755 lib.so.1.2 &&
    chmod 700 sub/deeper"
# every entry its own mtime, whole seconds (the broadcast carries seconds)
i=0
while IFS= read -r -d '' p; do
    i=$((i + 1)); as_user touch -h -d "@$((1000000000 + i * 1000))" "$p"
done < <(find "$T" -depth -print0)
python3 "$MANIFEST" "$T" > "$T_WORK/m.src"
# (set-up checks: the manifest sees what the copies must have)
t_check "the source's manifest: $(wc -l < "$T_WORK/m.src") entries, 7 symbolic links" [ "$(grep -c '^l ' "$T_WORK/m.src")" = 7 ]
t_check "  lib.so.1.2 and sub/hard one inode of 2 links" grep -qF "[b'lib.so.1.2', b'sub/hard'] b'sub/hard'" "$T_WORK/m.src"
t_check "  names with a newline and with bytes 0xff 0xfe" bash -c "grep -qF \"b'new\\nline'\" '$T_WORK/m.src' && grep -qF \"b'bad\\xff\\xfe'\" '$T_WORK/m.src'"
t_check "storm-bcast -p of the tree to $N nodes" b -v -p "$T" /tmp/tree
t_check "  every node has an exact copy (types, modes, owner, sizes, links, times, targets, bytes, inode groups)" \
    same_everywhere /tmp/tree "$T_WORK/m.src"
t_check "  the absolute link is a link to /etc/hostname on vn3, the outside one points outside" \
    bash -c "[ \"\$('$VC' exec vn3 readlink /tmp/tree/abs)\" = /etc/hostname ] && [ \"\$('$VC' exec vn3 readlink /tmp/tree/outside)\" = ../../../../etc/passwd ]"
t_check "  lib.so -> lib.so.1 -> lib.so.1.2: one copy of the library's bytes" \
    bash -c "[ \"\$('$VC' exec vn2 stat -c '%F %i' /tmp/tree/lib.so.1.2)\" = \"\$('$VC' exec vn2 stat -L -c '%F %i' /tmp/tree/lib.so)\" ] && [ \"\$('$VC' exec vn2 stat -c %F /tmp/tree/lib.so)\" = 'symbolic link' ]"
t_check "no temporaries left anywhere" no_trace /nonexistent

# --- compressed on the wire (-C: lz4, and -C zstd) ---------------------------------
# Python's asyncio package (its sources and bytecode), as Debian ships it.
as_user cp -r /usr/lib/python3.11/asyncio "$SRC/asyncio"
python3 "$MANIFEST" "$SRC/asyncio" > "$T_WORK/m.py"
t_check "storm-bcast -C -p of Python's asyncio ($(wc -l < "$T_WORK/m.py") entries)" b -v -C -p "$SRC/asyncio" /tmp/asyncio
t_check "  every node has an exact copy" same_everywhere /tmp/asyncio "$T_WORK/m.py"
t_check "  in less than half its bytes on the wire (lz4)" \
    awk '/MB sent, lz4/ { sub(/.*: /, ""); sub(/\(/, ""); if ($3 + 0 > 0 && $3 * 2 < $1) ok = 1 } END { exit !ok }' "$T_WORK/b.out"
t_check "storm-bcast --compress=zstd -f -p of the same" b -v --compress=zstd -f -p "$SRC/asyncio" /tmp/asyncio
t_check "  every node has an exact copy" same_everywhere /tmp/asyncio "$T_WORK/m.py"
t_check "  in less than half its bytes on the wire (zstd)" \
    awk '/MB sent, zstd/ { sub(/.*: /, ""); sub(/\(/, ""); if ($3 + 0 > 0 && $3 * 2 < $1) ok = 1 } END { exit !ok }' "$T_WORK/b.out"

# --- special files are refused ---------------------------------------------------
F=$SRC/fifo
as_user mkdir -p "$F/a" && as_user mkfifo "$F/a/pipe" && echo x | as_user tee "$F/file" > /dev/null
t_check "a FIFO in the source: exit 1" fails b "$F" /tmp/fifo
t_check "  naming it" grep -q "storm-bcast: error: $F holds special files, which are not sent: $F/a/pipe (a FIFO)" "$T_WORK/b.out"
D=$SRC/dev
as_user mkdir -p "$D" && mknod "$D/null" c 1 3 && chmod 666 "$D/null"
t_check "a device in the source: exit 1" fails b "$D" /tmp/dev
t_check "  naming it" grep -q "$D/null (a character device)" "$T_WORK/b.out"
t_check "  and nothing of either on any node" no_trace "/tmp/fifo /tmp/dev"

# --- failures mid-tree: nothing partial, --force keeps or restores the old tree ---
# The new tree: 40 MB in 400 files, with links too.
NEW=$SRC/new
as_user mkdir -p "$NEW/d"
as_user sh -c "cd '$NEW' && for i in \$(seq 1 400); do head -c 100000 /dev/urandom > d/f\$i; done && ln -s d/f1 first && ln d/f2 second"
# On vn3, /scratch is a tmpfs of 20 MB: the old tree fits, the new one not.
"$VC" exec vn3 sh -c 'mount -t tmpfs -o size=20m tmpfs /scratch && chmod 1777 /scratch'
t_check "the old tree to /scratch/env" b -p "$T" /scratch/env
t_check "a full disk on vn3 (40 MB tree, 20 MB /scratch) with --force: exit 1" fails b -f "$NEW" /scratch/env
t_check "  naming vn3 and the cause" grep -q "vn3: not enough space in /scratch" "$T_WORK/b.out"
t_check "  every node still has the old tree, exact" same_everywhere /scratch/env "$T_WORK/m.src"
t_check "  and no temporaries" no_trace /nonexistent
"$VC" exec vn3 sh -c 'umount /scratch'
t_check "the old tree to vn3's /scratch/env again" b -f -p "$T" /scratch/env

# vn2 cannot swap the new tree in once every node has all of it (root
# made its /scratch/env a directory of its own meanwhile, which nobody may
# not replace in the sticky /scratch): the nodes that swapped theirs put
# the old tree back.
"$VC" shape 100mbit > /dev/null
b -f -p "$NEW" /scratch/env &
bpid=$!
for _ in $(seq 200); do "$VC" exec vn2 sh -c 'ls -d /scratch/.env.storm-*' > /dev/null 2>&1 && break; sleep 0.05; done
"$VC" exec vn2 sh -c 'mv /scratch/env /scratch/env.saved && mkdir /scratch/env'
wait "$bpid"
rc=$?
"$VC" shape off > /dev/null
t_check "vn2 cannot put the new tree in place at the end: exit non-zero (rc $rc)" [ "$rc" != 0 ]
t_check "  naming vn2 and the cause" grep -q "vn2: cannot replace /scratch/env: Operation not permitted" "$T_WORK/b.out"
"$VC" exec vn2 sh -c 'rmdir /scratch/env && mv /scratch/env.saved /scratch/env'
t_check "  every node has the old tree back, exact" same_everywhere /scratch/env "$T_WORK/m.src"
t_check "  and no temporaries" no_trace /nonexistent

# vn4 killed while the new tree streams (links shaped to 100 Mbit/s: about
# 4 s): once while the nodes stage its 404 entries, once while the data
# flows (vn4 said it is receiving).
for when in staging data; do
    before=$(node_log_size vn4)
    "$VC" shape 100mbit > /dev/null
    b -f -p "$NEW" /scratch/env &
    bpid=$!
    if [ $when = staging ]; then
        for _ in $(seq 400); do [ -n "$(ls -A "$STATE"/nodes/vn4/scratch/.env.storm-*/d 2>/dev/null)" ] && break; sleep 0.01; done
    else
        wait_node_log vn4 "$before" 200 0.05 "receiving /scratch/env"
        sleep 0.5
    fi
    vn4_part=$(find "$STATE"/nodes/vn4/scratch/.env.storm-* 2>/dev/null | wc -l)
    kill -9 "$(cat "$STATE/run/slurmd-vn4.pid")"
    wait "$bpid"
    rc=$?
    "$VC" shape off > /dev/null
    t_check "vn4 killed mid-tree ($when, $vn4_part entries staged there): exit 1 (rc $rc)" [ "$rc" = 1 ]
    t_check "  naming vn4" grep -q "vn4: " "$T_WORK/b.out"
    vn4_left=$(find "$STATE/nodes/vn4/scratch" -maxdepth 1 -name '.env.storm-*' 2>/dev/null | wc -l)
    "$VC" start vn4 > /dev/null
    wait_node_log vn4 "$before" 50 0.2 "left by a broadcast that did not finish"
    scontrol update nodename=vn4 state=resume > /dev/null 2>&1
    t_check "  vn4 had staged part of it ($vn4_left staging directory), its restarted slurmd removed it" \
        bash -c "[ $vn4_left = 1 ] && [ \$(ls -a '$STATE/nodes/vn4/scratch' | grep -c storm-) = 0 ]"
    t_check "  every node (vn4 too) has the old tree, exact" same_everywhere /scratch/env "$T_WORK/m.src"
    t_check "  and no temporaries" no_trace /nonexistent
done
python3 "$MANIFEST" "$NEW" > "$T_WORK/m.new"
t_check "with every node up, --force replaces the tree whole" b -f -p "$NEW" /scratch/env
t_check "  every node has the new tree, exact" same_everywhere /scratch/env "$T_WORK/m.new"
scancel "$job"
t_done
