// storm-prim: drive STORM's primitives on the node agents of a running
// cluster, as an initiator (slurmctld or srun will be the usual ones).
//
//   storm-prim [-n NODES] xfer EVENT SIZE        XFER-AND-SIGNAL of SIZE bytes
//   storm-prim [-n NODES] verify EVENT SIZE      did every node get them intact?
//   storm-prim [-n NODES] caw VAR REL VALUE [WVAR=WVAL]   COMPARE-AND-WRITE
//   storm-prim [-n NODES] bench OP COUNT SIZE    latency of OP (xfer|caw): p50, p99
//                                                of COUNT ops after a warm-up
//   storm-prim [-n NODES] heartbeat INTERVAL SECONDS [drain]
//                                                heartbeats with fault detection;
//                                                "drain" drains faulty nodes in Slurm
//   storm-prim nodes                             the node table
//
// Options: -n NODES; -f F, the fanout of multi-chunk transfers (default 2);
// -c SIZE, the chunk size (64k, or 786240 where the agents multicast); -w W,
// chunks in flight (64).
//
// NODES is a set of indices into Slurm's node table ("0-63,70") or "all"
// (the default).  SIZE accepts k/M suffixes.  The data of xfer/verify is a
// pattern derived from EVENT and SIZE, so verify needs no copy of it.  Reads
// slurm.conf (SLURM_CONF) for the nodes, SwitchParameters and AuthInfo; must
// run as SlurmUser or SlurmdUser (munge).  Exit: 0 success, 1 the operation
// failed or did not hold, 2 usage or set-up error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <event2/event.h>

#include "agent/agent_config.hpp"
#include "lib/common/signals.hpp"
#include "lib/prim/checksum.hpp"
#include "lib/prim/engine.hpp"
#include "lib/prim/heartbeat.hpp"
#include "slurm_adapter/slurm_nodes.hpp"

extern "C" {
#include "src/common/read_config.h"
}

using namespace storm;
using namespace std::chrono;

namespace {

[[noreturn]] void usage(const char *why)
{
    std::fprintf(stderr,
                 "storm-prim: %s\n"
                 "usage: storm-prim [-n NODES] [-f FANOUT] [-c CHUNK] [-w WINDOW] xfer EVENT SIZE | verify "
                 "EVENT SIZE |\n"
                 "                  caw VAR REL VALUE [WVAR=WVAL] | bench xfer|caw COUNT SIZE |\n"
                 "                  heartbeat INTERVAL_MS SECONDS [drain] | nodes\n"
                 "  REL: ge lt eq ne; NODES: all (default) or indices like 0-63,70\n",
                 why);
    std::exit(2);
}

uint64_t parse_size(const std::string &s)
{
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (end == s.c_str())
        usage(("bad size " + s).c_str());
    std::string unit(end);
    if (unit == "k" || unit == "K")
        v <<= 10;
    else if (unit == "M" || unit == "m")
        v <<= 20;
    else if (!unit.empty())
        usage(("bad size " + s).c_str());
    return v;
}

std::string pattern(const std::string &event, uint64_t size)
{
    std::string s(size, '\0');
    uint64_t x = prim::fnv1a64(event) ^ size;
    for (auto &c : s) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        c = static_cast<char>(x >> 56);
    }
    return s;
}

prim::Relation parse_rel(const std::string &r)
{
    if (r == "ge")
        return prim::Relation::ge;
    if (r == "lt")
        return prim::Relation::lt;
    if (r == "eq")
        return prim::Relation::eq;
    if (r == "ne")
        return prim::Relation::ne;
    usage(("bad relation " + r).c_str());
}

