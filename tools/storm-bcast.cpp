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
#include <getopt.h>
#include <string>
#include <unistd.h>

#include "launch_bcast/client.hpp"
#include "slurm_adapter/bcast_job.hpp"

using namespace storm;

namespace {

// The help text; it names the multicast chunk size from the constant itself.
const std::string kUsage =
    std::string("usage: storm-bcast [OPTIONS] SOURCE DEST\n"
                "  -f, --force             replace DEST where it exists\n"
                "  -p, --preserve          keep SOURCE's access and modification times\n"
                "  -C, --compress[=LIB]    compress chunks on the wire (zlib; LIB \"none\" turns it off)\n"
                "  -s, --size=SIZE         chunk size (default 32k, or ") +
    std::to_string(net::kMcastChunkSize) +
    " bytes where the\n"
    "                          agents multicast, half that to " +
    std::to_string(bcast::kSmallChunkNodes) +
    " nodes or fewer;\n"
    "                          k and m suffixes)\n"
    "  -t, --timeout=SECONDS   how long each hop may stay silent (default 10)\n"
    "  -j, --jobid=JOB[.STEP]  the job (default: SLURM_JOB_ID, and SLURM_STEP_ID)\n"
    "  -F, --fanout=N          branches of the data tree (default 1: a pipeline through the nodes)\n"
    "  -w, --window=SIZE       bytes in flight, unacknowledged by every node (default 16m)\n"
    "      --send-libs[=yes|no] also send SOURCE's shared libraries to DEST_libs/\n"
    "      --exclude=PATHS     libraries under these directories are not sent\n"
    "                          (default: BcastExclude)\n"
    "      --progress, --no-progress   show progress (default: when stderr is a terminal)\n"
    "  -v, --verbose           say what is sent where\n"
    "  -V, --version, -h, --help\n";

[[noreturn]] void usage(const std::string &why)
{
    std::fprintf(stderr, "storm-bcast: %s\n%s", why.c_str(), kUsage.c_str());
    std::exit(2);
}

uint64_t parse_size(const char *s)
{
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || errno)
        usage(std::string("bad size ") + s);
    if (*end == 'k' || *end == 'K')
        v <<= 10, ++end;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, ++end;
    if (*end)
        usage(std::string("bad size ") + s);
    return v;
}

uint32_t parse_uint(const char *s, const char *what, uint32_t lo, uint32_t hi)
{
    char *end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        usage(std::string("bad ") + what + " \"" + s + "\" (" + std::to_string(lo) + "-" +
              std::to_string(hi) + ")");
    return static_cast<uint32_t>(v);
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
    enum { kSendLibs = 256, kExclude, kProgress, kNoProgress };
    const option longopts[] = {{"force", no_argument, nullptr, 'f'},
                               {"preserve", no_argument, nullptr, 'p'},
                               {"compress", optional_argument, nullptr, 'C'},
                               {"size", required_argument, nullptr, 's'},
                               {"timeout", required_argument, nullptr, 't'},
                               {"jobid", required_argument, nullptr, 'j'},
                               {"fanout", required_argument, nullptr, 'F'},
                               {"window", required_argument, nullptr, 'w'},
                               {"send-libs", optional_argument, nullptr, kSendLibs},
                               {"exclude", required_argument, nullptr, kExclude},
                               {"progress", no_argument, nullptr, kProgress},
                               {"no-progress", no_argument, nullptr, kNoProgress},
                               {"verbose", no_argument, nullptr, 'v'},
                               {"version", no_argument, nullptr, 'V'},
                               {"help", no_argument, nullptr, 'h'},
                               {nullptr, 0, nullptr, 0}};
    bcast::ClientOptions o;
    std::string job_arg;
    bool send_libs = false, verbose = false;
    int progress = -1;
    std::string exclude;
    bool exclude_set = false;
    uint64_t window_bytes = 16u << 20;
    int c;
    while ((c = getopt_long(argc, argv, "fpC::s:t:j:F:w:vVh", longopts, nullptr)) != -1) {
        switch (c) {
        case 'f':
            o.flags |= bcast::kForce;
            break;
        case 'p':
            o.flags |= bcast::kPreserve;
            break;
        case 'C':
            if (optarg && strcasecmp(optarg, "none") == 0)
                o.compress = false;
            else if (!optarg || !strcasecmp(optarg, "zlib") || !strcasecmp(optarg, "lz4"))
                o.compress = true;
            else
                usage(std::string("unknown compression \"") + optarg + "\" (zlib, lz4 or none)");
            break;
        case 's': {
            uint64_t v = parse_size(optarg);
            if (v < 1024 || v > bcast::kMaxChunk)
                usage("chunk size must be 1k to " + std::to_string(bcast::kMaxChunk >> 20) + "m");
            o.chunk_size = static_cast<uint32_t>(v);
            break;
        }
        case 't':
            o.timeout = std::chrono::seconds(parse_uint(optarg, "timeout", 1, 3600));
            break;
        case 'j':
            job_arg = optarg;
            break;
        case 'w':
            window_bytes = parse_size(optarg);
            if (window_bytes < 1024 || window_bytes > (1u << 30))
                usage("window must be 1k to 1024m");
            break;
        case 'F':
            o.fanout = static_cast<uint8_t>(parse_uint(optarg, "fanout", 1, 64));
            break;
        case kSendLibs:
            send_libs = !optarg || !strcasecmp(optarg, "yes");
            if (optarg && strcasecmp(optarg, "yes") && strcasecmp(optarg, "no"))
                usage(std::string("--send-libs takes yes or no, not \"") + optarg + "\"");
            break;
        case kExclude:
            exclude = optarg;
            exclude_set = true;
            break;
        case kProgress:
            progress = 1;
            break;
        case kNoProgress:
            progress = 0;
            break;
        case 'v':
            verbose = true;
            break;
        case 'V':
            std::printf("storm-bcast %s (Slurm %s)\n", STORM_VERSION, STORM_SLURM_VERSION);
            return 0;
        case 'h':
            std::fputs(kUsage.c_str(), stdout);
            return 0;
        default:
            usage("bad option");
        }
    }
    if (argc - optind != 2)
        usage("needs SOURCE and DEST");
    std::string source = argv[optind], dest = argv[optind + 1];
    if (dest.empty() || dest.back() == '/')
        usage("DEST must name the file or directory to create, not \"" + dest + "\"");

    slurm_init(nullptr);
    if (!exclude_set)
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
    {
        size_t dot = job_arg.find('.');
        job = parse_uint(job_arg.substr(0, dot).c_str(), "job id", 1, UINT32_MAX - 1);
        if (dot != std::string::npos)
            step = parse_uint(job_arg.substr(dot + 1).c_str(), "step id", 0, UINT32_MAX - 1);
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
