// storm-bcast: broadcast files into a job's nodes through Storm's node
// agents -- the sbcast of a Storm cluster, for batch scripts and
// allocations.
//
//   storm-bcast [OPTIONS] SOURCE DEST
//
// SOURCE is a file or a directory (sent with everything under it).  DEST
// is the path on every node; a relative one is taken from BcastParameters'
// DestDir, else the current directory (as sbcast does).  Every node holds
// the complete copy under DEST, owned by the job's user with SOURCE's mode,
// or none does: the command says which node failed and why, and exits 1.
// Exit: 0 success, 1 failure, 2 usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <unistd.h>

#include "launch_bcast/client.hpp"
#include "slurm_adapter/bcast_job.hpp"
#include "tools/bcast_args.hpp"

using namespace storm;

namespace {

[[noreturn]] void usage(const std::string &why)
{
    std::fprintf(stderr, "storm-bcast: %s\n%s", why.c_str(), tools::kBcastUsage.c_str());
    std::exit(2);
}

class Progress {
public:
    Progress(bool on, std::string what) : on_(on), what_(std::move(what)) {}
    void operator()(uint64_t done, uint64_t total)
    {
        if (!on_)
            return;
        auto now = std::chrono::steady_clock::now();
        if (done < total && now - last_ < std::chrono::milliseconds(100))
            return;
        last_ = now;
        double secs = std::chrono::duration<double>(now - start_).count();
        std::fprintf(stderr, "\rstorm-bcast: %s %3d%% %.1f of %.1f MB, %.1f MB/s   ", what_.c_str(),
                     total ? static_cast<int>(done * 100 / total) : 100, done / 1e6, total / 1e6,
                     secs > 0 ? done / 1e6 / secs : 0.0);
        shown_ = true;
    }
    void end()
    {
        if (shown_)
            std::fputc('\n', stderr);
    }

private:
    bool on_;
    std::string what_;
    bool shown_ = false;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

} // namespace

int main(int argc, char **argv)
{
    tools::BcastArgs a;
    try {
        a = tools::parse_bcast_args(argc, argv);
    } catch (const tools::UsageError &e) {
        usage(e.what());
    }
    if (a.action == tools::BcastArgs::Action::version) {
        std::printf("storm-bcast %s (Slurm %s)\n", STORM_VERSION, STORM_SLURM_VERSION);
        return 0;
    }
    if (a.action == tools::BcastArgs::Action::help) {
        std::fputs(tools::kBcastUsage.c_str(), stdout);
        return 0;
    }
    bcast::ClientOptions &o = a.options;
    std::string &job_arg = a.job, &exclude = a.exclude, &source = a.source, &dest = a.dest;
    const bool send_libs = a.send_libs, verbose = a.verbose;
    int progress = a.progress;
    const uint64_t window_bytes = a.window_bytes;

    slurm_init(nullptr);
    if (!a.exclude_set)
        exclude = slurm_conf.bcast_exclude ? slurm_conf.bcast_exclude : "none";
    if (dest.front() != '/') {
        std::string base = shim::bcast_dest_dir();
        if (base.empty()) {
            char cwd[4096];
            if (!getcwd(cwd, sizeof cwd)) {
                std::perror("storm-bcast: getcwd");
                return 1;
            }
            base = cwd;
        }
        dest = base + "/" + dest;
    }
    uint32_t job = 0, step = NO_VAL;
    if (job_arg.empty()) {
        const char *j = getenv("SLURM_JOB_ID");
        if (!j)
            usage("no job: run inside an allocation or give --jobid");
        job_arg = j;
        if (const char *s = getenv("SLURM_STEP_ID"))
            job_arg += std::string(".") + s;
    }
    try {
        std::tie(job, step) = tools::parse_job_step(job_arg, NO_VAL);
    } catch (const tools::UsageError &e) {
        usage(e.what());
    }
    if (progress < 0)
        progress = isatty(STDERR_FILENO) ? 1 : 0;

    try {
        bcast::Source src = bcast::scan(source);
        auto target = shim::bcast_target(job, step);
        auto auth = shim::daemon_authenticator();
        shim::aim(o, target);
        o.window = static_cast<unsigned>(std::max<uint64_t>(2, window_bytes / bcast::chunk_size_of(o)));
        auto send = [&](const bcast::Source &s, const std::string &to, const std::string &what) {
            o.dest = to;
            Progress p(progress == 1, what);
            o.progress = [&p](uint64_t d, uint64_t t) { p(d, t); };
            auto t0 = std::chrono::steady_clock::now();
            try {
                bcast::broadcast(*auth, o, s);
            } catch (...) {
                p.end();
                throw;
            }
            p.end();
            if (verbose)
                std::fprintf(stderr, "storm-bcast: %s -> %s on %u nodes (%s, head %s): %.1f MB in %.3f s\n",
                             what.c_str(), to.c_str(), target.nodes, target.node_list.c_str(),
                             target.head.c_str(), s.total_bytes() / 1e6,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        };
        send(src, dest, source);
        if (send_libs) {
            auto libs = shim::shared_libraries(source, exclude);
            if (libs.empty())
                std::fprintf(stderr, "storm-bcast: no shared libraries of %s to send\n", source.c_str());
            else
                send(bcast::scan_files(libs), dest + "_libs", std::to_string(libs.size()) + " libraries");
        }
    } catch (const bcast::BcastError &e) {
        std::fprintf(stderr, "storm-bcast: error: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "storm-bcast: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
