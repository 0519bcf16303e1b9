// launch/bcast in srun: `srun --bcast` sends the program through the node
// agents (launch_bcast/) while Slurm launches the step.
//  - create_job_step, once the step exists, checks the program (and its
//    libraries with --send-libs) and gets the broadcast credential (plan);
//  - step_launch opens the broadcasts on every node and waits for that: a
//    bad destination, a full disk, a refused credential end the step there
//    with the reason, and nothing is launched.  Then a thread streams the
//    bytes and commits, while step_launch passes the broadcasts' session
//    ids to the step (SLURM_STORM_BCAST, launch_bcast/gate.hpp) and
//    launches it through launch/slurm at once: each node's slurmstepd
//    (switch/rdma) holds the tasks until the program is in place on every
//    node, or fails the step with the broadcast's error, which srun then
//    prints once it collected the thread (launch);
//  - fwd_signal: srun ending the step cancels a broadcast still under way
//    (its nodes then fail the tasks instead of starting them) (cancel_all).
#include "plugins/launch_bcast/parts.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include "launch_bcast/gate.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "slurm_adapter/bcast_job.hpp"

namespace storm::plugins::launch_bcast {

// The broadcasts of one step's srun --bcast, opened on every node and
// streamed by `thread` while the step launches.
struct StepBroadcasts::Step {
    std::unique_ptr<storm::net::Authenticator> auth;
    // What to send (the program, then its libraries), checked when the
    // step was created, and the broadcasts once step_launch opened them.
    std::vector<std::pair<storm::bcast::ClientOptions, storm::bcast::Source>> plans;
    std::vector<std::unique_ptr<storm::bcast::Broadcast>> runs;
    std::vector<uint64_t> sids;
    std::string program, dest;
    uint32_t nodes = 0;
    std::chrono::steady_clock::time_point start;
    std::thread thread;
    std::string error; // the thread's, read after join
    double seconds = 0;
    std::mutex mu; // runs: stream() clears it, cancel() reads it
    bool cancelled = false;

