// A job step's communication context (switch/rdma).
//
// slurmctld allocates one per step (switch_p_build_jobinfo) and carries it
// in the step's switch info; slurmstepd opens it on the node agent before
// the tasks start and closes it when the step ends; each task receives it
// in its environment (STORM_CTX) and attaches to the node agent with it.
//
// Contract:
//  - `id` is unique among the live contexts of the cluster, in
//    [0, PoolConfig::context_max); it also fixes the tasks' TCP ports:
//    the task of local index L on a node listens on port_for(L).
//  - `nodes[i]` lists the step's i-th node: its IPv4 address and the global
//    ranks of its tasks (SLURM_NODEID i, SLURM_LOCALID = position in ranks).
//  - `key` is the context's secret: context_key_bytes random bytes slurmctld
//    draws when it makes the context (step_context.hpp, make_context), that
//    only the step's tasks learn (STORM_CTX, readable by their uid and
//    root); libstormmsg's tasks prove it to each other at every connection
//    (msg/handshake.hpp).  Empty in a context of format version 2 or 3
//    (made by an older slurmctld): such a context still opens on the node
//    agent, but libstormmsg refuses to connect its tasks.  Never log it.
//  - `cosched` is slurmctld's word that the step's job is in a partition of
//    storm_cosched_partitions (implicit coscheduling): the node agent lets
//    the job's tasks register with its local scheduler only while such a
//    context is open on the node (lib/node/admissions.hpp).
//  - encode() gives one line of printable ASCII (an environment value, and
//    the form packed into the switch info); decode() accepts exactly that
//    form, and versions 2's and 3's (keyless), and throws net::DecodeError
//    naming what is wrong otherwise (a context of another format version
//    included).  A keyless context encodes as version 3, so that it
//    decodes to itself.
//  - The text grows with the number of runs of nodes, not of nodes: nodes
//    of consecutive addresses whose ranks follow one pattern (block: node
//    j holds r0+jk..r0+jk+k-1; cyclic: j, j+N, ...) are written as one run,
//    so a step on thousands of nodes of one address range encodes in a
//    few dozen bytes (Slurm carries it to every node of the step, through
//    each hop of its launch tree).  In memory `nodes` lists every node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <netinet/in.h>
#include <string>
#include <string_view>
#include <vector>

namespace storm::rdma {

// The task environment variable that carries encode() (slurmstepd sets it
// in switch_p_job_attach).
constexpr const char *context_env = "STORM_CTX";

// Largest number of a context's tasks on one node (the port block per
// context).
constexpr uint32_t max_local_tasks = 64;

// The format version encode() writes (its first character); decode()
// reads it and versions 2 and 3.  2 added the coscheduling flag, 3 runs of
// nodes, 4 the key.
constexpr char context_format = '4';

// The length of a context's key (written as twice as many lowercase hex
// digits).
constexpr size_t context_key_bytes = 32;

enum class PoolMode : uint8_t {
    divided = 'd', // the node's pool is divided among `divisions` contexts
    swapped = 's', // the running context owns the whole pool, swapped at gang switches
};
const char *mode_name(PoolMode m) noexcept;

struct ContextNode {
    in_addr_t addr = 0;          // network byte order
    std::vector<uint32_t> ranks; // global ranks of this node's tasks, in local order
};

struct Context {
    uint32_t id = 0;
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    uint32_t uid = 0; // the job's owner: only its processes may attach
    std::string key;  // context_key_bytes secret bytes, or empty (version 2 or 3)
    PoolMode mode = PoolMode::divided;
    bool cosched = false;   // the job's partition is coscheduled (slurmctld decides)
    uint32_t divisions = 1; // n of FM's division (divided mode); 1 when swapped
    uint32_t port_base = 0; // storm_ctx_ports' first port
    uint32_t ntasks = 0;
    std::vector<ContextNode> nodes;

    uint16_t port_for(uint32_t local) const noexcept
    {
        return static_cast<uint16_t>(port_base + id * max_local_tasks + local);
    }
    // Node index and local index of `rank`; throws std::out_of_range.
    std::pair<uint32_t, uint32_t> locate(uint32_t rank) const;

    std::string encode() const;
    static Context decode(std::string_view text);
    // Consistency: every rank in [0, ntasks) exactly once, at most
    // max_local_tasks per node, ports in range.  Throws std::invalid_argument.
    void validate() const;
};

} // namespace storm::rdma
