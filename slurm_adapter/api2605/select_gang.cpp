// select/gang's entry points for Slurm 26.05 (plugins/select_gang/parts.hpp
// says what the generations share): node selection for gang-scheduled
// partitions, inside slurmctld, the only process that loads a select plugin
// from 25.05.
//
// The plugin IS select/cons_tres plus packing: it loads cons_tres through
// Slurm's plugin loader and delegates every select_p_* call to it, except
// that select_p_job_test lets slurmctld's part
// (plugins/select_gang/slurmctld.cpp) pack the jobs of gang partitions into
// the gang matrix's slots first.
//
// plugin_id: from 25.05 slurmctld loads the SelectType plugin alone
// (select_g_init, src/interfaces/select.c: one plugin_context_create, no
// check of ids between plugins), and running_cons_tres() tests that
// plugin's id against SELECT_PLUGIN_CONS_TRES (109): a SelectType of
// another id with CR_CPU/CR_Core/CR_Socket stops slurmctld at start, and
// the cons_tres paths of node_scheduler.c, gres.c, reservation.c and
// job_mgr.c (core reservations, per-task GRES, memory from GRES) would be
// skipped.  select/gang answers 109: every allocation is cons_tres's, so
// those paths are right for it.  cons_tres, loaded inside it, has 109 too;
// no code compares the ids of two loaded select plugins on this line.
// sched_gang/README.md ("Slurm's release lines") says more.
//
// Known limit: some Slurm code still tests SelectType with xstrstr(...,
// "cons_tres") (heterogeneous GRES, dynamic nodes, MaxNodeCount, the
// default SelectTypeParameters); with SelectType=select/gang those paths
// behave as for a non-cons_tres selector.
#include "plugins/select_gang/parts.hpp"

extern "C" {
#include "src/interfaces/select.h"
}

STORM_PLUGIN_IDENTITY("Storm gang node selection (packs gang jobs, delegates to select/cons_tres)",
                      "select/gang")
extern "C" {
extern const uint32_t plugin_id = SELECT_PLUGIN_CONS_TRES; // 109: see above
}

namespace {

// slurm_select_ops_t of 26.05's src/interfaces/select.c (which keeps it to
// itself), in the order of its node_select_syms[] (WrappedPlugin checks the
// size; t0000 checks the names against the Slurm source).
struct SelectOps {
    uint32_t *plugin_id;
    int (*node_init)(void);
    int (*job_test)(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint32_t max_nodes,
                    uint32_t req_nodes, uint16_t mode, list_t *preeemptee_candidates,
                    list_t **preemptee_job_list, resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr);
    int (*job_begin)(job_record_t *job_ptr);
    int (*job_ready)(job_record_t *job_ptr);
    int (*job_expand)(job_record_t *from_job_ptr, job_record_t *to_job_ptr);
    int (*job_resized)(job_record_t *job_ptr, node_record_t *node_ptr);
    void (*job_mem_reduce)(job_record_t *job_ptr);
    int (*job_fini)(job_record_t *job_ptr);
    int (*job_suspend)(job_record_t *job_ptr, bool indf_susp);
    int (*job_resume)(job_record_t *job_ptr, bool indf_susp);
    int (*nodeinfo_set_all)(void);
    int (*nodeinfo_set)(job_record_t *job_ptr);
    int (*reconfigure)(void);
};

const char *cons_tres_syms[] = {
    "plugin_id",
    "select_p_node_init",
    "select_p_job_test",
    "select_p_job_begin",
    "select_p_job_ready",
    "select_p_job_expand",
    "select_p_job_resized",
    "select_p_job_mem_reduce",
    "select_p_job_fini",
    "select_p_job_suspend",
    "select_p_job_resume",
    "select_p_select_nodeinfo_set_all",
    "select_p_select_nodeinfo_set",
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

FWD(int, node_init, (void), ())
FWD(int, job_begin, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_ready, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_expand, (job_record_t * from_job_ptr, job_record_t *to_job_ptr), (from_job_ptr, to_job_ptr))
FWD(int, job_resized, (job_record_t * job_ptr, node_record_t *node_ptr), (job_ptr, node_ptr))
FWD(void, job_mem_reduce, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_fini, (job_record_t * job_ptr), (job_ptr))
FWD(int, job_suspend, (job_record_t * job_ptr, bool indf_susp), (job_ptr, indf_susp))
FWD(int, job_resume, (job_record_t * job_ptr, bool indf_susp), (job_ptr, indf_susp))
FWD2(int, select_nodeinfo_set_all, nodeinfo_set_all, (void), ())
FWD2(int, select_nodeinfo_set, nodeinfo_set, (job_record_t * job_ptr), (job_ptr))
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
