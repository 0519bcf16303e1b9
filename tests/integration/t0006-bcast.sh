#!/usr/bin/env bash
# t0006: users' broadcasts through the node agents inside 16 real slurmd
# (storm-bcast, and srun --bcast with CliFilterPlugins=cli_filter/storm), as an
# unprivileged user: byte-for-byte copies on every node, owned by the user
# with the source's mode; a directory tree with --preserve; and every bad
# input of the issue -- missing or unreadable source, a directory where a
# file belongs, an unwritable destination, an existing file without
# --force, a full disk on one node, a hung head node, a node killed
# mid-transfer (storm-bcast, and srun --bcast while its step launches), a
# node that cannot put the file in place once the others did (they put the
# earlier file back), a job that ended, another user's job -- fails with a
# message naming the node and cause, exit 1, no launch, and no file
# (partial or whole, temporary or final) on any node.  A killed node's slurmd removes its part
# on restart.  srun --bcast's launch overlaps the transfer: with shaped
# links every node's slurmstepd holds the tasks until the copy is there;
# srun ended mid-transfer cancels it, and no task starts.
# With T_BCAST_MCAST=1 (t0010) the agents carry the data by multicast, and
# it also checks that they did, and that a node whose network drops the
# multicast gets every chunk over the tree instead.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
BCAST="$STORM_BUILDDIR/tools/storm-bcast"
N=16
MCAST=${T_BCAST_MCAST:-0}
if [ "$MCAST" = 1 ]; then
    vc_up "$N" --conf "SwitchParameters=storm_mcast=239.255.77.1:6831"
else
    vc_up "$N"
fi
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
NODES=$("$VC" nodes | tr "\n" " ")
# as the unprivileged user nobody, with a 60 s allocation of all nodes
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
SRC=$T_WORK/src
mkdir -p "$SRC"
head -c 12000000 /dev/urandom > "$SRC/data12"
chmod 640 "$SRC/data12"
chown nobody:nogroup "$SRC/data12"
sum=$(md5sum < "$SRC/data12")
# on_all CMD: CMD's output on every node, "node: output" per line
on_all() { local n; for n in $NODES; do echo "$n: $("$VC" exec "$n" sh -c "$1" 2>&1)"; done; }
# no_trace PATTERN: no node has a file matching PATTERN, nor any temporary
no_trace() {
    local out
    out=$(on_all "ls -d $1 /tmp/.*.storm-* /scratch/.*.storm-* 2>/dev/null" | grep -v -e ': $' -e 'is not running')
    [ -z "$out" ] || { echo "$out" | t_diag; return 1; }
}
job=$(as_user sbatch --parsable -N "$N" -t 5 -o /dev/null --wrap "sleep 600")
for _ in $(seq 100); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
t_check "a 16-node job of nobody runs ($job)" [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]
fails() { ! "$@"; }
b() { as_user "$BCAST" -j "$job" "$@" > "$T_WORK/b.out" 2>&1; local rc=$?; t_diag < "$T_WORK/b.out"; return $rc; }

# --- files land whole, as the user ---------------------------------------------
t_check "storm-bcast 12 MB to $N nodes" b -v "$SRC/data12" /tmp/data12
t_check "every node has it byte for byte" \
    bash -c "[ \$(for n in $NODES; do '$VC' exec \$n sh -c 'md5sum < /tmp/data12'; done | grep -c '$sum') = $N ]"
t_check "owned by nobody:nogroup with the source's mode 640 everywhere" \
    bash -c "[ \$(for n in $NODES; do '$VC' exec \$n stat -c '%U:%G %a' /tmp/data12; done | grep -c '^nobody:nogroup 640\$') = $N ]"
