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
// With --send-libs, the program's shared libraries (and those of
// --libs-from) follow to DEST_libs/ (launch_bcast/libraries.hpp); with
// --unpack, --conda-unpack or --venv-relocate, a relocation step then runs
// on every node (tools/bcast_unpack.hpp).
// Exit: 0 success, 1 failure, 2 usage.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>

#include "launch_bcast/client.hpp"
#include "launch_bcast/libraries.hpp"
#include "slurm_adapter/bcast_job.hpp"
#include "tools/bcast_args.hpp"
#include "tools/bcast_unpack.hpp"

using namespace storm;

namespace {

[[noreturn]] void usage(const std::string &why)
{
    std::fprintf(stderr, "storm-bcast: %s\n%s", why.c_str(), tools::kBcastUsage.c_str());
    std::exit(2);
}

// One line on a terminal, rewritten at most every 100 ms: the files and
// bytes every node holds, of the whole, and the rate.  Chunks are answered
// in the order of the entries, so a file counts once its last byte is.
class Progress {
public:
    Progress(bool on, std::string what, const bcast::Source &src) : on_(on), what_(std::move(what))
    {
        uint64_t end = 0;
        for (const auto &e : src.entries)
            if (e.kind == bcast::Entry::file)
                ends_.push_back(end += e.size);
    }
    void operator()(uint64_t done, uint64_t total)
    {
        if (!on_)
            return;
        auto now = std::chrono::steady_clock::now();
        if (done < total && now - last_ < std::chrono::milliseconds(100))
            return;
        last_ = now;
        show(done, total, now);
    }
    // The last line (every file, every byte) once the broadcast committed,
    // then a new line after whatever was shown.
    void end(bool committed)
    {
        const uint64_t total = ends_.empty() ? 0 : ends_.back();
        if (on_ && committed && shown_done_ != total)
            show(total, total, std::chrono::steady_clock::now());
        if (shown_)
            std::fputc('\n', stderr);
    }

private:
    void show(uint64_t done, uint64_t total, std::chrono::steady_clock::time_point now)
    {
        double secs = std::chrono::duration<double>(now - start_).count();
        auto files = std::upper_bound(ends_.begin(), ends_.end(), done) - ends_.begin();
        std::fprintf(stderr, "\rstorm-bcast: %s %3d%% %ld of %zu files, %.1f of %.1f MB, %.1f MB/s   ",
                     what_.c_str(), total ? static_cast<int>(done * 100 / total) : 100,
                     static_cast<long>(files), ends_.size(), done / 1e6, total / 1e6,
                     secs > 0 ? done / 1e6 / secs : 0.0);
        shown_ = true;
        shown_done_ = done;
    }

