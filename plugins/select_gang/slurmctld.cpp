// select/gang in slurmctld: gang jobs packed into the gang matrix's slots
// (sched_gang/packing.hpp: buddy placement, fewer idle cells than
// cons_tres's first fit):
//
//  - Intercepted: SchedulerType=sched/gang, the job's partition has
//    OverSubscribe=FORCE:N with N >= 2, mode exactly SELECT_MODE_RUN_NOW
//    (no flags: the entry file's `run_now`), no preemptee candidates, no required nodes, not
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
// are weak references here, so srun and slurmd still load the plugin (they
// do up to 24.11).
#include "plugins/select_gang/parts.hpp"
#include "slurm_adapter/gang_config.hpp"

#include <cstring>

#include "sched_gang/config.hpp"

extern "C" {
#include "src/common/job_resources.h"
#include "src/common/node_conf.h"
}

// slurmctld's; absent (null) in srun and slurmd, which load every select
// plugin but never call job_test.
#pragma weak job_list
#pragma weak part_list

namespace storm::plugins::select_gang {

namespace {

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
    storm::slurm_api::slurm_list_itr it = list_iterator_create(job_list);
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
const char *not_packed(job_record_t *job, bool run_now, slurm_list preemptee_candidates)
{
    if (!run_now || !running_in_slurmctld() || !&job_list || !job_list || !&part_list || !part_list ||
        !slurm_conf.schedtype || strcmp(slurm_conf.schedtype, "sched/gang") || !gang_share(job->part_ptr))
        return "-"; // not a gang job being started: not select/gang's decision
    if (preemptee_candidates && list_count(preemptee_candidates) > 0)
        return "preemption candidates";
    if (job->details && job->details->req_node_bitmap)
        return "required nodes";
    if (job->details && job->details->contiguous)
        return "contiguous nodes";
    return "";
}

} // namespace

// Packing's choice of nodes for `job` among `bitmap`'s (see the header).
storm::gang::Placement GangPacking::pack(bitstr_t *bitmap, uint32_t count)
{
    uint32_t nodes = static_cast<uint32_t>(bit_size(bitmap));
    std::vector<uint32_t> candidates = set_bits(bitmap);
    unsigned mpl = gang_mpl();
    std::lock_guard<std::mutex> lk(mu);
    matrix.update(running_gang_jobs());
    return storm::gang::place(storm::gang::pack_view(matrix, nodes), candidates, count, mpl);
}

int GangPacking::job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, bool run_now,
                          slurm_list preemptee_candidates, slurm_list *preemptee_job_list,
                          const std::function<int()> &cons_tres)
{
    const char *skip = not_packed(job_ptr, run_now, preemptee_candidates);
    if (*skip == '-')
        return cons_tres();
    if (*skip) {
        int rc = cons_tres();
        log.debug("JobId=%u: %s: cons_tres's choice (rc %d)", job_ptr->job_id, skip, rc);
        return rc;
    }
    storm::gang::Placement p;
    storm::shim::guarded(log, "job_test", [&] {
        p = pack(bitmap, min_nodes);
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

} // namespace storm::plugins::select_gang
