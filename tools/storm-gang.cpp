// storm-gang: what Storm's gang scheduling is doing.
//
//   storm-gang [status]          the machine manager's view: quantum, MPL,
//                                the matrix (slots x jobs, alternative
//                                jobs, idle cells), current slot, strobe
//                                rate and round trip, isolated nodes
//   storm-gang nodes [-n NODES]  each node agent's view: strobes applied,
//                                stale ones ignored, fail-safe releases,
//                                jobs held and stopped, jobs switched with
//                                the cgroup v2 freezer, strobes that lent
//                                the node (a slot with nothing to run
//                                there left the running jobs on), and the delivery
//                                delay from a strobe's issue to the node's
//                                switch (p50, p99, max of its last 4096
//                                strobes within 30 s)
//
// `status` reads the file slurmctld's sched/gang rewrites every second in
// StateSaveLocation (storm-gang.status); run it on the controller's host.
// `nodes` asks every node agent with COMPARE-AND-WRITE (no other channel
// exists or is needed: each value is found by bisection on "var >= x",
// 64 values at a time), so it must run as SlurmUser or root.
// Exit: 0, 1 gang scheduling is not running or nodes did not answer,
// 2 usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <event2/event.h>

#include "agent/agent_config.hpp"
#include "lib/common/signals.hpp"
#include "lib/net/munge_auth.hpp"
#include "lib/prim/engine.hpp"
#include "slurm_adapter/slurm_nodes.hpp"
#include "tools/gang_args.hpp"

extern "C" {
#include "src/common/read_config.h"
}

using namespace storm;
using namespace std::chrono;

