#!/usr/bin/env bash
# t0011: gang strobes by multicast (SwitchParameters storm_mcast): two
# CPU-bound jobs of nobody on vn1 and vn2 at a 50 ms quantum, where only
# every third strobe also goes down the tree (one every 150 ms: the
# interval, in quanta, prime to the two slots).  The
# manager multicasts the strobes, every node applies them
# (gang:mcast_strobes), and the jobs take turns as in t0007.  Datagrams that are not strobes sealed under the
# table's key (junk, a replayed header with a forged tag) are counted and
# dropped (gang:mcast_rejected) and change nothing.  A node whose network
# drops the group still switches on the tree's strobes, both jobs in turn.
# With vn1's slurmd killed and not restarted, the steps' slurmstepd send
# SIGCONT to what its agent stopped, after the fail-safe time; a new slurmd
# switches both jobs again.  A job Slurm suspended while vn1's agent could
# not hear of it stays stopped through vn1's slurmd dying and starting
# again, until scontrol resume.
# Once one job ended (one slot), the manager strobes at the heartbeat's pace
# only and the other job runs all the time; nothing is left stopped at the
# end.  The agents switch with signals
# (storm_gang_stop=signal; t0007 covers the freezer).
. "$(dirname "$0")/lib.sh"
. "$STORM_SRCDIR/tests/integration/gang_lib.sh"
GROUP=239.255.77.1 PORT=6831
vc_up 3 --conf "PartitionName=gang Nodes=vn[1-2] OverSubscribe=FORCE:2 MaxTime=INFINITE State=UP" \
    --conf "SchedulerParameters=storm_gang_quantum=50ms" --conf "SwitchParameters=storm_mcast=$GROUP:$PORT,storm_gang_stop=signal"

start_pair
# The status is rewritten once a second, and the second slot may have
# opened less than half a second before the copy start_pair read (a line
# whose tasks start soon after the job, as 26.05's): read it again, for up
# to 5 s, until it counts 10 strobes sent.
mcast_sent() { sed -n "s/^strobe_multicast: $GROUP:$((PORT + 1)) from [0-9.]*, \([0-9]*\) sent, 0 failed$/\1/p" "$1"; }
sent=$(mcast_sent "$T_WORK/status")
for _ in $(seq 10); do
    [ "${sent:-0}" -ge 10 ] && break
    sleep 0.5
    "$GANG" > "$T_WORK/status.again" 2>&1
    sent=$(mcast_sent "$T_WORK/status.again")
done
t_check "the manager multicasts its strobes to $GROUP:$((PORT + 1)) (${sent:-none} sent, none failed)" \
    [ "${sent:-0}" -ge 10 ]
# vn1 and vn2 are Storm's nodes 0 and 1
t_check "vn1 and vn2 applied strobes that came by multicast" t_prim -n 0-1 caw gang:mcast_strobes ge 10
t_check "vn1 and vn2 stop the jobs with signals, as set" \
    bash -c "grep -q 'gang: jobs are stopped with signals (storm_gang_stop=signal)' '$STATE/log/slurmd-vn1.log' &&
             grep -q 'gang: jobs are stopped with signals (storm_gang_stop=signal)' '$STATE/log/slurmd-vn2.log'"
# The states are sampled once both nodes switch both jobs (a loaded host
# can take a moment to find a new step's processes).
t_check "both nodes stop each job in turn within 10 s of the start" all_stopped_once 10
check_states "strobes by multicast"

# --- datagrams that are not the manager's --------------------------------------
epoch=$(sed -n 's/^epoch: //p' "$T_WORK/status")
forged() { # magic "SGMC", version 2, the current epoch; then junk where the nonce, strobe and tag go
    printf 'SGMC\002'
    printf '%016x' "$epoch" | sed 's/../\\x&/g' | xargs -0 printf
    head -c 60 /dev/urandom
}
for _ in 1 2 3; do
    ip netns exec storm-vn3 bash -c "echo junk > /dev/udp/$GROUP/$((PORT + 1))"
    forged | ip netns exec storm-vn3 bash -c "cat > /dev/udp/$GROUP/$((PORT + 1))"
done
sleep 0.5
t_check "vn1 and vn2 counted the junk and forged datagrams as rejected" t_prim -n 0-1 caw gang:mcast_rejected ge 3
t_check "  and logged it" bash -c "grep -q 'gang: dropped a strobe datagram' '$STATE/log/slurmd-vn1.log'"
check_states "after forged datagrams"

