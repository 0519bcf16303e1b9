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
//   storm-prim -h | --help                       this list
//
// Options (before the command): -n NODES; -f F, the fanout of multi-chunk
// transfers (1-64, default 2); -c SIZE, the chunk size (64k, or 786240
// where the agents multicast); -w W, chunks in flight (64).
//
// NODES is a set of indices into Slurm's node table ("0-63,70") or "all"
// (the default).  SIZE accepts k/M suffixes.  The data of xfer/verify is a
// pattern derived from EVENT and SIZE, so verify needs no copy of it.  Reads
// slurm.conf (SLURM_CONF) for the nodes, SwitchParameters and AuthInfo; must
// run as SlurmUser or SlurmdUser (munge).
//
// The commands are a table (kCommands: name, arguments, help, handler), as
// flux-core's flux-kvs has: a handler checks its arguments before anything
// reads slurm.conf or connects, so a bad argument costs nothing.
//
// Exit: 0 success, 1 the operation failed or did not hold, 2 usage or
// set-up error: a bad option or argument is one line naming it and its
// value ("storm-prim: -f abc: not a whole number from 1 to 64").
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
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

// One line on stderr, exit 2.
[[noreturn]] void fail(const std::string &why)
{
    std::fprintf(stderr, "storm-prim: %s\n", why.c_str());
    std::exit(2);
}

// A bad value of option or argument `what`.
[[noreturn]] void bad(const std::string &what, const std::string &value, const std::string &why)
{
    fail(what + " " + (value.empty() ? "\"\"" : value) + ": " + why);
}

// A whole number in [lo, hi], digits only.
uint64_t parse_uint(const std::string &what, const std::string &s, uint64_t lo, uint64_t hi)
{
    auto why = "not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
        bad(what, s, why);
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
    if (errno == ERANGE || v < lo || v > hi)
        bad(what, s, why);
    return v;
}

// A signed 64-bit number.
int64_t parse_int(const std::string &what, const std::string &s)
{
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) || *end || errno == ERANGE)
        bad(what, s, "not a whole number (64 bits, signed)");
    return v;
}

// Bytes: a whole number with an optional k or M suffix, at most `max`.
uint64_t parse_size(const std::string &what, const std::string &s, uint64_t max)
{
    auto why = "not a size from 0 to " + std::to_string(max) + " bytes (a whole number, k or M after it)";
    size_t digits = s.find_first_not_of("0123456789");
    std::string unit = digits == std::string::npos ? "" : s.substr(digits);
    unsigned shift = unit.empty()                 ? 0
                     : unit == "k" || unit == "K" ? 10
                     : unit == "M" || unit == "m" ? 20
                                                  : 64;
    if (s.empty() || digits == 0 || shift == 64)
        bad(what, s, why);
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
    if (errno == ERANGE || v > (max >> shift))
        bad(what, s, why);
    return v << shift;
}

// A number > 0 and at most `max`, fractions allowed.
double parse_positive(const std::string &what, const std::string &s, double max)
{
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) || *end || errno == ERANGE ||
        !std::isfinite(v) || v <= 0 || v > max)
        bad(what, s, "not a number above 0 and at most " + std::to_string(static_cast<long long>(max)));
    return v;
}

