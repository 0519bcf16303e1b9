// switch/rdma in slurmd: the node agent (agent/).
//
// slurmd loads EVERY switch_*.so in PluginDir after daemonizing and after
// reading its configuration (so its node name and spool directory are
// known), and calls its init(); Slurm has no node-init hook, so init() is
// where the node agent starts: only when the process is slurmd and
// SwitchType=switch/rdma.  fini() stops it (destroying the
// NodeAgentRunner).  From 23.11 `scontrol reconfigure` makes slurmd exec a
// new slurmd, which loads the plugins while the old one and its agent still
// run (the old one exits once the new one is up, without calling fini()):
// the new slurmd's agent starts once the old slurmd has exited.
#include "plugins/switch_rdma/parts.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <unistd.h>
#include <vector>

#include "agent/step_listing.hpp"
#include "lib/common/files.hpp"
#include "lib/common/process_tree.hpp"
#include "lib/common/procs.hpp"
#include "slurm_adapter/sbcast_cred.hpp"
#include "slurm_adapter/slurm_nodes.hpp"
#include "lib/node/cosched_protocol.h"
#include "launch_bcast/gate.hpp"
#include "sched_gang/freezer.hpp"
#include "switch_rdma/control.hpp"

extern "C" {
#include "src/common/list.h"
#include "src/common/read_config.h"
#include "src/common/stepd_api.h"
}

