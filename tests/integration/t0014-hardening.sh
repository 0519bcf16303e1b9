#!/usr/bin/env bash
# t0014: a hostile user cannot exhaust a node agent (issue 39), on a virtual
# cluster of real slurmd:
#  - memory at the head: a client that keeps 1 GiB in flight while a node
#    of the pipeline is stopped raises the head's slurmd RSS by the head's
#    window (32 MiB), not by what it sends (hole 2);
#  - unauthenticated TCP connections: 200 idle connections from one address
#    to an agent are held 32 at a time and all closed after the 10 s hello
#    deadline (Slurm's MessageTimeout, set to 10 here), each with one log
#    line (hole 3);
#  - unix sockets: the launch gate closes a user's connection at once, a
#    user holds at most 512 connections to the buffer pool's socket, and
#    connections that send no first request are closed after the 10 s
#    deadline (a user's to the pool, root's to the gate) while a step's
#    tasks, attached to the pool, idle past it and still exchange (hole 4).
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
N=3
# The agents' hello deadline is Slurm's MessageTimeout (at least 10 s).
vc_up "$N" --conf MessageTimeout=10
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
LOG=$STATE/log
BCAST="$STORM_BUILDDIR/tools/storm-bcast"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
slurmd_pid() { cat "$STATE/run/slurmd-$1.pid"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

job=$(as_user sbatch --parsable -N "$N" -t 5 -o /dev/null --wrap "sleep 600")
for _ in $(seq 100); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
t_check "a $N-node job of nobody runs ($job)" [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]

# --- hole 2: the head's memory stays bounded --------------------------------------
head -c 400000000 /dev/zero > "$T_WORK/big"
chown nobody:nogroup "$T_WORK/big"
head_pid=$(slurmd_pid vn1)
stopped=$(slurmd_pid vn2)
before=$(rss_kb "$head_pid")
as_user "$BCAST" -j "$job" -s 1m -w 1024m -t 30 "$T_WORK/big" /tmp/t0014-big > "$T_WORK/big.out" 2>&1 &
bpid=$!
# vn2 stops once it opened its copy: the data then pile up at the head.
for _ in $(seq 200); do grep -q "receiving /tmp/t0014-big" "$LOG/slurmd-vn2.log" && break; sleep 0.02; done
kill -STOP "$stopped"
t_check "vn2 stopped once the broadcast was open on it" grep -q "receiving /tmp/t0014-big" "$LOG/slurmd-vn2.log"
peak=$before
for _ in $(seq 40); do
    r=$(rss_kb "$head_pid") && [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.2
done
kill -CONT "$stopped"
grew=$(((peak - before) / 1024))
t_check "1 GiB in flight, vn2 stopped: the head's slurmd grew by ${grew} MiB (< 96)" [ "$grew" -lt 96 ]
t_check "  the head stopped reading the client" grep -q "not reading it until the nodes catch up" "$LOG/slurmd-vn1.log"
for _ in $(seq 600); do kill -0 "$bpid" 2> /dev/null || break; sleep 0.1; done
kill "$bpid" 2> /dev/null
wait "$bpid" 2> /dev/null
as_user timeout 60 srun --jobid="$job" -N "$N" hostname > "$T_WORK/after.out" 2>&1
t_check "the cluster still runs steps on every node afterwards" [ "$(grep -c '^vn' "$T_WORK/after.out")" = "$N" ]
[ "$(grep -c '^vn' "$T_WORK/after.out")" = "$N" ] || t_diag < "$T_WORK/after.out"

# --- hole 3: idle unauthenticated TCP connections ---------------------------------
vn1=$(getent hosts vn1 2> /dev/null | awk '{ print $1 }')
[ -n "$vn1" ] || vn1=$(awk '$2 == "vn1" { print $1 }' "$STATE/etc/hosts")
port=6830
held() { "$VC" exec vn1 ss -Htn state established "( sport = :$port )" 2> /dev/null | wc -l; }
base=$(held)
(
    fds=()
    for _ in $(seq 200); do exec {fd}<> "/dev/tcp/$vn1/$port" 2> /dev/null && fds+=("$fd"); done
    echo "${#fds[@]}" > "$T_WORK/opened"
    sleep 16
) &
flood=$!
sleep 3
t_check "200 connections opened as root from one address ($(cat "$T_WORK/opened" 2> /dev/null))" \
    [ "$(cat "$T_WORK/opened" 2> /dev/null)" -ge 190 ]
now=$(held)
t_check "  at most 32 held by vn1's agent 3 s later ($((now - base)) above the $base before)" [ $((now - base)) -le 32 ]
sleep 11
now=$(held)
t_check "  none held 14 s later, past the 10 s hello deadline ($((now - base)) above)" [ $((now - base)) -le 0 ]
t_check "  one line for the refusals at accept" grep -q "refused .*at accept: at most 256 connections may be unauthenticated at once, 32 from one address" "$LOG/slurmd-vn1.log"
# the 32 may have been accepted over more than one sweep of the deadline:
# its lines' counts add up to them
late=$(sed -n 's/.*closed \([0-9]*\) connections that sent no valid hello within 10000 ms.*/\1/p' "$LOG/slurmd-vn1.log" |
    awk '{ s += $1 } END { print s + 0 }')
t_check "  lines for those closed at the deadline ($late connections)" [ "$late" -ge 32 ]
wait "$flood" 2> /dev/null

# --- hole 4: unix sockets -------------------------------------------------------------
spool=$STATE/nodes/vn1/spool
cc -O1 -o "$T_WORK/unix_flood" -x c - << 'EOF' || t_bail "cannot compile the unix socket client"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* unix_flood PATH N [SECONDS]: N connections to PATH, held SECONDS (2)
   without a word; prints how many the server closed (end of file) and how
   many stayed open. */
int main(int argc, char **argv)
{
    int n = atoi(argv[2]), *fds = calloc(n, sizeof *fds), closed = 0, open_ = 0;
    int hold = argc > 3 ? atoi(argv[3]) : 2;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strncpy(sa.sun_path, argv[1], sizeof sa.sun_path - 1);
    for (int i = 0; i < n; ++i) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (connect(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0) { perror("connect"); return 1; }
    }
    sleep(hold);
    for (int i = 0; i < n; ++i) {
        char b;
        if (recv(fds[i], &b, 1, MSG_DONTWAIT) == 0) closed++; else open_++;
    }
    printf("%d %d\n", closed, open_);
    return 0;
}
EOF
out=$(as_user "$T_WORK/unix_flood" "$spool/storm-bcast.sock" 3)
t_check "launch gate: a user's 3 connections are all closed at once ($out)" [ "$out" = "3 0" ]
t_check "  one line says why" grep -q "closed a connection of uid 65534 .* to the launch gate .*: only root and SlurmdUser may use it" "$LOG/slurmd-vn1.log"
out=$(as_user bash -c "ulimit -n 4096; '$T_WORK/unix_flood' '$spool/storm-pool.sock' 600")
t_check "buffer pool's socket: a user holds 512 of 600 connections ($out)" [ "$out" = "88 512" ]
t_check "  one line says why" grep -q "closed a connection of uid 65534 .* to the control socket .*: the uid holds 512 connections to it already" "$LOG/slurmd-vn1.log"

# The first-request deadline (10 s): idle connections are closed, a step's
# tasks (attached to the pool) may idle far longer.
LIBDIR=$(t_make_var libdir)
cc -O1 -o "$T_WORK/idle_task" -x c - -I"$STORM_SRCDIR" -L"$LIBDIR" -lstormmsg -Wl,-rpath,"$LIBDIR" << 'EOF' ||
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "switch_rdma/msg/storm_msg.h"
/* idle_task SECONDS: attaches to its step's context, idles, then passes a
   message around the ring and meets at a barrier. */
int main(int argc, char **argv)
{
    int secs = atoi(argv[1]), got = -1;
    if (storm_msg_init() != 0) { fprintf(stderr, "idle_task: init: %s\n", storm_msg_error()); return 1; }
    int rank = storm_msg_rank(), size = storm_msg_size();
    sleep(secs);
    if (storm_msg_send((rank + 1) % size, 3, &rank, sizeof rank) != 0 ||
        storm_msg_recv((rank + size - 1) % size, 3, &got, sizeof got, NULL, NULL) < 0 ||
        storm_msg_barrier() != 0) {
        fprintf(stderr, "idle_task: rank %d after %d s: %s\n", rank, secs, storm_msg_error());
        return 1;
    }
    printf("idle_task: rank %d ok after %d s idle\n", rank, secs);
    storm_msg_finalize();
    return 0;
}
EOF
    t_bail "cannot compile the idle task against $LIBDIR"
as_user timeout 60 srun --jobid="$job" -N 2 -n 2 -w vn1,vn2 "$T_WORK/idle_task" 14 > "$T_WORK/idle.out" 2>&1 &
idle=$!
as_user "$T_WORK/unix_flood" "$spool/storm-pool.sock" 20 1 > "$T_WORK/early.out" &
early=$!
as_user "$T_WORK/unix_flood" "$spool/storm-pool.sock" 20 13 > "$T_WORK/late.out" &
late=$!
"$T_WORK/unix_flood" "$spool/storm-bcast.sock" 2 13 > "$T_WORK/gate.out" &
gate=$!
wait "$early" "$late" "$gate"
out=$(cat "$T_WORK/early.out")
t_check "buffer pool's socket: 20 idle connections of a user all open after 1 s ($out)" [ "$out" = "0 20" ]
out=$(cat "$T_WORK/late.out")
t_check "  all 20 closed 13 s later, past the 10 s deadline ($out)" [ "$out" = "20 0" ]
t_check "  one line says why" grep -q "closed a connection of uid 65534 .* to the control socket .*: no request within 10000 ms of its accept" "$LOG/slurmd-vn1.log"
out=$(cat "$T_WORK/gate.out")
t_check "launch gate: 2 idle connections of root closed by the deadline ($out)" [ "$out" = "2 0" ]
t_check "  one line says why" grep -q "closed a connection of uid 0 .* to the launch gate .*: no request within 10000 ms of its accept" "$LOG/slurmd-vn1.log"
wait "$idle"
rc=$?
ok=$(grep -c '^idle_task: rank [01] ok after 14 s idle' "$T_WORK/idle.out")
t_check "a step's 2 tasks attached to the pool idle 14 s, then exchange (exit $rc, $ok ranks ok)" \
    [ "$rc.$ok" = 0.2 ]
[ "$rc" = 0 ] || t_diag < "$T_WORK/idle.out"
t_done
