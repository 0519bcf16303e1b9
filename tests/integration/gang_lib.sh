# Helpers of the gang-scheduling tests (t0007, t0011): two CPU-bound 2-node
# jobs of nobody on vn1 and vn2, and samples of their tasks' CPU time.
# Sourced after lib.sh: the tests' requirements, STATE and GANG.
t_require_root
t_require_installed
command -v setpriv > /dev/null || t_skip "needs setpriv (util-linux)"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
GANG=$STORM_BUILDDIR/tools/storm-gang
chmod 1777 "$T_WORK" # the jobs of nobody work there
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
burn() { # TAG: a 2-node job of nobody spinning one task per node
    as_user sbatch --parsable -p gang -N2 -o /dev/null -D "$T_WORK" \
        --wrap "srun sh -c 'while :; do :; done' $1"
}
# pid of TAG's task on NODE
task_pid() {
    local p
    for p in $(pgrep -f "^(/usr)?/bin/sh -c while :; do :; done $1\$"); do
        tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=$2" && { echo "$p"; return 0; }
    done
    return 1
}
# cpu_ns_of VAR PID: PID's CPU time so far (ns) into VAR, 0 once it is gone
cpu_ns_of() {
    local -n out=$1
    local _
    read -r out _ 2> /dev/null < "/proc/$2/schedstat" || out=0
}
# sample SECONDS PID...: one line per interval of ~20 ms, 1/0 per pid: did
# it get more than 2 ms of CPU in that interval?  No command is forked
# while it samples (bash's own clock, reads and t_nap only): where
# forks are slow, a sampler that forked stretched its intervals to over
# 100 ms, and with a 300 ms quantum half of them held a switch, so both
# jobs showed in them.  The intervals' mean length goes to the test's log.
sample() {
    local secs=$1 p i t lines=0 line; shift
    local -a last=() now=()
    for p in "$@"; do cpu_ns_of t "$p"; last+=("$t"); done
    local start=${EPOCHREALTIME/./}
    local end=$((start + secs * 1000000)) stop
    while ((${EPOCHREALTIME/./} < end)); do
        t_nap 0.02
        now=()
        for p in "$@"; do cpu_ns_of t "$p"; now+=("$t"); done
        line=""
        for i in "${!now[@]}"; do line+="$((now[i] - last[i] > 2000000 ? 1 : 0)) "; done
        echo "$line"
        last=("${now[@]}")
        lines=$((lines + 1))
    done
    stop=${EPOCHREALTIME/./}
    echo "sampled $lines intervals of $(((stop - start) / (lines ? lines : 1) / 1000)) ms on average" | t_diag >&2
}
# pct FILE AWK-CONDITION: percentage of the sample lines where it holds
pct() { awk "{ n++ } $2 { k++ } END { printf \"%d\", n ? 100 * k / n : 0 }" "$1"; }
# longest_run FILE CONDITION: the most lines in a row that meet CONDITION.
longest_run() { awk "$2 { if (++k > m) m = k; next } { k = 0 } END { printf \"%d\", m }" "$1"; }
state_of() { awk '{ sub(/.*\) /, ""); print substr($0, 1, 1) }' "/proc/$1/stat" 2>/dev/null; }
# The host's cgroup v2 hierarchy (the node agents' freezer groups are
# /storm-gang-<node>/job_<id> in it), and a process's group there.
cg2_root() { awk '$9 == "cgroup2" && $4 == "/" { print $5; exit }' /proc/self/mountinfo; }
cgroup2_of() { sed -n 's/^0:://p' "/proc/$1/cgroup" 2>/dev/null; }
# Whether PID is stopped (SIGSTOP) or frozen (its group's cgroup.events).
halted() {
    [ "$(state_of "$1")" = T ] && return 0
    grep -qx 'frozen 1' "$(cg2_root)$(cgroup2_of "$1")/cgroup.events" 2>/dev/null
}
# freezer_groups: the agents' job groups that exist now
freezer_groups() { find "$(cg2_root)" -maxdepth 2 -path '*/storm-gang-vn*/job_*' -type d 2>/dev/null; }

