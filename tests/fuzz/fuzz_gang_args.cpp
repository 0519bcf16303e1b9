// Fuzz target: storm-gang's command line (tools/gang_args.hpp).  The
// input's NUL bytes separate the arguments.  The parse never throws, and
// its verdict follows the grammar: help only for -h and --help, status
// only alone, nodes well formed only with no argument or -n and one word,
// and every node only for none or "-n all".
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.hpp"
#include "tools/gang_args.hpp"

using namespace storm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    std::string_view in = fuzz::bytes(data, size);
    std::vector<std::string> w{"storm-gang"};
    while (size > 0 && w.size() <= 16) {
        size_t nul = in.find('\0');
        w.emplace_back(in.substr(0, nul));
        if (nul == std::string_view::npos)
            break;
        in.remove_prefix(nul + 1);
    }
    std::vector<const char *> argv;
    for (auto &s : w)
        argv.push_back(s.c_str());
    argv.push_back(nullptr);
    int argc = static_cast<int>(w.size());
    tools::GangArgs a = tools::parse_gang_args(argc, argv.data());
    using C = tools::GangArgs::Command;
    std::string first = argc > 1 ? w[1] : "status";
    FUZZ_REQUIRE(a.word == first);
    FUZZ_REQUIRE((a.command == C::help) == (first == "-h" || first == "--help"));
    if (a.command == C::status)
        FUZZ_REQUIRE(argc <= 2 && first == "status");
    if (a.command == C::nodes) {
        FUZZ_REQUIRE(first == "nodes");
        FUZZ_REQUIRE(a.nodes_ok == (argc == 2 || (argc == 4 && w[2] == "-n")));
        if (a.nodes_ok)
            FUZZ_REQUIRE(a.all == (argc == 2 || w[3] == "all"));
        FUZZ_REQUIRE(!a.all || a.pick.empty());
        if (a.nodes_ok && !a.all)
            FUZZ_REQUIRE(a.pick == w[3]);
    }
    if (a.command == C::unknown)
        FUZZ_REQUIRE(first != "nodes" && !(first == "status" && argc <= 2));
    return 0;
}
