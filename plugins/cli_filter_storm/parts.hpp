// cli_filter/storm's parts, as its entry file (cli_filter_storm.cpp) calls
// them: srun --bcast's broadcast through Storm (srun.cpp).  Slurm loads
// cli_filter plugins into srun, salloc and sbatch; only srun has work here.
//
// Contract: one SrunBroadcast per process, made by init() and destroyed by
// fini() (Slurm calls it only in its memory-leak-debug builds: srun's exit
// collects the broadcast instead, see srun.cpp).  remember() and start()
// never throw; start() ends srun (exit 1) when the program cannot be
// broadcast, as srun's own broadcast does.
#pragma once

#include "slurm_adapter/shim.hpp"

extern "C" {
#include "src/common/slurm_opt.h"
}

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launch_bcast/client.hpp"

namespace storm::plugins::cli_filter_storm {

class SrunBroadcast {
public:
    explicit SrunBroadcast(const Logger &log);
    ~SrunBroadcast(); // cancels and collects a broadcast still running
    SrunBroadcast(const SrunBroadcast &) = delete;
    SrunBroadcast &operator=(const SrunBroadcast &) = delete;

    // pre_submit: srun's options of het component `offset` (srun_opt set:
    // srun only), before srun verifies them and requests the step.
    void remember(slurm_opt_t *opt, int offset) noexcept;
    // post_submit: the step exists (job and step id).  With srun --bcast
    // (bcast_flag) and switch/rdma: opens the broadcast of the program (and
    // its libraries with --send-libs) on every node, hands its session ids
    // to the step (SLURM_STORM_BCAST, launch_bcast/gate.hpp), points srun
    // at the copy, turns srun's own broadcast off, and streams the bytes
    // from a thread while srun launches the step.
    void start(int offset, uint32_t job_id, uint32_t step_id) noexcept;
    // srun exits: cancels a broadcast still under way, collects it, says
    // how it ended; exit status 1 if it failed (no task ran).
    void at_exit() noexcept;

private:
    struct Run;
    void begin(uint32_t job_id, uint32_t step_id);
    void stream(); // on the thread
    void watch();  // on the watcher thread: srun ending the step
    void collect();

    Logger log_;
    slurm_opt_t *opt_ = nullptr; // srun's options (component 0)
    int components_ = 0;         // pre_submit calls: het components
    uint32_t step_nodes_ = 0;    // the step's nodes, once known
    std::unique_ptr<Run> run_;
};

} // namespace storm::plugins::cli_filter_storm
