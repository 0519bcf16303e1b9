// select/gang's entry points for Slurm 22.05 (plugins/select_gang/parts.hpp
// says what the generations share): node selection for gang-scheduled
// partitions, inside slurmctld (and, as Slurm loads every select plugin,
// srun, slurmd and slurmstepd).
//
// The plugin wraps select/cons_tres, loaded through Slurm's plugin loader
// exactly as src/plugins/select/other does: every select_p_* call is
// delegated to cons_tres, except that select_p_job_test lets slurmctld's
// part (plugins/select_gang/slurmctld.cpp) pack the jobs of gang partitions
// into the gang matrix's slots first.
//
// plugin_id: 22.05 loads every select plugin in PluginDir and refuses two
// with one id, so select/gang has its own (150), not cons_tres's (109).
//
// Known limit: some Slurm code tests SelectType with xstrstr(...,
// "cons_tres") (GPU options, TRES reservations); with SelectType=select/gang
// those paths behave as for a non-cons_tres selector.  See
// sched_gang/README.md.
#include "plugins/select_gang/parts.hpp"

extern "C" {
#include "src/common/select.h"
}

STORM_PLUGIN_IDENTITY("Storm gang node selection (packs gang jobs, delegates to select/cons_tres)",
                      "select/gang")
extern "C" {
extern const uint32_t plugin_id = 150; // unique among select plugins (>= 100)
}

