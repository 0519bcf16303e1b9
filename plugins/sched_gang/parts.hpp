// sched/gang's part, as its entry file (sched_gang.cpp) calls it: the
// machine manager (sched_gang/manager.hpp) inside slurmctld and the poller
// that feeds it slurmctld's jobs (slurmctld.cpp).  slurmctld is the only
// process that loads a sched plugin.
//
// Contract: one GangMachine per process, made by init() and destroyed by
// fini(), which stops the poller and the manager.  init() and reconfigure()
// run with slurmctld's configuration write lock held, and throw if the
// manager cannot start.
#pragma once

#include "slurm_adapter/shim.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sched_gang/config.hpp"
#include "sched_gang/manager.hpp"

struct event_base;
struct event;

namespace storm::prim {
class Engine;
class FaultMonitor;
} // namespace storm::prim
namespace storm::net {
class Authenticator;
}

namespace storm::plugins::sched_gang {

class GangMachine {
public:
    explicit GangMachine(const Logger &log);
    ~GangMachine();
    GangMachine(const GangMachine &) = delete;
    GangMachine &operator=(const GangMachine &) = delete;

    // At init(): the gang partitions; in slurmctld, the manager started if
    // there are any, else one line saying there is nothing to gang-schedule.
    void init(const gang::GangConfig &c);
    // New settings: the gang partitions, the manager's timing, or the
    // manager started if it was not and slurmctld now has gang partitions.
    void reconfigure(const gang::GangConfig &c);

private:
    void start_manager(const gang::GangConfig &c);
    void poll() noexcept;
    gang::Snapshot snapshot();
    void extend_end_times();

    Logger log;      // the plugin's, the manager's too
    Logger gang_log; // this part's own lines
    std::unique_ptr<gang::MachineManager> manager;
    std::map<std::string, uint32_t> index; // node name -> Storm's index
    std::vector<std::string> gang_parts;
    // Swapped communication contexts (switch_rdma, storm_pool_mode=auto):
    // the node's pool goes to one job at a time, so a job holds whole
    // nodes in the matrix, and two jobs of a node never share a slot.
    bool whole_nodes = false;
    std::mutex mu;
    std::condition_variable cv;
    bool quit = false;
    std::thread poller;
    // Stopped time not yet added to each job's end time (under a second).
    std::map<uint32_t, std::chrono::microseconds> carry;
};

// Storm's fault detection in slurmctld (fault.cpp): beats every node agent
// of the nodes Slurm has in service, and drains and sets down in Slurm
// those silent for storm_fault_timeout.  configure() may be called with
// slurmctld's locks held (init, reconfigure): it starts the thread the
// first time the timeout is not 0 and SwitchType is switch/rdma, and
// otherwise only posts the new timeout (0 stops the beats); it throws if
// the thread cannot start.  The destructor joins the thread: call it
// without slurmctld's locks (fini()).
class FaultWatch {
public:
    explicit FaultWatch(const Logger &log);
    ~FaultWatch();
    FaultWatch(const FaultWatch &) = delete;
    FaultWatch &operator=(const FaultWatch &) = delete;

    void configure(std::chrono::milliseconds timeout);

private:
    void start();
    void poll() noexcept;
    void take_out_of_service();

    Logger log;        // "sched/gang: fault: "
    Logger engine_log; // the plugin's
    std::atomic<int64_t> timeout_ms{0};
    std::atomic<bool> quit{false};
    std::thread thread;
    // On the loop thread.
    std::vector<std::string> names; // Storm's node table
    event_base *base = nullptr;
    event *poll_ev = nullptr;
    std::unique_ptr<net::Authenticator> auth;
    std::unique_ptr<prim::Engine> engine;
    std::unique_ptr<prim::FaultMonitor> monitor;
    std::chrono::milliseconds current{0};
    std::vector<std::pair<uint32_t, std::chrono::milliseconds>> failed;
};

} // namespace storm::plugins::sched_gang
