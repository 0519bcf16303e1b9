#include "tools/bcast_args.hpp"

#include <cerrno>
#include <cstdlib>
#include <getopt.h>
#include <strings.h>

namespace storm::tools {

// It names the multicast chunk size from the constant itself.
const std::string kBcastUsage =
    std::string("usage: storm-bcast [OPTIONS] SOURCE DEST\n"
                "  -f, --force             replace DEST where it exists\n"
                "  -p, --preserve          keep SOURCE's access and modification times\n"
                "  -C, --compress[=LIB]    compress chunks on the wire: lz4 (the default), zstd (fewer\n"
                "                          bytes, more CPU on every node), zlib, or none\n"
                "  -s, --size=SIZE         chunk size (default 32k, 256k with -C, or ") +
    std::to_string(net::kMcastChunkSize) +
    " bytes where the\n"
    "                          agents multicast, half that to " +
    std::to_string(bcast::kSmallChunkNodes) +
    " nodes or fewer;\n"
    "                          k and m suffixes)\n"
    "  -t, --timeout=SECONDS   how long each hop may stay silent (default 10)\n"
    "  -j, --jobid=JOB[.STEP]  the job (default: SLURM_JOB_ID, and SLURM_STEP_ID)\n"
    "  -F, --fanout=N          branches of the data tree (default 1: a pipeline through the nodes)\n"
    "  -w, --window=SIZE       bytes in flight, unacknowledged by every node, fewer\n"
    "                          while answers are slow (default: from 1m to 16m)\n"
    "      --send-libs[=yes|no] also send SOURCE's shared libraries to DEST_libs/\n"
    "      --libs-from=FILE    with --send-libs (implied), also these dlopen()ed libraries\n"
    "                          and theirs: FILE holds one absolute path a line (# comments)\n"
    "      --exclude=PATHS     libraries under these directories are not sent\n"
    "                          (default: BcastExclude)\n"
    "      --unpack=CMD        once DEST is in place, run CMD (sh -c) in DEST on every node\n"
    "                          of the job, as you; exit 1 naming the nodes where it failed\n"
    "      --conda-unpack      the same with DEST/bin/conda-unpack (a conda-pack directory)\n"
    "      --venv-relocate     the same with storm-venv-relocate (a venv: its bin/ scripts\n"
    "                          and activate then name DEST)\n"
    "      --unpack-timeout=SECONDS   cancel that step where it runs longer, naming the\n"
    "                          nodes still running it (default 600; 0: no limit)\n"
    "      --progress, --no-progress   show progress (default: when stderr is a terminal)\n"
    "  -v, --verbose           say what is sent where\n"
    "  -V, --version, -h, --help\n";

namespace {

uint64_t parse_size(const char *s)
{
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || errno)
        throw UsageError(std::string("bad size ") + s);
    if (*end == 'k' || *end == 'K')
        v <<= 10, ++end;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, ++end;
    if (*end)
        throw UsageError(std::string("bad size ") + s);
    return v;
}

uint32_t parse_uint(const char *s, const char *what, uint32_t lo, uint32_t hi)
{
    char *end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        throw UsageError(std::string("bad ") + what + " \"" + s + "\" (" + std::to_string(lo) + "-" +
                         std::to_string(hi) + ")");
    return static_cast<uint32_t>(v);
}

} // namespace