// An event or variable name.
const std::string &parse_name(const std::string &what, const std::string &s)
{
    if (s.empty() || s.size() > prim::kMaxName)
        bad(what, s, "names have 1 to " + std::to_string(prim::kMaxName) + " bytes");
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
    bad("REL", r, "not a relation (ge, lt, eq or ne)");
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

double ms_since(steady_clock::time_point t0)
{
    return duration<double, std::milli>(steady_clock::now() - t0).count();
}

// The largest transfer an agent takes (EngineConfig::max_event_bytes).
const uint64_t kMaxSize = prim::EngineConfig{}.max_event_bytes;

// The options, and what a command sets up once its arguments are checked:
// the node table, the node set and an initiator's engine.
struct Prim {
    std::string nodes_arg = "all";
    net::RangeSet nodes; // parsed from nodes_arg, unless "all"
    unsigned data_fanout = 0, window = 0;
    size_t chunk = 0;

    std::vector<shim::SlurmNode> table;
    agent::AgentConfig acfg;
    net::RangeSet set;
    event_base *base = nullptr;
    std::unique_ptr<net::Authenticator> auth;
    std::unique_ptr<prim::Engine> engine;

    ~Prim()
    {
        engine.reset();
        if (base)
            event_base_free(base);
    }

    // slurm.conf: the node table and the agents' settings.
    void read_config()
    {
        if (slurm_conf_init(nullptr) != SLURM_SUCCESS)
            fail("cannot read slurm.conf (set SLURM_CONF)");
        try {
            table = shim::slurm_node_table();
            acfg = agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
        } catch (const std::exception &e) {
            fail(e.what());
        }
    }

    // read_config(), the set, and the engine.
    void connect()
    {
        read_config();
        set = nodes_arg == "all" ? net::RangeSet::range(0, static_cast<uint32_t>(table.size())) : nodes;
        if (!set.empty() && set.nth(set.size() - 1) >= table.size())
            bad("-n", nodes_arg,
                "node " + std::to_string(set.nth(set.size() - 1)) + " is beyond the node table (" +
                    std::to_string(table.size()) + " nodes)");
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
        base = event_base_new();
        if (!base)
            fail("cannot make an event loop");
        auth = shim::daemon_authenticator();
        engine = std::make_unique<prim::Engine>(base, ec, *auth, Logger("storm-prim"));
    }

    void wait(bool &done)
    {
        if (!engine->run_until([&] { return done; }, 600s)) {
            std::fprintf(stderr, "storm-prim: no result within 600 s\n");
            std::exit(1);
        }
    }
    prim::XferResult xfer(const std::string &ev, const std::string &data)
    {
        bool done = false;
        prim::XferResult res;
        engine->xfer_and_signal(set, ev, data, [&](const prim::XferResult &r) {
            res = r;
            done = true;
        });
        wait(done);
        return res;
    }
    prim::CawResult caw(const std::string &var, prim::Relation rel, int64_t v,
                        std::optional<prim::Engine::Write> w)
    {
        bool done = false;
        prim::CawResult res;
        engine->compare_and_write(set, var, rel, v, w, [&](const prim::CawResult &r) {
            res = r;
            done = true;
        });
        wait(done);
        return res;
    }
};

using Args = std::vector<std::string>;

int cmd_xfer(Prim &p, const Args &a)
{
    const std::string &ev = parse_name("EVENT", a[0]);
    std::string data = pattern(ev, parse_size("SIZE", a[1], kMaxSize));
    p.connect();
    auto t0 = steady_clock::now();
    prim::XferResult r = p.xfer(ev, data);
    double ms = ms_since(t0);
    std::printf("xfer %s: %zu bytes to %u nodes in %.3f ms (%.1f MB/s): %s\n", ev.c_str(), data.size(),
                p.set.size(), ms, data.size() / ms / 1000.0,
                r.ok ? "ok" : ("FAILED on " + r.failed.str()).c_str());
    return r.ok ? 0 : 1;
}

int cmd_verify(Prim &p, const Args &a)
{
    const std::string &ev = parse_name("EVENT", a[0]);
    if (ev.size() > prim::kMaxName - 4)
        bad("EVENT", ev, "verify checks the variable crc:EVENT, whose name has at most 255 bytes");
    std::string data = pattern(ev, parse_size("SIZE", a[1], kMaxSize));
    p.connect();
    prim::CawResult r =
        p.caw("crc:" + ev, prim::Relation::eq, static_cast<int64_t>(prim::crc32c(data)), std::nullopt);
    std::printf("verify %s: %s\n", ev.c_str(),
                !r.ok     ? ("no answer from " + r.failed.str()).c_str()
                : r.holds ? "every node holds the data"
                          : "some node lacks the data");
    return r.ok && r.holds ? 0 : 1;
}

int cmd_caw(Prim &p, const Args &a)
{
    const std::string &var = parse_name("VAR", a[0]);
    prim::Relation rel = parse_rel(a[1]);
    int64_t value = parse_int("VALUE", a[2]);
    std::optional<prim::Engine::Write> w;
    if (a.size() == 4) {
        auto eq = a[3].find('=');
        if (eq == std::string::npos)
            bad("WVAR=WVAL", a[3], "write as WVAR=WVAL");
        w = prim::Engine::Write{parse_name("WVAR", a[3].substr(0, eq)),
                                parse_int("WVAL", a[3].substr(eq + 1))};
    }
    p.connect();
    auto t0 = steady_clock::now();
    prim::CawResult r = p.caw(var, rel, value, w);
    std::printf("caw %s %s %s on %u nodes in %.3f ms: %s%s\n", var.c_str(), a[1].c_str(), a[2].c_str(),
                p.set.size(), ms_since(t0),
                !r.ok     ? ("no answer from " + r.failed.str()).c_str()
                : r.holds ? "holds"
                          : "does not hold",
                r.written ? ", written" : "");
    return r.ok && r.holds && (!w || r.written) ? 0 : 1;
}

int cmd_bench(Prim &p, const Args &a)
{
    const std::string &op = a[0];
    if (op != "xfer" && op != "caw")
        bad("OP", op, "not xfer or caw");
    int count = static_cast<int>(parse_uint("COUNT", a[1], 1, 1000000000));
    std::string data = pattern("bench", parse_size("SIZE", a[2], kMaxSize));
    p.connect();
    std::vector<double> lat;
    bool ok = true;
    auto one = [&] {
        if (op == "xfer")
            return p.xfer("bench", data).ok;
        return p.caw("bench", prim::Relation::ge, 0, std::nullopt).ok;
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
        auto pct = [&](double q) {
            return lat[std::min(lat.size() - 1, static_cast<size_t>(q * lat.size()))];
        };
        std::printf("bench %s %s bytes x %d on %u nodes: p50 %.3f ms p99 %.3f ms max %.3f ms\n", op.c_str(),
                    a[2].c_str(), count, p.set.size(), pct(0.5), pct(0.99), lat.back());
    }
    return ok ? 0 : 1;
}

int cmd_heartbeat(Prim &p, const Args &a)
{
    prim::HeartbeatMaster::Config hc;
    double interval_ms = parse_positive("INTERVAL_MS", a[0], 3600000);
    hc.interval = microseconds(static_cast<long>(interval_ms * 1000));
    if (hc.interval.count() == 0)
        bad("INTERVAL_MS", a[0], "below a microsecond");
    double seconds = parse_positive("SECONDS", a[1], 1e9);
    if (a.size() == 3 && a[2] != "drain")
        bad("heartbeat's third argument", a[2], "only \"drain\" may follow SECONDS");
    bool drain = a.size() == 3;
    p.connect();
    prim::HeartbeatMaster hb(*p.engine, p.base, p.set, hc);
    std::vector<std::string> faulty;
    hb.on_fault([&](const net::RangeSet &f, const std::string &why) {
        for (uint32_t n : f.members()) {
            std::printf("heartbeat: node %s (%u) %s\n", p.table[n].name.c_str(), n, why.c_str());
            faulty.push_back(p.table[n].name);
            if (drain) {
                std::string c = "scontrol update NodeName=" + p.table[n].name +
                                " State=DRAIN Reason='storm: missed heartbeats'";
                if (std::system(c.c_str()) != 0)
                    std::fprintf(stderr, "storm-prim: %s failed\n", c.c_str());
            }
        }
        std::fflush(stdout);
    });
    hb.start();
    p.engine->run_until([] { return false; }, milliseconds(static_cast<long>(seconds * 1000)));
    hb.stop();
    std::printf("heartbeat: %llu beats every %s ms to %u nodes (%llu skipped while a queue was full); %zu "
                "faulty\n",
                static_cast<unsigned long long>(hb.issued()), a[0].c_str(), p.set.size(),
                static_cast<unsigned long long>(hb.late()), faulty.size());
    return faulty.empty() ? 0 : 1;
}

int cmd_nodes(Prim &p, const Args &)
{
    p.read_config();
    for (size_t k = 0; k < p.table.size(); ++k)
        std::printf("%zu %s %s:%u\n", k, p.table[k].name.c_str(), p.table[k].address.c_str(), p.acfg.port);
    return 0;
}

struct Command {
    const char *name;
    const char *args; // as the usage shows them
    const char *help;
    size_t min_args, max_args;
    int (*run)(Prim &, const Args &); // the exit status
};

const Command kCommands[] = {
    {"xfer", "EVENT SIZE", "XFER-AND-SIGNAL of SIZE bytes", 2, 2, cmd_xfer},
    {"verify", "EVENT SIZE", "did every node get them intact?", 2, 2, cmd_verify},
    {"caw", "VAR REL VALUE [WVAR=WVAL]", "COMPARE-AND-WRITE; REL: ge lt eq ne", 3, 4, cmd_caw},
    {"bench", "xfer|caw COUNT SIZE", "latency: p50, p99 of COUNT ops after a warm-up", 3, 3, cmd_bench},
    {"heartbeat", "INTERVAL_MS SECONDS [drain]", "heartbeats with fault detection; drain: drain faulty nodes",
     2, 3, cmd_heartbeat},
    {"nodes", "", "the node table", 0, 0, cmd_nodes},
};

void usage(FILE *to)
{
    std::fprintf(to, "usage: storm-prim [-n NODES] [-f FANOUT] [-c CHUNK] [-w WINDOW] COMMAND [ARGS]\n");
    for (const auto &c : kCommands) {
        std::string line = std::string(c.name) + (*c.args ? " " : "") + c.args;
        std::fprintf(to, "  %-40s %s\n", line.c_str(), c.help);
    }
    std::fprintf(to,
                 "  NODES: all (default) or indices like 0-63,70; FANOUT: 1-64 (2); CHUNK: a size like 64k;\n"
                 "  WINDOW: chunks in flight, 1-1048576 (64); SIZE: bytes, k or M after the number\n");
}

} // namespace