namespace storm::plugins::switch_rdma {

namespace {

// The steps (not batch, extern or interactive) running on this node, as
// slurmstepd's sockets in the spool directory show them.  Runs on the
// listing's caller's thread (the gang scanner, coscheduling's worker).
std::vector<storm::agent::StepListing::Step> running_steps(const std::string &spool, const std::string &node)
{
    auto *steps = stepd_available(spool.c_str(), node.c_str());
    if (!steps)
        throw std::runtime_error("cannot list the steps in " + spool);
    std::vector<storm::agent::StepListing::Step> out;
    auto *it = list_iterator_create(steps);
    while (auto *loc = static_cast<step_loc_t *>(list_next(it)))
        if (loc->step_id.step_id <= SLURM_MAX_NORMAL_STEP_ID)
            out.push_back({loc->step_id.job_id, loc->step_id.step_id, loc->step_id.step_het_comp});
    list_iterator_destroy(it);
    FREE_NULL_LIST(steps);
    return out;
}

// At most this many processes of one step on one node are found through
// the process tree (beyond, slurmstepd lists its container).
constexpr size_t kTreeLimit = 65536;

// The processes of one step, kernel threads left out; nullopt if the step
// just ended.
//  - None, without listing, until slurmstepd has forked every task of the
//    step on this node: a listing that finds a task held before its
//    siblings are forked would settle the step (step_listing.hpp) with
//    them left out.
//  - Where the container listing reads the whole host's /proc
//    (`tree`: proctrack/pgid, whose container is a process group), the
//    tasks slurmstepd reports and their descendants, from the kernel's
//    children files (lib/common/process_tree.hpp): a read per process of
//    the step instead of one of every process on the host, which on 1000
//    virtual nodes sharing one /proc made every launch cost N² reads.  A
//    process whose parent exited before it was found (handed to init) is
//    not found this way.
//  - Otherwise, and where the kernel has no children files or the tree
//    passes kTreeLimit, slurmstepd lists its container (proctrack/cgroup:
//    the cgroup's processes).  A step without tasks (extern) is listed.
std::optional<std::vector<pid_t>> list_step(const std::string &spool, const std::string &node, bool tree,
                                            const storm::agent::StepListing::Step &s)
{
    slurm_step_id_t id{};
    id.job_id = s.job;
    id.step_id = s.step;
    id.step_het_comp = s.het;
    uint16_t proto = 0;
    int fd = stepd_connect(spool.c_str(), node.c_str(), &id, &proto);
    if (fd < 0)
        return std::nullopt;
    slurmstepd_task_info_t *tasks = nullptr;
    uint32_t ntasks = 0;
    bool told = stepd_task_info(fd, proto, &tasks, &ntasks) == SLURM_SUCCESS && ntasks > 0;
    bool forked = true;
    std::vector<pid_t> roots;
    for (uint32_t i = 0; told && i < ntasks; ++i) {
        if (tasks[i].pid > 1 && !tasks[i].exited)
            roots.push_back(tasks[i].pid);
        forked = forked && (tasks[i].pid > 0 || tasks[i].exited);
    }
    xfree(tasks);
    if (told && !forked) {
        close(fd);
        return std::vector<pid_t>{};
    }
    if (told && tree) {
        auto found = storm::process_tree(roots, kTreeLimit);
        if (found && !found->truncated) {
            close(fd);
            return std::move(found->pids);
        }
    }
    uint32_t *pids = nullptr, count = 0;
    std::optional<std::vector<pid_t>> out;
    if (stepd_list_pids(fd, proto, &pids, &count) == SLURM_SUCCESS) {
        out.emplace();
        for (uint32_t i = 0; i < count; ++i)
            if (pids[i] > 1 && !storm::kernel_thread(static_cast<pid_t>(pids[i])))
                out->push_back(static_cast<pid_t>(pids[i]));
    }
    xfree(pids);
    close(fd);
    return out;
}

// Whether process `pid` runs (not a zombie).
bool process_runs(pid_t pid)
{
    char buf[512];
    const char *f = storm::stat_fields("/proc/" + std::to_string(pid) + "/stat", buf);
    return f && f[0] != 'Z' && f[0] != 'X';
}

// In the new slurmd of a reconfigure: the old slurmd, still running (its
// pid from slurmd's pid file, which the new one writes only later), or 0.
pid_t old_slurmd()
{
    const char *env = storm::slurm_api::kSlurmdReconfigureEnv;
    if (!env || !getenv(env))
        return 0;
    std::string file = slurmd_pid_file();
    if (file.empty())
        return 0;
    long pid = std::strtol(storm::read_file(file).value_or("0").c_str(), nullptr, 10);
    if (pid <= 1 || pid == getpid() || !process_runs(static_cast<pid_t>(pid)))
        return 0;
    return static_cast<pid_t>(pid);
}

} // namespace

namespace slurmd {

NodeAgentRunner::NodeAgentRunner(const agent::AgentConfig &config, const Logger &log)
{
    pid_t old = old_slurmd();
    if (!old) {
        agent_ = start_node_agent(config, log);
        return;
    }
    log.info("slurmd reconfigured: the node agent starts once the old slurmd (pid %d) has exited",
             static_cast<int>(old));
    waiter_ = std::thread([this, config, log, old] {
        using namespace std::chrono;
        while (!stop_ && process_runs(old))
            std::this_thread::sleep_for(milliseconds(20));
        // Its sockets may take a moment to go: a few tries.
        for (auto deadline = steady_clock::now() + seconds(30); !stop_;) {
            try {
                agent_ = start_node_agent(config, log);
                return;
            } catch (const std::exception &e) {
                if (steady_clock::now() >= deadline) {
                    log.error("node agent: not started after the reconfigure: %s", e.what());
                    return;
                }
            }
            std::this_thread::sleep_for(milliseconds(500));
        }
    });
}

// The waiting thread first (it may be starting the agent), then the agent.
NodeAgentRunner::~NodeAgentRunner()
{
    stop_ = true;
    if (waiter_.joinable())
        waiter_.join();
}

// The node agent on the agents' network as slurmd sees it: Slurm's node
// table with the agent port, this node's index, munge with SlurmUser's and
// SlurmdUser's uids; without a network (its loop only) if this node is not
// in the table.  Started; throws if it cannot start.
std::unique_ptr<agent::NodeAgent> start_node_agent(const agent::AgentConfig &config, const Logger &log)
{
    auto agent_network = [&]() -> std::optional<storm::agent::AgentNetwork> {
        auto table = storm::shim::slurm_node_table();
        std::string me = slurmd_node_name();
        storm::agent::AgentNetwork net;
        net.self = UINT32_MAX;
        net.nodes = storm::shim::agent_addresses(table, config.port);
        for (size_t i = 0; i < table.size(); ++i) {
            net.names.push_back(table[i].name);
            if (table[i].name == me)
                net.self = static_cast<uint32_t>(i);
        }
        if (net.self == UINT32_MAX) {
            log.error("node %s is not in slurm.conf's node table: the primitives are off on this node",
                      me.c_str());
            return std::nullopt;
        }
        net.auth = storm::shim::daemon_authenticator();
        std::string spool = slurmd_spool_dir();
        net.trusted = {0, slurm_conf.slurmd_user_id};
        net.hello_timeout = std::chrono::seconds(std::max<unsigned>(10, slurm_conf.msg_timeout));
        bool tree =
            slurm_conf.proctrack_type && std::strcmp(slurm_conf.proctrack_type, "proctrack/pgid") == 0;
        auto listing = std::make_shared<storm::agent::StepListing>(
            [spool, me] { return running_steps(spool, me); },
            [spool, me, tree](const storm::agent::StepListing::Step &s) {
                return list_step(spool, me, tree, s);
            });
        net.step_lister = [listing](const std::set<uint32_t> &jobs, const storm::node::HeldTest &held) {
            return (*listing)(jobs, held);
        };
        // Broadcasts: Slurm's sbcast credential (signed by SlurmUser, or
        // root), open ones journaled in slurmd's spool directory.
        storm::bcast::NodeSetup bcast;
        bcast.authorizer = std::make_unique<storm::shim::SbcastAuthorizer>(
            storm::net::MungeAuth::socket_from_authinfo(slurm_conf.authinfo),
            std::vector<uid_t>{slurm_conf.slurm_user_id, 0}, table);
        bcast.journal_dir = spool + "/storm-bcast";
        bcast.gate_socket = spool + "/" + storm::bcast::gate::socket_name;
        net.bcast = std::move(bcast);
        storm::gang::NodeSetup gang;
        gang.journal_dir = gang_journal_dir();
        gang.freeze_group =
            storm::gang::freeze_group_name(me); // the virtual nodes of a host share its cgroups
        net.gang = gang;
        storm::rdma::NodeSetup pool;
        pool.socket_path = spool + "/" + storm::rdma::control::socket_name;
        pool.stats_path = spool + "/storm-pool.stats";
        net.pool = pool;
        storm::cosched::NodeSetup cosched;
        cosched.socket_path = spool + "/" STORM_COSCHED_SOCKET_NAME;
        cosched.group = "storm-cosched-" + me; // the virtual nodes of a host share its cgroups
        net.cosched = cosched;
        return net;
    };
    auto agent = std::make_unique<storm::agent::NodeAgent>(config, log, agent_network());
    agent->start();
    return agent;
}

} // namespace slurmd

} // namespace storm::plugins::switch_rdma
