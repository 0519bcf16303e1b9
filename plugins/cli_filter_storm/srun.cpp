// cli_filter/storm in srun: `srun --bcast` sends the program through the
// node agents (launch_bcast/) while Slurm launches the step.
//  - pre_submit remembers srun's options (remember);
//  - post_submit, once the step exists and before srun sets it up (where
//    srun's own broadcast would run) and launches it: checks the program
//    (and its libraries with --send-libs, with the dlopen()ed ones that
//    STORM_BCAST_LIBS_FROM=FILE lists), gets the broadcast credential,
//    opens the broadcasts on every node and waits for that: a bad
//    destination, a full disk, a refused credential end srun there with the
//    reason (exit 1), and nothing is launched, as with srun's own
//    broadcast.  Then a thread streams the bytes and commits, while srun
//    passes the broadcasts' session ids to the step (SLURM_STORM_BCAST in
//    srun's environment, which srun merges into the step's:
//    launch_bcast/gate.hpp) and launches it at once: each node's slurmstepd
//    (switch/rdma) holds the tasks until the program is in place on every
//    node, or fails the step with the broadcast's error, which the thread
//    prints (start);
//  - a watcher thread cancels the broadcast when srun ends the step (a
//    signal) before the program is in place: its nodes then fail the tasks
//    instead of starting them.  Where the line's srun does not tell
//    (storm_srun_step_aborted() < 0), srun's exit cancels it;
//  - srun's exit (atexit) collects the threads; a failed broadcast makes
//    srun exit 1 (no task ran) (at_exit).
#include "plugins/cli_filter_storm/parts.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>

#include "launch_bcast/gate.hpp"
#include "launch_bcast/libraries.hpp"
#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "slurm_adapter/bcast_job.hpp"
#include "srun_command.hpp" // slurm_adapter/api<GEN>/

extern "C" {
#include "src/common/list.h"
#include "src/common/xstring.h"
}

namespace storm::plugins::cli_filter_storm {

// The broadcasts of this srun's step, opened on every node, streamed by
// `thread`; `watcher` cancels them when srun ends the step first.
struct SrunBroadcast::Run {
    std::unique_ptr<storm::net::Authenticator> auth;
    std::vector<std::unique_ptr<storm::bcast::Broadcast>> runs;
    std::string program, dest;
    uint32_t nodes = 0;
    storm::bcast::Codec codec = storm::bcast::Codec::none; // on the wire
    std::chrono::steady_clock::time_point start;
    std::thread thread, watcher;
    std::mutex mu; // runs, done, cancelled, error
    std::condition_variable cv;
    bool done = false;
    std::string cancelled; // why, once cancelled
    std::string error;
    double seconds = 0;

