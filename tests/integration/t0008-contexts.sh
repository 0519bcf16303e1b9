#!/usr/bin/env bash
# t0008: communication contexts and buffer swapping inside the real
# slurmctld, slurmd and slurmstepd, with the installed libstormmsg.
# - every step gets a context (STORM_CTX) from slurmctld; its tasks attach
#   to their node agents and run the library's all-to-all test: every
#   message arrives once and in order (divided pool, no gang);
# - two all-to-all jobs of nobody gang-scheduled at a short quantum in a
#   FORCE:2 partition, with swapped pools: both finish with every message
#   once and in order across hundreds of halt / swap / release switches,
#   and the nodes report the switches and no failure;
# - bad input gets a clear error: a task without a context, a context
#   stolen by another user, tasks whose share of the pool leaves no credit;
# - another user who knows a running step's context id, job and step but
#   not its key cannot claim a rank of it (an old-version hello, a guessed
#   key): refused, named on the task's stderr, and the step still runs;
# - contexts survive a slurmctld restart (no id handed out twice);
# - a node killed mid-run fails the context on the others (no hang);
# - nothing is left open at the end.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
command -v cc > /dev/null || t_skip "needs a C compiler"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
LIBDIR=$(t_make_var libdir)
Q=20ms
vc_up 4 --conf "PartitionName=gang Nodes=vn[1-2] OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP" \
    --conf "SchedulerParameters=storm_gang_quantum=$Q,storm_gang_failsafe=2s"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
A2A=$T_WORK/msg_alltoall
t_check "the all-to-all test builds against the installed library ($LIBDIR)" \
    cc -O2 -o "$A2A" "$STORM_SRCDIR/tests/integration/msg_alltoall.c" -I"$STORM_SRCDIR" -L"$LIBDIR" -lstormmsg \
    -Wl,-rpath,"$LIBDIR"
stat_of() { # NODE KEY: the node agent's pool statistics
    awk -v k="$2" '$1 == k { print $2 }' "$STATE/nodes/$1/spool/storm-pool.stats" 2>/dev/null
}

# ---- one step, divided pool -------------------------------------------
timeout 60 srun -p debug -N4 -n8 -O sh -c 'echo "$SLURM_PROCID $STORM_CTX"' > "$T_WORK/ctx.out" 2>&1
t_diag < "$T_WORK/ctx.out"
t_check "each task of a step gets the step's context (8 tasks, 4 nodes, divided)" \
    bash -c "[ \$(awk '{print \$2}' '$T_WORK/ctx.out' | sort -u | wc -l) = 1 ] &&
             [ \$(grep -c ';d;-;1;' '$T_WORK/ctx.out') = 8 ]"
# nodes of consecutive addresses, 2 tasks each: one run, not a list of nodes
t_check "the context lists the 4 nodes as one run (block, 2 tasks a node)" \
    bash -c "[ \$(grep -c ';8;[0-9.]*\*4^2=0-1\$' '$T_WORK/ctx.out') = 8 ]"
timeout 120 srun -p debug -N4 -n8 -O "$A2A" 500 3000 > "$T_WORK/one.out" 2> "$T_WORK/one.err"
rc=$?
t_diag < "$T_WORK/one.err"
t_check "all-to-all over 8 tasks on 4 nodes: every message once and in order (rc $rc)" \
    bash -c "[ $rc = 0 ] && [ \$(grep -c ' ok' '$T_WORK/one.out') = 8 ]"

# ---- two jobs gang-scheduled, swapped pools ----------------------------
before1=$(stat_of vn1 swaps); before1=${before1:-0}
job() { # TAG
    as_user sbatch --parsable -p gang -N2 -n2 -o "$T_WORK/$1.out" -e "$T_WORK/$1.err" -D "$T_WORK" \
        --wrap "srun $A2A 40000 1500"
}
A=$(job ja); B=$(job jb)
for _ in $(seq 50); do [ "$(squeue -h -j "$A,$B" -t R | wc -l)" = 2 ] && break; sleep 0.2; done
t_check "two all-to-all jobs of nobody share vn[1-2] ($A, $B)" \
    [ "$(squeue -h -j "$A,$B" -t R -o %N | sort -u)" = "vn[1-2]" ]
wait_job "$A" 300; wait_job "$B" 300
cat "$T_WORK"/ja.* "$T_WORK"/jb.* | t_diag
t_check "both gang-scheduled jobs got every message once and in order" \
    bash -c "[ \$(cat '$T_WORK/ja.out' '$T_WORK/jb.out' | grep -c ' ok') = 4 ]"