    void stream()
    {
        try {
            for (auto &r : runs)
                r->finish();
        } catch (const std::exception &e) {
            std::lock_guard<std::mutex> l(mu);
            error = cancelled ? "srun is ending the step (a signal): the broadcast was cancelled" : e.what();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard<std::mutex> l(mu);
        runs.clear(); // connections closed here, on the thread that used them last
    }
    // From srun's signal thread: the tasks would start once the program is
    // in place, and srun is ending the step before that.
    void cancel()
    {
        std::lock_guard<std::mutex> l(mu);
        cancelled = !runs.empty();
        for (auto &r : runs)
            r->cancel();
    }
};

namespace {

// What srun says when the program cannot be broadcast: nothing is launched.
std::string cannot_broadcast(const std::string &program, const std::string &why)
{
    return "cannot broadcast " + program + ": " + why + "\nStep launch aborted.";
}

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

StepBroadcasts::StepBroadcasts(const Logger &log) : log_(log) {}

StepBroadcasts::~StepBroadcasts()
{
    // srun ended before launching a step whose broadcast runs: wait for it
    // (a thread must not outlive the plugin).
    for (auto &[job, b] : steps_)
        if (b->thread.joinable())
            b->thread.join();
}

StepBroadcasts::Step *StepBroadcasts::find(const srun_job_t *job)
{
    std::lock_guard<std::mutex> l(mu_);
    auto it = steps_.find(job);
    return it == steps_.end() ? nullptr : it->second.get();
}

void StepBroadcasts::erase(const srun_job_t *job)
{
    std::lock_guard<std::mutex> l(mu_);
    steps_.erase(job);
}

int StepBroadcasts::plan(srun_job_t *job, slurm_opt_t *opt_local) noexcept
{
    srun_opt_t *sropt = opt_local->srun_opt;
    if (!slurm_conf.switch_type || std::strcmp(slurm_conf.switch_type, "switch/rdma") != 0) {
        // No node agents to send through: srun's own broadcast does it.
        log_.verbose("SwitchType is %s, not switch/rdma: no Storm agents, srun broadcasts itself",
                     slurm_conf.switch_type ? slurm_conf.switch_type : "none");
        return SLURM_SUCCESS;
    }
    return storm::shim::guarded(log_, "srun --bcast", [&] {
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
            auto b = std::make_unique<Step>();
            b->program = program;
            b->dest = dest;
            auto target = storm::shim::bcast_target(job->step_id.job_id, job->step_id.step_id, het_offset);
            b->nodes = target.nodes;
            b->auth = storm::shim::daemon_authenticator();
            storm::bcast::ClientOptions o;
            storm::shim::aim(o, target);
            o.dest = dest;
            o.flags = storm::bcast::kForce | storm::bcast::kPreserve;
            o.compress = sropt->compress && sropt->compress != COMPRESS_OFF;
            auto src = storm::bcast::scan(program);
            if (src.entries.front().dir)
                throw storm::bcast::BcastError(program + " is a directory");
            try {
                b->plans.emplace_back(o, std::move(src));
                if (sropt->send_libs) {
                    if (dest.back() == '/') {
                        log_.warning("--send-libs needs --bcast=/absolute/path with launch/bcast: "
                                     "libraries not sent");
                    } else {
                        auto libs = storm::shim::shared_libraries(
                            program, sropt->bcast_exclude       ? sropt->bcast_exclude
                                     : slurm_conf.bcast_exclude ? slurm_conf.bcast_exclude
                                                                : "none");
                        if (!libs.empty()) {
                            o.dest = dest + "_libs";
                            b->plans.emplace_back(o, storm::bcast::scan_files(libs));
                        }
                    }
                }
            } catch (const storm::bcast::BcastError &e) {
                throw storm::bcast::BcastError(cannot_broadcast(program, e.what()));
            }
            {
                std::lock_guard<std::mutex> l(mu_);
                steps_[job] = std::move(b);
            }
            // As srun does after its own broadcast: run the copy.  srun's
            // broadcast is off: the file will be there before any task
            // starts (launch() and the launch gate).
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

int StepBroadcasts::launch(srun_job_t *job, uint32_t *global_rc, const std::function<int()> &slurm_launch)
{
    Step *b = find(job);
    if (b) {
        // Connections to the agents open here, not when the step was
        // created: srun forks its shepherd in between, which would keep
        // them open (and the head waiting) after srun closed them.
        try {
            b->start = std::chrono::steady_clock::now();
            for (auto &[o, src] : b->plans)
                b->runs.push_back(std::make_unique<storm::bcast::Broadcast>(*b->auth, o, std::move(src)));
            b->plans.clear();
            // Every node opened the destination, or this throws.
            for (auto &r : b->runs)
                b->sids.push_back(r->open());
        } catch (const std::exception &e) {
            log_.error("srun --bcast: %s", cannot_broadcast(b->program, e.what()).c_str());
            b->runs.clear();
            erase(job);
            complete_step(job);
            if (global_rc && *global_rc == 0)
                *global_rc = 1;
            return SLURM_ERROR;
        }
        log_.verbose("%s -> %s on %u nodes through Storm: opened in %.3f s, the launch goes on "
                     "while it streams",
                     b->program.c_str(), b->dest.c_str(), b->nodes,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - b->start).count());
        b->thread = std::thread([b] {
            storm::name_thread("storm-bcast");
            // srun's signal thread takes the signals (and cancels us).
            storm::block_all_signals();
            b->stream();
        });
    }
    // Only the broadcasts of this srun hold the step: not a value the
    // user's environment brought along.
    if (b)
        env_array_overwrite(&job->env, storm::bcast::gate::env_name,
                            storm::bcast::gate::format(b->sids).c_str());
    else
        unsetenvp(job->env, storm::bcast::gate::env_name);
    // srun loads its launcher before it applies -v, so init()'s line stays
    // hidden: say at launch, when -v is in force, who launches the step.
    log_.verbose("Storm %s (Slurm %s): launching %u tasks through launch/slurm", STORM_VERSION,
                 STORM_SLURM_VERSION, job->ntasks);
    int rc = slurm_launch();
    if (!b)
        return rc;
    // The nodes started the tasks once the broadcasts ended: the thread is
    // done, or about to be.
    b->thread.join();
    struct Erase {
        StepBroadcasts &all;
        const srun_job_t *job;
        ~Erase() { all.erase(job); }
    } erase_step{*this, job};
    if (b->error.empty()) {
        log_.verbose("%s -> %s on %u nodes through Storm in %.3f s", b->program.c_str(), b->dest.c_str(),
                     b->nodes, b->seconds);
    } else {
        // The nodes' slurmstepd failed the tasks (launch/slurm printed a
        // line per task, and still returns success): say why, and exit 1.
        log_.error("%s", cannot_broadcast(b->program, b->error).c_str());
        if (global_rc && *global_rc == 0)
            *global_rc = 1;
    }
    return rc;
}

void StepBroadcasts::cancel_all()
{
    std::lock_guard<std::mutex> l(mu_);
    for (auto &[job, b] : steps_)
        b->cancel();
}

} // namespace storm::plugins::launch_bcast
