// The node buffer pool's settings (SwitchParameters, with the agent's).
//
//   storm_pool_size=1048576   bytes of pinned shared memory per node: the
//                             "NIC buffer" every context's queues live in
//   storm_packet_size=4096    bytes per packet slot (header included)
//   storm_ctx_ports=40000     first TCP port of the contexts' tasks: context
//                             c's task of local index L listens on
//                             40000 + c*64 + L
//   storm_ctx_max=64          contexts alive at once in the cluster (ports
//                             storm_ctx_ports .. + storm_ctx_max*64 - 1)
//   storm_pool_mode=auto      auto: swapped in gang-scheduled partitions,
//                             divided elsewhere; divided: divided everywhere
//   storm_pool_swap=valid     at a switch, copy the valid packets only
//                             (valid) or the whole window (full)
//   storm_pool_halt_wait=10ms how long (at most half a quantum) a gang switch waits for the leaving
//                             context to halt (its in-flight packets to
//                             land); a halt that takes longer finishes later
//                             and the context swaps then
//
// Credits (FM's rule, seed 002 section 3.3), per task, for p tasks:
//   divided: the pool is split into n = the partition's MPL (OverSubscribe
//            FORCE:n or YES:n, 1 otherwise) shares, a context's share among its tasks
//            on the node; credits per sender = recv_slots / (n * p),
//            i.e. B_r / (n^2 p);
//   swapped: the running context's tasks share the whole pool; credits
//            per sender = recv_slots / p, i.e. B_r / p.
// A task's share is one quarter send queue, three quarters receive queue.
#pragma once

#include <cstdint>
#include <string>

#include "lib/common/params.hpp"
#include "switch_rdma/context.hpp"
#include "switch_rdma/layout.hpp"

namespace storm::rdma {

struct PoolConfig {
    uint64_t pool_size = 1 << 20;
    uint32_t packet_size = 4096;
    uint32_t port_base = 40000;
    uint32_t context_max = 64;
    bool force_divided = false;
    bool swap_full = false;
    uint64_t halt_wait_us = 10000;

    // Consumes the pool's keys from `p`; throws ConfigError on a bad value.
    void take(ParamList &p)
    {
        pool_size = p.take_uint("storm_pool_size", 64 * 1024, 1ull << 30, pool_size);
        packet_size = static_cast<uint32_t>(p.take_uint("storm_packet_size", 256, 65536, packet_size));
        context_max = static_cast<uint32_t>(p.take_uint("storm_ctx_max", 1, 1000, context_max));
        port_base = static_cast<uint32_t>(p.take_uint(
            "storm_ctx_ports", 1024, 65535 - uint64_t{context_max} * max_local_tasks + 1, port_base));
        std::string mode = p.take_choice("storm_pool_mode", {"auto", "divided"}, "auto");
        force_divided = mode == "divided";
        swap_full = p.take_choice("storm_pool_swap", {"valid", "full"}, "valid") == "full";
        halt_wait_us = p.take_duration_us("storm_pool_halt_wait", 0, 10000000, halt_wait_us);
    }
};

// One task's queues: slot counts and initial credits per sender.
struct TaskShare {
    uint64_t bytes = 0;      // the task's share of the pool
    uint32_t send_slots = 0; // packets
    uint32_t recv_slots = 0; // packets
    uint32_t credits = 0;    // per sender (FM's C0); 0: the pool is too small
};

// The share of one of `local_tasks` tasks of a context of `ntasks` tasks.
inline TaskShare task_share(const PoolConfig &c, PoolMode mode, uint32_t divisions, uint32_t local_tasks,
                            uint32_t ntasks)
{
    TaskShare s;
    uint64_t region = mode == PoolMode::divided ? c.pool_size / divisions : c.pool_size;
    s.bytes = region / (local_tasks ? local_tasks : 1);
    s.bytes -= s.bytes % 64; // shares stay cache-line aligned
    uint64_t slots = s.bytes > sizeof(QueueHeader) ? (s.bytes - sizeof(QueueHeader)) / c.packet_size : 0;
    if (slots < 2)
        return s;
    s.send_slots = static_cast<uint32_t>(slots / 4 ? slots / 4 : 1);
    s.recv_slots = static_cast<uint32_t>(slots - s.send_slots);
    uint64_t senders = uint64_t{ntasks ? ntasks : 1} * (mode == PoolMode::divided ? divisions : 1);
    s.credits = static_cast<uint32_t>(s.recv_slots / senders);
    return s;
}

// Why `share` (of one of `local_tasks` tasks of a context of `ntasks`)
// cannot communicate, or "" if it can: the reason tasks get at attach.
inline std::string no_credit_reason(const PoolConfig &c, PoolMode mode, uint32_t divisions,
                                    uint32_t local_tasks, uint32_t ntasks, const TaskShare &share)
{
    if (share.credits > 0)
        return "";
    std::string why = "the pool of " + std::to_string(c.pool_size) + " bytes leaves no credit for " +
                      std::to_string(ntasks) + " tasks (" + std::to_string(local_tasks) +
                      " on this node) in " + mode_name(mode) + " mode";
    if (mode == PoolMode::divided)
        why += " with n=" + std::to_string(divisions);
    why += ": raise storm_pool_size or lower the step's task count";
    if (mode == PoolMode::divided && divisions > 1)
        why += " or the partition's OverSubscribe=FORCE:" + std::to_string(divisions);
    return why;
}

} // namespace storm::rdma
