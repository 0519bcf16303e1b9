#!/usr/bin/env bash
# t0004: wrong values for Storm's slurm.conf settings stop the daemon that
# reads them, with a log line that names the setting, the key, the value and
# what is allowed; a bad plugstack.conf argument stops srun with a message.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}

bad_conf() { # description conf-line expected-log-text [more conf-lines]
    local d=$1 line=$2 msg=$3 rc l
    local -a more=()
    for l in "${@:4}"; do more+=(--conf "$l"); done
    "$VC" down > /dev/null 2>&1 || true
    "$VC" up 2 --conf "$line" "${more[@]}" > "$T_WORK/up.out" 2>&1; rc=$?
    if [ "$rc" = 0 ]; then t_fail "$d: the cluster came up with $line"; "$VC" down > /dev/null 2>&1; return; fi
    if grep -qF -- "$msg" "$STATE/log/slurmctld.log"; then t_ok "$d (up exit $rc)"
    else t_fail "$d: \"$msg\" not in slurmctld.log"; tail -5 "$STATE/log/slurmctld.log" | t_diag; fi
}
bad_conf "SwitchParameters value out of range" "SwitchParameters=storm_fanout=1" \
    'switch/rdma: init: SwitchParameters: invalid value "1" for storm_fanout (allowed: an integer from 2 to 64)'
bad_conf "SwitchParameters port not a number" "SwitchParameters=storm_agent_port=http" \
    'switch/rdma: init: SwitchParameters: invalid value "http" for storm_agent_port (allowed: an integer from 1 to 65535)'
bad_conf "SwitchParameters agent nice out of range" "SwitchParameters=storm_agent_nice=-30" \
    'switch/rdma: init: SwitchParameters: invalid value "-30" for storm_agent_nice (allowed: an integer from -20 to 19)'
bad_conf "SwitchParameters unknown key" "SwitchParameters=storm_fanout=4,storm_fanuot=3" \
    'switch/rdma: init: SwitchParameters: unknown key storm_fanuot (known: storm_agent_port, storm_fanout, storm_rt_priority, storm_agent_nice, storm_pool_size,'
bad_conf "SchedulerParameters unknown storm_ key" "SchedulerParameters=bf_interval=5,storm_quantum=2ms" \
    'sched/gang: init: SchedulerParameters: unknown key storm_quantum (known: storm_gang_quantum, storm_gang_failsafe, storm_gang_mpl, storm_fault_timeout)'
bad_conf "fault timeout under a second" "SchedulerParameters=storm_fault_timeout=500ms" \
    'sched/gang: init: SchedulerParameters: invalid value "500ms" for storm_fault_timeout (allowed: 0 to turn fault detection off, or a duration from 1s to 60min'
GANGP="PartitionName=gang Nodes=ALL OverSubscribe=FORCE:2 State=UP"
bad_conf "gang quantum 0" "SchedulerParameters=storm_gang_quantum=0" \
    'sched/gang: init: SchedulerParameters: invalid value "0" for storm_gang_quantum' "$GANGP"
bad_conf "gang MPL beyond the partition's OverSubscribe" "SchedulerParameters=storm_gang_mpl=3" \
    "sched/gang: init: SchedulerParameters: storm_gang_mpl=3 exceeds the 2 jobs per core that partition gang allows (OverSubscribe=FORCE:2)" "$GANGP"
bad_conf "gang fail-safe shorter than 3 quanta" "SchedulerParameters=storm_gang_quantum=1s,storm_gang_failsafe=2s" \
    'sched/gang: init: SchedulerParameters: invalid value "2s" for storm_gang_failsafe' "$GANGP"
bad_conf "stock gang scheduling on as well" "PreemptMode=GANG" \
    "sched/gang: init: PreemptMode includes GANG" "$GANGP"
bad_conf "SwitchParameters rt priority out of range" "SwitchParameters=storm_rt_priority=100" \
    'switch/rdma: init: SwitchParameters: invalid value "100" for storm_rt_priority (allowed: an integer from 0 to 99)'
bad_conf "SwitchParameters gang stop way unknown" "SwitchParameters=storm_gang_stop=thaw" \
    'switch/rdma: init: SwitchParameters: invalid value "thaw" for storm_gang_stop (allowed: freeze or signal)'
bad_conf "SwitchParameters multicast group not multicast" "SwitchParameters=storm_mcast=10.1.2.3:6831" \
    "switch/rdma: init: SwitchParameters: invalid value \"10.1.2.3:6831\" for storm_mcast ('10.1.2.3' is not a multicast group (224.0.0.0/4)"
"$VC" down > /dev/null 2>&1

# Good values are taken, and the node agents report them.
vc_up 2 --conf "SwitchParameters=storm_agent_port=16830,storm_fanout=3"
t_check "node agents use the configured port and fanout" \
    [ "$(grep -l 'node agent started (port 16830, fanout 3' "$STATE"/log/slurmd-vn*.log | wc -l)" = 2 ]

# spank_storm.so takes no argument: srun refuses to run with one.
plug=$(scontrol show config | sed -n 's/^PlugStackConfig *= //p')
cp "$plug" "$T_WORK/plugstack.good"
sed -i 's/spank_storm.so.*/spank_storm.so bogus=1/' "$plug"
srun -N1 true > "$T_WORK/srun.out" 2>&1; rc=$?
cp "$T_WORK/plugstack.good" "$plug"
t_check "a plugstack.conf argument is refused (srun exit $rc)" \
    bash -c "[ $rc != 0 ] && grep -q 'spank/storm: unknown argument \"bogus=1\"' '$T_WORK/srun.out'"
t_check "srun works again with the right plugstack.conf" srun -N1 true
t_done
