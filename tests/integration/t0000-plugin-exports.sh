#!/usr/bin/env bash
# t0000: each built plugin exports exactly what Slurm looks up for its type
# (the linker version script hides everything else, the C++ core included),
# its identity strings are right, and no C++ symbol leaks out.
. "$(dirname "$0")/lib.sh"
cd "$STORM_BUILDDIR/plugins/.libs" || t_bail "no built plugins in $STORM_BUILDDIR/plugins/.libs"

common="fini init plugin_name plugin_type plugin_version"
# select: the 36 functions of slurm_select_ops_t, read from the Slurm source
# this tree was configured with, so a new Slurm that adds one fails here.
slurm_src=$(sed -n 's/^SLURM_SRC = //p' "$STORM_BUILDDIR/Makefile")
select_syms="plugin_id $(sed -n '/^const char \*node_select_syms\[\] = {/,/^};/p' "$slurm_src/src/common/select.c" |
    grep -o '"select_p_[a-z_]*"' | tr -d '"' | tr '\n' ' ')"
launch_syms=$(sed -n '/^static const char \*syms\[\] = {/,/^};/p' "$slurm_src/src/srun/libsrun/launch.c" |
    grep -o '"launch_p_[a-z_]*"' | tr -d '"' | tr '\n' ' ')
# switch: the configured line's syms[] (src/interfaces/switch.c from 23.02,
# src/common/switch.c before), which switch/rdma must export exactly.
switch_c=$slurm_src/src/interfaces/switch.c
[ -f "$switch_c" ] || switch_c=$slurm_src/src/common/switch.c
switch_syms="$(sed -n '/^static const char \*syms\[\] = {/,/^};/p' "$switch_c" |
    grep -o '"\(plugin_id\|switch_p_[a-z_]*\)"' | tr -d '"' | tr '\n' ' ')"

sorted() { tr ' \n' '\n\n' | grep . | sort -u | tr '\n' ' '; }
exports() { nm -D --defined-only "$1" | awk '{print $3}' | sort -u | tr '\n' ' '; }

switch_n=$(echo "$switch_syms" | wc -w)
t_check "switch/rdma: ${switch_c#"$slurm_src"/} lists plugin_id and 19 functions or more ($((switch_n - 1)))" \
    [ "$switch_n" -ge 20 -a -n "$(echo "$switch_syms" | grep -w plugin_id)" ]
t_check "select/gang: Slurm's select.c lists 36 functions" [ "$(echo "$select_syms" | wc -w)" = 37 ]
t_check "launch/bcast: Slurm's launch.c lists 8 functions" [ "$(echo "$launch_syms" | wc -w)" = 8 ]

check_exports() { # plugin expected...
    local so=$1; shift
    local want got
    want=$(echo "$*" | sorted)
    got=$(exports "$so")
    if [ "$want" = "$got" ]; then t_ok "$so exports exactly what Slurm looks up"
    else
        t_fail "$so exports exactly what Slurm looks up"
        diff <(echo "$want" | tr ' ' '\n') <(echo "$got" | tr ' ' '\n') | t_diag
    fi
}
check_exports sched_gang.so $common sched_p_reconfig
check_exports select_gang.so $common $select_syms
check_exports switch_rdma.so $common $switch_syms
check_exports launch_bcast.so $common $launch_syms
check_exports spank_storm.so plugin_name plugin_type plugin_version slurm_spank_init slurm_spank_init_post_opt slurm_spank_local_user_init slurm_spank_task_init

for so in *.so; do
    t_check "$so: no C++ symbol exported" bash -c "! nm -D --defined-only '$so' | awk '{print \$3}' | grep -q '^_Z'"
done

# plugin_type strings, read from .rodata
for pair in sched_gang.so:sched/gang select_gang.so:select/gang switch_rdma.so:switch/rdma \
            launch_bcast.so:launch/bcast spank_storm.so:spank; do
    so=${pair%%:*} type=${pair#*:}
    t_check "$so names itself $type" bash -c "strings -a '$so' | grep -qx '$type'"
done
t_done
