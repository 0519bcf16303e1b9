// select/gang: node selection for gang-scheduled partitions, inside
// slurmctld (and, as Slurm loads every select plugin, srun and slurmd).
//
// Slurm-facing shim over select/cons_tres, loaded through Slurm's plugin
// loader exactly as src/plugins/select/other does.  Every select_p_* call
// is delegated to cons_tres, except that select_p_job_test packs the jobs
// of gang partitions into the gang matrix's slots (sched_gang/packing.hpp:
// buddy placement, fewer idle cells than cons_tres's first fit):
//
//  - Intercepted: SchedulerType=sched/gang, the job's partition has
//    OverSubscribe=FORCE:N with N >= 2, mode exactly SELECT_MODE_RUN_NOW
//    (no flags), no preemptee candidates, no required nodes, not
//    --contiguous.  Everything else (TEST_ONLY, WILL_RUN, RESV, preemption
//    tests) goes to cons_tres unchanged.
//  - The slots' view: a matrix (matrix.hpp) kept here that mirrors
//    sched/gang's, fed with the running jobs of every gang partition (they
//    share sched/gang's one matrix) as whole nodes (packing.hpp explains
//    the node-level view), indexed by Slurm's node index.
//  - packing chooses the job's min_nodes nodes among `bitmap`'s; `bitmap`
//    is narrowed to them and cons_tres's job_test runs on it.  If packing
//    has no answer, or cons_tres refuses the narrowed set, cons_tres runs
//    again on the original `bitmap` (job_test is destructive of it, so a
//    copy is kept): no job is left unplaced that cons_tres alone would
//    place.  One debug line "select/gang: ..." per decision.
//
// Locking: slurmctld calls job_test with its locks held (the schedulers and
// the allocation RPCs take config read, job write, node write, partition
// read), so job_list, the job records and the node table are read here
// without locking (slurmctld's locks are not recursive).  A mutex guards
// the mirror matrix.  job_list and part_list exist only in slurmctld: they
// are weak references here, so srun and slurmd still load the plugin.
//
// Known limit: some Slurm code tests SelectType with xstrstr(...,
// "cons_tres") (GPU options, TRES reservations); with SelectType=select/gang
// those paths behave as for a non-cons_tres selector.  See README.md.
#include "slurm_adapter/shim.hpp"
#include "slurm_adapter/gang_config.hpp"

#include <cstring>
#include <mutex>

#include "sched_gang/config.hpp"
#include "sched_gang/matrix.hpp"
#include "sched_gang/packing.hpp"

extern "C" {
#include "src/common/job_resources.h"
#include "src/common/node_conf.h"
#include "src/common/select.h"
#include "src/slurmctld/slurmctld.h"
}

// slurmctld's; absent (null) in srun and slurmd, which load every select
// plugin but never call job_test.
#pragma weak job_list
#pragma weak part_list

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

struct SelectContext {
    storm::Logger log{"select/gang"};
    storm::shim::WrappedPlugin<slurm_select_ops_t> cons_tres{"select", "select/cons_tres", cons_tres_syms,
                                                             sizeof(cons_tres_syms)};
    std::mutex mu;
    storm::gang::Matrix matrix{storm::gang::kMaxSlots}; // mirrors sched/gang's
};

// N of a partition with OverSubscribe=FORCE:N, N >= 2; else 0.
unsigned gang_share(const part_record_t *p)
{
    if (!p || !(p->max_share & SHARED_FORCE))
        return 0;
    unsigned n = p->max_share & ~SHARED_FORCE;
    return n >= 2 ? n : 0;
}

// The matrix's slot count, as sched/gang reads it (caller holds the
// partition read lock).  Throws ConfigError as sched/gang's init would.
unsigned gang_mpl() { return storm::shim::read_gang_config().mpl; }

// The indices of b's set bits, in order.
std::vector<uint32_t> set_bits(bitstr_t *b)
{
    std::vector<uint32_t> out;
    bitoff_t last = bit_fls(b);
    for (bitoff_t n = bit_ffs(b); n >= 0 && n <= last; ++n)
        if (bit_test(b, n))
            out.push_back(static_cast<uint32_t>(n));
    return out;
}

// The running jobs of the gang partitions, as whole nodes (cell = Slurm's
// node index << 20), like sched/gang's poller (caller holds the job read
// lock).
std::vector<storm::gang::JobShape> running_gang_jobs()
{
    std::vector<storm::gang::JobShape> out;
    ListIterator it = list_iterator_create(job_list);
    while (auto *job = static_cast<job_record_t *>(list_next(it))) {
        if (!IS_JOB_RUNNING(job) || IS_JOB_COMPLETING(job) || !gang_share(job->part_ptr))
            continue;
        job_resources_t *jr = job->job_resrcs;
        if (!jr || !jr->node_bitmap)
            continue;
        storm::gang::JobShape shape;
        shape.job_id = job->job_id;
        for (auto n : set_bits(jr->node_bitmap))
            shape.cells.push_back(uint64_t(n) << 20);
        if (!shape.cells.empty())
            out.push_back(std::move(shape));
    }
    list_iterator_destroy(it);
    return out;
}