# --- vn2's network drops the group: its strobes come down the tree alone ----
# (the group's datagrams to vn2 go to a class of 8 bit/s with room for one
# packet, as in t0010); the tree's strobes, one every 150 ms at this quantum
# and slot count, visit both slots in turn, so both jobs still run there.
# The agent publishes its count once a second, so the window is 5 s (about
# 33 strobes; a 2 s window could see one publish, 7 strobes, on a slow host).
{
    echo "qdisc add dev svh2 root handle 1: htb default 1 r2q 1000"
    echo "class add dev svh2 parent 1: classid 1:1 htb rate 10gbit"
    echo "class add dev svh2 parent 1: classid 1:2 htb rate 8bit ceil 8bit"
    echo "qdisc add dev svh2 parent 1:2 pfifo limit 1"
    echo "filter add dev svh2 parent 1: protocol ip u32 match ip dst $GROUP/32 flowid 1:2"
} > "$T_WORK/drop.tc"
tc -batch "$T_WORK/drop.tc" 2>&1 | grep -v 'quantum of class' | t_diag
"$GANG" nodes -n vn2 > "$T_WORK/vn2.before" 2>&1
sleep 5
"$GANG" nodes -n vn2 > "$T_WORK/vn2.after" 2>&1
t_diag < "$T_WORK/vn2.after"
applied() { awk '$1 == "vn2" { print $2 }' "$1"; }
t_check "with the multicast dropped, vn2 still applies strobes from the tree ($(applied "$T_WORK/vn2.before") then $(applied "$T_WORK/vn2.after"))" \
    [ "$(applied "$T_WORK/vn2.after")" -ge $(( $(applied "$T_WORK/vn2.before") + 10 )) ]
sample_states "$T_WORK/st.drop" 300 "$a2" "$b2"
ra=$(tpct "$T_WORK/st.drop" '!$1'); rb=$(tpct "$T_WORK/st.drop" '!$2'); both=$(tpct "$T_WORK/st.drop" '!$1 && !$2')
t_check "  and runs both jobs in turn there (A runs in $ra%, B in $rb%, both in $both% of the 300 samples' time)" \
    [ "$ra" -ge 15 -a "$rb" -ge 15 -a "$both" -le 15 ]
tc qdisc del dev svh2 root

# --- vn1's slurmd dies and stays dead: the steps continue themselves ----------
# A job vn1's agent stopped (SIGSTOP) would stay stopped with it; each
# step's slurmstepd sends SIGCONT once the agent has been gone for the
# fail-safe time (the default here: 5 s).
kill -9 "$(cat "$STATE/run/slurmd-vn1.pid" 2>/dev/null || echo 0)" 2>/dev/null ||
    pkill -9 -f "slurmd -N vn1 "
sleep 0.3
echo "with vn1's slurmd killed: $(states "$a1" "$b1" | tr -d ' ') stopped (A, B on vn1)" | t_diag
sleep 6.5
sample_states "$T_WORK/st.orphan" 100 "$a1" "$b1"
t_check "with vn1's slurmd dead, its steps' slurmstepd continue both jobs there (both run in $(pct "$T_WORK/st.orphan" '!$1 && !$2')% of 100 samples)" \
    [ "$(pct "$T_WORK/st.orphan" '!$1 && !$2')" -ge 90 ]
"$VC" start vn1 > /dev/null 2>&1
for _ in $(seq 40); do # the manager readmits vn1 with the table
    "$GANG" nodes -n vn1 2> /dev/null | awk '$1 == "vn1" && $5 == 2 && $6 == 1 { ok = 1 } END { exit !ok }' && break
    sleep 0.5
done
t_check "  and vn1's new agent switches both jobs again within 10 s" all_stopped_once 10