    // Any thread: the tasks would start once the program is in place, and
    // srun is ending the step (or exiting) before that.
    void cancel(const char *why)
    {
        std::lock_guard<std::mutex> l(mu);
        if (done || runs.empty())
            return;
        cancelled = why;
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
// gives up on (srun_job.c, _cancel_steps): else, with no slurmstepd to
// report it, it would hold its nodes until the job ends, and the next step
// would wait for them.  `nodes`: the step's node count.
void complete_step(uint32_t job_id, uint32_t step_id, uint32_t nodes)
{
    slurm_msg_t req;
    step_complete_msg_t msg;
    slurm_msg_t_init(&req);
    std::memset(&msg, 0, sizeof msg);
    msg.step_id.job_id = job_id;
    msg.step_id.step_id = step_id;
    msg.step_id.step_het_comp = NO_VAL;
    msg.range_first = 0;
    msg.range_last = nodes - 1;
    msg.step_rc = 1;
    req.msg_type = REQUEST_STEP_COMPLETE;
    req.data = &msg;
    int rc = 0;
    (void)slurm_send_recv_controller_rc_msg(&req, &rc, working_cluster_rec);
}

// With --send-libs: the file listing the program's dlopen()ed libraries
// (launch_bcast/libraries.hpp, as storm-bcast --libs-from=FILE), which
// srun has no option for.
constexpr const char *kLibsFromEnv = "STORM_BCAST_LIBS_FROM";

// How long srun's exit waits for a broadcast still running to end by itself.
constexpr std::chrono::seconds kExitGrace{5};

// srun's exit collects the broadcast (Slurm calls the plugin's fini() only
// in its memory-leak-debug builds).
SrunBroadcast *g_exiting = nullptr;

// A heterogeneous step: srun keeps one option set per component in its
// opt_list (exported by srun, looked up at run time: salloc and sbatch
// load the plugin too).
template <class R, class L> L list_param(R (*)(L));

bool heterogeneous_step(int components)
{
    if (components > 1)
        return true;
    // Slurm's list type: List up to 22.05, list_t * from 23.02.
    using SlurmList = decltype(list_param(&list_count));
    auto *list = static_cast<SlurmList *>(dlsym(RTLD_DEFAULT, "opt_list"));
    return list && *list && list_count(*list) > 1;
}

} // namespace

SrunBroadcast::SrunBroadcast(const Logger &log) : log_(log) {}

SrunBroadcast::~SrunBroadcast()
{
    if (g_exiting == this)
        g_exiting = nullptr;
    if (run_) {
        run_->cancel("srun ended before the program was in place: the broadcast was cancelled");
        collect();
    }
}

void SrunBroadcast::remember(slurm_opt_t *opt, int offset) noexcept
{
    if (offset == 0) {
        opt_ = opt;
        // Only a broadcast of this srun holds the step: not a value the
        // user's environment brought along (srun merges its environment
        // into the step's).
        unsetenv(storm::bcast::gate::env_name);
    }
    components_ = std::max(components_, offset + 1);
}

void SrunBroadcast::start(int offset, uint32_t job_id, uint32_t step_id) noexcept
{
    if (offset != 0 || !opt_ || !opt_->srun_opt || run_)
        return;
    // srun loads its cli_filter plugins before it applies -v, so init()'s
    // line stays hidden: say here, when -v is in force, who is there.
    log_.verbose("Storm %s (Slurm %s): step %u.%u created%s", STORM_VERSION, STORM_SLURM_VERSION, job_id,
                 step_id, opt_->srun_opt->bcast_flag ? ", srun --bcast" : "");
    if (!opt_->srun_opt->bcast_flag)
        return;
    if (!slurm_conf.switch_type || std::strcmp(slurm_conf.switch_type, "switch/rdma") != 0) {
        // No node agents to send through: srun's own broadcast does it.
        log_.verbose("SwitchType is %s, not switch/rdma: no Storm agents, srun broadcasts itself",
                     slurm_conf.switch_type ? slurm_conf.switch_type : "none");
        return;
    }
    if (heterogeneous_step(components_)) {
        // One environment for every component's step, and one session list
        // per variable: each component would wait for the others' sessions.
        log_.verbose("srun --bcast of a heterogeneous step: srun's own broadcast sends the program");
        return;
    }
    std::string program = "the program";
    try {
        if (slurm_api::srun_argc(opt_) > 0 && slurm_api::srun_argv(opt_) && slurm_api::srun_argv(opt_)[0])
            program = slurm_api::srun_argv(opt_)[0];
        begin(job_id, step_id);
    } catch (const std::exception &e) {
        // As srun's own broadcast fails (fatal); the step's nodes are free
        // at once, and srun's shepherd ends the allocation srun made, if
        // it made one, once srun is gone.
        std::string why = e.what();
        if (why.rfind("cannot broadcast ", 0) != 0)
            why = cannot_broadcast(program, why);
        log_.error("%s", why.c_str());
        if (step_nodes_)
            complete_step(job_id, step_id, step_nodes_);
        std::fflush(nullptr);
        std::exit(1);
    }
}

void SrunBroadcast::begin(uint32_t job_id, uint32_t step_id)
{
    slurm_opt_t *opt = opt_;
    srun_opt_t *sropt = opt->srun_opt;
    if (slurm_api::srun_argc(opt) == 0 || !slurm_api::srun_argv(opt) || !slurm_api::srun_argv(opt)[0])
        throw storm::bcast::BcastError("no command name to broadcast");
    char **argv = slurm_api::srun_argv(opt);
    std::string program = argv[0];
    std::string dest, destdir = storm::shim::bcast_dest_dir();
    if (sropt->bcast_file && sropt->bcast_file[0] == '/')
        dest = sropt->bcast_file;
    else if (!destdir.empty())
        dest = destdir + "/";
    else
        dest = std::string(opt->chdir ? opt->chdir : "/tmp") + "/";

    auto run = std::make_unique<Run>();
    run->program = program;
    run->dest = dest;
    auto target = storm::shim::bcast_target(job_id, step_id, NO_VAL);
    run->nodes = target.nodes;
    step_nodes_ = target.nodes;
    run->auth = storm::shim::daemon_authenticator();
    storm::bcast::ClientOptions o;
    storm::shim::aim(o, target);
    o.dest = dest;
    o.flags = storm::bcast::kForce | storm::bcast::kPreserve;
    // Any library srun names (lz4, its default; zlib where it has it) is
    // Storm's default, lz4.
    o.compress = sropt->compress && sropt->compress != COMPRESS_OFF ? storm::bcast::kDefaultCodec
                                                                    : storm::bcast::Codec::none;
    run->codec = o.compress;
    std::vector<std::pair<storm::bcast::ClientOptions, storm::bcast::Source>> plans;
    std::string libdir; // DEST_libs, when the libraries go there
    try {
        auto src = storm::bcast::scan(program);
        if (src.entries.front().dir())
            // Stock srun fails on it too ("Can't mmap file"): a directory
            // is no program to run.
            throw storm::bcast::BcastError(program +
                                           " is a directory: srun --bcast sends the program the step runs; "
                                           "send a directory with storm-bcast");
        plans.emplace_back(o, std::move(src));
        if (sropt->send_libs) {
            if (dest.back() == '/') {
                log_.warning("--send-libs needs --bcast=/absolute/path with Storm's broadcast: "
                             "libraries not sent");
            } else {
                // dlopen()ed libraries: srun has no option for them, the
                // environment names their list (storm-bcast --libs-from's)
                const char *list = getenv(kLibsFromEnv);
                auto libs =
                    storm::bcast::scan_libraries(program, storm::bcast::read_library_list(list ? list : ""),
                                                 sropt->bcast_exclude       ? sropt->bcast_exclude
                                                 : slurm_conf.bcast_exclude ? slurm_conf.bcast_exclude
                                                                            : "none");
                if (libs.entries.size() > 1) {
                    o.dest = dest + "_libs";
                    plans.emplace_back(o, std::move(libs));
                    libdir = o.dest;
                }
            }
        }
    } catch (const storm::bcast::BcastError &e) {
        throw storm::bcast::BcastError(cannot_broadcast(program, e.what()));
    }

    // Every node opened the destination, or this throws.  srun forked its
    // shepherd before post_submit, and the sockets close on exec: nothing
    // srun starts later keeps them open.
    run->start = std::chrono::steady_clock::now();
    std::vector<uint64_t> sids;
    try {
        for (auto &[po, src] : plans)
            run->runs.push_back(std::make_unique<storm::bcast::Broadcast>(*run->auth, po, std::move(src)));
        for (auto &r : run->runs)
            sids.push_back(r->open());
    } catch (const std::exception &e) {
        throw storm::bcast::BcastError(cannot_broadcast(program, e.what()));
    }
    log_.verbose("%s -> %s on %u nodes through Storm: opened in %.3f s, the launch goes on while it streams",
                 program.c_str(), dest.c_str(), run->nodes,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - run->start).count());