# check_switching LABEL: 4 s of samples of the tasks a1 a2 (job A on vn1,
# vn2) and b1 b2 (job B); the jobs alternate on each node
check_switching() {
    sample 4 "$a1" "$a2" "$b1" "$b2" > "$T_WORK/s.$1"
    local ov1 ov2 tog ra rb
    ov1=$(pct "$T_WORK/s.$1" '$1 && $3'); ov2=$(pct "$T_WORK/s.$1" '$2 && $4')
    tog=$(pct "$T_WORK/s.$1" '$1 != $2 || $3 != $4')
    ra=$(pct "$T_WORK/s.$1" '$1'); rb=$(pct "$T_WORK/s.$1" '$3')
    echo "$1: $(wc -l < "$T_WORK/s.$1") intervals; A ran in $ra%, B in $rb%; both on vn1 $ov1%, on vn2 $ov2%; a job's two nodes apart $tog%" | t_diag
    t_check "$1: jobs in different slots never share a node's CPU (overlap vn1 $ov1%, vn2 $ov2%: only intervals around a switch)" \
        [ "$ov1" -le 25 -a "$ov2" -le 25 ]
    t_check "$1: a job's processes run together on both nodes (apart in $tog% of intervals)" [ "$tog" -le 25 ]
    t_check "$1: both jobs make progress (A $ra%, B $rb%)" [ "$ra" -ge 25 -a "$rb" -ge 25 ]
}
# start_pair: jobs A and B (burnA, burnB) running, their tasks' pids in
# a1 a2 b1 b2; one check that they share vn[1-2]; a second later,
# storm-gang's status in $T_WORK/status (and the test's log).
start_pair() {
    A=$(burn burnA); B=$(burn burnB)
    for _ in $(seq 100); do
        [ "$(squeue -h -j "$A,$B" -t R | wc -l)" = 2 ] && task_pid burnA vn1 > /dev/null && task_pid burnA vn2 > /dev/null &&
            task_pid burnB vn1 > /dev/null && task_pid burnB vn2 > /dev/null && break
        sleep 0.2
    done
    t_check "two 2-node jobs of nobody run on the same cores of vn[1-2] ($A, $B)" \
        [ "$(squeue -h -j "$A,$B" -t R -o %N | sort -u)" = "vn[1-2]" ]
    a1=$(task_pid burnA vn1); a2=$(task_pid burnA vn2); b1=$(task_pid burnB vn1); b2=$(task_pid burnB vn2)
    sleep 1
    "$GANG" > "$T_WORK/status" 2>&1
    t_diag < "$T_WORK/status"
}
# states PID...: one line, 1 for each process that is stopped, else 0;
# every state read by one awk, close to at once.  Stopped is state T, or a
# SIGSTOP pending (ShdPnd or SigPnd): the process took the signal's effect
# as far as the kernel goes (it runs no more of its own code) and shows R
# only until the scheduler gives it a CPU to stop on.  On two busy cores
# that took up to 26 ms after the agent's signal (traced with the
# signal_generate and signal_deliver events): a quantum's half, counted as
# "running" by state alone.
states() { states_at "" "$@"; }
# states_at TIME PID...: the same, then TIME (if not empty) as the last field.
states_at() {
    local p at=$1 files=()
    shift
    for p in "$@"; do files+=("/proc/$p/status"); done
    awk -v at="$at" 'function stop_pending(h, d) { d = substr(h, length(h) - 4, 1); return index("4567cdefCDEF", d) > 0 }
         /^State:/ { t = $2 == "T" } /^SigPnd:/ { p = stop_pending($2) }
         /^ShdPnd:/ { printf "%d ", t || p || stop_pending($2) } END { print at }' "${files[@]}"
}
# sample_states FILE COUNT PID...: COUNT lines of states into FILE, each
# ending with the time it was taken (seconds, to the microsecond).
sample_states() {
    local out=$1 count=$2 _
    shift 2
    : > "$out"
    for _ in $(seq "$count"); do states_at "$EPOCHREALTIME" "$@" >> "$out"; done
}
# tpct FILE CONDITION: like pct, over time instead of samples: each sample
# (but the last) stands for the time until the next one.  The samples are
# not evenly spaced: each is a fork and an awk on two busy cores, whose pace
# follows which job runs: one job ran in 79% of the samples and 52% of the
# time (the agent switched every quantum, as traced).
tpct() {
    awk "NR > 1 { d = \$NF - t; all += d; if (c) k += d } { t = \$NF; c = ($2) }
         END { printf \"%d\", all ? 100 * k / all + 0.5 : 0 }" "$1"
}
# all_stopped_once [SECONDS]: true once each of the four tasks was seen
# stopped at least once (each node's switcher found both jobs' processes and
# switches them), within SECONDS (default 10); says after how many samples.
all_stopped_once() {
    local s1=0 s2=0 s3=0 s4=0 x1 x2 x3 x4 n=0 until=$(($(date +%s) + ${1:-10}))
    while [ "$(date +%s)" -lt "$until" ]; do
        n=$((n + 1))
        read -r x1 x2 x3 x4 < <(states "$a1" "$a2" "$b1" "$b2" 2> /dev/null)
        s1=$((s1 | ${x1:-0})) s2=$((s2 | ${x2:-0})) s3=$((s3 | ${x3:-0})) s4=$((s4 | ${x4:-0}))
        if [ "$s1$s2$s3$s4" = 1111 ]; then
            echo "every task was seen stopped within $n samples" | t_diag
            return 0
        fi
    done
    echo "tasks seen stopped (A vn1, A vn2, B vn1, B vn2): $s1 $s2 $s3 $s4" | t_diag
    return 1
}
# check_states LABEL: for quanta too short for check_switching's CPU time
# intervals, 300 samples of the tasks' states (states(): a pending SIGSTOP
# counts as stopped): on each node one job is stopped while the other runs,
# and a job's two tasks are in the same state, but around switches.  The
# strobes reach both nodes within a millisecond or so of each other
# (delay_p99 under 1 ms here), so at a 50 ms quantum few samples fall
# between; up to 15% is allowed (0-1% seen).  Without switching on a node
# "neither stopped" would be all of them.  By state alone (T), before the
# pending signal counted, the outgoing task waiting for a CPU put up to 38%
# of one node's samples in "neither stopped".
check_states() {
    local both1 both2 apart ra rb ms run1 run2
    sample_states "$T_WORK/st.$1" 300 "$a1" "$a2" "$b1" "$b2" # 1 = stopped
    ms=$(awk 'NR == 1 { t = $NF } END { printf "%d", ($NF - t) * 1000 }' "$T_WORK/st.$1") # first to last sample
    run1=$(longest_run "$T_WORK/st.$1" '!$1 && !$3'); run2=$(longest_run "$T_WORK/st.$1" '!$2 && !$4')
    both1=$(tpct "$T_WORK/st.$1" '!$1 && !$3'); both2=$(tpct "$T_WORK/st.$1" '!$2 && !$4')
    apart=$(tpct "$T_WORK/st.$1" '$1 != $2 || $3 != $4')
    ra=$(tpct "$T_WORK/st.$1" '!$1'); rb=$(tpct "$T_WORK/st.$1" '!$3')
    echo "$1: 300 samples in $ms ms; of that time A not stopped in $ra% (of the samples $(pct "$T_WORK/st.$1" '!$1')%), B in $rb% ($(pct "$T_WORK/st.$1" '!$3')%); neither stopped on vn1 $both1%, on vn2 $both2% (at most $run1 and $run2 samples in a row); a job's tasks in different states $apart%" | t_diag
    t_check "$1: on each node one job is stopped while the other runs (neither stopped: vn1 $both1%, vn2 $both2%)" \
        [ "$both1" -le 15 -a "$both2" -le 15 ]
    t_check "$1: a job's tasks on both nodes are stopped and continued together ($apart% apart)" [ "$apart" -le 15 ]
    t_check "$1: both jobs run in turn (A $ra%, B $rb%)" [ "$ra" -ge 30 -a "$rb" -ge 30 ]
}