namespace {

[[noreturn]] void usage(const char *why)
{
    std::fprintf(stderr,
                 "storm-gang: %s\n"
                 "usage: storm-gang [status]\n"
                 "       storm-gang nodes [-n NODES]   (NODES: names like vn[1-8], or all)\n",
                 why);
    std::exit(2);
}

int status()
{
    if (!slurm_conf.state_save_location)
        usage("slurm.conf has no StateSaveLocation");
    std::string path = std::string(slurm_conf.state_save_location) + "/storm-gang.status";
    std::ifstream in(path);
    if (!in) {
        std::fprintf(
            stderr,
            "storm-gang: %s: %s: gang scheduling is not running here (SchedulerType=sched/gang with a "
            "partition OverSubscribe=FORCE:N, N >= 2, on this controller host?)\n",
            path.c_str(), std::strerror(errno));
        return 1;
    }
    struct stat st;
    double age = stat(path.c_str(), &st) == 0 ? difftime(time(nullptr), st.st_mtime) : 0;
    std::string line;
    while (std::getline(in, line))
        std::printf("%s\n", line.c_str());
    if (age > 5) {
        std::printf("stale: the status is %.0f s old: slurmctld is not updating it (stopped or hung?)\n",
                    age);
        return 1;
    }
    return 0;
}

// One value on one node, found by bisection with COMPARE-AND-WRITE.
struct Probe {
    uint32_t node;
    std::string var;
    int64_t lo = 0;  // var >= lo holds
    int64_t hi = -1; // var >= hi does not (-1: unknown yet)
    bool done = false, failed = false;
};

const char *kVars[] = {"gang:strobes",      "gang:ignored",     "gang:failsafes", "gang:jobs",
                       "gang:stopped",      "gang:frozen_jobs", "gang:lent",      "gang:delay_p50_us",
                       "gang:delay_p99_us", "gang:delay_max_us"};
constexpr size_t kNVars = sizeof kVars / sizeof *kVars;

void step(prim::Engine &e, const std::shared_ptr<Probe> &p, int &outstanding)
{
    int64_t x = p->hi < 0 ? std::max<int64_t>(1, p->lo * 2) : p->lo + (p->hi - p->lo) / 2;
    if (p->hi >= 0 && p->hi - p->lo <= 1) {
        p->done = true;
        --outstanding;
        return;
    }
    e.compare_and_write(
        net::RangeSet::single(p->node), p->var, prim::Relation::ge, x, std::nullopt,
        [&e, p, x, &outstanding](const prim::CawResult &r) {
            if (!r.ok) {
                p->failed = p->done = true;
                --outstanding;
                return;
            }
            if (r.holds)
                p->lo = x;
            else
                p->hi = x;
            if (p->hi < 0 && p->lo >= (int64_t(1) << 50))
                p->hi = p->lo + 1;
            step(e, p, outstanding);
        },
        2000ms);
}

int nodes(const tools::GangArgs &args)
{
    std::vector<shim::SlurmNode> table;
    agent::AgentConfig acfg;
    try {
        table = shim::slurm_node_table();
        acfg = agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
    } catch (const std::exception &e) {
        usage(e.what());
    }
    std::vector<uint32_t> pick;
    if (!args.nodes_ok) {
        usage("bad arguments to nodes");
    } else if (!args.all) {
        for (const auto &name : shim::expand_hostlist(args.pick.c_str())) {
            auto it = std::find_if(table.begin(), table.end(), [&](auto &n) { return n.name == name; });
            if (it == table.end())
                usage(("no node " + name + " in slurm.conf").c_str());
            pick.push_back(static_cast<uint32_t>(it - table.begin()));
        }
    } else {
        for (uint32_t i = 0; i < table.size(); ++i)
            pick.push_back(i);
    }
    prim::EngineConfig ec;
    ec.nodes = shim::agent_addresses(table, acfg.port);
    ec.fanout = acfg.fanout;
    event_base *base = event_base_new();
    auto auth = shim::daemon_authenticator();
    auto engine = std::make_unique<prim::Engine>(base, ec, *auth, Logger("storm-gang"));
    std::vector<std::shared_ptr<Probe>> probes;
    int outstanding = 0;
    for (uint32_t n : pick)
        for (const char *v : kVars) {
            probes.push_back(std::make_shared<Probe>(Probe{n, v}));
            ++outstanding;
        }
    // At most 64 probes at a time, so that asking does not hold up strobes.
    size_t next = 0;
    int total = outstanding;
    auto started = [&] { return static_cast<int>(next) - (total - outstanding); };
    if (!engine->run_until(
            [&] {
                while (next < probes.size() && started() < 64)
                    step(*engine, probes[next++], outstanding);
                return outstanding == 0;
            },
            120s)) {
        std::fprintf(stderr, "storm-gang: the node agents did not answer within 120 s\n");
        return 1;
    }
    std::printf("%-12s %8s %8s %9s %5s %7s %6s %8s %10s %10s %10s\n", "node", "strobes", "ignored",
                "failsafes", "jobs", "stopped", "frozen", "lent", "delay_p50", "delay_p99", "delay_max");
    int rc = 0;
    std::vector<int64_t> p50s, p99s;
    for (size_t k = 0; k < pick.size(); ++k) {
        const auto *row = &probes[k * kNVars];
        const std::string &name = table[pick[k]].name;
        if (std::any_of(row, row + kNVars, [](auto &p) { return p->failed; })) {
            std::printf("%-12s no answer (node agent down, or not SwitchType=switch/rdma)\n", name.c_str());
            rc = 1;
            continue;
        }
        auto v = [&](size_t i) { return static_cast<long long>(row[i]->lo); };
        std::printf("%-12s %8lld %8lld %9lld %5lld %7lld %6lld %8lld %8lldus %8lldus %8lldus\n", name.c_str(),
                    v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9));
        if (v(0) > 0) {
            p50s.push_back(v(7));
            p99s.push_back(v(8));
        }
    }
    if (!p50s.empty()) {
        std::sort(p50s.begin(), p50s.end());
        std::printf("delivery over %zu nodes: median of p50 %lld us, worst p99 %lld us\n", p50s.size(),
                    static_cast<long long>(p50s[p50s.size() / 2]),
                    static_cast<long long>(*std::max_element(p99s.begin(), p99s.end())));
    }
    engine.reset();
    event_base_free(base);
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    block_sigpipe();
    tools::GangArgs args = tools::parse_gang_args(argc, argv);
    if (args.command == tools::GangArgs::Command::help)
        usage("gang scheduling's matrix and the nodes' view");
    if (slurm_conf_init(nullptr) != SLURM_SUCCESS)
        usage("cannot read slurm.conf (set SLURM_CONF)");
    if (args.command == tools::GangArgs::Command::status)
        return status();
    if (args.command == tools::GangArgs::Command::nodes)
        return nodes(args);
    usage(("unknown command " + args.word).c_str());
}
