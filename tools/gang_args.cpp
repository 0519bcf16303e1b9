#include "tools/gang_args.hpp"

namespace storm::tools {

GangArgs parse_gang_args(int argc, const char *const *argv)
{
    GangArgs a;
    a.word = argc > 1 ? argv[1] : "status";
    if (a.word == "-h" || a.word == "--help") {
        a.command = GangArgs::Command::help;
    } else if (a.word == "status" && argc <= 2) {
        a.command = GangArgs::Command::status;
    } else if (a.word == "nodes") {
        a.command = GangArgs::Command::nodes;
        int n = argc - 2;
        std::string flag = n >= 1 ? argv[2] : "";
        if (n == 2 && flag == "-n") {
            a.pick = argv[3];
            a.all = a.pick == "all";
            if (a.all)
                a.pick.clear();
        } else if (n != 0) {
            a.nodes_ok = false;
        }
    } else {
        a.command = GangArgs::Command::unknown;
    }
    return a;
}

} // namespace storm::tools
