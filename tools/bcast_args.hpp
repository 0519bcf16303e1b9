// storm-bcast's command line (tools/storm-bcast.cpp), parsed apart from
// Slurm so that it can be tested and fuzzed (tests/fuzz/fuzz_bcast_args.cpp).
//
// Contract:
//  - parse_bcast_args(argc, argv) reads the options with getopt_long (its
//    own messages, such as "unrecognized option", go to stderr unless
//    opterr is 0; it starts over at each call) and SOURCE and DEST.  It
//    throws UsageError with the reason the tool prints before its usage
//    (exit 2); -h and -V end the parse at once (action help or version),
//    as they did in the tool.  argv's order may change (getopt permutes).
//  - On success every value is in its documented range: chunk size 1k to
//    bcast::kMaxChunk (0: the default), timeout 1-3600 s, fanout 1-64,
//    window 1k-1024m; DEST is neither empty nor ends with '/'.
//  - --libs-from=FILE sets send_libs (the file is read by the tool,
//    launch_bcast/libraries.hpp); at most one of --unpack=CMD (CMD not
//    empty), --conda-unpack and --venv-relocate is given (unpack says
//    which); --unpack-timeout is 0 (no limit) to 86400 s (default 600).
//  - parse_job_step("JOB[.STEP]", no_step) gives the job (1 to 2^32-2) and
//    the step (0 to 2^32-2, or `no_step` when none is given), or throws
//    UsageError ("bad job id ...", "bad step id ...").
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "launch_bcast/client.hpp"

namespace storm::tools {

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct BcastArgs {
    enum class Action { run, help, version };
    Action action = Action::run;
    bcast::ClientOptions options; // flags, compress, chunk_size, timeout, fanout
    std::string job;              // --jobid as given; "" when not
    bool send_libs = false, verbose = false;
    int progress = -1; // -1: when stderr is a terminal
    std::string exclude;
    bool exclude_set = false;
    uint64_t window_bytes = 0; // 0: the client's default (from 1 MiB to 16 MiB, by the answers' delay)
    std::string libs_from; // --libs-from: the list of dlopen()ed libraries; "" when not
    // After the commit, on every node of the job, in DEST: nothing, CMD
    // (/bin/sh -c), DEST/bin/conda-unpack, or storm-venv-relocate.
    enum class Unpack { none, command, conda, venv };
    Unpack unpack = Unpack::none;
    std::string unpack_cmd;
    // --unpack-timeout: how long the step may run before it is cancelled
    // (0: no limit).
    std::chrono::seconds unpack_timeout{600};
    std::string source, dest;
};

// The help text.
extern const std::string kBcastUsage;

BcastArgs parse_bcast_args(int argc, char **argv);
std::pair<uint32_t, uint32_t> parse_job_step(const std::string &arg, uint32_t no_step);

} // namespace storm::tools
