#include "switch_rdma/step_context.hpp"

#include <cerrno>
#include <sys/random.h>
#include <system_error>

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
    c.cosched = s.cosched;
    c.divisions = divisions_for(pool, s);
    c.port_base = pool.port_base;
    c.ntasks = s.ntasks;
    c.nodes = s.nodes;
    c.key = context_key();
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
    // A pool that leaves these tasks no credit does not refuse the step
    // (most steps never use their context): the tasks that call
    // storm_msg_init() get the reason (pool.hpp, no_credit_reason()).
    c.validate();
    return c;
}

std::string context_key()
{
    std::string key(context_key_bytes, '\0');
    for (size_t got = 0; got < key.size();) {
        ssize_t n = getrandom(&key[got], key.size() - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::system_error(errno, std::generic_category(), "getrandom (the context's key)");
        got += static_cast<size_t>(n);
    }
    return key;
}

StepRefused contexts_exhausted(uint32_t context_max)
{
    return StepRefused("all " + std::to_string(context_max) +
                           " contexts are in use (storm_ctx_max): the step waits for one to end",
                       true);
}

} // namespace storm::rdma
