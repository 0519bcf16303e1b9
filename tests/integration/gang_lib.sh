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
# states PID...: one line, 1 for each process that is stopped (state T),
# else 0; every state read by one awk, close to at once.
states() {
    local p files=()
    for p in "$@"; do files+=("/proc/$p/stat"); done
    awk '{ sub(/.*\) /, ""); printf "%d ", substr($0, 1, 1) == "T" } END { print "" }' "${files[@]}"
}
# sample_states FILE COUNT PID...: COUNT lines of states into FILE.
sample_states() {
    local out=$1 count=$2 _
    shift 2
    : > "$out"
    for _ in $(seq "$count"); do states "$@" >> "$out"; done
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
# intervals, 300 samples of the tasks' states: on each node one job is
# stopped while the other runs (T against R), and a job's two tasks are in
# the same state, but around switches.  Around a switch a task sent SIGSTOP
# still shows R until it is scheduled to take the signal, a few ms on two
# busy cores: at a 50 ms quantum that alone put 14-26% of the samples on
# one node in "neither stopped" (by hand and in CI), so up to a third is
# allowed; without switching on a node it would be all of them.
check_states() {
    sample_states "$T_WORK/st.$1" 300 "$a1" "$a2" "$b1" "$b2" # 1 = stopped
    local both1 both2 apart ra rb
    both1=$(pct "$T_WORK/st.$1" '!$1 && !$3'); both2=$(pct "$T_WORK/st.$1" '!$2 && !$4')
    apart=$(pct "$T_WORK/st.$1" '$1 != $2 || $3 != $4')
    ra=$(pct "$T_WORK/st.$1" '!$1'); rb=$(pct "$T_WORK/st.$1" '!$3')
    echo "$1: 300 samples; A not stopped in $ra%, B in $rb%; neither stopped on vn1 $both1%, on vn2 $both2%; a job's tasks in different states $apart%" | t_diag
    t_check "$1: on each node one job is stopped while the other runs (neither stopped: vn1 $both1%, vn2 $both2%)" \
        [ "$both1" -le 33 -a "$both2" -le 33 ]
    t_check "$1: a job's tasks on both nodes are stopped and continued together ($apart% apart)" [ "$apart" -le 33 ]
    t_check "$1: both jobs run in turn (A $ra%, B $rb%)" [ "$ra" -ge 20 -a "$rb" -ge 20 ]
}
