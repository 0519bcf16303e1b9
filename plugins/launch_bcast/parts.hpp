// launch/bcast's parts, as its entry file (launch_bcast.cpp) calls them:
// launch/slurm's entry points, which every launch_p_* forwards to, and
// srun --bcast's broadcasts (srun.cpp), the plugin's own work.  srun is
// the only process that loads a launch plugin.
//
// Contract: one StepBroadcasts per srun, made by init() and destroyed by
// fini() (after joining any broadcast still streaming).  plan() and
// launch() return Slurm codes and log their failures.
#pragma once

#include "slurm_adapter/shim.hpp"

// src/srun/libsrun/opt.h declares "extern enum modes mode;", which only C
// accepts for an enum it never defines; C++ needs an opaque declaration.
enum modes : int;
extern "C" {
#include "src/srun/libsrun/launch.h"
#include "src/srun/libsrun/multi_prog.h"
}
#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace storm::plugins::launch_bcast {

// Must match plugin_ops_t and syms[] in src/srun/libsrun/launch.c.
inline const char *launch_syms[] = {
    "launch_p_setup_srun_opt",  "launch_p_handle_multi_prog_verify",
    "launch_p_create_job_step", "launch_p_step_launch",
    "launch_p_step_wait",       "launch_p_step_terminate",
    "launch_p_print_status",    "launch_p_fwd_signal",
};
struct LaunchOps {
    int (*setup_srun_opt)(char **rest, slurm_opt_t *opt_local);
    int (*handle_multi_prog)(int command_pos, slurm_opt_t *opt_local);
    int (*create_job_step)(srun_job_t *job, bool use_all_cpus, void (*signal_function)(int),
                           sig_atomic_t *destroy_job, slurm_opt_t *opt_local);
    int (*step_launch)(srun_job_t *job, slurm_step_io_fds_t *cio_fds, uint32_t *global_rc,
                       slurm_step_launch_callbacks_t *step_callbacks, slurm_opt_t *opt_local);
    int (*step_wait)(srun_job_t *job, bool got_alloc, slurm_opt_t *opt_local);
    int (*step_terminate)(void);
    void (*print_status)(void);
    void (*fwd_signal)(int signal);
};

// The broadcasts of srun --bcast, by step: het job components launch from
// threads of their own.  A step's entry lives from plan() until launch()
// collected its thread.
class StepBroadcasts {
public:
    explicit StepBroadcasts(const Logger &log);
    ~StepBroadcasts(); // joins the threads of steps srun never launched
    StepBroadcasts(const StepBroadcasts &) = delete;
    StepBroadcasts &operator=(const StepBroadcasts &) = delete;

    // Once launch/slurm created the step srun --bcast asked for (sropt's
    // bcast_flag): checks the program (and its libraries with --send-libs),
    // gets the broadcast credential, and points srun at the copy.  A
    // failure ends the step.
    int plan(srun_job_t *job, slurm_opt_t *opt_local) noexcept;
    // Launches the step with `slurm_launch` (launch/slurm's step_launch),
    // with the step's broadcasts opened before and streaming meanwhile.
    int launch(srun_job_t *job, uint32_t *global_rc, const std::function<int()> &slurm_launch);
    // srun ends the steps (a signal): cancels the broadcasts under way.
    void cancel_all();

private:
    struct Step;
    Step *find(const srun_job_t *job);
    void erase(const srun_job_t *job);

    Logger log_;
    std::mutex mu_;
    std::map<const srun_job_t *, std::unique_ptr<Step>> steps_;
};

} // namespace storm::plugins::launch_bcast