BcastArgs parse_bcast_args(int argc, char **argv)
{
    enum {
        kSendLibs = 256,
        kExclude,
        kProgress,
        kNoProgress,
        kLibsFrom,
        kUnpack,
        kCondaUnpack,
        kVenvRelocate,
        kUnpackTimeout
    };
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
                               {"libs-from", required_argument, nullptr, kLibsFrom},
                               {"unpack", required_argument, nullptr, kUnpack},
                               {"conda-unpack", no_argument, nullptr, kCondaUnpack},
                               {"venv-relocate", no_argument, nullptr, kVenvRelocate},
                               {"unpack-timeout", required_argument, nullptr, kUnpackTimeout},
                               {"progress", no_argument, nullptr, kProgress},
                               {"no-progress", no_argument, nullptr, kNoProgress},
                               {"verbose", no_argument, nullptr, 'v'},
                               {"version", no_argument, nullptr, 'V'},
                               {"help", no_argument, nullptr, 'h'},
                               {nullptr, 0, nullptr, 0}};
    BcastArgs a;
    bcast::ClientOptions &o = a.options;
    optind = 0; // getopt_long starts over (glibc)
    int c;
    bool libs_no = false; // --send-libs=no
    while ((c = getopt_long(argc, argv, "fpC::s:t:j:F:w:vVh", longopts, nullptr)) != -1) {
        switch (c) {
        case 'f':
            o.flags |= bcast::kForce;
            break;
        case 'p':
            o.flags |= bcast::kPreserve;
            break;
        case 'C':
            try {
                o.compress = optarg ? bcast::codec_named(optarg) : bcast::kDefaultCodec;
            } catch (const std::invalid_argument &e) {
                throw UsageError(e.what());
            }
            break;
        case 's': {
            uint64_t v = parse_size(optarg);
            if (v < 1024 || v > bcast::kMaxChunk)
                throw UsageError("chunk size must be 1k to " + std::to_string(bcast::kMaxChunk >> 20) + "m");
            o.chunk_size = static_cast<uint32_t>(v);
            break;
        }
        case 't':
            o.timeout = std::chrono::seconds(parse_uint(optarg, "timeout", 1, 3600));
            break;
        case 'j':
            a.job = optarg;
            break;
        case 'w':
            a.window_bytes = parse_size(optarg);
            if (a.window_bytes < 1024 || a.window_bytes > (1u << 30))
                throw UsageError("window must be 1k to 1024m");
            break;
        case 'F':
            o.fanout = static_cast<uint8_t>(parse_uint(optarg, "fanout", 1, 64));
            break;
        case kSendLibs:
            a.send_libs = !optarg || !strcasecmp(optarg, "yes");
            libs_no = !a.send_libs;
            if (optarg && strcasecmp(optarg, "yes") && strcasecmp(optarg, "no"))
                throw UsageError(std::string("--send-libs takes yes or no, not \"") + optarg + "\"");
            break;
        case kExclude:
            a.exclude = optarg;
            a.exclude_set = true;
            break;
        case kLibsFrom:
            if (!*optarg)
                throw UsageError("--libs-from needs a file");
            a.libs_from = optarg;
            break;
        case kUnpack:
        case kCondaUnpack:
        case kVenvRelocate:
            if (a.unpack != BcastArgs::Unpack::none)
                throw UsageError("only one of --unpack, --conda-unpack and --venv-relocate");
            a.unpack = c == kUnpack        ? BcastArgs::Unpack::command
                       : c == kCondaUnpack ? BcastArgs::Unpack::conda
                                           : BcastArgs::Unpack::venv;
            if (c == kUnpack) {
                if (!*optarg)
                    throw UsageError("--unpack needs a command");
                a.unpack_cmd = optarg;
            }
            break;
        case kUnpackTimeout:
            a.unpack_timeout = std::chrono::seconds(parse_uint(optarg, "unpack timeout", 0, 86400));
            break;
        case kProgress:
            a.progress = 1;
            break;
        case kNoProgress:
            a.progress = 0;
            break;
        case 'v':
            a.verbose = true;
            break;
        case 'V':
            a.action = BcastArgs::Action::version;
            return a;
        case 'h':
            a.action = BcastArgs::Action::help;
            return a;
        default:
            throw UsageError("bad option");
        }
    }
    if (!a.libs_from.empty()) {
        if (libs_no)
            throw UsageError("--libs-from sends libraries: not with --send-libs=no");
        a.send_libs = true;
    }
    if (argc - optind != 2)
        throw UsageError("needs SOURCE and DEST");
    a.source = argv[optind];
    a.dest = argv[optind + 1];
    if (a.dest.empty() || a.dest.back() == '/')
        throw UsageError("DEST must name the file or directory to create, not \"" + a.dest + "\"");
    return a;
}

std::pair<uint32_t, uint32_t> parse_job_step(const std::string &arg, uint32_t no_step)
{
    uint32_t step = no_step;
    size_t dot = arg.find('.');
    uint32_t job = parse_uint(arg.substr(0, dot).c_str(), "job id", 1, UINT32_MAX - 1);
    if (dot != std::string::npos)
        step = parse_uint(arg.substr(dot + 1).c_str(), "step id", 0, UINT32_MAX - 1);
    return {job, step};
}

} // namespace storm::tools