namespace {

// Must match slurm_select_ops_t in src/common/select.h (WrappedPlugin checks
// the size; t0000 checks the names against the Slurm source).
const char *cons_tres_syms[] = {
    "plugin_id",
    "select_p_state_save",
    "select_p_state_restore",
    "select_p_job_init",
    "select_p_node_init",
    "select_p_job_test",
    "select_p_job_begin",
    "select_p_job_ready",
    "select_p_job_expand",
    "select_p_job_resized",
    "select_p_job_signal",
    "select_p_job_fini",
    "select_p_job_suspend",
    "select_p_job_resume",
    "select_p_step_pick_nodes",
    "select_p_step_start",
    "select_p_step_finish",
    "select_p_select_nodeinfo_pack",
    "select_p_select_nodeinfo_unpack",
    "select_p_select_nodeinfo_alloc",
    "select_p_select_nodeinfo_free",
    "select_p_select_nodeinfo_set_all",
    "select_p_select_nodeinfo_set",
    "select_p_select_nodeinfo_get",
    "select_p_select_jobinfo_alloc",
    "select_p_select_jobinfo_free",
    "select_p_select_jobinfo_set",
    "select_p_select_jobinfo_get",
    "select_p_select_jobinfo_copy",
    "select_p_select_jobinfo_pack",
    "select_p_select_jobinfo_unpack",
    "select_p_select_jobinfo_sprint",
    "select_p_select_jobinfo_xstrdup",
    "select_p_get_info_from_plugin",
    "select_p_update_node_config",
    "select_p_reconfigure",
    "select_p_resv_test",
};

storm::plugins::select_gang::Context<slurm_select_ops_t> *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::plugins::select_gang::init_select(g_ctx, cons_tres_syms, sizeof(cons_tres_syms));
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

// Forwarders.  Slurm calls select_p_* only after init() succeeded.
#define FWD2(ret, sym, member, params, args)                                                                 \
    extern "C" ret select_p_##sym params { return g_ctx->cons_tres.ops().member args; }
#define FWD(ret, name, params, args) FWD2(ret, name, name, params, args)

FWD(int, state_save, (char *dir_name), (dir_name))
FWD(int, state_restore, (char *dir_name), (dir_name))
FWD(int, job_init, (List job_list), (job_list))
FWD(int, node_init, (void), ())
FWD(int, job_begin, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_ready, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_expand, (job_record_t * from_job_ptr, job_record_t *to_job_ptr), (from_job_ptr, to_job_ptr))
FWD(int, job_resized, (job_record_t * job_ptr, node_record_t *node_ptr), (job_ptr, node_ptr))
FWD(int, job_signal, (job_record_t * job_ptr, int signal), (job_ptr, signal))
FWD(int, job_fini, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_suspend, (job_record_t * job_ptr, bool indf_susp), (job_ptr, indf_susp))
FWD(int, job_resume, (job_record_t * job_ptr, bool indf_susp), (job_ptr, indf_susp))
FWD(bitstr_t *, step_pick_nodes,
    (job_record_t * job_ptr, select_jobinfo_t *step_jobinfo, uint32_t node_count, bitstr_t **avail_nodes),
    (job_ptr, step_jobinfo, node_count, avail_nodes))
FWD(int, step_start, (step_record_t * step_ptr), (step_ptr))
FWD(int, step_finish, (step_record_t * step_ptr, bool killing_step), (step_ptr, killing_step))
FWD2(int, select_nodeinfo_pack, nodeinfo_pack,
     (select_nodeinfo_t * nodeinfo, buf_t *buffer, uint16_t protocol_version),
     (nodeinfo, buffer, protocol_version))
FWD2(int, select_nodeinfo_unpack, nodeinfo_unpack,
     (select_nodeinfo_t * *nodeinfo, buf_t *buffer, uint16_t protocol_version),
     (nodeinfo, buffer, protocol_version))
FWD2(select_nodeinfo_t *, select_nodeinfo_alloc, nodeinfo_alloc, (void), ())
FWD2(int, select_nodeinfo_free, nodeinfo_free, (select_nodeinfo_t * nodeinfo), (nodeinfo))
FWD2(int, select_nodeinfo_set_all, nodeinfo_set_all, (void), ())
FWD2(int, select_nodeinfo_set, nodeinfo_set, (job_record_t * job_ptr), (job_ptr))
FWD2(int, select_nodeinfo_get, nodeinfo_get,
     (select_nodeinfo_t * nodeinfo, enum select_nodedata_type dinfo, enum node_states state, void *data),
     (nodeinfo, dinfo, state, data))
FWD2(select_jobinfo_t *, select_jobinfo_alloc, jobinfo_alloc, (void), ())
FWD2(int, select_jobinfo_free, jobinfo_free, (select_jobinfo_t * jobinfo), (jobinfo))
FWD2(int, select_jobinfo_set, jobinfo_set,
     (select_jobinfo_t * jobinfo, enum select_jobdata_type data_type, void *data), (jobinfo, data_type, data))
FWD2(int, select_jobinfo_get, jobinfo_get,
     (select_jobinfo_t * jobinfo, enum select_jobdata_type data_type, void *data), (jobinfo, data_type, data))
FWD2(select_jobinfo_t *, select_jobinfo_copy, jobinfo_copy, (select_jobinfo_t * jobinfo), (jobinfo))
FWD2(int, select_jobinfo_pack, jobinfo_pack,
     (select_jobinfo_t * jobinfo, buf_t *buffer, uint16_t protocol_version),
     (jobinfo, buffer, protocol_version))
FWD2(int, select_jobinfo_unpack, jobinfo_unpack,
     (select_jobinfo_t * *jobinfo_pptr, buf_t *buffer, uint16_t protocol_version),
     (jobinfo_pptr, buffer, protocol_version))
FWD2(char *, select_jobinfo_sprint, jobinfo_sprint,
     (select_jobinfo_t * jobinfo, char *buf, size_t size, int mode), (jobinfo, buf, size, mode))
FWD2(char *, select_jobinfo_xstrdup, jobinfo_xstrdup, (select_jobinfo_t * jobinfo, int mode), (jobinfo, mode))
FWD(int, get_info_from_plugin, (enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data),
    (dinfo, job_ptr, data))
FWD(int, update_node_config, (int index), (index))
FWD(int, reconfigure, (void), ())
FWD(bitstr_t *, resv_test,
    (resv_desc_msg_t * resv_desc_ptr, uint32_t node_cnt, bitstr_t *avail_bitmap, bitstr_t **core_bitmap),
    (resv_desc_ptr, node_cnt, avail_bitmap, core_bitmap))
#undef FWD
#undef FWD2

// Gang jobs started now are packed, everything else is cons_tres's.
// `bitmap` is in/out as for cons_tres (the chosen nodes).
extern "C" int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes,
                                 uint32_t max_nodes, uint32_t req_nodes, uint16_t mode,
                                 List preemptee_candidates, List *preemptee_job_list,
                                 bitstr_t *exc_core_bitmap)
{
    return g_ctx->packing.job_test(job_ptr, bitmap, min_nodes, mode == SELECT_MODE_RUN_NOW,
                                   preemptee_candidates, preemptee_job_list, [&] {
                                       return g_ctx->cons_tres.ops().job_test(
                                           job_ptr, bitmap, min_nodes, max_nodes, req_nodes, mode,
                                           preemptee_candidates, preemptee_job_list, exc_core_bitmap);
                                   });
}