if [ "$MCAST" = 1 ]; then
    # data12's chunks where the agents multicast, of the size storm-bcast's
    # help names (net::kMcastChunkSize)
    mchunk=$("$BCAST" --help | sed -n 's/.*, or \([0-9]*\) bytes where the$/\1/p')
    t_check "storm-bcast --help names the multicast chunk size ($mchunk bytes)" [ "${mchunk:-0}" -gt 0 ]
    chunks=$(((12000000 + ${mchunk:-1} - 1) / ${mchunk:-1}))
    t_check "  the head multicast the chunks (COMPARE-AND-WRITE on its count)" t_prim -n 0 caw mcast:sent ge $chunks
    t_check "  and every other node took them from multicast" t_prim -n 1-$((N - 1)) caw mcast:received ge $chunks
    # vn6's (index 5) link drops the group's datagrams: they go to a class
    # of 8 bit/s with room for one packet, everything else passes
    {
        echo "qdisc add dev svh6 root handle 1: htb default 1 r2q 1000"
        echo "class add dev svh6 parent 1: classid 1:1 htb rate 10gbit"
        echo "class add dev svh6 parent 1: classid 1:2 htb rate 8bit ceil 8bit"
        echo "qdisc add dev svh6 parent 1:2 pfifo limit 1"
        echo "filter add dev svh6 parent 1: protocol ip u32 match ip dst 239.255.77.1/32 flowid 1:2"
    } > "$T_WORK/drop.tc"
    tc -batch "$T_WORK/drop.tc" 2>&1 | grep -v 'quantum of class' | t_diag
    t_check "the network drops the multicast to vn6: storm-bcast 12 MB still succeeds" b -f "$SRC/data12" /tmp/data12
    tc qdisc del dev svh6 root
    t_check "  vn6 has it byte for byte" bash -c "[ \"\$('$VC' exec vn6 sh -c 'md5sum < /tmp/data12')\" = '$sum' ]"
    t_check "  every chunk of it came to vn6 over the tree" t_prim -n 5 caw mcast:repaired ge $chunks
    t_check "  while the others still took it from multicast" t_prim -n 1-4,6-$((N - 1)) caw mcast:received ge $((2 * chunks))
fi
t_check "an existing file is not replaced without --force" fails b "$SRC/data12" /tmp/data12 2>/dev/null
t_check "  and the message says so per node" grep -q "vn1: /tmp/data12 exists (--force replaces it)" "$T_WORK/b.out"
t_check "with --force it is (and compressed, with 256k chunks, fanout 2)" b -f -C -s 256k -F 2 "$SRC/data12" /tmp/data12
mkdir -p "$SRC/tree/sub" && echo hello > "$SRC/tree/sub/hi" && head -c 100000 /dev/urandom > "$SRC/tree/blob"
touch -d 2001-02-03 "$SRC/tree/blob"; chown -R nobody:nogroup "$SRC/tree"
t_check "a directory tree with --preserve" b -p "$SRC/tree" /scratch/tree
t_check "  arrives whole, times kept" bash -c "[ \$(for n in $NODES; do '$VC' exec \$n sh -c 'cat /scratch/tree/sub/hi; stat -c %y /scratch/tree/blob'; done | grep -c -e '^hello\$' -e '^2001-02-03') = $((2 * N)) ]"
t_check "no temporaries left anywhere" no_trace /nonexistent

# --- srun --bcast through Storm ------------------------------------------------
cp /bin/echo "$SRC/prog" && head -c 12000000 /dev/urandom >> "$SRC/prog" && chmod 755 "$SRC/prog"
cd "$T_WORK" || t_bail "cd $T_WORK"
as_user srun --jobid="$job" -N "$N" -v --bcast "$SRC/prog" ok > "$T_WORK/srun.out" 2>&1
rc=$?
t_diag < "$T_WORK/srun.out"
t_check "srun --bcast prog: every task ran the copy (rc $rc)" bash -c "[ $rc = 0 ] && [ \$(grep -c '^ok\$' '$T_WORK/srun.out') = $N ]"
t_check "  sent through Storm, not srun's own broadcast" grep -q "cli_filter/storm: .*prog -> $T_WORK/ on $N nodes through Storm" "$T_WORK/srun.out"
t_check "  as slurm_bcast_<job>.<step>_<node> in the working directory, nobody's" \
    bash -c "[ \$(for n in $NODES; do '$VC' exec \$n sh -c 'stat -c %U:%a $T_WORK/slurm_bcast_${job}.*_'\$n; done | grep -c '^nobody:755\$') = $N ]"