# --- Slurm suspends a job, vn1's agent does not hear of it, and slurmd dies ----
# vn1's agent gets no table (its port is dropped on vn1's link, as above),
# so after `scontrol suspend A` its journal still lists A.  With vn1's
# slurmd killed, A's slurmstepd leaves A stopped (Slurm suspended it) and
# B's continues B; then a new slurmd, heard again, leaves A stopped too
# (A's step marked itself suspended by Slurm) until `scontrol resume`.
{
    echo "qdisc add dev svh1 root handle 1: htb default 1 r2q 1000"
    echo "class add dev svh1 parent 1: classid 1:1 htb rate 10gbit"
    echo "class add dev svh1 parent 1: classid 1:2 htb rate 8bit ceil 8bit"
    echo "qdisc add dev svh1 parent 1:2 pfifo limit 1"
    echo "filter add dev svh1 parent 1: protocol ip u32 match ip protocol 6 0xff match ip dport 6830 0xffff flowid 1:2"
} > "$T_WORK/deaf.tc"
tc -batch "$T_WORK/deaf.tc" 2>&1 | grep -v 'quantum of class' | t_diag
sleep 0.3
scontrol suspend "$A"
for _ in $(seq 20); do [ "$(state_of "$a1")" = T ] && [ "$(state_of "$a2")" = T ] && break; sleep 0.1; done
t_check "with its port dropped, vn1's agent still journals A after scontrol suspend" \
    grep -qx "$A" "$STATE/nodes/vn1/spool/storm-gang/jobs"
kill -9 "$(cat "$STATE/run/slurmd-vn1.pid" 2>/dev/null || echo 0)" 2>/dev/null ||
    pkill -9 -f "slurmd -N vn1 "
sleep 6.5
sample_states "$T_WORK/st.held" 100 "$a1" "$a2" "$b1"
t_check "  with vn1's slurmd dead: A, suspended by Slurm, stays stopped on vn1 and vn2 ($(pct "$T_WORK/st.held" '$1 && $2')% of 100 samples)" \
    [ "$(pct "$T_WORK/st.held" '$1 && $2')" -ge 95 ]
t_check "  while B's slurmstepd continues B on vn1 (runs in $(pct "$T_WORK/st.held" '!$3')%)" \
    [ "$(pct "$T_WORK/st.held" '!$3')" -ge 90 ]
tc qdisc del dev svh1 root
recovered() { grep -c 'previous node agent was switching' "$STATE/log/slurmd-vn1.log" 2>/dev/null; }
before=$(recovered)
"$VC" start vn1 > /dev/null 2>&1
for _ in $(seq 40); do [ "$(recovered)" -gt "$before" ] && break; sleep 0.25; done # the new agent's recover()
sleep 1
sample_states "$T_WORK/st.back" 100 "$a1"
t_check "  a new slurmd on vn1 leaves A stopped too (stopped in $(pct "$T_WORK/st.back" '$1')% of 100 samples)" \
    [ "$(pct "$T_WORK/st.back" '$1')" -ge 95 ]
t_check "  and says so" grep -q "left stopped for Slurm to resume (scontrol suspend): job $A\$" "$STATE/log/slurmd-vn1.log"
scontrol resume "$A"
t_check "  after scontrol resume, both jobs take turns again on both nodes within 10 s" all_stopped_once 10

# --- one slot left: nothing to switch, the heartbeat alone ------------------
# With A gone the matrix has one slot: the manager sends only the
# heartbeat's strobes (one every 100 ms with multicast), not one every
# 50 ms quantum, and B runs all the time.
scancel "$A"
wait_job "$A" 30
sleep 3 # the status's rate is over its last second
"$GANG" > "$T_WORK/status1" 2>&1
t_diag < "$T_WORK/status1"
rate=$(sed -n 's/^strobe_rate: \([0-9]*\).*/\1/p' "$T_WORK/status1")
t_check "one slot left: strobes at the heartbeat's pace, not every quantum (${rate:-no} per second, 20 at 50 ms)" \
    bash -c "grep -q '^slots: 1' '$T_WORK/status1' && [ -n '$rate' ] && [ '$rate' -ge 5 ] && [ '$rate' -le 14 ]"
sample_states "$T_WORK/st.one" 100 "$b1" "$b2"
t_check "  and B runs all the time (stopped in $(pct "$T_WORK/st.one" '$1 || $2')% of 100 samples)" \
    [ "$(pct "$T_WORK/st.one" '$1 || $2')" -le 5 ]

scancel "$B"
wait_job "$B" 30
no_tasks() { ! pgrep -f "^(/usr)?/bin/sh -c while :; do :; done burn" > /dev/null; }
t_check "nothing left: no task of either job remains, stopped or not" no_tasks
t_check "no slurmd logged a switching error" bash -c "! grep -h 'gang: cannot send' '$STATE'/log/slurmd-vn*.log"
t_done