int main(int argc, char **argv)
{
    block_sigpipe();
    Prim p;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; ++i) {
        std::string opt = argv[i];
        if (opt == "-h" || opt == "--help") {
            usage(stdout);
            return 0;
        }
        if (opt != "-n" && opt != "-f" && opt != "-c" && opt != "-w")
            fail(opt + ": unknown option (storm-prim --help lists them)");
        if (i + 1 >= argc)
            fail(opt + ": needs a value");
        std::string val = argv[++i];
        if (opt == "-n") {
            p.nodes_arg = val;
            if (val != "all") {
                try {
                    p.nodes = net::RangeSet::parse(val);
                } catch (const std::exception &e) {
                    bad(opt, val, e.what());
                }
            }
        } else if (opt == "-f") {
            p.data_fanout = static_cast<unsigned>(parse_uint(opt, val, 1, 64));
        } else if (opt == "-w") {
            p.window = static_cast<unsigned>(parse_uint(opt, val, 1, 1u << 20));
        } else {
            p.chunk = parse_size(opt, val, net::kMaxDataPayload - 1024); // the engine's limit
            if (p.chunk == 0)
                bad(opt, val, "a chunk has at least one byte");
        }
    }
    if (i >= argc)
        fail("no command (storm-prim --help lists them)");
    std::string name = argv[i++];
    Args args(argv + i, argv + argc);
    const Command *cmd = nullptr;
    for (const auto &c : kCommands)
        if (name == c.name)
            cmd = &c;
    if (!cmd)
        fail(name + ": unknown command (storm-prim --help lists them)");
    if (args.size() < cmd->min_args || args.size() > cmd->max_args)
        fail(name + ": takes " + (*cmd->args ? cmd->args : "no arguments") + ", not " +
             std::to_string(args.size()) + " argument" + (args.size() == 1 ? "" : "s"));
    try {
        return cmd->run(p, args);
    } catch (const std::exception &e) { // set-up: the engine, munge, the event loop
        fail(name + ": " + e.what());
    }
}