rm -f "$T_WORK"/slurm_bcast_*
as_user srun --jobid="$job" -N "$N" --bcast=/tmp/p2 sh -c 'echo $0' > "$T_WORK/srun2.out" 2>&1
t_check "srun --bcast=/tmp/p2 runs /tmp/p2 on every node" bash -c "[ \$(grep -c '^/tmp/p2\$' '$T_WORK/srun2.out') = $N ]"
# srun --compress: Storm's default codec (lz4) on the wire.  The program
# is a script of 1.2 MB, mostly comments: it shrinks to less than half.
{ echo '#!/bin/sh'; echo 'echo "compressed $0"'; for i in $(seq 40000); do echo "# line $i of a long comment"; done; } > "$SRC/p3"
chmod 755 "$SRC/p3"
as_user srun --jobid="$job" -N "$N" -v --compress --bcast=/tmp/p3 "$SRC/p3" > "$T_WORK/srun3.out" 2>&1
t_check "srun --compress --bcast=/tmp/p3 runs /tmp/p3 on every node" bash -c "[ \$(grep -c '^compressed /tmp/p3\$' '$T_WORK/srun3.out') = $N ]"
t_check "  in fewer bytes on the wire, lz4" \
    awk '/through Storm in .* MB sent, lz4/ { sub(/.*s \(/, ""); if ($1 + 0 > 0 && $1 * 2 < 1.2) ok = 1 } END { exit !ok }' "$T_WORK/srun3.out"
# The launch overlaps the transfer.  With links shaped to 100 Mbit/s the
# 12 MB program takes about a second to arrive, while Slurm starts the
# step's slurmstepd at once: each one holds the tasks until the copy is in
# place on its node (without the hold they would find no program).
# log_mark: every slurmd log's size; new_log: what each logged since.
log_mark() { for n in $NODES; do echo "$n $(stat -c %s "$STATE/log/slurmd-$n.log")"; done > "$T_WORK/logmark"; }
new_log() { while read -r n size; do tail -c +$((size + 1)) "$STATE/log/slurmd-$n.log"; done < "$T_WORK/logmark"; }
rm -f "$T_WORK"/slurm_bcast_*
log_mark
"$VC" shape 100mbit > /dev/null
as_user srun --jobid="$job" -N "$N" --bcast "$SRC/prog" ok > "$T_WORK/srun4.out" 2>&1
rc=$?
"$VC" shape off > /dev/null
t_diag < "$T_WORK/srun4.out"
t_check "links shaped to 100 Mbit/s: every task ran the whole copy (rc $rc)" \
    bash -c "[ $rc = 0 ] && [ \$(grep -c '^ok\$' '$T_WORK/srun4.out') = $N ]"
new_log | grep "launch gate: step $job\.[0-9]* may start" > "$T_WORK/held"
held_max=$(sed -n 's/.*(held \([0-9]*\) ms).*/\1/p' "$T_WORK/held" | sort -n | tail -1)
t_check "  slurmstepd held the tasks on every node until the copy was there" [ "$(wc -l < "$T_WORK/held")" = "$N" ]
t_check "  while the transfer ran: the launch did not wait for it (a node held ${held_max:-0} ms)" \
    [ "${held_max:-0}" -ge 100 ]
