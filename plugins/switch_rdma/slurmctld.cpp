// switch/rdma in slurmctld (the configured SwitchType), under its job write
// lock: the table of contexts in use.
//
// build_jobinfo gives each step a Context (step_context.hpp) with the
// lowest free id of the ContextTable, marked coscheduled when the job's
// partition is among storm_cosched_partitions (slurmctld is the only judge
// of that: see lib/node/admissions.hpp), or refuses the step with one
// "switch/rdma: step J.S: ..." line (ESLURM_INTERCONNECT_BUSY when every id
// is in use, so srun retries; ESLURM_INTERCONNECT_FAILURE otherwise);
// job_step_complete releases the step's id, job_complete any id its job
// left.  srun's steps outside an allocation (build_jobinfo in srun, without
// a step record) and steps without tasks get a jobinfo without a context.
//
// Restart: switch_p_libstate_save writes the table (slurmctld calls it when
// it shuts down), switch_p_libstate_restore reads it back before the job
// state.  Its entries stay unconfirmed until a recovered step re-marks its
// id (job_step_allocated), which wins over a stale entry: slurmctld's job
// state is the authority.  At the first step creation after that, the
// unconfirmed entries whose job has ended are dropped, the others kept
// until their job ends.  A malformed state file is logged (file and line),
// kept as <file>.bad, and slurmctld starts from the re-marks alone: every
// step slurmctld knows re-marks its id before any new step is created, so
// no live step's id is handed out again.
#include "plugins/switch_rdma/parts.hpp"

#include <cstdio>
#include <cstring>

#include "slurm_adapter/slurm_nodes.hpp"

extern "C" {
#include "src/common/node_conf.h"
#include "src/common/read_config.h"
}

