// switch/rdma in slurmstepd (the configured one), for each step: its
// context on the node agent, the launch gate, the gang fail-safes.
//
// job_init (root, before the tasks start) opens the step's context on the
// node agent (control::open on <SlurmdSpoolDir>/storm-pool.sock; a failure
// fails the step), which admits a coscheduled one's job to the local
// scheduler; job_attach (in each task) sets STORM_CTX and
// STORM_POOL_SOCKET, and STORM_COSCHED_SOCKET in a coscheduled step (in the
// others, on a node that coschedules, STORM_COSCHED_REFUSED with why);
// postfini (root, after every process of the step is gone) closes it (a
// failure is only logged).  Before that, job_init holds a step that srun
// --bcast launched through cli_filter/storm (SLURM_STORM_BCAST in its
// environment) until the node agent says the broadcasts ended on this node
// (launch_bcast/gate.hpp), or fails it with their error; job_attach keeps
// the variable out of the tasks' environment.  Steps whose jobinfo has no
// context (batch, extern, interactive, no tasks) get neither.
//
// Where this node's agent switches gang-scheduled jobs, a guard
// (step_guard.hpp) continues the step if the agent dies and stays away, but
// not the SIGSTOP of a step Slurm suspended (scontrol suspend): where Slurm
// has the suspend hooks (22.05), they flag the step and mark it so that the
// agent's fail-safes leave it stopped too; from 23.11, which has none, a
// thread follows slurmstepd's own record of the suspend and does the same
// (watch_suspend).
#include "plugins/switch_rdma/parts.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <set>
#include <sys/stat.h>

#include "lib/common/cgroupfs.hpp"
#include "lib/common/files.hpp"
#include "lib/common/procs.hpp"
#include "lib/node/cosched_protocol.h"
#include "launch_bcast/gate.hpp"
#include "sched_gang/freezer.hpp"
#include "switch_rdma/control.hpp"

extern "C" {
#include "src/common/env.h"
}