double ms_since(steady_clock::time_point t0)
{
    return duration<double, std::milli>(steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char **argv)
{
    block_sigpipe();
    std::string nodes_arg = "all";
    unsigned data_fanout = 0, window = 0;
    size_t chunk = 0;
    int i = 1;
    while (i + 1 < argc && argv[i][0] == '-') {
        std::string opt = argv[i], val = argv[i + 1];
        if (opt == "-n")
            nodes_arg = val;
        else if (opt == "-f")
            data_fanout = static_cast<unsigned>(std::stoul(val));
        else if (opt == "-w")
            window = static_cast<unsigned>(std::stoul(val));
        else if (opt == "-c")
            chunk = parse_size(val);
        else
            usage(("unknown option " + opt).c_str());
        i += 2;
    }
    if (i >= argc)
        usage("no command");
    std::string cmd = argv[i++];
    std::vector<std::string> args(argv + i, argv + argc);

    if (slurm_conf_init(nullptr) != SLURM_SUCCESS)
        usage("cannot read slurm.conf (set SLURM_CONF)");
    std::vector<shim::SlurmNode> table;
    agent::AgentConfig acfg;
    try {
        table = shim::slurm_node_table();
        acfg = agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
    } catch (const std::exception &e) {
        usage(e.what());
    }
    if (cmd == "nodes") {
        for (size_t k = 0; k < table.size(); ++k)
            std::printf("%zu %s %s:%u\n", k, table[k].name.c_str(), table[k].address.c_str(), acfg.port);
        return 0;
    }
    net::RangeSet set;
    try {
        set = nodes_arg == "all" ? net::RangeSet::range(0, static_cast<uint32_t>(table.size()))
                                 : net::RangeSet::parse(nodes_arg);
    } catch (const std::exception &e) {
        usage(e.what());
    }
    if (!set.empty() && set.nth(set.size() - 1) >= table.size())
        usage("node index beyond the node table");

    prim::EngineConfig ec;
    ec.nodes = shim::agent_addresses(table, acfg.port);
    ec.fanout = acfg.fanout;
    if (data_fanout)
        ec.data_fanout = data_fanout;
    if (window)
        ec.window = window;
    if (chunk)
        ec.chunk_size = chunk;
    else if (acfg.mcast.enabled())
        ec.chunk_size = net::kMcastChunkSize; // the agents multicast
    event_base *base = event_base_new();
    auto auth = shim::daemon_authenticator();
    auto engine = std::make_unique<prim::Engine>(base, ec, *auth, Logger("storm-prim"));
    auto wait = [&](bool &done) {
        if (!engine->run_until([&] { return done; }, 600s)) {
            std::fprintf(stderr, "storm-prim: no result within 600 s\n");
            std::exit(1);
        }
    };
    auto do_xfer = [&](const std::string &ev, const std::string &data, prim::XferResult &res) {
        bool done = false;
        engine->xfer_and_signal(set, ev, data, [&](const prim::XferResult &r) {
            res = r;
            done = true;
        });
        wait(done);
    };
    auto do_caw = [&](const std::string &var, prim::Relation rel, int64_t v,
                      std::optional<prim::Engine::Write> w, prim::CawResult &res) {
        bool done = false;
        engine->compare_and_write(set, var, rel, v, w, [&](const prim::CawResult &r) {
            res = r;
            done = true;
        });
        wait(done);
    };

    int rc = 2;
    if (cmd == "xfer" && args.size() == 2) {
        std::string data = pattern(args[0], parse_size(args[1]));
        auto t0 = steady_clock::now();
        prim::XferResult r;
        do_xfer(args[0], data, r);
        double ms = ms_since(t0);
        std::printf("xfer %s: %zu bytes to %u nodes in %.3f ms (%.1f MB/s): %s\n", args[0].c_str(),
                    data.size(), set.size(), ms, data.size() / ms / 1000.0,
                    r.ok ? "ok" : ("FAILED on " + r.failed.str()).c_str());
        rc = r.ok ? 0 : 1;
    } else if (cmd == "verify" && args.size() == 2) {
        std::string data = pattern(args[0], parse_size(args[1]));
        prim::CawResult r;
        do_caw("crc:" + args[0], prim::Relation::eq, static_cast<int64_t>(prim::crc32c(data)), std::nullopt,
               r);
        std::printf("verify %s: %s\n", args[0].c_str(),
                    !r.ok     ? ("no answer from " + r.failed.str()).c_str()
                    : r.holds ? "every node holds the data"
                              : "some node lacks the data");
        rc = r.ok && r.holds ? 0 : 1;
    } else if (cmd == "caw" && (args.size() == 3 || args.size() == 4)) {
        std::optional<prim::Engine::Write> w;
        if (args.size() == 4) {
            auto eq = args[3].find('=');
            if (eq == std::string::npos)
                usage("write as WVAR=WVAL");
            w = prim::Engine::Write{args[3].substr(0, eq), std::stoll(args[3].substr(eq + 1))};
        }
        prim::CawResult r;
        auto t0 = steady_clock::now();
        do_caw(args[0], parse_rel(args[1]), std::stoll(args[2]), w, r);
        std::printf("caw %s %s %s on %u nodes in %.3f ms: %s%s\n", args[0].c_str(), args[1].c_str(),
                    args[2].c_str(), set.size(), ms_since(t0),
                    !r.ok     ? ("no answer from " + r.failed.str()).c_str()
                    : r.holds ? "holds"
                              : "does not hold",
                    r.written ? ", written" : "");
        rc = r.ok && r.holds && (!w || r.written) ? 0 : 1;
    } else if (cmd == "bench" && args.size() == 3 && (args[0] == "xfer" || args[0] == "caw")) {
        int count = std::stoi(args[1]);
        std::string data = pattern("bench", parse_size(args[2]));
        std::vector<double> lat;
        bool ok = true;
        auto one = [&] {
            if (args[0] == "xfer") {
                prim::XferResult r;
                do_xfer("bench", data, r);
                return r.ok;
            }
            prim::CawResult r;
            do_caw("bench", prim::Relation::ge, 0, std::nullopt, r);
            return r.ok;
        };
        // A warm-up, not measured, sets up the connections of the tree and
        // runs for 10 ops and at least 200 ms: on a virtual machine, the
        // first milliseconds after an idle spell run slower than the rest.
        auto warm_until = steady_clock::now() + milliseconds(200);
        for (int k = 0; ok && (k < 10 || steady_clock::now() < warm_until); ++k)
            ok = one();
        for (int k = 0; k < count && ok; ++k) {
            auto t0 = steady_clock::now();
            ok = one();
            lat.push_back(ms_since(t0));
        }
        if (ok && !lat.empty()) {
            std::sort(lat.begin(), lat.end());
            auto pct = [&](double p) {
                return lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
            };
            std::printf("bench %s %s bytes x %d on %u nodes: p50 %.3f ms p99 %.3f ms max %.3f ms\n",
                        args[0].c_str(), args[2].c_str(), count, set.size(), pct(0.5), pct(0.99), lat.back());
        }
        rc = ok ? 0 : 1;
    } else if (cmd == "heartbeat" && (args.size() == 2 || (args.size() == 3 && args[2] == "drain"))) {
        prim::HeartbeatMaster::Config hc;
        hc.interval = microseconds(static_cast<long>(std::stod(args[0]) * 1000)); // INTERVAL in ms
        auto seconds = std::stod(args[1]);
        bool drain = args.size() == 3;
        prim::HeartbeatMaster hb(*engine, base, set, hc);
        std::vector<std::string> faulty;
        hb.on_fault([&](const net::RangeSet &f, const std::string &why) {
            for (uint32_t n : f.members()) {
                std::printf("heartbeat: node %s (%u) %s\n", table[n].name.c_str(), n, why.c_str());
                faulty.push_back(table[n].name);
                if (drain) {
                    std::string c = "scontrol update NodeName=" + table[n].name +
                                    " State=DRAIN Reason='storm: missed heartbeats'";
                    if (std::system(c.c_str()) != 0)
                        std::fprintf(stderr, "storm-prim: %s failed\n", c.c_str());
                }
            }
            std::fflush(stdout);
        });
        hb.start();
        engine->run_until([] { return false; }, milliseconds(static_cast<long>(seconds * 1000)));
        hb.stop();
        std::printf(
            "heartbeat: %llu beats every %s ms to %u nodes (%llu skipped while a queue was full); %zu "
            "faulty\n",
            static_cast<unsigned long long>(hb.issued()), args[0].c_str(), set.size(),
            static_cast<unsigned long long>(hb.late()), faulty.size());
        rc = faulty.empty() ? 0 : 1;
    } else {
        usage(("bad command or arguments: " + cmd).c_str());
    }
    engine.reset();
    event_base_free(base);
    return rc;
}