    bool on_;
    std::string what_;
    std::vector<uint64_t> ends_; // of each file: the bytes up to its end
    bool shown_ = false;
    uint64_t shown_done_ = UINT64_MAX; // the bytes of the last line shown
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// A program installed beside this one.
std::string beside_me(const std::string &name)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return name;
    std::string p(self, static_cast<size_t>(n));
    return p.substr(0, p.rfind('/') + 1) + name;
}

// The relocation step's command (""; none), checked against the source
// before anything is sent.
std::string unpack_command(const tools::BcastArgs &a, const bcast::Source &src)
{
    using U = tools::BcastArgs::Unpack;
    if (a.unpack == U::none)
        return "";
    if (a.unpack == U::command)
        return a.unpack_cmd;
    if (!src.entries.front().dir())
        throw bcast::BcastError(a.source + " is not a directory: nothing to " +
                                (a.unpack == U::conda ? "conda-unpack" : "relocate"));
    auto has = [&](const char *rel, bcast::Entry::Kind kind) {
        for (const auto &e : src.entries)
            if (e.path == rel && e.kind == kind)
                return true;
        return false;
    };
    if (a.unpack == U::conda) {
        if (!has("bin/conda-unpack", bcast::Entry::file))
            throw bcast::BcastError(a.source + " has no bin/conda-unpack: not a conda-pack directory");
        return "exec ./bin/conda-unpack";
    }
    if (!has("pyvenv.cfg", bcast::Entry::file) || !has("bin/python3", bcast::Entry::symlink))
        throw bcast::BcastError(a.source + " has no pyvenv.cfg and bin/python3 link: not a venv");
    // Its text goes in the command (tools/bcast_unpack.hpp): read here.
    std::string script = beside_me("storm-venv-relocate");
    std::ifstream in(script, std::ios::binary);
    std::ostringstream text;
    if (!(in && text << in.rdbuf()) || text.str().empty())
        throw bcast::BcastError("cannot read " + script + ", which relocates a venv");
    return tools::venv_relocate_command(text.str());
}

size_t files_of(const bcast::Source &s)
{
    return static_cast<size_t>(std::count_if(s.entries.begin(), s.entries.end(), [](const bcast::Entry &e) {
        return e.kind == bcast::Entry::file;
    }));
}

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
        const std::string unpack = unpack_command(a, src);
        bcast::Source libs;
        if (send_libs) {
            if (src.entries.front().dir())
                throw bcast::BcastError("--send-libs sends a program's libraries: " + source +
                                        " is a directory");
            libs = bcast::scan_libraries(source, bcast::read_library_list(a.libs_from), exclude);
        }
        auto target = shim::bcast_target(job, step);
        auto auth = shim::daemon_authenticator();
        shim::aim(o, target);
        if (window_bytes)
            o.window = static_cast<unsigned>(std::max<uint64_t>(2, window_bytes / bcast::chunk_size_of(o)));
        auto send = [&](const bcast::Source &s, const std::string &to, const std::string &what) {
            o.dest = to;
            Progress p(progress == 1, what, s);
            o.progress = [&p](uint64_t d, uint64_t t) { p(d, t); };
            auto t0 = std::chrono::steady_clock::now();
            std::string phases;
            if (verbose)
                o.phase = [&phases, t0](const char *phase) {
                    char b[64];
                    std::snprintf(
                        b, sizeof b, "%s%s at %.3f s", phases.empty() ? "" : ", ", phase,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                    phases += b;
                };
            uint64_t wire = 0;
            try {
                wire = bcast::broadcast(*auth, o, s);
            } catch (...) {
                p.end(false);
                throw;
            }
            p.end(true);
            if (verbose) {
                char sent[64] = "";
                if (o.compress != bcast::Codec::none)
                    std::snprintf(sent, sizeof sent, " (%.1f MB sent, %s)", wire / 1e6,
                                  bcast::codec_name(o.compress));
                std::fprintf(stderr,
                             "storm-bcast: %s -> %s on %u nodes (%s, head %s): %.1f MB%s in %.3f s (%s)\n",
                             what.c_str(), to.c_str(), target.nodes, target.node_list.c_str(),
                             target.head.c_str(), s.total_bytes() / 1e6, sent,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                             phases.c_str());
            }
        };
        send(src, dest, source);
        if (send_libs) {
            if (libs.entries.size() <= 1)
                std::fprintf(stderr, "storm-bcast: no shared libraries of %s to send\n", source.c_str());
            else
                send(libs, dest + "_libs", std::to_string(files_of(libs)) + " libraries");
        }
        if (!unpack.empty()) {
            auto t0 = std::chrono::steady_clock::now();
            const std::string dir = src.entries.front().dir() ? dest : dest.substr(0, dest.rfind('/') + 1);
            auto r = tools::run_on_nodes(job, shim::expand_hostlist(target.node_list.c_str()),
                                         target.node_list, dir, dest, unpack, a.unpack_timeout);
            if (r.timed_out) {
                std::string list;
                for (size_t i = 0; i < r.failed.size(); ++i)
                    list += (i ? ", " : "") + r.failed[i];
                throw bcast::BcastError(dest +
                                        " is in place on every node, but its relocation step did not end " +
                                        "within " + std::to_string(a.unpack_timeout.count()) +
                                        " s (--unpack-timeout) and was cancelled: " + list);
            }
            if (!r.failed.empty()) {
                std::string list;
                for (size_t i = 0; i < r.failed.size(); ++i)
                    list += (i ? ", " : "") + r.failed[i];
                throw bcast::BcastError(dest +
                                        " is in place on every node, but its relocation step failed on " +
                                        std::to_string(r.failed.size()) + " of " +
                                        std::to_string(target.nodes) + " nodes: " + list);
            }
            if (r.srun_status != 0)
                throw bcast::BcastError("the relocation step ran on every node, but srun exited " +
                                        std::to_string(r.srun_status));
            if (verbose)
                std::fprintf(stderr, "storm-bcast: relocation step on %u nodes in %.3f s\n", target.nodes,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
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