namespace storm::plugins::switch_rdma::slurmstepd {

namespace {

// How long job_init asks an unreachable node agent again.
constexpr std::chrono::seconds kAgentStartWait{3};

std::string pool_socket() { return slurmd_spool_dir() + "/" + storm::rdma::control::socket_name; }

// gang_journal_dir() where this node's agent switches jobs (it made the
// directory), else "".
std::string gang_dir_here()
{
    std::string dir = gang_journal_dir();
    struct stat st;
    return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? dir : "";
}

// srun --bcast through cli_filter/storm: the tasks wait until the program is in
// place on this node (every node confirmed every byte).  The step fails
// with the broadcast's error instead.
int hold_for_broadcasts(SwitchContext &s, stepd_step_rec_t *job)
{
    const char *text = getenvp(job->env, storm::bcast::gate::env_name);
    if (!text)
        return SLURM_SUCCESS;
    std::string name = step_name(job->step_id.job_id, job->step_id.step_id);
    try {
        auto sids = storm::bcast::gate::parse(text);
        storm::bcast::gate::wait(slurmd_spool_dir() + "/" + storm::bcast::gate::socket_name,
                                 job->step_id.job_id, job->step_id.step_id, sids);
        s.log.verbose("step %s: broadcast %s in place, tasks start", name.c_str(), text);
        return SLURM_SUCCESS;
    } catch (const storm::net::UnixUnreachable &e) {
        s.log.error("step %s: no launch gate on this node, so no task waits for the broadcast of its "
                    "program: not started (%s)",
                    name.c_str(), e.what());
    } catch (const std::invalid_argument &e) {
        s.log.error("step %s: %s=\"%s\": %s: not started", name.c_str(), storm::bcast::gate::env_name, text,
                    e.what());
    } catch (const std::exception &e) {
        s.log.error("step %s: its program is not in place on this node: %s", name.c_str(), e.what());
    }
    return SLURM_ERROR;
}

// Whether Slurm suspended the step: flagged by the suspend hooks where
// Slurm has them (22.05), else slurmstepd's own record of it (set before
// the step's SIGTSTP and SIGSTOP, cleared before its SIGCONT).
bool suspended_by_slurm(SwitchContext &s)
{
    return s.stepd.slurm_suspended ||
           (!storm::slurm_api::kSwitchSuspendHooks && storm::slurm_api::step_suspended());
}

// The step's processes that a dead gang agent left stopped, continued:
// its job's freezer group (freezer.hpp) thawed, and, unless
// Slurm suspended the step, each process stopped by a signal sent SIGCONT.
// How many processes were in a thawed group or continued.  On the guard's
// thread.
size_t continue_step(SwitchContext &s, stepd_step_rec_t *job)
{
    if (!job->cont_id)
        return 0; // no container yet (proctrack/pgid would list the kernel's threads)
    bool slurm_suspended = suspended_by_slurm(s);
    pid_t *pids = nullptr;
    int n = 0;
    if (proctrack_g_get_pids(job->cont_id, &pids, &n) != SLURM_SUCCESS)
        return 0;
    std::string root = storm::cgroupfs::find_mount("/proc/self/mountinfo", "cgroup2", "");
    std::string group = "/" + storm::gang::freeze_group_name(slurmd_node_name()) + "/" +
                        storm::gang::job_group_name(job->step_id.job_id);
    std::set<std::string> thawed;
    size_t count = 0;
    for (int i = 0; i < n; ++i) {
        pid_t pid = pids[i];
        if (pid <= 1 || storm::kernel_thread(pid))
            continue;
        bool continued = false;
        std::string cg = root.empty() ? "" : storm::cgroupfs::cgroup_of("/proc", pid, "");
        if (cg.size() >= group.size() && cg.compare(cg.size() - group.size(), group.size(), group) == 0) {
            std::string freeze = root + cg + "/cgroup.freeze";
            if (!thawed.count(cg) && storm::read_file(freeze).value_or("").rfind("1", 0) == 0 &&
                storm::cgroupfs::write_text(freeze, "0"))
                thawed.insert(cg);
            continued = thawed.count(cg) > 0;
        }
        char buf[512];
        const char *f = storm::stat_fields("/proc/" + std::to_string(pid) + "/stat", buf);
        if (f && f[0] == 'T' && !slurm_suspended && kill(pid, SIGCONT) == 0)
            continued = true;
        count += continued;
    }
    xfree(pids);
    return count;
}

// Where this node's agent switches gang-scheduled jobs: the step's guard
// (step_guard.hpp) watches it.
void guard_step(SwitchContext &s, stepd_step_rec_t *job)
{
    if (job->batch || job->step_id.step_id == SLURM_EXTERN_CONT ||
        job->step_id.step_id == SLURM_BATCH_SCRIPT || job->step_id.step_id == SLURM_INTERACTIVE_STEP)
        return; // the agent switches the other steps only
    std::string dir = gang_dir_here();
    if (dir.empty())
        return; // no gang scheduling on this node
    s.stepd.guard = std::make_unique<storm::gang::StepGuard>(
        storm::gang::StepGuardConfig{dir, job->step_id.job_id,
                                     step_name(job->step_id.job_id, job->step_id.step_id)},
        [&s, job] { return continue_step(s, job); }, s.log);
}

// Marks (or unmarks) the step as suspended by Slurm for the node agent's
// fail-safes (step_guard.hpp), where the agent switches jobs.  A failure
// is logged: the agent then treats the step as any other.
void mark_suspended(SwitchContext &s, slurm_step_id_t id, bool on)
{
    if (on == s.stepd.marked)
        return;
    std::string dir = gang_dir_here();
    if (dir.empty())
        return; // no gang scheduling on this node
    s.stepd.marked = on;
    if (!storm::gang::mark_suspended(dir, id.job_id, id.step_id, on))
        s.gang_log.error("step %s: cannot mark it suspended by Slurm in %s: %s: a node agent started "
                         "meanwhile may continue it",
                         step_name(id.job_id, id.step_id).c_str(), dir.c_str(), std::strerror(errno));
}

// Where Slurm has no suspend hooks (from 23.11), where this node's agent
// switches jobs: a thread follows slurmstepd's own record of a Slurm
// suspend every 20 ms and flags and marks the step as the hooks did (the
// mark lands within 20 ms of Slurm's SIGTSTP, well before its SIGSTOP,
// which follows after suspend_grace_time, 2 s by default).  Joined by
// postfini (or fini).
void watch_suspend(SwitchContext &s, stepd_step_rec_t *job)
{
    if (storm::slurm_api::kSwitchSuspendHooks || job->batch || job->step_id.step_id == SLURM_EXTERN_CONT ||
        job->step_id.step_id == SLURM_BATCH_SCRIPT || job->step_id.step_id == SLURM_INTERACTIVE_STEP ||
        gang_dir_here().empty() || s.stepd.watch.thread.joinable())
        return;
    slurm_step_id_t id = job->step_id;
    s.stepd.watch.thread = std::thread([&s, id] {
        while (!s.stepd.watch.stop) {
            bool on = storm::slurm_api::step_suspended();
            if (on != s.stepd.slurm_suspended) {
                if (on)
                    s.stepd.slurm_suspended = true;
                mark_suspended(s, id, on);
                if (!on)
                    s.stepd.slurm_suspended = false;
                s.gang_log.verbose("step %s: %s by Slurm", step_name(id.job_id, id.step_id).c_str(),
                                   on ? "suspended" : "resumed");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
}

} // namespace

// Opens the step's context on the node agent, then holds the step until
// srun --bcast's broadcasts ended here.  In that order, so that the opening
// overlaps the transfer instead of following it; if the hold fails,
// job_postfini (which slurmstepd calls after a failed job_init too) closes
// the context.
int job_init(SwitchContext &s, stepd_step_rec_t *job, const JobInfo *info)
{
    storm::shim::guarded(s.log, "job_init: the step's gang fail-safe", [&] {
        guard_step(s, job);
        watch_suspend(s, job);
        return SLURM_SUCCESS;
    });
    if (!info || !info->ctx)
        return hold_for_broadcasts(s, job);
    const auto &ctx = *info->ctx;
    std::string name = step_name(ctx.job_id, ctx.step_id);
    // The agent may be starting: slurmd serves a launch that waited in its
    // listen queue while a reconfigured slurmd took over, a moment before
    // its agent starts (slurmd.cpp).  So an unreachable agent is asked
    // again for up to kAgentStartWait.
    for (auto deadline = std::chrono::steady_clock::now() + kAgentStartWait;;) {
        try {
            storm::rdma::control::request(pool_socket(), storm::rdma::control::open(ctx));
            break;
        } catch (const storm::rdma::control::AgentUnreachable &e) {
            if (std::chrono::steady_clock::now() >= deadline) {
                s.log.error("step %s: node agent: not running on this node (%s)", name.c_str(), e.what());
                return SLURM_ERROR;
            }
        } catch (const std::exception &e) {
            s.log.error("step %s: node agent: %s", name.c_str(), e.what());
            return SLURM_ERROR;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    s.stepd.opened = ctx;
    s.log.verbose("step %s: context %u open on the node agent", name.c_str(), ctx.id);
    return hold_for_broadcasts(s, job);
}

// In each task, as its user, before exec: the context and the agent's
// socket in the task's environment.
int attach(SwitchContext &s, const JobInfo *info, char ***env)
{
    // Whatever the task's user passed on: only slurmstepd says.  The launch
    // gate's variable was for this slurmstepd alone: an srun in a task must
    // not inherit it.
    unsetenvp(*env, storm::bcast::gate::env_name);
    unsetenvp(*env, STORM_COSCHED_SOCKET_ENV);
    unsetenvp(*env, STORM_COSCHED_REFUSED_ENV);
    if (!info || !info->ctx)
        return SLURM_SUCCESS;
    const auto &ctx = *info->ctx;
    // Implicit coscheduling: where the local scheduler listens, for the
    // PMPI library (spank/storm's --storm-cosched) or libstormmsg, in the
    // steps slurmctld marked coscheduled only (the agent admits their jobs,
    // whose contexts job_init opened).  The others' tasks do not try, and
    // learn why.
    if (ctx.cosched) {
        std::string cosched = slurmd_spool_dir() + "/" STORM_COSCHED_SOCKET_NAME;
        if (!env_array_overwrite(env, STORM_COSCHED_SOCKET_ENV, cosched.c_str()))
            throw std::runtime_error("cannot set " STORM_COSCHED_SOCKET_ENV " in the task's environment");
    } else if (s.config.cosched.enabled()) {
        // The partition's name is the task's environment's: for the
        // message only.
        const char *part = getenvp(*env, "SLURM_JOB_PARTITION");
        std::string why =
            part && !s.config.cosched.covers(part)
                ? "job " + std::to_string(ctx.job_id) + "'s partition \"" + part + "\" is not coscheduled"
                : "slurmctld did not mark step " + step_name(ctx.job_id, ctx.step_id) +
                      " coscheduled (its storm_cosched_partitions do not list the job's partition)";
        if (!env_array_overwrite(env, STORM_COSCHED_REFUSED_ENV, why.c_str()))
            throw std::runtime_error("cannot set " STORM_COSCHED_REFUSED_ENV " in the task's environment");
    }
    std::string text = ctx.encode(), socket = pool_socket();
    if (!env_array_overwrite(env, storm::rdma::context_env, text.c_str()) ||
        !env_array_overwrite(env, storm::rdma::control::socket_env, socket.c_str()))
        throw std::runtime_error("cannot set STORM_CTX and STORM_POOL_SOCKET in the task's environment");
    return SLURM_SUCCESS;
}

// After every process of the step is killed (also when job_init failed):
// closes the context job_init opened.  A failure is only logged.
int postfini(SwitchContext &s, stepd_step_rec_t *job)
{
    s.stepd.guard.reset(); // every process is gone: nothing left to continue
    s.stepd.watch.join();
    mark_suspended(s, job->step_id, false);
    if (!s.stepd.opened)
        return SLURM_SUCCESS;
    storm::rdma::Context ctx = std::move(*s.stepd.opened);
    s.stepd.opened.reset();
    std::string name = step_name(ctx.job_id, ctx.step_id);
    try {
        storm::rdma::control::request(pool_socket(),
                                      storm::rdma::control::close(ctx.id, ctx.job_id, ctx.step_id));
        s.log.verbose("step %s: context %u closed", name.c_str(), ctx.id);
    } catch (const std::exception &e) {
        s.log.error("step %s: node agent: closing context %u: %s", name.c_str(), ctx.id, e.what());
    }
    return SLURM_SUCCESS;
}

// The gang fail-safes leave a step Slurm suspended stopped: the step's own
// (the flag) and the node agent's (the step's mark, step_guard.hpp), until
// Slurm resumes it.
void pre_suspend(SwitchContext &s, stepd_step_rec_t *job)
{
    s.stepd.slurm_suspended = true;
    mark_suspended(s, job->step_id, true);
}

void post_resume(SwitchContext &s, stepd_step_rec_t *job)
{
    mark_suspended(s, job->step_id, false);
    s.stepd.slurm_suspended = false;
}

} // namespace storm::plugins::switch_rdma::slurmstepd