after1=$(stat_of vn1 swaps)
t_diag < "$STATE/nodes/vn1/spool/storm-pool.stats"
t_check "vn1 swapped the pool between them at least 10 times ($before1 -> ${after1:-none})" \
    [ $(( ${after1:-0} - before1 )) -ge 10 ]
t_check "  with every halt answered and no context failed" \
    bash -c "[ '$(stat_of vn1 failures)' = 0 ] && [ '$(stat_of vn2 failures)' = 0 ] &&
             [ '$(stat_of vn1 halt_count)' -gt 0 ]"

# ---- bad input ----------------------------------------------------------
timeout 60 "$A2A" 1 > "$T_WORK/noctx.out" 2>&1; rc=$?
t_diag < "$T_WORK/noctx.out"
t_check "a task without a context: clear error, exit $rc" \
    bash -c "[ $rc != 0 ] && grep -q 'no communication context' '$T_WORK/noctx.out'"
# root's step, its context copied by nobody on the same node
timeout 60 srun -p debug -w vn3 -N1 -n1 sh -c 'echo "$STORM_CTX" > '"$T_WORK"'/stolen; echo "$STORM_POOL_SOCKET" >> '"$T_WORK"'/stolen; sleep 5' &
srun_pid=$!
for _ in $(seq 50); do [ -s "$T_WORK/stolen" ] && [ "$(wc -l < "$T_WORK/stolen")" = 2 ] && break; sleep 0.1; done
"$VC" exec vn3 env STORM_CTX="$(sed -n 1p "$T_WORK/stolen")" STORM_POOL_SOCKET="$(sed -n 2p "$T_WORK/stolen")" \
    SLURM_PROCID=0 setpriv --reuid=nobody --regid=nogroup --clear-groups "$A2A" 1 > "$T_WORK/stolen.out" 2>&1
rc=$?
t_diag < "$T_WORK/stolen.out"
t_check "another user's task cannot attach to root's context (exit $rc)" \
    bash -c "[ $rc != 0 ] && grep -q 'belongs to uid 0' '$T_WORK/stolen.out'"
wait "$srun_pid"
timeout 60 srun -p debug -w vn4 -N1 -n64 -O "$A2A" 1 > "$T_WORK/small.out" 2>&1; rc=$?
sed -n 1,3p "$T_WORK/small.out" | t_diag
t_check "a step whose share of the pool leaves no credit runs, and its tasks fail init with the reason (exit $rc)" \
    bash -c "[ $rc != 0 ] && [ \$(grep -c 'leaves no credit for 64 tasks' '$T_WORK/small.out') = 64 ]"

# ---- a forged peer: another user claims a rank of a running step ----------
# root's 2-task step on vn1 and vn2; rank 1 connects only after 8 s, so
# rank 0 waits for its peer meanwhile.  nobody, on vn3, knows the context's
# id, job, step and ports (they are not secret) but not its key: it claims
# rank 1 with the hello of frame version 2 (no proof: what any user could
# send before) and with a guessed key.  Both are refused, and the step
# still runs.  Only the fields nobody could know are kept from STORM_CTX
# (fields 2-4: id, job, step; 10: port; 12: nodes), never the key.
FORGE=$T_WORK/msg_forge
t_check "the forging peer builds" cc -O2 -o "$FORGE" "$STORM_SRCDIR/tests/integration/msg_forge.c" -lcrypto
timeout 120 srun -p debug -w vn1,vn2 -N2 -n2 -o "$T_WORK/forge.out" -e "$T_WORK/forge.err" sh -c \
    'echo "$STORM_CTX" | cut -d";" -f2-4,10,12 > '"$T_WORK"'/forge.ids.$SLURM_PROCID
     [ "$SLURM_PROCID" = 1 ] && sleep 8; exec '"$A2A"' 200 3000' &
srun_pid=$!
for _ in $(seq 100); do [ -s "$T_WORK/forge.ids.0" ] && break; sleep 0.1; done
IFS=';' read -r f_id f_job f_step f_port f_nodes < "$T_WORK/forge.ids.0"
f_addr=${f_nodes%%[*=]*}
f_target="$f_addr $((f_port + f_id * 64)) $f_id $f_job $f_step 1 0 4096"
sleep 1 # rank 0 attached and listens
"$VC" exec vn3 setpriv --reuid=nobody --regid=nogroup --clear-groups "$FORGE" --old $f_target \
    > "$T_WORK/forge.old" 2>&1