namespace storm::plugins::switch_rdma::slurmctld {

namespace {

// The IPv4 address of a node as slurmctld's node table has it (NodeAddr,
// which the node agents use too), resolved once per address.  Caller holds
// s.ctld.mu and slurmctld's node read lock.
in_addr_t node_address(SwitchContext &s, const std::string &name)
{
    node_record_t *node = find_node_record(const_cast<char *>(name.c_str()));
    std::string addr = node && node->comm_name ? node->comm_name : name;
    auto it = s.ctld.addresses.find(addr);
    if (it != s.ctld.addresses.end())
        return it->second;
    in_addr a{};
    if (inet_pton(AF_INET, addr.c_str(), &a) != 1)
        a = storm::shim::resolve_ipv4(name, addr).sin_addr;
    s.ctld.addresses[addr] = a.s_addr;
    return a.s_addr;
}

// Does Storm gang-schedule this partition (SchedulerType=sched/gang and
// OverSubscribe=FORCE:n, n >= 2)?  Is it coscheduled (storm_cosched_partitions;
// caller holds s.ctld.mu)?  step_create holds no partition lock: a
// partition record lives while jobs point at it (deleting one takes the job
// write lock we hold), and max_share and name are not changed in place.
rdma::StepShape step_shape(SwitchContext &s, const slurm_step_layout_t *layout, const step_record_t *step)
{
    const job_record_t *job = step->job_ptr;
    rdma::StepShape shape;
    shape.job_id = job->job_id;
    shape.step_id = step->step_id.step_id;
    shape.uid = job->user_id;
    if (const part_record_t *part = job->part_ptr) {
        shape.cosched = part->name && s.config.cosched.covers(part->name);
        bool force = part->max_share & SHARED_FORCE;
        uint32_t n = part->max_share & ~SHARED_FORCE;
        shape.force_n = n; // FORCE:n or YES:n: up to n jobs share a node's pool
        shape.gang =
            force && n >= 2 && slurm_conf.schedtype && !std::strcmp(slurm_conf.schedtype, "sched/gang");
    }
    shape.ntasks = layout->task_cnt;
    shape.node_names = storm::shim::expand_hostlist(layout->node_list);
    if (shape.node_names.size() != layout->node_cnt)
        throw std::runtime_error("the step's layout lists " + std::to_string(layout->node_cnt) +
                                 " nodes but its node list " + std::string(layout->node_list) + " has " +
                                 std::to_string(shape.node_names.size()));
    for (uint32_t i = 0; i < layout->node_cnt; ++i) {
        rdma::ContextNode node;
        node.addr = node_address(s, shape.node_names[i]);
        node.ranks.assign(layout->tids[i], layout->tids[i] + layout->tasks[i]);
        shape.nodes.push_back(std::move(node));
    }
    return shape;
}

// Drops the restored entries no recovered step re-marked whose job has
// ended (caller holds s.ctld.mu and slurmctld's job lock).
void sweep_restored(SwitchContext &s)
{
    s.ctld.sweep_pending = false;
    auto dropped = s.ctld.table.sweep([](uint32_t job_id, uint32_t) {
        job_record_t *job = find_job_record(job_id);
        return !job || IS_JOB_FINISHED(job);
    });
    for (const auto &d : dropped)
        s.log.info("context %u of step %s, from the state file, is free: its job has ended", d.first,
                   step_name(d.second.job_id, d.second.step_id).c_str());
}

} // namespace

// Held ids above a lowered storm_ctx_max stay until their steps end; the
// coscheduled partitions apply to new steps.
void reconfigure(SwitchContext &s, const agent::AgentConfig &config)
{
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    s.config.pool = config.pool;
    s.config.cosched = config.cosched;
    s.ctld.table.set_capacity(config.pool.context_max);
    s.ctld.addresses.clear();
}

void save_state(SwitchContext &s, const char *dir)
{
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    s.ctld.table.save(dir);
    s.log.verbose("saved %zu contexts in %s", s.ctld.table.size(), rdma::ContextTable::path_in(dir).c_str());
}

void restore_state(SwitchContext &s, const char *dir, bool recover)
{
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    uint32_t capacity = s.config.pool.context_max;
    s.ctld.table = rdma::ContextTable(capacity);
    if (!recover) // slurmctld -c: no job is recovered either
        return;
    std::string path = rdma::ContextTable::path_in(dir);
    try {
        s.ctld.table = rdma::ContextTable::load(dir, capacity);
    } catch (const rdma::StateError &e) {
        std::string bad = path + ".bad";
        bool kept = rename(path.c_str(), bad.c_str()) == 0;
        s.log.warning("%s; starting from the steps slurmctld recovers (each re-marks its context)%s%s",
                      e.what(), kept ? ", the file is kept as " : "", kept ? bad.c_str() : "");
    }
    s.ctld.sweep_pending = s.ctld.table.has_unconfirmed();
    s.log.verbose("restored %zu contexts from %s", s.ctld.table.size(), path.c_str());
}

void clear_state(SwitchContext &s)
{
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    s.ctld.table.clear();
    s.ctld.sweep_pending = false;
}

int build_jobinfo(SwitchContext &s, JobInfo *info, const slurm_step_layout_t *layout,
                  const step_record_t *step)
{
    uint32_t job_id = step->job_ptr->job_id, step_id = step->step_id.step_id;
    std::string name = step_name(job_id, step_id);
    if (!info)
        throw std::logic_error("no switch info allocated");
    if (!layout || !layout->task_cnt || !layout->tids || !layout->tasks) {
        s.log.verbose("step %s: no tasks in its layout, no communication context", name.c_str());
        return SLURM_SUCCESS;
    }
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    if (s.ctld.sweep_pending)
        sweep_restored(s);
    try {
        auto ctx = rdma::make_context(s.config.pool, step_shape(s, layout, step));
        auto id = s.ctld.table.allocate(job_id, step_id);
        if (!id)
            throw rdma::contexts_exhausted(s.ctld.table.capacity());
        ctx.id = *id;
        try {
            ctx.validate();
        } catch (...) {
            s.ctld.table.release(*id, job_id, step_id);
            throw;
        }
        info->ctx = std::move(ctx);
    } catch (const rdma::StepRefused &e) {
        if (e.busy() && !storm::slurm_api::kInterconnectBusyRetried)
            s.log.error(
                "step %s: all %u contexts are in use (storm_ctx_max): the step fails (Slurm %s has no "
                "error on which srun retries it)",
                name.c_str(), s.ctld.table.capacity(), storm::slurm_api::kLine);
        else
            s.log.error("step %s: %s", name.c_str(), e.what());
        return e.busy() ? storm::slurm_api::kInterconnectBusy : ESLURM_INTERCONNECT_FAILURE;
    } catch (const std::exception &e) {
        s.log.error("step %s: no communication context: %s", name.c_str(), e.what());
        return ESLURM_INTERCONNECT_FAILURE;
    }
    s.log.verbose("step %s: context %u (%s, n=%u, %u tasks on %u nodes%s)", name.c_str(), info->ctx->id,
                  rdma::mode_name(info->ctx->mode), info->ctx->divisions, info->ctx->ntasks,
                  static_cast<unsigned>(info->ctx->nodes.size()), info->ctx->cosched ? ", coscheduled" : "");
    return SLURM_SUCCESS;
}

// The step ended (or its record is freed, also after a refused build): its
// id is free again.
void release_step(SwitchContext &s, const JobInfo *info)
{
    if (!info || !info->ctx)
        return;
    const auto &c = *info->ctx;
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    if (s.ctld.table.release(c.id, c.job_id, c.step_id))
        s.log.verbose("step %s: context %u released", step_name(c.job_id, c.step_id).c_str(), c.id);
}

// A step recovered from slurmctld's job state: its id is held again.
void recover_step(SwitchContext &s, const JobInfo *info)
{
    if (!info || !info->ctx)
        return;
    const auto &c = *info->ctx;
    std::string name = step_name(c.job_id, c.step_id);
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    auto before = s.ctld.table.holder(c.id);
    using Mark = rdma::ContextTable::Mark;
    switch (s.ctld.table.mark(c.id, c.job_id, c.step_id)) {
    case Mark::added:
    case Mark::confirmed:
        s.log.verbose("step %s: context %u recovered", name.c_str(), c.id);
        break;
    case Mark::replaced:
        s.log.info("step %s: context %u recovered; the state file gave it to step %s", name.c_str(), c.id,
                   step_name(before->job_id, before->step_id).c_str());
        break;
    case Mark::conflict:
        s.log.error("step %s: context %u is also held by step %s (slurmctld's job state lists both): "
                    "it is free again once step %s ends",
                    name.c_str(), c.id, step_name(before->job_id, before->step_id).c_str(),
                    step_name(before->job_id, before->step_id).c_str());
        break;
    }
}

// The job ended: any id its steps still hold is free.
void release_job(SwitchContext &s, uint32_t job_id)
{
    std::lock_guard<std::mutex> lk(s.ctld.mu);
    for (uint32_t id : s.ctld.table.release_job(job_id))
        s.log.verbose("job %u ended: context %u released", job_id, id);
}

} // namespace storm::plugins::switch_rdma::slurmctld
