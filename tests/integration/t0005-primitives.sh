#!/usr/bin/env bash
# t0005: STORM's three primitives between the node agents inside 64 real
# slurmd: XFER-AND-SIGNAL (64 bytes and 12 MB, to all and to a subset);
# TEST-EVENT (each agent publishes the count and checksum of every event it
# received as variables); COMPARE-AND-WRITE (checks those everywhere, and
# conditional writes).  Bad frames, unauthenticated frames and credentials
# of a non-daemon user are rejected by a real agent; a node killed before a
# transfer is reported alone as failed, in bounded time; heartbeats find a
# hung node alone and drain it through Slurm.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
PRIM="$STORM_BUILDDIR/tools/storm-prim"
N=64
vc_up "$N"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}

started=$(grep -l "node agent started (port 6830, fanout 8, node [0-9]* of $N," "$STATE"/log/slurmd-vn*.log | wc -l)
t_check "every slurmd runs an agent that knows its place among $N ($started)" [ "$started" = "$N" ]

t_check "XFER-AND-SIGNAL 64 bytes to $N nodes" t_prim xfer small 64
t_check "every node got them intact (COMPARE-AND-WRITE on the checksums)" t_prim verify small 64
t_check "a check against other data fails" bash -c "! '$PRIM' verify small 65 > /dev/null"
t_check "XFER-AND-SIGNAL 12 MB to $N nodes" t_prim xfer big 12M
t_check "every node got 12 MB intact" t_prim verify big 12M
t_check "TEST-EVENT counts: event:big >= 1 everywhere, then write flag=7" t_prim caw event:big ge 1 flag=7
t_check "the write reached every node" t_prim caw flag eq 7
t_check "a relation that holds nowhere" bash -c "! '$PRIM' caw flag eq 8 > /dev/null"
t_check "a conditional write that does not hold writes nothing" \
    bash -c "! '$PRIM' caw flag eq 8 flag=9 > /dev/null && '$PRIM' caw flag eq 7 > /dev/null"

t_check "XFER-AND-SIGNAL to a subset 0-9,20" t_prim -n 0-9,20 xfer sub 1k
t_check "the subset holds it" t_prim -n 0-9,20 verify sub 1k
t_check "the other nodes do not" bash -c "! '$PRIM' -n 11-19 caw event:sub ge 1 > /dev/null"

# --- bad input into a real agent (vn5 = index 4) ------------------------------
ip5=$(scontrol -o show node vn5 | sed -n 's/.* NodeAddr=\([0-9.]*\) .*/\1/p')
log5=$STATE/log/slurmd-vn5.log
bash -c "exec 3<>/dev/tcp/$ip5/6830; printf 'GARBAGE-GARBAGE-GARBAGE-GARBAGE' >&3; sleep 0.3" 2>/dev/null
t_check "garbage is rejected with a log line" grep -q "switch/rdma: malformed frame from peer .*bad magic" "$log5"
# a well-formed caw frame (protocol version 3), unauthenticated: header (20 bytes) + empty payload
bash -c "exec 3<>/dev/tcp/$ip5/6830; printf 'STOR\x03\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01' >&3; sleep 0.3" 2>/dev/null
t_check "a frame before authentication is rejected" grep -q "switch/rdma: bad caw frame from .*before authentication" "$log5"
if command -v setpriv > /dev/null; then
    setpriv --reuid=nobody --regid=nogroup --clear-groups "$PRIM" -n 4 caw flag eq 7 > "$T_WORK/nobody.out" 2>&1
    rc=$?
    t_check "a non-daemon user's credential is refused (rc $rc)" \
        bash -c "[ $rc != 0 ] && grep -q 'which is not a Slurm daemon' '$log5'"
fi
t_check "slurmd on vn5 survived it all" bash -c "kill -0 \$(cat '$STATE/run/slurmd-vn5.pid')"
t_check "and its agent still works" t_prim xfer after 64

# --- heartbeats and fault detection -------------------------------------------------
t_check "heartbeats every 10 ms for 1 s: every node keeps up" t_prim heartbeat 10 1
pid15=$(cat "$STATE/run/slurmd-vn15.pid")
kill -STOP "$pid15"   # a hung node: its agent stops answering
"$PRIM" heartbeat 10 3 drain > "$T_WORK/hb.out" 2>&1; rc=$?
kill -CONT "$pid15"
t_diag < "$T_WORK/hb.out"
t_check "a hung node is found by the heartbeats, alone (rc $rc)" \
    bash -c "[ $rc = 1 ] && grep -q '^heartbeat: node vn15 (14) ' '$T_WORK/hb.out' && grep -q '; 1 faulty\$' '$T_WORK/hb.out'"
t_check "the other nodes kept receiving beats" \
    bash -c "[ \$(sed -n 's/^heartbeat: \([0-9]*\) beats.*/\1/p' '$T_WORK/hb.out') -ge 100 ]"
t_check "it was drained in Slurm" bash -c "sinfo -h -R -o '%N %E' | grep -q '^vn15 storm: missed heartbeats'"
scontrol update NodeName=vn15 State=RESUME > /dev/null 2>&1

# --- a node dies: reported alone, in bounded time -------------------------------
kill -9 "$(cat "$STATE/run/slurmd-vn10.pid")"
t0=$(date +%s)
"$PRIM" xfer dead 256k > "$T_WORK/dead.out" 2>&1; rc=$?
took=$(( $(date +%s) - t0 ))
t_diag < "$T_WORK/dead.out"
t_check "XFER-AND-SIGNAL reports exactly the dead node (index 9) in $took s" \
    bash -c "[ $rc = 1 ] && grep -q 'FAILED on 9\$' '$T_WORK/dead.out' && [ $took -le 30 ]"
t_check "the other $((N - 1)) nodes hold the data" t_prim -n 0-8,10-63 verify dead 256k
t_done