rm -f "$T_WORK"/slurm_bcast_*
# srun ended (SIGTERM) while a 40 MB program is on its way: the broadcast is
# cancelled, no task starts anywhere, and no node keeps a copy.
cp /bin/echo "$SRC/big" && head -c 40000000 /dev/urandom >> "$SRC/big" && chmod 755 "$SRC/big"
"$VC" shape 100mbit > /dev/null
# (setpriv execs srun: $! is srun's pid)
setpriv --reuid=nobody --regid=nogroup --clear-groups \
    srun --jobid="$job" -N "$N" --bcast=/tmp/cancelled "$SRC/big" ok > "$T_WORK/srun6.out" 2>&1 &
spid=$!
# once the step's slurmstepd hold its tasks on every node, while the
# program streams
for _ in $(seq 200); do [ "$(pgrep -fc "slurmstepd: \[$job\.[0-9]")" -ge "$N" ] && break; sleep 0.05; done
t0=$(date +%s.%N)
kill -TERM "$spid"
wait "$spid"
rc=$?
secs=$(echo "$(date +%s.%N) - $t0" | bc)
"$VC" shape off > /dev/null
t_diag < "$T_WORK/srun6.out"
t_check "srun --bcast ended by SIGTERM mid-transfer: exit non-zero (rc $rc) within 10 s of it ($secs s), no task ran" \
    bash -c "[ $rc != 0 ] && [ \$(echo '$secs < 10' | bc) = 1 ] && ! grep -q '^ok\$' '$T_WORK/srun6.out'"
t_check "  srun says the broadcast was cancelled" grep -q "cannot broadcast $SRC/big: .*the broadcast was cancelled" "$T_WORK/srun6.out"
t_check "  and no node kept anything" no_trace /tmp/cancelled
t_check "  nor did any task start later" bash -c "sleep 2; ! grep -q '^ok\$' '$T_WORK/srun6.out'"

# vn4 cannot put the file in place once every node has every byte (its
# /tmp/data12 became root's directory meanwhile, which nobody may not
# replace in /tmp): the others, which already swapped the new file in, put
# the earlier one back.
head -c 12000000 /dev/urandom > "$SRC/v2" && chmod 644 "$SRC/v2"
"$VC" shape 100mbit > /dev/null
b -f "$SRC/v2" /tmp/data12 &
bpid=$!
for _ in $(seq 200); do "$VC" exec vn4 sh -c 'ls /tmp/.data12.storm-*' > /dev/null 2>&1 && break; sleep 0.05; done
"$VC" exec vn4 sh -c 'rm -f /tmp/data12 && mkdir /tmp/data12'
wait "$bpid"
rc=$?
"$VC" shape off > /dev/null
t_check "a node that cannot put the file in place at the end: exit non-zero (rc $rc)" [ "$rc" != 0 ]
t_check "  naming node and cause" grep -q "vn4: cannot rename into /tmp/data12: Operation not permitted" "$T_WORK/b.out"
t_check "  every other node has the earlier file back, byte for byte" \
    bash -c "[ \$(for n in $NODES; do '$VC' exec \$n sh -c 'md5sum < /tmp/data12' 2>/dev/null; done | grep -c '$sum') = $((N - 1)) ]"
t_check "  and no temporaries anywhere" no_trace /nonexistent
"$VC" exec vn4 sh -c 'rmdir /tmp/data12'

# --- bad input: a clear error, exit 1, nothing left ----------------------------
t_check "a missing source: exit 1" fails b "$SRC/nope" /tmp/nope
t_check "  saying so" grep -q "cannot read $SRC/nope: No such file or directory" "$T_WORK/b.out"
echo secret > "$SRC/secret" && chmod 600 "$SRC/secret"
t_check "an unreadable source: exit 1" fails b "$SRC/secret" /tmp/secret
t_check "  saying so" grep -q "cannot read $SRC/secret: Permission denied" "$T_WORK/b.out"
t_check "a directory where the file goes: exit 1" fails b -f "$SRC/data12" /scratch/tree
t_check "  naming the nodes" grep -q "vn7: /scratch/tree is a directory" "$T_WORK/b.out"
t_check "a destination the user cannot write: exit 1" fails b "$SRC/data12" /etc/data12
t_check "  naming node and cause" grep -q "vn3: cannot create /etc/data12: Permission denied" "$T_WORK/b.out"
as_user srun --jobid="$job" -N "$N" --bcast=/etc/p3 true > "$T_WORK/srun3.out" 2>&1
rc=$?
t_diag < "$T_WORK/srun3.out"
t_check "srun --bcast to an unwritable place: no launch (rc $rc)" \
    bash -c "[ $rc != 0 ] && grep -q 'Step launch aborted' '$T_WORK/srun3.out' && ! grep -q 'launching' '$T_WORK/srun3.out'"
t_check "no file of these anywhere" no_trace "/tmp/nope /tmp/secret /etc/data12 /etc/p3"

"$VC" exec vn9 sh -c 'mount -t tmpfs -o size=4m tmpfs /scratch && chmod 1777 /scratch'
t_check "a full disk on vn9 (4 MB /scratch): exit 1" fails b "$SRC/data12" /scratch/data12
t_check "  naming vn9 and the cause" grep -q "vn9: not enough space in /scratch: 12000000 bytes needed, [0-9]* free" "$T_WORK/b.out"
t_check "  and no node kept anything" no_trace /scratch/data12
# 40 one-byte files: 40 bytes pass the free-space check, but each takes a
# 4 KiB page of vn9's 64 KiB /scratch.  Every node creates each file of a
# tree with its first bytes (reserving its blocks first if they come in
# several chunks), so vn9 fails there.
"$VC" exec vn9 sh -c 'umount /scratch && mount -t tmpfs -o size=64k tmpfs /scratch && chmod 1777 /scratch'
mkdir -p "$SRC/many" && for i in $(seq 1 40); do echo -n x > "$SRC/many/f$i"; done && chown -R nobody:nogroup "$SRC/many"
t_check "40 one-byte files into vn9's 64 KiB /scratch: exit 1" fails b "$SRC/many" /scratch/many
t_check "  naming vn9 and the file it could not reserve" \
    grep -qE "vn9: cannot (reserve 1 bytes for|write) /scratch/many/f[0-9]+: No space left on device" "$T_WORK/b.out"
t_check "  and no node kept anything" no_trace /scratch/many

pid1=$(cat "$STATE/run/slurmd-vn1.pid")
kill -STOP "$pid1"
t0=$(date +%s)
fails b -t 1 "$SRC/data12" /tmp/hung; rc=$?
t1=$(date +%s)
kill -CONT "$pid1"
t_check "a hung head node: exit 1 within 10 s ($((t1 - t0)) s)" [ "$rc" = 0 -a $((t1 - t0)) -le 10 ]
t_check "  naming it" grep -q "no answer from the Storm agent on vn1 for 3 s" "$T_WORK/b.out"
sleep 1
t_check "  and, resumed, it kept nothing (nor did any node)" no_trace /tmp/hung

"$VC" shape 100mbit > /dev/null
as_user "$BCAST" -j "$job" -s 16k "$SRC/data12" /tmp/killed > "$T_WORK/kill.out" 2>&1 &
bpid=$!
sleep 0.4
kill -9 "$(cat "$STATE/run/slurmd-vn5.pid")"
t0=$(date +%s.%N)
wait $bpid
rc=$?
t1=$(date +%s.%N)
"$VC" shape off > /dev/null
t_diag < "$T_WORK/kill.out"
t_check "vn5 killed mid-transfer: exit 1 (rc $rc, after $(echo "$t1 - $t0" | bc) s)" [ "$rc" = 1 ]
t_check "  naming vn5" grep -q "vn5: " "$T_WORK/kill.out"
vn5_left=$(find "$STATE/nodes/vn5/tmp" -maxdepth 1 -name '*storm-*' | wc -l)
t_check "  no other node kept anything (vn5 left $vn5_left temporary)" no_trace /tmp/killed
t_check "  the killed vn5 had staged its part ($vn5_left temporary)" [ "$vn5_left" -ge 1 ]
"$VC" start vn5 > /dev/null
for _ in $(seq 50); do grep -q "left by a broadcast that did not finish" "$STATE/log/slurmd-vn5.log" && break; sleep 0.2; done
t_check "restarted, vn5's slurmd removed what it had staged" \
    bash -c "[ \$(ls -a '$STATE/nodes/vn5/tmp' | grep -c storm-) = 0 ]"

scontrol update nodename=vn5 state=resume > /dev/null 2>&1

# The restarted vn5 is reached again at once: the agents retry a node whose
# daemon closed or refused their connection after a short pause (0.25 s,
# doubling while it stays down), not after their 10 s timeout.
echo probe > "$SRC/probe" && chown nobody "$SRC/probe"
t0=$(date +%s%N); probes=0
for _ in $(seq 40); do probes=$((probes + 1)); b -f "$SRC/probe" /tmp/probe && break; sleep 0.25; done
ms=$((($(date +%s%N) - t0) / 1000000))
t_check "the restarted vn5 takes a broadcast to every node again within 3 s ($ms ms, $probes tries)" \
    [ "$ms" -le 3000 ]

# srun --bcast with vn8 killed mid-transfer, while the step launches: the
# tasks start nowhere, srun says why, and no node keeps a copy.  vn8 is
# killed once its slurmd got the step's launch, which srun sends once every
# node opened the broadcast (the 12 MB take a second at 100 Mbit/s).
"$VC" shape 100mbit > /dev/null
vn8_log=$(node_log_size vn8)
as_user srun --jobid="$job" -N "$N" --bcast=/tmp/killed2 "$SRC/prog" ok > "$T_WORK/srun5.out" 2>&1 &
spid=$!
wait_node_log vn8 "$vn8_log" 200 0.05 "launch task StepId=$job\."
kill -9 "$(cat "$STATE/run/slurmd-vn8.pid")"
wait $spid
rc=$?
"$VC" shape off > /dev/null
t_diag < "$T_WORK/srun5.out"
t_check "srun --bcast, vn8 killed mid-transfer: exit non-zero (rc $rc), no task ran" \
    bash -c "[ $rc != 0 ] && ! grep -q '^ok\$' '$T_WORK/srun5.out'"
t_check "  srun says why, naming vn8, and that the launch was aborted" \
    bash -c "grep -q 'cannot broadcast $SRC/prog: transfer of /tmp/killed2 failed' '$T_WORK/srun5.out' &&
             grep -q '^ *vn8: ' '$T_WORK/srun5.out' && grep -q 'Step launch aborted' '$T_WORK/srun5.out'"
"$VC" start vn8 > /dev/null
for _ in $(seq 50); do grep -q "left by a broadcast that did not finish" "$STATE/log/slurmd-vn8.log" && break; sleep 0.2; done
t_check "  and no node kept anything (vn8 once restarted)" no_trace /tmp/killed2
scontrol update nodename=vn8 state=resume > /dev/null 2>&1
scancel "$job"
wait_job "$job" 30
t_check "a job that ended: exit 1" fails b "$SRC/data12" /tmp/late
t_check "  saying so" grep -q "cannot get a broadcast credential for job $job" "$T_WORK/b.out"
rjob=$(sbatch --parsable -N 2 -t 5 -o /dev/null --wrap "sleep 600")
# running: slurmctld answers a pending job's credential request with "Job is
# pending execution" before it looks at the user (26.05).
for _ in $(seq 100); do [ "$(squeue -h -j "$rjob" -o %T)" = RUNNING ] && break; sleep 0.1; done
t_check "another user's job: exit 1" fails b -j $rjob "$SRC/data12" /tmp/theirs
t_check "  refused by slurmctld" grep -q "cannot get a broadcast credential for job $rjob: Invalid user id" "$T_WORK/b.out"
scancel "$rjob"
t_check "nothing of either anywhere" no_trace "/tmp/late /tmp/theirs"
t_done