    // The step's tasks wait for these sessions (srun merges its environment
    // into the step's before the launch).
    if (setenv(storm::bcast::gate::env_name, storm::bcast::gate::format(sids).c_str(), 1) != 0)
        throw storm::bcast::BcastError(cannot_broadcast(program, "cannot set the step's environment"));
    // As slurmd does for srun's own --send-libs: the libraries' directory
    // first in the tasks' LD_LIBRARY_PATH.
    if (!libdir.empty()) {
        const char *was = getenv("LD_LIBRARY_PATH");
        std::string path = was && *was ? libdir + ":" + was : libdir;
        if (setenv("LD_LIBRARY_PATH", path.c_str(), 1) != 0)
            throw storm::bcast::BcastError(cannot_broadcast(program, "cannot set the step's environment"));
    }
    // As srun does after its own broadcast: run the copy.  srun's broadcast
    // is off: the file will be there before any task starts (the gate).
    xfree(argv[0]);
    argv[0] = xstrdup(dest.c_str());
    sropt->bcast_flag = false;

    run_ = std::move(run);
    Run *r = run_.get();
    r->thread = std::thread([this] { stream(); });
    r->watcher = std::thread([this] { watch(); });
    if (!g_exiting) {
        g_exiting = this;
        std::atexit([] {
            if (g_exiting)
                g_exiting->at_exit();
        });
    }
}

void SrunBroadcast::stream()
{
    storm::name_thread("storm-bcast");
    // srun's signal handling takes the signals.
    storm::block_all_signals();
    Run &r = *run_;
    std::string error;
    uint64_t wire = 0; // bytes sent, for the verbose line
    try {
        for (auto &b : r.runs) {
            b->finish();
            wire += b->wire_bytes();
        }
    } catch (const std::exception &e) {
        error = e.what();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
    std::vector<std::unique_ptr<storm::bcast::Broadcast>> closing;
    {
        std::lock_guard<std::mutex> l(r.mu);
        if (!error.empty() && !r.cancelled.empty())
            error = r.cancelled;
        r.error = error;
        r.seconds = seconds;
        r.done = true;
        closing.swap(r.runs);
    }
    r.cv.notify_all();
    closing.clear(); // connections closed here, on the thread that used them last
    if (error.empty() && r.codec != storm::bcast::Codec::none)
        log_.verbose("%s -> %s on %u nodes through Storm in %.3f s (%.1f MB sent, %s)", r.program.c_str(),
                     r.dest.c_str(), r.nodes, seconds, wire / 1e6, storm::bcast::codec_name(r.codec));
    else if (error.empty())
        log_.verbose("%s -> %s on %u nodes through Storm in %.3f s", r.program.c_str(), r.dest.c_str(),
                     r.nodes, seconds);
    else
        // The nodes' slurmstepd fail the tasks (srun prints a line per
        // node): say why.
        log_.error("%s", cannot_broadcast(r.program, error).c_str());
}

void SrunBroadcast::watch()
{
    storm::name_thread("storm-bcast-w");
    storm::block_all_signals();
    Run &r = *run_;
    for (;;) {
        int aborted = storm_srun_step_aborted();
        if (aborted < 0)
            return; // this line's srun does not tell: its exit cancels
        if (aborted > 0) {
            r.cancel("srun is ending the step (a signal): the broadcast was cancelled");
            return;
        }
        std::unique_lock<std::mutex> l(r.mu);
        if (r.cv.wait_for(l, std::chrono::milliseconds(50), [&] { return r.done; }))
            return;
    }
}

void SrunBroadcast::collect()
{
    if (run_->thread.joinable())
        run_->thread.join();
    if (run_->watcher.joinable())
        run_->watcher.join();
}

void SrunBroadcast::at_exit() noexcept
{
    if (!run_)
        return;
    // srun exits with the program still on its way.  Mostly the broadcast
    // failed and the nodes failed the tasks before its error reached this
    // srun (it comes after the chunks still queued towards the head): give
    // it time to say why.  Else srun gave up on the step: nobody wants the
    // program any more.
    {
        std::unique_lock<std::mutex> l(run_->mu);
        run_->cv.wait_for(l, kExitGrace, [&] { return run_->done; });
    }
    run_->cancel("srun ended before the program was in place: the broadcast was cancelled");
    collect();
    bool failed = !run_->error.empty();
    run_.reset();
    if (failed) {
        // No task ran; srun may still think the launch went well.
        std::fflush(nullptr);
        _exit(1);
    }
}

} // namespace storm::plugins::cli_filter_storm
