// Shared fixture of the primitives' unit tests: many agents in one
// process on loopback ports, one event loop, a fake authenticator (munge
// itself is tested in test_munge_auth).
#pragma once

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "lib/prim/engine.hpp"
#include "tests/unit/cmocka.hpp"

namespace prim_fixture {

using namespace storm;
using namespace storm::prim;
using namespace std::chrono_literals;
using net::RangeSet;

// "FAKE:<serial>:<uid>:<payload>"; a serial is accepted once (replay
// detection).  Credentials made by an authenticator carry its uid; uid 0 is
// the daemons' (trusted).
class FakeAuth : public net::Authenticator {
public:
    explicit FakeAuth(uid_t uid = 0) : uid_(uid) {}
    // Thread-safe, as the contract wants (engines call it from their
    // AuthOffload's threads).  `delay`: each call takes this long, as a
    // busy munged's.
    std::string credential(std::string_view payload) override
    {
        std::this_thread::sleep_for(delay);
        return "FAKE:" + std::to_string(++serial()) + ":" + std::to_string(uid_) + ":" + std::string(payload);
    }
    Verified verify(std::string_view cred) override
    {
        std::this_thread::sleep_for(delay);
        std::lock_guard<std::mutex> l(mu_);
        std::string c(cred);
        if (c.rfind("FAKE:", 0) != 0)
            throw net::AuthError("Invalid credential");
        size_t colon = c.find(':', 5);
        size_t colon2 = colon == std::string::npos ? colon : c.find(':', colon + 1);
        if (colon2 == std::string::npos)
            throw net::AuthError("Invalid credential");
        if (!seen_.insert(c.substr(5, colon - 5)).second)
            throw net::AuthError("Replayed credential");
        return {static_cast<uid_t>(std::stoul(c.substr(colon + 1, colon2 - colon - 1))),
                c.substr(colon2 + 1)};
    }
    bool trusted(uid_t uid) const override { return uid == 0; }

    std::chrono::milliseconds delay{0};

private:
    static std::atomic<uint64_t> &serial()
    {
        static std::atomic<uint64_t> s{0};
        return s;
    }
    uid_t uid_;
    std::mutex mu_;
    std::set<std::string> seen_;
};

// n bytes of a deterministic pseudo-random pattern.
inline std::string pattern(size_t n, unsigned seed)
{
    std::string s(n, '\0');
    uint32_t x = seed * 2654435761u + 1;
    for (auto &c : s) {
        x = x * 1103515245u + 12345u;
        c = static_cast<char>(x >> 24);
    }
    return s;
}

inline sockaddr_in loopback(uint16_t port)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

// A port below the ephemeral range (where outgoing connections would take
// it from under us) that nobody is listening on now, in 12000-19999: the
// programs of msg_fixture.hpp (make -j runs them beside these) listen on
// ports from 20000 they do not check first, and one of theirs taken here
// would answer their peers ("not a libstormmsg peer").
inline uint16_t free_port()
{
    static uint16_t next = static_cast<uint16_t>(12000 + (getpid() % 250) * 32);
    for (;;) {
        uint16_t p = next++;
        if (next >= 20000)
            next = 12000;
        int s = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a = loopback(p);
        bool ok = bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
        close(s);
        if (ok)
            return p;
    }
}

struct Cluster {
    event_base *base = event_base_new();
    FakeAuth auth;
    std::vector<sockaddr_in> table;
    std::vector<std::unique_ptr<Engine>> agents;
    std::unique_ptr<Engine> initiator;
    std::vector<EngineConfig> agent_config;

    // With `mcast`, every agent also runs the multicast data path.
    Cluster(unsigned n, unsigned fanout, std::chrono::milliseconds timeout = 2000ms,
            std::optional<net::McastConfig> mcast = std::nullopt)
    {
        for (unsigned i = 0; i < n; ++i)
            table.push_back(loopback(free_port()));
        for (unsigned i = 0; i < n; ++i) {
            EngineConfig c;
            c.self = i;
            c.nodes = table;
            c.fanout = fanout;
            c.timeout = timeout;
            c.chunk_size = 64 << 10;
            if (mcast)
                c.mcast = *mcast;
            agent_config.push_back(c);
            agents.push_back(std::make_unique<Engine>(base, c, auth, Logger("agent" + std::to_string(i))));
            agents.back()->listen();
        }
        EngineConfig c;
        c.nodes = table;
        c.fanout = fanout;
        c.timeout = timeout;
        c.chunk_size = 64 << 10;
        initiator = std::make_unique<Engine>(base, c, auth, Logger("initiator"));
    }
    // Agent i (dead or alive) as if its daemon restarted: a fresh engine on
    // the same address.
    void restart(unsigned i)
    {
        agents[i].reset();
        agents[i] =
            std::make_unique<Engine>(base, agent_config[i], auth, Logger("agent" + std::to_string(i)));
        agents[i]->listen();
    }
    ~Cluster()
    {
        initiator.reset();
        agents.clear();
        event_base_free(base);
    }

    XferResult xfer(const RangeSet &set, const std::string &ev, const std::string &data,
                    std::chrono::milliseconds limit = 20000ms)
    {
        bool done = false;
        XferResult res;
        initiator->xfer_and_signal(set, ev, data, [&](const XferResult &r) {
            res = r;
            done = true;
        });
        assert_true(initiator->run_until([&] { return done; }, limit));
        return res;
    }
    CawResult caw(const RangeSet &set, const std::string &var, Relation rel, int64_t v,
                  std::optional<Engine::Write> w)
    {
        bool done = false;
        CawResult res;
        initiator->compare_and_write(set, var, rel, v, w, [&](const CawResult &r) {
            res = r;
            done = true;
        });
        assert_true(initiator->run_until([&] { return done; }, 20000ms));
        return res;
    }
};

} // namespace prim_fixture
