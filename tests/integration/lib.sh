# Shared helpers of the numbered integration scripts (sourced, not run).
#
# Each script prints "ok N - what" / "not ok N - what" lines, ends with a
# summary, and exits 0 only if every check passed (77 = skipped, for
# automake).  Clusters it starts are torn down on every exit path, and
# leftovers of an earlier crashed run are cleaned before starting.
set -u

: "${STORM_SRCDIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${STORM_BUILDDIR:=$STORM_SRCDIR}"
: "${STORM_PLUGINDIR:=$(sed -n 's/^SLURM_PLUGINDIR = //p' "$STORM_BUILDDIR/Makefile" 2>/dev/null)}"
VC="$STORM_SRCDIR/contrib/vcluster/storm-vcluster"
# The Slurm line the tree was configured for (configure --with-slurm=PREFIX;
# empty: the system's): the clusters run its daemons, and its commands come
# first in PATH.
: "${STORM_SLURM_PREFIX:=$(sed -n 's/^SLURM_PREFIX = //p' "$STORM_BUILDDIR/Makefile" 2>/dev/null)}"
: "${STORM_SLURM_VERSION:=$(sed -n 's/^STORM_SLURM_VERSION = //p' "$STORM_BUILDDIR/Makefile" 2>/dev/null)}"
export STORM_SLURM_VERSION
if [ -n "$STORM_SLURM_PREFIX" ]; then
    export STORM_VC_SLURM=$STORM_SLURM_PREFIX
    case ":$PATH:" in
        *":$STORM_SLURM_PREFIX/bin:"*) ;;
        *) PATH=$STORM_SLURM_PREFIX/bin:$STORM_SLURM_PREFIX/sbin:$PATH; export PATH ;;
    esac
else
    export STORM_VC_SLURM=system
