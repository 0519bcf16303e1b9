// sched/gang in slurmctld: Storm's fault detection (lib/prim/fault_monitor.hpp).
//
// A thread of its own ("storm-fault") runs an engine (a pure initiator, as
// the machine manager's) and the monitor on a libevent loop.  Every 500 ms
// it reads under slurmctld's node read lock which nodes Slurm has in
// service (slurm_adapter/node_fault.hpp) and beats those; a node the
// monitor reports (silent for storm_fault_timeout) is drained and set down
// under the locks of scontrol update, with the reason "storm: no heartbeat
// for N s", which requeues or fails its jobs as Slurm does for a node that
// stopped responding.  It is then out of service, so no longer beaten or
// reported, until an administrator resumes it.
//
// Locking: configure() only posts the timeout (sched_p_reconfig holds
// slurmctld's write locks: it must not wait for this thread); the
// destructor (fini(), without locks) joins it.
#include "plugins/sched_gang/parts.hpp"

#include <cstring>
#include <future>
#include <set>

#include <event2/event.h>

#include "agent/agent_config.hpp"
#include "lib/common/precise_base.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/common/timeval.hpp"
#include "lib/prim/fault_monitor.hpp"
#include "slurm_adapter/node_fault.hpp"
#include "slurm_adapter/slurm_nodes.hpp"

namespace storm::plugins::sched_gang {

namespace {
constexpr std::chrono::milliseconds kPoll{500};
} // namespace

FaultWatch::FaultWatch(const Logger &log) : log(log.child("fault")), engine_log(log) {}

FaultWatch::~FaultWatch()
{
    if (thread.joinable()) {
        quit = true;
        thread.join(); // the 500 ms timer sees quit
    }
    monitor.reset();
    engine.reset();
    auth.reset();
    if (poll_ev)
        event_free(poll_ev);
    if (base)
        event_base_free(base);
}

void FaultWatch::configure(std::chrono::milliseconds timeout)
{
    timeout_ms = timeout.count();
    if (thread.joinable() || timeout.count() == 0)
        return;
    if (!slurm_conf.switch_type || std::strcmp(slurm_conf.switch_type, "switch/rdma") != 0) {
        log.warning("SwitchType is not switch/rdma: no node agents to beat, fault detection is off");
        return;
    }
    start();
}

void FaultWatch::start()
{
    auto agent = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
    auto table = storm::shim::slurm_node_table();
    for (const auto &n : table)
        names.push_back(n.name);
    base = new_precise_base();
    if (!base)
        throw std::runtime_error("fault detection: event_base_new failed");
    prim::EngineConfig pc;
    pc.nodes = storm::shim::agent_addresses(table, agent.port);
    pc.fanout = agent.fanout;
    pc.timeout = std::chrono::milliseconds(1000);
    auth = storm::shim::daemon_authenticator();
    engine = std::make_unique<prim::Engine>(base, pc, *auth, engine_log);
    poll_ev = event_new(
        base, -1, EV_PERSIST, [](evutil_socket_t, short, void *a) { static_cast<FaultWatch *>(a)->poll(); },
        this);
    timeval tv = to_timeval(kPoll);
    if (!poll_ev || event_add(poll_ev, &tv) < 0)
        throw std::runtime_error("fault detection: cannot register its timer");
    std::promise<void> started;
    auto ready = started.get_future();
    thread = std::thread([this, &started] {
        name_thread("storm-fault");
        block_sigpipe();
        started.set_value();
        event_base_dispatch(base);
    });
    ready.wait();
}

// On the loop: the timeout as last configured, the nodes failed since the
// last poll taken out of service, then the nodes in service beaten.
void FaultWatch::poll() noexcept
{
    if (quit) {
        event_base_loopbreak(base);
        return;
    }
    try {
        std::chrono::milliseconds t(timeout_ms.load());
        if (t != current) {
            monitor.reset();
            failed.clear();
            current = t;
            if (t.count() == 0) {
                log.info("fault detection is off (storm_fault_timeout=0)");
                return;
            }
            auto fc = prim::FaultConfig::for_timeout(t);
            monitor = std::make_unique<prim::FaultMonitor>(*engine, base, fc, log);
            monitor->on_failed([this](uint32_t node, std::chrono::milliseconds silent) {
                failed.emplace_back(node, silent);
            });
            log.info("fault detection: a node whose agent answers no heartbeat for %s is drained and set "
                     "down (a heartbeat every %s, answers awaited %s)",
                     format_duration_us(static_cast<uint64_t>(t.count()) * 1000).c_str(),
                     format_duration_us(static_cast<uint64_t>(fc.interval.count()) * 1000).c_str(),
                     format_duration_us(static_cast<uint64_t>(fc.answer.count()) * 1000).c_str());
        }
        if (!monitor)
            return;
        take_out_of_service();
        std::set<uint32_t> up;
        slurmctld_lock_t lock = storm::shim::ctld_lock(NO_LOCK, READ_LOCK, NO_LOCK);
        lock_slurmctld(lock);
        for (uint32_t i = 0; i < names.size(); ++i)
            if (storm::shim::in_service(names[i]))
                up.insert(i);
        unlock_slurmctld(lock);
        monitor->watch(up);
    } catch (const std::exception &e) {
        log.error("%s", e.what());
    }
}

void FaultWatch::take_out_of_service()
{
    for (auto [node, silent] : std::exchange(failed, {})) {
        char reason[128];
        snprintf(reason, sizeof reason, "storm: no heartbeat for %.1f s", silent.count() / 1000.0);
        const std::string &name = names.at(node);
        slurmctld_lock_t lock = storm::shim::fault_lock();
        lock_slurmctld(lock);
        bool done = storm::shim::fail_node(name, reason);
        unlock_slurmctld(lock);
        if (done) {
            log.error("node %s: %s: drained and set down (its jobs requeued or failed)", name.c_str(),
                      reason);
            monitor->forget(node); // beaten afresh once an administrator resumes it
        } else {
            // Already out of service (Slurm's own doing, or gone): it
            // stays failed, never reported again while in service.
            log.info("node %s: %s; Slurm has it out of service already", name.c_str(), reason);
        }
    }
}

} // namespace storm::plugins::sched_gang
