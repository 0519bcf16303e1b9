#!/usr/bin/env bash
# t0019: a broadcast into a file system that stops answering does not stop
# the node agent (issue 39, hole 1), on 4 real slurmd.  vn3's destination is
# an ext4 file system of its own (a loop device, in vn3's mount namespace)
# frozen with fsfreeze: every create or write in it blocks in the kernel
# until it is thawed, as on an NFS mount whose server hung.  While vn3's
# part of a broadcast is stuck there:
#  - vn3's agent still answers COMPARE-AND-WRITE at once, and a job step on
#    vn3 starts at once (the agent's loop runs);
#  - the broadcast fails after its timeout (5 s), the user reading that
#    vn3's file system did not answer; the other nodes keep nothing.
# Once thawed, vn3 removes its part by itself, and the same broadcast then
# succeeds on every node.
. "$(dirname "$0")/lib.sh"
t_require_root
t_require_installed
own_fs_require
N=4
vc_up "$N"
STATE=${STORM_VC_STATE:-/var/lib/storm-vcluster}
LOG=$STATE/log
VCX() { "$VC" exec "$@"; }
BCAST="$STORM_BUILDDIR/tools/storm-bcast"
PRIM="$STORM_BUILDDIR/tools/storm-prim"
as_user() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
chmod 1777 "$T_WORK"
D=/tmp/t0019
own_fs vn3 "$D"

job=$(as_user sbatch --parsable -N "$N" -t 5 -o /dev/null --wrap "sleep 600")
for _ in $(seq 100); do [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break; sleep 0.1; done
t_check "a $N-node job of nobody runs ($job)" [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]
head -c 1000000 /dev/urandom > "$T_WORK/f"
chown nobody:nogroup "$T_WORK/f"
t_check "before: a broadcast into it reaches every node" as_user "$BCAST" -j "$job" -t 5 "$T_WORK/f" "$D/before"

VCX vn3 fsfreeze -f "$D"
start=$(date +%s.%N)
as_user "$BCAST" -j "$job" -t 5 "$T_WORK/f" "$D/f" > "$T_WORK/frozen.out" 2>&1 &
bpid=$!
sleep 1.5 # vn3's worker is in the frozen file system by now
t0=$(date +%s.%N)
t_check "vn3's agent answers COMPARE-AND-WRITE meanwhile" timeout 20 "$PRIM" -n 2 caw flag ge 0
t1=$(date +%s.%N)
caw=$(echo "$t1 - $t0" | bc)
t_check "  within 1 s (${caw} s)" [ "$(echo "$caw < 1" | bc)" = 1 ]
as_user timeout 30 srun --jobid="$job" -w vn3 -N1 hostname > "$T_WORK/step.out" 2>&1
t2=$(date +%s.%N)
step=$(echo "$t2 - $t1" | bc)
t_check "a step on vn3 runs meanwhile" grep -qx vn3 "$T_WORK/step.out"
t_check "  and starts within 3 s (${step} s)" [ "$(echo "$step < 3" | bc)" = 1 ]
t_check "  while vn3's broadcast still waits for its file system" kill -0 "$bpid"
wait "$bpid"
rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
t_check "the broadcast fails (exit $rc after ${took} s)" [ "$rc" != 0 ]
t_check "  naming vn3's file system and its deadline" \
    grep -q "vn3: the file system at $D did not answer within 5 s on vn3 (while staging $D/.f.storm-" \
    "$T_WORK/frozen.out"
grep -q "did not answer within" "$T_WORK/frozen.out" || t_diag < "$T_WORK/frozen.out"
t_check "  within 20 s" [ "$(echo "$took < 20" | bc)" = 1 ]
left=$(for n in vn1 vn2 vn4; do VCX "$n" sh -c "ls -A $D"; done | grep -c "f\.storm-\|^f$")
t_check "the other nodes keep nothing of it ($left entries)" [ "$left" = 0 ]
t_check "vn3 logs that its part waits for the file system" \
    grep -q "is not removed yet: the file system at $D did not answer" "$LOG/slurmd-vn3.log"

VCX vn3 fsfreeze -u "$D"
for _ in $(seq 100); do grep -q "storm-.* removed at last" "$LOG/slurmd-vn3.log" && break; sleep 0.1; done
t_check "thawed, vn3 removes its part by itself" grep -q "$D/.f.storm-[0-9a-f]* removed at last" "$LOG/slurmd-vn3.log"
t_check "  and nothing of it is left there" [ -z "$(VCX vn3 sh -c "ls -A $D | grep 'f\.storm-\|^f$'")" ]
t_check "the same broadcast then succeeds" as_user "$BCAST" -j "$job" -t 5 "$T_WORK/f" "$D/f"
same=0
for n in vn1 vn2 vn3 vn4; do VCX "$n" cmp -s "$T_WORK/f" "$D/f" && same=$((same + 1)); done
t_check "  every node holds it ($same of $N)" [ "$same" = "$N" ]
scancel "$job"
t_done