fi
# (a script that runs another with other settings names its own run)
T_NAME=${T_NAME:-$(basename "$0" .sh)}
# Work files must be visible on every virtual node: not under /tmp or
# /scratch, which are private per node.  A build tree there (a clone under
# /tmp) keeps its work files in /var/tmp instead, one folder per tree.
case "$STORM_BUILDDIR/" in
    /tmp/* | /scratch/*)
        T_WORK_ROOT=/var/tmp/storm-test-work/$(printf '%s' "$STORM_BUILDDIR" | md5sum | cut -c1-12) ;;
    *) T_WORK_ROOT=$STORM_BUILDDIR/test-work ;;
esac
T_WORK="$T_WORK_ROOT/$T_NAME"
T_PASS=0 T_FAIL=0 T_N=0
T_CLUSTER=no

t_ok() { T_N=$((T_N + 1)); T_PASS=$((T_PASS + 1)); echo "ok $T_N - $*"; }
t_fail() { T_N=$((T_N + 1)); T_FAIL=$((T_FAIL + 1)); echo "not ok $T_N - $*"; }
# t_check DESCRIPTION COMMAND...: passes when COMMAND exits 0.
t_check() { local d=$1; shift; if "$@"; then t_ok "$d"; else t_fail "$d"; fi; }
t_skip() { echo "SKIP: $*"; exit 77; }
t_bail() { t_fail "$*"; exit 1; }   # runs the EXIT trap
t_diag() { sed 's/^/# /'; }
# t_nap SECONDS: waits SECONDS (fractions too) without forking a command,
# for loops that sample at a steady pace: on a machine where forks are
# slow, `sleep` in such a loop stretched its period several times over.
t_nap() {
    [ -n "${T_NAP_FD:-}" ] || exec {T_NAP_FD}<> <(:) # a pipe nobody writes to
    read -r -t "$1" -u "$T_NAP_FD" _ || :
}
# node_log_size NODE: the size of NODE's slurmd log now, a mark for
# wait_node_log.
node_log_size() { stat -c %s "$STATE/log/slurmd-$1.log"; }
# wait_node_log NODE MARK TRIES PERIOD PATTERN: waits until what NODE's
# slurmd logged past MARK (node_log_size) holds PATTERN (grep), looking
# TRIES times, PERIOD seconds apart; fails if it never does.
wait_node_log() {
    local _
    for _ in $(seq "$3"); do
        tail -c +$(($2 + 1)) "$STATE/log/slurmd-$1.log" | grep -q "$5" && return 0
        sleep "$4"
    done
    return 1
}
# t_prim ARGS...: runs tools/storm-prim ARGS, its output as diagnostics;
# passes on its exit status.
t_prim() {
    "$STORM_BUILDDIR/tools/storm-prim" "$@" > "$T_WORK/prim.out" 2>&1
    local rc=$?
    t_diag < "$T_WORK/prim.out"
    return $rc
}

t_done() {
    echo "$T_NAME: $T_PASS passed, $T_FAIL failed"
    [ "$T_FAIL" = 0 ] && [ "$T_PASS" -gt 0 ]
}

t_require_root() {
    if [ "$(id -u)" != 0 ]; then
        [ "${STORM_REQUIRE_INTEGRATION:-0}" = 1 ] && { echo "not ok - needs root"; exit 1; }
        t_skip "needs root (network and mount namespaces)"
    fi
}

# Fails unless the plugins in Slurm's PluginDir are the ones just built.
# t_make_var NAME: a variable of the build's Makefile, fully expanded
# (libdir, includedir, pkglibdir...: where `make install` put things).
t_make_var() {
    printf 'storm-print-var:\n\t@echo $(%s)\n' "$1" |
        make -s --no-print-directory -C "$STORM_BUILDDIR" -f Makefile -f - storm-print-var
}

t_require_installed() {
    local p
    for p in sched_gang select_gang switch_rdma cli_filter_storm spank_storm; do
        if ! cmp -s "$STORM_BUILDDIR/plugins/.libs/$p.so" "$STORM_PLUGINDIR/$p.so"; then
            t_bail "$STORM_PLUGINDIR/$p.so is not the plugin just built: run 'make install' (contrib/storm-test does)"
        fi
    done
}

t_cleanup() {
    local rc=$?
    if [ "$T_CLUSTER" = yes ]; then
        if [ "$rc" != 0 ] || [ "$T_FAIL" != 0 ]; then
            echo "# --- logs of the failed run (tails) ---"
            for f in "${STORM_VC_STATE:-/var/lib/storm-vcluster}"/log/*.log; do
                [ -f "$f" ] || continue
                echo "# == $f"; tail -n 15 "$f" | t_diag
            done
            # A daemon that crashed leaves its core in its working directory,
            # the log directory (storm-vcluster lifts the core limit).
            for f in "${STORM_VC_STATE:-/var/lib/storm-vcluster}"/log/core*; do
                [ -f "$f" ] || continue
                local what exe
                what=$(file -b "$f" 2> /dev/null)
                echo "# == core file $f: ${what:0:160}"
                exe=$(sed -n "s/.*from '\([^ ']*\).*/\1/p" <<< "$what")
                exe=$(command -v "${exe:-slurmd}")
                if command -v gdb > /dev/null && [ -n "$exe" ]; then
                    timeout 120 gdb -batch -ex 'thread apply all bt 12' "$exe" -c "$f" 2> /dev/null | head -n 100 | t_diag
                fi
            done
        fi
        "$VC" down > /dev/null 2>&1 || "$VC" down
    fi
    exit "$rc"
}
trap t_cleanup EXIT
trap 'exit 130' INT TERM

# vc_up N [ARGS...]: a fresh virtual cluster (any leftover torn down first).
vc_up() {
    "$VC" down > /dev/null 2>&1 || true
    T_CLUSTER=yes
    if ! "$VC" up "$@" > "$T_WORK/vcluster-up.out" 2>&1; then
        t_diag < "$T_WORK/vcluster-up.out"
        t_bail "storm-vcluster up $*"
    fi
    eval "$("$VC" env)"
    echo "# virtual cluster up: $*" # set-up, not a check: a failure above fails the script
}

t_workdir() { rm -rf "$T_WORK"; mkdir -p "$T_WORK"; }
t_workdir
# Every script runs in its work folder: srun and sbatch pass their working
# directory to the nodes, which see the build tree only outside /tmp.
cd "$T_WORK" || t_bail "cannot enter $T_WORK"

# wait_job JOBID [SECONDS]: waits until the job has left the queue: squeue
# answers and lists nothing, or no longer knows the id.  Fails for an empty
# id, and when squeue itself keeps failing (no answer is not "ended").
wait_job() {
    local id=$1 limit=${2:-60} i=0 out
    [ -n "$id" ] || return 1
    while [ $i -lt $((limit * 5)) ]; do
        if out=$(squeue -h -j "$id" 2>&1); then
            [ -n "$out" ] || return 0
        else
            case "$out" in *"Invalid job id"*) return 0 ;; esac
        fi
        sleep 0.2; i=$((i + 1))
    done
    return 1
}

