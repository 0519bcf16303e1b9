#include "switch_rdma/step_context.hpp"

namespace storm::rdma {

PoolMode mode_for(const PoolConfig &pool, const StepShape &s) noexcept
{
    return s.gang && !pool.force_divided ? PoolMode::swapped : PoolMode::divided;
}

uint32_t divisions_for(const PoolConfig &pool, const StepShape &s) noexcept
{
    if (mode_for(pool, s) == PoolMode::swapped)
        return 1;
    return s.force_n ? s.force_n : 1;
}

Context make_context(const PoolConfig &pool, const StepShape &s)
{
    Context c;
    c.job_id = s.job_id;
    c.step_id = s.step_id;
    c.uid = s.uid;
    c.mode = mode_for(pool, s);
    c.divisions = divisions_for(pool, s);
    c.port_base = pool.port_base;
    c.ntasks = s.ntasks;
    c.nodes = s.nodes;
    uint32_t most = 0;
    size_t most_at = 0;
    for (size_t i = 0; i < c.nodes.size(); ++i)
        if (c.nodes[i].ranks.size() > most) {
            most = static_cast<uint32_t>(c.nodes[i].ranks.size());
            most_at = i;
        }
    std::string where = most_at < s.node_names.size() ? " on node " + s.node_names[most_at] : " on one node";
    if (most > max_local_tasks)
        throw StepRefused(std::to_string(most) + " tasks" + where + ", more than the " +
                              std::to_string(max_local_tasks) +
                              " a communication context allows per node: use fewer tasks per node",
                          false);
    TaskShare share = task_share(pool, c.mode, c.divisions, most, c.ntasks);
    if (share.credits == 0) {
        std::string why = "the pool of " + std::to_string(pool.pool_size) + " bytes leaves no credit for " +
                          std::to_string(c.ntasks) + " tasks (" + std::to_string(most) + where + ") in " +
                          mode_name(c.mode) + " mode";
        if (c.mode == PoolMode::divided)
            why += " with n=" + std::to_string(c.divisions);
        why += ": raise storm_pool_size or lower the step's task count";
        if (c.mode == PoolMode::divided && c.divisions > 1)
            why += " or the partition's OverSubscribe=FORCE:" + std::to_string(c.divisions);
        throw StepRefused(why, false);
    }
    c.validate();
    return c;
}

StepRefused contexts_exhausted(uint32_t context_max)
{
    return StepRefused("all " + std::to_string(context_max) +
                           " contexts are in use (storm_ctx_max): the step waits for one to end",
                       true);
}

} // namespace storm::rdma