rc_old=$?
"$VC" exec vn3 setpriv --reuid=nobody --regid=nogroup --clear-groups "$FORGE" $f_target \
    > "$T_WORK/forge.new" 2>&1
rc_new=$?
wait "$srun_pid"
rc=$?
cat "$T_WORK/forge.old" "$T_WORK/forge.new" "$T_WORK/forge.err" | t_diag
t_check "nobody's version-2 hello claiming rank 1 of root's step $f_job.$f_step (context $f_id at $f_addr) is refused (exit $rc_old)" \
    bash -c "[ $rc_old = 0 ] && grep -q 'refused: the task closed the connection' '$T_WORK/forge.old'"
t_check "nobody's hello with a guessed key is refused (exit $rc_new)" \
    bash -c "[ $rc_new = 0 ] && grep -q 'sent a hello claiming rank 1 with a guessed key' '$T_WORK/forge.new' &&
             grep -q 'refused: the task closed the connection' '$T_WORK/forge.new'"
t_check "  rank 0 names both refusals on its stderr" \
    bash -c "grep -q 'rank 0 of step $f_job.$f_step refused a connection: rank 1 speaks frame version 2' '$T_WORK/forge.err' &&
             grep -q \"rank 0 of step $f_job.$f_step refused a connection: rank 1's hello does not prove the context's key\" '$T_WORK/forge.err'"
t_check "  and the real 2-task step still exchanges every message (rc $rc)" \
    bash -c "[ $rc = 0 ] && [ \$(grep -c ' ok' '$T_WORK/forge.out') = 2 ]"

# ---- slurmctld restart: contexts survive --------------------------------
L=$(sbatch --parsable -p debug -w vn3 -N1 -o /dev/null --wrap "srun sh -c 'echo \$STORM_CTX > $T_WORK/live.ctx; sleep 30'")
for _ in $(seq 100); do [ -s "$T_WORK/live.ctx" ] && break; sleep 0.1; done
live_id=$(cut -d';' -f2 "$T_WORK/live.ctx")
scontrol shutdown slurmctld > "$T_WORK/restart.out" 2>&1
for _ in $(seq 100); do pgrep -f "slurmctld -f $STATE/etc/slurm.conf" > /dev/null || break; sleep 0.1; done
"$VC" start ctld >> "$T_WORK/restart.out" 2>&1
for _ in $(seq 150); do sinfo -h -n vn4 -o %t 2>/dev/null | grep -qx idle && break; sleep 0.2; done
timeout 60 srun -p debug -w vn4 -N1 -n1 sh -c 'echo $STORM_CTX' > "$T_WORK/after.ctx" 2>&1
new_id=$(cut -d';' -f2 "$T_WORK/after.ctx")
t_diag < "$T_WORK/restart.out"
t_check "after a slurmctld restart a new step does not get a live step's context id ($live_id, new $new_id)" \
    bash -c "[[ '$live_id' =~ ^[0-9]+\$ ]] && [[ '$new_id' =~ ^[0-9]+\$ ]] && [ '$live_id' != '$new_id' ]"
scancel "$L"; wait_job "$L" 60

# ---- a node killed mid-run ------------------------------------------------
K=$(sbatch --parsable -p debug -w vn3,vn4 -N2 -n2 -o "$T_WORK/kill.out" -e "$T_WORK/kill.err" \
    --wrap "srun --kill-on-bad-exit=0 $A2A 100000000 1000")
for _ in $(seq 100); do pgrep -f "^$A2A " > /dev/null && break; sleep 0.1; done
sleep 1
for p in $(pgrep -f "^$A2A "); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=vn4" && kill -9 "$p"
done
t0=$(date +%s)
wait_job "$K" 120
t1=$(date +%s)
t_diag < "$T_WORK/kill.err"
t_check "a task killed on vn4: vn3's task fails cleanly naming the peer, in $((t1 - t0)) s" \
    bash -c "[ $((t1 - t0)) -lt 60 ] && grep -qi 'rank 1' '$T_WORK/kill.err'"

# ---- nothing left --------------------------------------------------------
sleep 2
t_check "no context is left open on any node" \
    bash -c "for n in vn1 vn2 vn3 vn4; do [ \"\$(awk '\$1 == \"contexts\" {print \$2}' '$STATE'/nodes/\$n/spool/storm-pool.stats)\" = 0 ] || exit 1; done"
t_done