// Why a job_test is not a packing decision ("" if it is one).
const char *not_packed(job_record_t *job, uint16_t mode, List preemptee_candidates)
{
    if (mode != SELECT_MODE_RUN_NOW || !running_in_slurmctld() || !&job_list || !job_list || !&part_list ||
        !part_list || !slurm_conf.schedtype || strcmp(slurm_conf.schedtype, "sched/gang") ||
        !gang_share(job->part_ptr))
        return "-"; // not a gang job being started: not select/gang's decision
    if (preemptee_candidates && list_count(preemptee_candidates) > 0)
        return "preemption candidates";
    if (job->details && job->details->req_node_bitmap)
        return "required nodes";
    if (job->details && job->details->contiguous)
        return "contiguous nodes";
    return "";
}

// Packing's choice of nodes for `job` among `bitmap`'s (see the header).
storm::gang::Placement pack(SelectContext &ctx, bitstr_t *bitmap, uint32_t count)
{
    uint32_t nodes = static_cast<uint32_t>(bit_size(bitmap));
    std::vector<uint32_t> candidates = set_bits(bitmap);
    unsigned mpl = gang_mpl();
    std::lock_guard<std::mutex> lk(ctx.mu);
    ctx.matrix.update(running_gang_jobs());
    return storm::gang::place(storm::gang::pack_view(ctx.matrix, nodes), candidates, count, mpl);
}

SelectContext *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "select/gang", [] {
        auto ctx = std::make_unique<SelectContext>();
        storm::shim::log_loaded(
            ctx->log, running_in_slurmctld(),
            "Storm %s loaded (Slurm %s); delegating to select/cons_tres, packing gang jobs", STORM_VERSION,
            STORM_SLURM_VERSION);
        return ctx;
    });
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

// See the header: gang jobs started now are packed, everything else is
// cons_tres's.  `bitmap` is in/out as for cons_tres (the chosen nodes).
extern "C" int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes,
                                 uint32_t max_nodes, uint32_t req_nodes, uint16_t mode,
                                 List preemptee_candidates, List *preemptee_job_list,
                                 bitstr_t *exc_core_bitmap)
{
    auto cons_tres = [&] {
        return g_ctx->cons_tres.ops().job_test(job_ptr, bitmap, min_nodes, max_nodes, req_nodes, mode,
                                               preemptee_candidates, preemptee_job_list, exc_core_bitmap);
    };
    const storm::Logger &log = g_ctx->log;
    const char *skip = not_packed(job_ptr, mode, preemptee_candidates);
    if (*skip == '-')
        return cons_tres();
    if (*skip) {
        int rc = cons_tres();
        log.debug("JobId=%u: %s: cons_tres's choice (rc %d)", job_ptr->job_id, skip, rc);
        return rc;
    }
    storm::gang::Placement p;
    storm::shim::guarded(log, "job_test", [&] {
        p = pack(*g_ctx, bitmap, min_nodes);
        return SLURM_SUCCESS;
    });
    if (p.kind == storm::gang::Placement::none) {
        int rc = cons_tres();
        log.debug("JobId=%u: %u nodes: packing has no fit (candidates, matrix slots): cons_tres's choice "
                  "(rc %d)",
                  job_ptr->job_id, min_nodes, rc);
        return rc;
    }
    bitstr_t *orig = bit_copy(bitmap);
    bit_clear_all(bitmap);
    for (uint32_t n : p.nodes)
        bit_set(bitmap, n);
    char *packed = bitmap2node_name(bitmap);
    int rc = cons_tres();
    if (rc == SLURM_SUCCESS) {
        log.debug("JobId=%u: packed on %s (%s %u)", job_ptr->job_id, packed, storm::gang::kind_name(p.kind),
                  p.slot);
    } else {
        // Refused: cons_tres's own choice on the original candidates.
        bit_copybits(bitmap, orig);
        if (preemptee_job_list)
            FREE_NULL_LIST(*preemptee_job_list);
        rc = cons_tres();
        log.debug("JobId=%u: cons_tres refused the packed nodes %s: its own choice (rc %d)", job_ptr->job_id,
                  packed, rc);
    }
    xfree(packed);
    FREE_NULL_BITMAP(orig);
    return rc;
}
