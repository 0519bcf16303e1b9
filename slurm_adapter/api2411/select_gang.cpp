// select/gang's entry points for Slurm 24.11 (plugins/select_gang/parts.hpp
// says what the generations share): node selection for gang-scheduled
// partitions, inside slurmctld (and, as Slurm loads select plugins there
// too, slurmd, slurmstepd and the commands that read node data).
//
// The plugin wraps select/cons_tres, loaded through Slurm's plugin loader:
// every select_p_* call is delegated to cons_tres, except that
// select_p_job_test lets slurmctld's part (plugins/select_gang/slurmctld.cpp)
// pack the jobs of gang partitions into the gang matrix's slots first.
//
// plugin_id: slurmctld, slurmstepd and the clients that read node data
// (sinfo, scontrol) still load every select plugin in PluginDir on 24.11
// (select_g_init(0), src/interfaces/select.c) and refuse two with one id,
// so select/gang keeps an id of its own (150), not cons_tres's (109).
//
// Known limit: some Slurm code tests SelectType with xstrstr(...,
// "cons_tres") (GPU options, heterogeneous GRES, dynamic nodes); with
// SelectType=select/gang those paths behave as for a non-cons_tres
// selector.  See sched_gang/README.md.
#include "plugins/select_gang/parts.hpp"

extern "C" {
#include "src/interfaces/select.h"
}

STORM_PLUGIN_IDENTITY("Storm gang node selection (packs gang jobs, delegates to select/cons_tres)",
                      "select/gang")
extern "C" {
extern const uint32_t plugin_id = 150; // unique among select plugins (>= 100)
}

namespace {

// slurm_select_ops_t of 24.11's src/interfaces/select.c (which keeps it to
// itself), in the order of its node_select_syms[] (WrappedPlugin checks the
// size; t0000 checks the names against the Slurm source).
struct SelectOps {
    uint32_t *plugin_id;
    int (*state_save)(char *dir_name);
    int (*state_restore)(char *dir_name);
    int (*job_init)(list_t *job_list);
    int (*node_init)(void);
    int (*job_test)(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint32_t max_nodes,
                    uint32_t req_nodes, uint16_t mode, list_t *preeemptee_candidates,
                    list_t **preemptee_job_list, resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr);
    int (*job_begin)(job_record_t *job_ptr);
    int (*job_ready)(job_record_t *job_ptr);
    int (*job_expand)(job_record_t *from_job_ptr, job_record_t *to_job_ptr);
    int (*job_resized)(job_record_t *job_ptr, node_record_t *node_ptr);
    int (*job_fini)(job_record_t *job_ptr);
    int (*job_suspend)(job_record_t *job_ptr, bool indf_susp);
    int (*job_resume)(job_record_t *job_ptr, bool indf_susp);
    bitstr_t *(*step_pick_nodes)(job_record_t *job_ptr, select_jobinfo_t *step_jobinfo, uint32_t node_count,
                                 bitstr_t **avail_nodes);
    int (*step_start)(step_record_t *step_ptr);
    int (*step_finish)(step_record_t *step_ptr, bool killing_step);
    int (*nodeinfo_pack)(select_nodeinfo_t *nodeinfo, buf_t *buffer, uint16_t protocol_version);
    int (*nodeinfo_unpack)(select_nodeinfo_t **nodeinfo, buf_t *buffer, uint16_t protocol_version);
    select_nodeinfo_t *(*nodeinfo_alloc)(void);
    int (*nodeinfo_free)(select_nodeinfo_t *nodeinfo);
    int (*nodeinfo_set_all)(void);
    int (*nodeinfo_set)(job_record_t *job_ptr);
    int (*nodeinfo_get)(select_nodeinfo_t *nodeinfo, enum select_nodedata_type dinfo, enum node_states state,
                        void *data);
    select_jobinfo_t *(*jobinfo_alloc)(void);
    int (*jobinfo_free)(select_jobinfo_t *jobinfo);
    int (*jobinfo_set)(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data);
    int (*jobinfo_get)(select_jobinfo_t *jobinfo, enum select_jobdata_type data_type, void *data);
    select_jobinfo_t *(*jobinfo_copy)(select_jobinfo_t *jobinfo);
    int (*jobinfo_pack)(select_jobinfo_t *jobinfo, buf_t *buffer, uint16_t protocol_version);
    int (*jobinfo_unpack)(select_jobinfo_t **jobinfo_pptr, buf_t *buffer, uint16_t protocol_version);
    int (*get_info_from_plugin)(enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data);
    int (*reconfigure)(void);
};

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
    "select_p_get_info_from_plugin",
    "select_p_reconfigure",
};

storm::plugins::select_gang::Context<SelectOps> *g_ctx = nullptr;

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
FWD(int, job_init, (list_t * job_list), (job_list))
FWD(int, node_init, (void), ())
FWD(int, job_begin, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_ready, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_expand, (job_record_t * from_job_ptr, job_record_t *to_job_ptr), (from_job_ptr, to_job_ptr))
FWD(int, job_resized, (job_record_t * job_ptr, node_record_t *node_ptr), (job_ptr, node_ptr))
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
FWD(int, get_info_from_plugin, (enum select_plugindata_info dinfo, job_record_t *job_ptr, void *data),
    (dinfo, job_ptr, data))
FWD(int, reconfigure, (void), ())
#undef FWD
#undef FWD2

// Gang jobs started now are packed, everything else is cons_tres's.
// `bitmap` is in/out as for cons_tres (the chosen nodes).
extern "C" int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes,
                                 uint32_t max_nodes, uint32_t req_nodes, uint16_t mode,
                                 list_t *preemptee_candidates, list_t **preemptee_job_list,
                                 resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr)
{
    return g_ctx->packing.job_test(job_ptr, bitmap, min_nodes, mode == SELECT_MODE_RUN_NOW,
                                   preemptee_candidates, preemptee_job_list, [&] {
                                       return g_ctx->cons_tres.ops().job_test(
                                           job_ptr, bitmap, min_nodes, max_nodes, req_nodes, mode,
                                           preemptee_candidates, preemptee_job_list, resv_exc_ptr,
                                           will_run_ptr);
                                   });
}
