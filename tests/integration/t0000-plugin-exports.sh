#!/usr/bin/env bash
# t0000: each built plugin exports exactly what Slurm looks up for its type
# (the linker version script hides everything else, the C++ core included),
# its identity strings are right, and no C++ symbol leaks out.
. "$(dirname "$0")/lib.sh"
cd "$STORM_BUILDDIR/plugins/.libs" || t_bail "no built plugins in $STORM_BUILDDIR/plugins/.libs"

common="fini init plugin_name plugin_type plugin_version"
# select: the functions of slurm_select_ops_t, read from the Slurm source
# this tree was configured with (src/common/select.c up to 23.02,
# src/interfaces/select.c since), so a new Slurm that adds one fails here.
# Their count per API generation guards the reading itself.
slurm_src=$(sed -n 's/^SLURM_SRC = //p' "$STORM_BUILDDIR/Makefile")
slurm_api=$(sed -n 's/^STORM_SLURM_API = //p' "$STORM_BUILDDIR/Makefile")
select_c=$slurm_src/src/interfaces/select.c
[ -f "$select_c" ] || select_c=$slurm_src/src/common/select.c
select_syms="plugin_id $(sed -n -E '/^(static )?const char \*node_select_syms\[\] = \{/,/^\};/p' "$select_c" |
    grep -o '"select_p_[a-z_]*"' | tr -d '"' | tr '\n' ' ')"
# cli_filter: the functions of cli_filter_ops_t, from the configured line's
# source (src/common/ up to 22.05, src/interfaces/ from 23.02).
cli_filter_c=$slurm_src/src/interfaces/cli_filter.c
[ -f "$cli_filter_c" ] || cli_filter_c=$slurm_src/src/common/cli_filter.c
cli_filter_syms=$(sed -n '/^static const char \*syms\[\] = {/,/^};/p' "$cli_filter_c" |
    grep -o '"cli_filter_p_[a-z_]*"' | tr -d '"' | tr '\n' ' ')
case $slurm_api in
2205) select_count=36 select_id=150 ;; # every select plugin loaded: an id of its own
2411) select_count=31 select_id=150 ;;
2511) select_count=12 select_id=109 ;; # SelectType alone loaded: cons_tres's id
2605) select_count=13 select_id=109 ;;
*) t_bail "unknown STORM_SLURM_API '$slurm_api' in $STORM_BUILDDIR/Makefile" ;;
esac
# A plugin's exported uint32_t (little-endian), read from the file: nm gives
# its address, objdump the 4 bytes there in the section that holds them.
u32_symbol() { # so symbol
    local a hex
    a=$(nm -D --defined-only "$1" | awk -v s="$2" '$3 == s { print $1 }')
    [ -n "$a" ] || return 1
    hex=$(objdump -s --start-address=0x$a --stop-address=$(printf '0x%x' $((0x$a + 4))) "$1" |
        awk '/^Contents of section / { keep = ($4 !~ /^\.debug/) ; next } keep && NF >= 2 { print $2; exit }')
    [ ${#hex} = 8 ] || return 1
    echo $((0x${hex:6:2}${hex:4:2}${hex:2:2}${hex:0:2}))
}
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
t_check "select/gang: Slurm's select.c lists $select_count functions (API $slurm_api)" [ "$(echo "$select_syms" | wc -w)" = $((select_count + 1)) ]
t_check "select/gang: plugin_id is $select_id (API $slurm_api)" [ "$(u32_symbol select_gang.so plugin_id)" = "$select_id" ]
t_check "cli_filter/storm: Slurm's $(basename "$(dirname "$cli_filter_c")")/cli_filter.c lists 3 functions" [ "$(echo "$cli_filter_syms" | wc -w)" = 3 ]

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
check_exports cli_filter_storm.so $common $cli_filter_syms
check_exports spank_storm.so plugin_name plugin_type plugin_version slurm_spank_init slurm_spank_init_post_opt slurm_spank_local_user_init slurm_spank_task_init

for so in *.so; do
    t_check "$so: no C++ symbol exported" bash -c "! nm -D --defined-only '$so' | awk '{print \$3}' | grep -q '^_Z'"
done

# plugin_type strings, read from .rodata
for pair in sched_gang.so:sched/gang select_gang.so:select/gang switch_rdma.so:switch/rdma \
            cli_filter_storm.so:cli_filter/storm spank_storm.so:spank; do
    so=${pair%%:*} type=${pair#*:}
    t_check "$so names itself $type" bash -c "strings -a '$so' | grep -qx '$type'"
done
t_done