# --- what an ordinary user does (the broadcast's scripts) -----------------------
# as_user CMD...: CMD as nobody:nogroup, without supplementary groups.
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
# fails CMD...: passes when CMD fails.
fails() { ! "$@"; }
# nobody_job N [MINUTES]: an N-node job of nobody's that sleeps, its id in
# $job; checks that it runs.
nobody_job() {
    job=$(as_user sbatch --parsable -N "$1" -t "${2:-5}" -o /dev/null --wrap "sleep 600")
    for _ in $(seq 100); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
    t_check "a $1-node job of nobody runs ($job)" [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]
}
# b ARGS...: storm-bcast -j $job ARGS as nobody, its output (in b.out) as
# diagnostics; passes on its exit status.
b() {
    as_user "$STORM_BUILDDIR/tools/storm-bcast" -j "$job" "$@" > "$T_WORK/b.out" 2>&1
    local rc=$?
    t_diag < "$T_WORK/b.out"
    return $rc
}
# same_everywhere DIR REF: every node's manifest of DIR (bcast_manifest.py,
# run there from the work folder: the nodes do not see the source tree
# under /tmp) is the file REF.
same_everywhere() {
    local n bad=0 m=$T_WORK/bcast_manifest.py
    [ -f "$m" ] || cp "$STORM_SRCDIR/tests/integration/bcast_manifest.py" "$m" || return 1
    for n in $("$VC" nodes); do
        "$VC" exec "$n" python3 "$m" "$1" > "$T_WORK/m.$n" 2>&1
        if ! cmp -s "$T_WORK/m.$n" "$2"; then
            echo "$n differs:" | t_diag
            diff "$2" "$T_WORK/m.$n" | head -20 | t_diag
            bad=1
        fi
    done
    return $bad
}
# no_trace PATTERN: no node has a file matching PATTERN (sh glob), nor a
# broadcast's staging directory in /tmp or /scratch.
no_trace() {
    local out n
    out=$(for n in $("$VC" nodes); do
        "$VC" exec "$n" sh -c "ls -d $1 /tmp/.*.storm-* /scratch/.*.storm-* 2>/dev/null" | sed "s/^/$n: /"
    done)
    [ -z "$out" ] || {
        echo "$out" | t_diag
        for n in $(echo "$out" | cut -d: -f1 | sort -u); do
            "$VC" exec "$n" sh -c "ls -laR /tmp/.*.storm-* /scratch/.*.storm-* 2>/dev/null | head -40" | t_diag
        done
        return 1
    }
}

# --- a node whose file system stops answering (t0019, t0020) -------------------
# own_fs_require: skips the script where fsfreeze or mkfs.ext4 is missing
# (before a cluster starts).
own_fs_require() {
    if ! command -v fsfreeze > /dev/null || ! command -v mkfs.ext4 > /dev/null; then
        t_skip "fsfreeze or mkfs.ext4 missing"
    fi
}
# own_fs NODE DIR: DIR on every node, which every user may write (1777); on
# NODE it is an ext4 file system of its own (64 MiB on a loop device,
# mounted in NODE's mount namespace), which `"$VC" exec NODE fsfreeze -f
# DIR` freezes: every create or write in it then blocks in the kernel until
# it is thawed (-u), as on an NFS mount whose server hung.  Thawed and
# unmounted on every way out of the script.  Checks that NODE has it.
own_fs() {
    local node=$1 dir=$2 n
    T_OWN_FS="$node $dir"
    trap 'rc=$?; own_fs_remove; (exit $rc); t_cleanup' EXIT
    truncate -s 64M "$T_WORK/fs.img"
    mkfs.ext4 -q -F "$T_WORK/fs.img"
    for n in $("$VC" nodes); do
        [ "$n" = "$node" ] || "$VC" exec "$n" sh -c "mkdir -p $dir && chmod 1777 $dir"
    done
    "$VC" exec "$node" sh -c "mkdir -p $dir && mount -o loop '$T_WORK/fs.img' $dir && chmod 1777 $dir"
    t_check "$node's destination is a file system of its own" "$VC" exec "$node" mountpoint -q "$dir"
}
# Never leaves a frozen file system behind (own_fs's exit trap).
own_fs_remove() {
    local node=${T_OWN_FS%% *} dir=${T_OWN_FS#* }
    "$VC" exec "$node" sh -c "fsfreeze -u $dir 2> /dev/null; umount $dir 2> /dev/null" > /dev/null 2>&1 || :
}
