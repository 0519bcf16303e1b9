// launch/bcast: srun's step launcher with Storm's broadcast in front.
//
// Slurm-facing shim, loaded by srun only (LaunchType=launch/bcast).  It
// wraps launch/slurm, loaded through Slurm's plugin loader, and forwards
// every launch_p_* call to it.  The broadcast of `srun --bcast` files
// through the node agents (launch_bcast/) will run in step_launch, before
// the tasks start.
//
// srun prints info() lines on the user's terminal, so the "loaded" line is
// logged at verbose level: `srun -v` shows it.
//
// launch/slurm relies on srun's MPIR process table, which srun allocates
// only for a LaunchType containing "slurm"; step_launch allocates it.
#include "plugins/common/shim.hpp"

// src/srun/libsrun/opt.h declares "extern enum modes mode;", which only C
// accepts for an enum it never defines; C++ needs an opaque declaration.
enum modes : int;
extern "C" {
#include "src/srun/libsrun/launch.h"
#include "src/srun/libsrun/multi_prog.h"
}
#include <chrono>
#include <cstring>

#include "plugins/common/bcast_job.hpp"

STORM_PLUGIN_IDENTITY("Storm broadcast launcher (wraps launch/slurm)", "launch/bcast")

namespace {

// Must match plugin_ops_t and syms[] in src/srun/libsrun/launch.c.
const char *launch_syms[] = {
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

struct LaunchContext {
    storm::Logger log{"launch/bcast"};
    storm::shim::WrappedPlugin<LaunchOps> slurm_launch{"launch", "launch/slurm", launch_syms,
                                                       sizeof(launch_syms)};
};

LaunchContext *g_ctx = nullptr;

// Ends a step whose tasks will not be launched, as srun does for steps it
// gives up on (src/srun/libsrun/srun_job.c, _cancel_steps): else it would
// hold its resources and the next step would wait for them.
void complete_step(const srun_job_t *job)
{
    slurm_msg_t req;
    step_complete_msg_t msg;
    slurm_msg_t_init(&req);
    std::memset(&msg, 0, sizeof msg);
    std::memcpy(&msg.step_id, &job->step_id, sizeof msg.step_id);
    msg.range_first = 0;
    msg.range_last = job->nhosts ? job->nhosts - 1 : 0;
    msg.step_rc = 1;
    req.msg_type = REQUEST_STEP_COMPLETE;
    req.data = &msg;
    int rc = 0;
    (void)slurm_send_recv_controller_rc_msg(&req, &rc, working_cluster_rec);
}

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "launch/bcast", [] {
        auto ctx = std::make_unique<LaunchContext>();
        storm::shim::log_loaded(ctx->log, running_in_daemon(),
                                "Storm %s loaded (Slurm %s); wrapping launch/slurm", STORM_VERSION,
                                STORM_SLURM_VERSION);
        return ctx;
    });
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

int launch_p_setup_srun_opt(char **rest, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().setup_srun_opt(rest, opt_local);
}
int launch_p_handle_multi_prog_verify(int command_pos, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().handle_multi_prog(command_pos, opt_local);
}
int launch_p_create_job_step(srun_job_t *job, bool use_all_cpus, void (*signal_function)(int),
                             sig_atomic_t *destroy_job, slurm_opt_t *opt_local)
{
    int rc =
        g_ctx->slurm_launch.ops().create_job_step(job, use_all_cpus, signal_function, destroy_job, opt_local);
    srun_opt_t *sropt = opt_local ? opt_local->srun_opt : nullptr;
    if (rc != SLURM_SUCCESS || !job || !sropt || !sropt->bcast_flag)
        return rc;
    if (!slurm_conf.switch_type || std::strcmp(slurm_conf.switch_type, "switch/rdma") != 0) {
        // No node agents to send through: srun's own broadcast does it.
        g_ctx->log.verbose("SwitchType is %s, not switch/rdma: no Storm agents, srun broadcasts itself",
                           slurm_conf.switch_type ? slurm_conf.switch_type : "none");
        return rc;
    }
    return storm::shim::guarded(g_ctx->log, "srun --bcast", [&] {
        try {
            if (sropt->argc == 0 || !sropt->argv || !sropt->argv[0])
                throw storm::bcast::BcastError("no command name to broadcast");
            std::string dest, destdir = storm::shim::bcast_dest_dir();
            if (sropt->bcast_file && sropt->bcast_file[0] == '/') {
                dest = sropt->bcast_file;
            } else if (!destdir.empty()) {
                dest = destdir + "/";
            } else {
                dest = std::string(opt_local->chdir ? opt_local->chdir : "/tmp") + "/";
            }
            std::string program = sropt->argv[0];
            uint32_t het_offset = NO_VAL;
            if (sropt->het_grp_bits)
                het_offset = static_cast<uint32_t>(bit_ffs(sropt->het_grp_bits));
            auto t0 = std::chrono::steady_clock::now();
            auto target = storm::shim::bcast_target(job->step_id.job_id, job->step_id.step_id, het_offset);
            auto auth = storm::shim::daemon_authenticator();
            storm::bcast::ClientOptions o;
            storm::shim::aim(o, target);
            o.dest = dest;
            o.flags = storm::bcast::kForce | storm::bcast::kPreserve;
            o.compress = sropt->compress && sropt->compress != COMPRESS_OFF;
            auto src = storm::bcast::scan(program);
            if (src.entries.front().dir)
                throw storm::bcast::BcastError(program + " is a directory");
            try {
                storm::bcast::broadcast(*auth, o, src);
                if (sropt->send_libs) {
                    if (dest.back() == '/') {
                        g_ctx->log.error("--send-libs needs --bcast=/absolute/path with launch/bcast: "
                                         "libraries not sent");
                    } else {
                        auto libs = storm::shim::shared_libraries(
                            program, sropt->bcast_exclude       ? sropt->bcast_exclude
                                     : slurm_conf.bcast_exclude ? slurm_conf.bcast_exclude
                                                                : "none");
                        if (!libs.empty()) {
                            o.dest = dest + "_libs";
                            storm::bcast::broadcast(*auth, o, storm::bcast::scan_files(libs));
                        }
                    }
                }
            } catch (const storm::bcast::BcastError &e) {
                throw storm::bcast::BcastError("cannot broadcast " + program + ": " + e.what() +
                                               "\nStep launch aborted.");
            }
            g_ctx->log.verbose("%s -> %s on %u nodes through Storm in %.3f s", program.c_str(), dest.c_str(),
                               target.nodes,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            // As srun does after its own broadcast: run the copy.  srun's
            // broadcast is off: the file is there.
            xfree(sropt->argv[0]);
            sropt->argv[0] = xstrdup(dest.c_str());
            sropt->bcast_flag = false;
            return SLURM_SUCCESS;
        } catch (...) {
            complete_step(job);
            throw;
        }
    });
}
int launch_p_step_launch(srun_job_t *job, slurm_step_io_fds_t *cio_fds, uint32_t *global_rc,
                         slurm_step_launch_callbacks_t *step_callbacks, slurm_opt_t *opt_local)
{
    // srun sets up the MPIR process table only when LaunchType contains
    // "slurm" (src/srun/srun.c), and launch/slurm writes every started task
    // into it: do what srun does for launch/slurm.  srun frees it
    // (mpir_cleanup) whatever the launcher.
    if (!MPIR_proctable)
        mpir_init(job->ntasks);
    // srun loads its launcher before it applies -v, so init()'s line stays
    // hidden: say at launch, when -v is in force, who launches the step.
    g_ctx->log.verbose("Storm %s (Slurm %s): launching %u tasks through launch/slurm", STORM_VERSION,
                       STORM_SLURM_VERSION, job->ntasks);
    return g_ctx->slurm_launch.ops().step_launch(job, cio_fds, global_rc, step_callbacks, opt_local);
}
int launch_p_step_wait(srun_job_t *job, bool got_alloc, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().step_wait(job, got_alloc, opt_local);
}
int launch_p_step_terminate(void) { return g_ctx->slurm_launch.ops().step_terminate(); }
void launch_p_print_status(void) { g_ctx->slurm_launch.ops().print_status(); }
void launch_p_fwd_signal(int signal) { g_ctx->slurm_launch.ops().fwd_signal(signal); }

} // extern "C"
