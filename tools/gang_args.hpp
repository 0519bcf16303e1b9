// storm-gang's command line (tools/storm-gang.cpp), parsed apart from Slurm
// so that it can be tested and fuzzed (tests/fuzz/fuzz_gang_args.cpp).
//
//   storm-gang [status] | nodes [-n NODES]
//
// Contract: parse_gang_args(argc, argv) never throws and reads nothing but
// argv.  It says which command was asked for (help for -h and --help;
// unknown for anything else, `word` then naming it: the tool reports
// "unknown command WORD" once slurm.conf is read, as before).  For nodes,
// `nodes_ok` says whether its arguments are well formed (none, or -n and
// one word: the tool reports "bad arguments to nodes" otherwise, after it
// read the node table), and unless `all` (no -n, or -n all) `pick` is the
// hostlist to expand (as given, even empty).
#pragma once

#include <string>

namespace storm::tools {

struct GangArgs {
    enum class Command { status, nodes, help, unknown };
    Command command = Command::status;
    std::string word;     // the command as given ("status" when none)
    bool nodes_ok = true; // nodes: its arguments are well formed
    bool all = true;      // nodes: every node
    std::string pick;     // nodes, unless all: the NODES of -n
};

GangArgs parse_gang_args(int argc, const char *const *argv);

} // namespace storm::tools
