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

} // namespace storm::plugins::sched_gang
