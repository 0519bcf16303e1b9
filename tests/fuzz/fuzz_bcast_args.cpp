// Fuzz target: storm-bcast's command line (tools/bcast_args.hpp), which any
// user runs: the options and SOURCE DEST (first byte 0 modulo 4), the
// JOB[.STEP] of --jobid and SLURM_JOB_ID (odd), or the list of libraries
// --libs-from reads (2 modulo 4).  The input's NUL bytes separate the
// arguments.  A bad command line is a UsageError with a
// reason, never anything else; an accepted one has every value in its
// documented range, and a job and step parse again the same from their
// decimal form.
#include <cstring>
#include <getopt.h>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.hpp"
#include "launch_bcast/libraries.hpp"
#include "tools/bcast_args.hpp"

using namespace storm;

namespace {

// "storm-bcast" then the input's NUL-separated words (at most 64).
std::vector<std::string> words(std::string_view in)
{
    std::vector<std::string> w{"storm-bcast"};
    while (w.size() <= 64) {
        size_t nul = in.find('\0');
        w.emplace_back(in.substr(0, nul));
        if (nul == std::string_view::npos)
            break;
        in.remove_prefix(nul + 1);
    }
    return w;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::Pick in(data, size);
    if (in.which % 2 == 1) {
        std::string arg(in.rest);
        arg = arg.c_str(); // an argument or a variable: NUL ends it
        const uint32_t none = 0xfffffffe;
        try {
            auto [job, step] = tools::parse_job_step(arg, none);
            FUZZ_REQUIRE(job >= 1 && job <= UINT32_MAX - 1);
            FUZZ_REQUIRE(step <= UINT32_MAX - 1);
            std::string again = std::to_string(job) + (step == none ? "" : "." + std::to_string(step));
            FUZZ_REQUIRE(tools::parse_job_step(again, none) == std::make_pair(job, step));
        } catch (const tools::UsageError &e) {
            FUZZ_REQUIRE(*e.what() != 0);
        }
        return 0;
    }
    if (in.which % 4 == 2) {
        // --libs-from's list: absolute paths, one a line, never a NUL or
        // a newline in one, or a reason
        try {
            for (const auto &p : bcast::parse_library_list(std::string(in.rest))) {
                FUZZ_REQUIRE(!p.empty() && p[0] == '/');
                FUZZ_REQUIRE(p.find('\n') == std::string::npos && p.find('\0') == std::string::npos);
            }
        } catch (const bcast::BcastError &e) {
            FUZZ_REQUIRE(*e.what() != 0);
        }
        return 0;
    }
    std::vector<std::string> w = words(in.rest);
    std::vector<char *> argv;
    for (auto &s : w)
        argv.push_back(s.data());
    argv.push_back(nullptr);
    opterr = 0; // getopt's own lines would drown libFuzzer's
    try {
        tools::BcastArgs a = tools::parse_bcast_args(static_cast<int>(w.size()), argv.data());
        if (a.action != tools::BcastArgs::Action::run)
            return 0;
        const auto &o = a.options;
        FUZZ_REQUIRE(o.chunk_size == bcast::ClientOptions{}.chunk_size ||
                     (o.chunk_size >= 1024 && o.chunk_size <= bcast::kMaxChunk));
        FUZZ_REQUIRE(o.timeout >= std::chrono::seconds(1) && o.timeout <= std::chrono::seconds(3600));
        FUZZ_REQUIRE(o.fanout >= 1 && o.fanout <= 64);
        FUZZ_REQUIRE(a.window_bytes == 0 || (a.window_bytes >= 1024 && a.window_bytes <= (1u << 30))); // 0: not given
        FUZZ_REQUIRE(a.progress >= -1 && a.progress <= 1);
        FUZZ_REQUIRE(!a.dest.empty() && a.dest.back() != '/');
        FUZZ_REQUIRE(a.exclude_set || a.exclude.empty());
        FUZZ_REQUIRE(a.libs_from.empty() || a.send_libs);
        FUZZ_REQUIRE((a.unpack == tools::BcastArgs::Unpack::command) == !a.unpack_cmd.empty());
        FUZZ_REQUIRE(a.unpack_timeout >= std::chrono::seconds(0) &&
                     a.unpack_timeout <= std::chrono::seconds(86400));
    } catch (const tools::UsageError &e) {
        FUZZ_REQUIRE(*e.what() != 0);
    }
    return 0;
}
