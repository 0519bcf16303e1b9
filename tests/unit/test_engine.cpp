// Unit tests of STORM's primitives (lib/prim/engine.*): many agents in one
// process on loopback, one event loop, with a fake authenticator (munge
// itself is tested in test_munge_auth).  Fault injection: agents killed
// before and during transfers, an agent that never answers, corrupt frames,
// frames before authentication, forged and replayed credentials.
#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/prim/checksum.hpp"
#include "lib/prim/engine.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace storm;
using namespace storm::prim;
using namespace std::chrono_literals;
using net::RangeSet;
using namespace prim_fixture;

namespace {

void test_xfer_small_and_large(void **)
{
    Cluster cl(16, 2);
    auto r = cl.xfer(RangeSet::range(0, 16), "small", "0123456789abcdef");
    assert_true(r.ok);
    for (auto &a : cl.agents) {
        std::string d;
        assert_int_equal(a->test_event("small", &d), 1);
        assert_true(d == "0123456789abcdef");
    }
    std::string big = pattern(3 << 20, 7); // 48 chunks of 64 KiB, 8 in flight
    r = cl.xfer(RangeSet::range(0, 16), "big", big);
    assert_true(r.ok);
    for (auto &a : cl.agents) {
        std::string d;
        assert_int_equal(a->test_event("big", &d), 1);
        assert_true(d == big);
    }
    // The same event again: TEST-EVENT counts signals.
    assert_true(cl.xfer(RangeSet::range(0, 16), "small", "x").ok);
    assert_int_equal(cl.agents[9]->test_event("small"), 2);
    // Every event's count and checksum, as variables COMPARE-AND-WRITE can
    // test; a variable set by that name wins.
    assert_int_equal(cl.agents[9]->variable("event:small"), 2);
    assert_int_equal(cl.agents[9]->variable("crc:small"), crc32c("x"));
    assert_int_equal(cl.agents[3]->variable("crc:big"), crc32c(big));
    assert_int_equal(cl.agents[3]->variable("event:none"), 0);
    assert_int_equal(cl.agents[3]->variable("crc:none"), 0);
    assert_int_equal(cl.agents[3]->variable("event:"), 0);
    auto r2 = cl.caw(RangeSet::range(0, 16), "crc:big", Relation::eq, crc32c(big), std::nullopt);
    assert_true(r2.ok && r2.holds);
    cl.agents[3]->set_variable("event:small", 40);
    assert_int_equal(cl.agents[3]->variable("event:small"), 40);
    // An empty transfer still signals.
    assert_true(cl.xfer(RangeSet::range(0, 16), "empty", "").ok);
    assert_int_equal(cl.agents[15]->test_event("empty"), 1);
}

void test_xfer_subset(void **)
{
    Cluster cl(12, 3);
    RangeSet set = RangeSet::parse("3,5-9,11");
    assert_true(cl.xfer(set, "ev", "data").ok);
    for (uint32_t i = 0; i < 12; ++i)
        assert_int_equal(cl.agents[i]->test_event("ev"), set.contains(i) ? 1 : 0);
}

void test_caw(void **)
{
    Cluster cl(10, 3);
    RangeSet all = RangeSet::range(0, 10);
    for (auto &a : cl.agents)
        a->set_variable("x", 5);
    auto r = cl.caw(all, "x", Relation::ge, 5, Engine::Write{"y", 7});
    assert_true(r.ok && r.holds && r.written);
    for (auto &a : cl.agents)
        assert_int_equal(a->variable("y"), 7);
    // Fails on one node: no write anywhere.
    cl.agents[6]->set_variable("x", 4);
    r = cl.caw(all, "x", Relation::ge, 5, Engine::Write{"y", 9});
    assert_true(r.ok && !r.holds && !r.written);
    for (auto &a : cl.agents)
        assert_int_equal(a->variable("y"), 7);
    assert_true(cl.caw(all, "x", Relation::lt, 6, std::nullopt).holds);
    assert_true(cl.caw(all, "x", Relation::ne, 3, std::nullopt).holds);
    assert_false(cl.caw(all, "x", Relation::eq, 5, std::nullopt).holds);
    assert_true(cl.caw(RangeSet::range(0, 6), "x", Relation::eq, 5, std::nullopt).holds);
}

void test_caw_concurrent_same_value(void **)
{
    Cluster cl(16, 2);
    RangeSet all = RangeSet::range(0, 16);
    // Two initiators race: "if v = 0 then v := mine".  Exactly one wins and
    // every node ends with the winner's value.
    EngineConfig c;
    c.nodes = cl.table;
    c.fanout = 2;
    Engine other(cl.base, c, cl.auth, Logger("other"));
    int done = 0;
    CawResult r1, r2;
    cl.initiator->compare_and_write(all, "v", Relation::eq, 0, Engine::Write{"v", 111},
                                    [&](const CawResult &r) {
                                        r1 = r;
                                        ++done;
                                    });
    other.compare_and_write(all, "v", Relation::eq, 0, Engine::Write{"v", 222}, [&](const CawResult &r) {
        r2 = r;
        ++done;
    });
    assert_true(cl.initiator->run_until([&] { return done == 2; }, 20000ms));
    assert_true(r1.ok && r2.ok);
    assert_true(r1.written != r2.written);
    int64_t v = cl.agents[0]->variable("v");
    assert_true(v == 111 || v == 222);
    assert_int_equal(v, r1.written ? 111 : 222);
    for (auto &a : cl.agents)
        assert_int_equal(a->variable("v"), v);
}

void test_dead_node_routed_around(void **)
{
    Cluster cl(16, 2);
    cl.agents[1].reset(); // an inner node of the binary tree, dead before the transfer
    cl.agents[0].reset(); // and the root itself
    auto r = cl.xfer(RangeSet::range(0, 16), "ev", pattern(200000, 3));
    assert_false(r.ok);
    assert_string_equal(r.failed.str().c_str(), "0-1"); // only the dead ones
    for (uint32_t i = 2; i < 16; ++i)
        assert_int_equal(cl.agents[i]->test_event("ev"), 1);
}

// A node whose daemon went down and came back is reached again well within
// the timeout: a refused or closed connection is retried after a short
// pause, not after a whole timeout.  While it is down, it alone fails.
void test_restarted_node_reached_again(void **)
{
    Cluster cl(8, 2, 4000ms);
    assert_true(cl.xfer(RangeSet::range(0, 8), "ev", "before").ok);
    cl.agents[3].reset();
    cl.initiator->run_until([] { return false; }, 100ms); // the connections to it close
    for (int k = 0; k < 3; ++k) {                         // refused at once, each time, and routed around
        auto t0 = std::chrono::steady_clock::now();
        auto r = cl.xfer(RangeSet::range(0, 8), "ev", "down " + std::to_string(k));
        assert_false(r.ok);
        assert_string_equal(r.failed.str().c_str(), "3");
        assert_true(std::chrono::steady_clock::now() - t0 < 1000ms);
    }
    cl.restart(3);
    auto t0 = std::chrono::steady_clock::now();
    bool ok = false;
    while (!ok && std::chrono::steady_clock::now() - t0 < 3000ms) {
        ok = cl.xfer(RangeSet::range(0, 8), "ev", "after").ok;
        if (!ok)
            cl.initiator->run_until([] { return false; }, 50ms);
    }
    auto took = std::chrono::steady_clock::now() - t0;
    assert_true(ok);
    // Within the pause of the last refusals (at most 2 s after 3 of them),
    // not the 4 s timeout.
    assert_true(took < 2100ms);
    std::string data;
    assert_int_equal(cl.agents[3]->test_event("ev", &data), 1);
    assert_string_equal(data.c_str(), "after");
}

// Unanswered transfers (strobes): every live node gets the data once, the
// dead ones are routed around, no answer comes back, and a transfer beyond
// one chunk is refused.  Frames with route timeout 0 are refused for
// COMPARE-AND-WRITE (test_bad_input_rejected covers malformed frames).
void test_xfer_unacked(void **)
{
    Cluster cl(16, 2);
    for (int k = 0; k < 5; ++k)
        cl.initiator->xfer_unacked(RangeSet::range(0, 16), "strobe", "slot " + std::to_string(k));
    // Every agent from `first` on has had `count` strobes.
    auto strobed = [&](uint32_t first, uint64_t count) {
        return cl.initiator->run_until(
            [&] {
                for (uint32_t i = first; i < 16; ++i)
                    if (cl.agents[i]->test_event("strobe") < count)
                        return false;
                return true;
            },
            5000ms);
    };
    assert_true(strobed(0, 5));
    std::string data;
    assert_int_equal(cl.agents[15]->test_event("strobe", &data), 5);
    assert_string_equal(data.c_str(), "slot 4");
    cl.agents[1].reset(); // an inner node and the root: the others still get it
    cl.agents[0].reset();
    cl.initiator->run_until([] { return false; }, 100ms); // their connections close
    cl.initiator->xfer_unacked(RangeSet::range(0, 16), "strobe", "slot 5");
    assert_true(strobed(2, 6));
    // Agents never reached (a fresh initiator): routed around as well.
    EngineConfig ec;
    ec.nodes = cl.table;
    ec.fanout = 2;
    Engine fresh(cl.base, ec, cl.auth, Logger("fresh"));
    fresh.xfer_unacked(RangeSet::range(0, 16), "strobe", "slot 6");
    assert_true(strobed(2, 7));
    // A node initiating for a set it heads applies it itself.
    cl.agents[2]->xfer_unacked(RangeSet::range(2, 16), "own", "x");
    assert_true(cl.initiator->run_until([&] { return cl.agents[9]->test_event("own") == 1; }, 5000ms));
    assert_int_equal(cl.agents[2]->test_event("own"), 1);
    bool threw = false;
    try {
        cl.initiator->xfer_unacked(RangeSet::range(2, 16), "big", std::string(1 << 20, 'x'));
    } catch (const std::invalid_argument &) {
        threw = true;
    }
    assert_true(threw);
}

void test_node_killed_mid_transfer(void **)
{
    Cluster cl(16, 2);
    bool done = false, killed = false;
    XferResult res;
    std::string data = pattern(8 << 20, 5);
    cl.initiator->xfer_and_signal(RangeSet::range(0, 16), "ev", data, [&](const XferResult &r) {
        res = r;
        done = true;
    });
    auto t0 = std::chrono::steady_clock::now();
    assert_true(cl.initiator->run_until(
        [&] {
            if (!killed && cl.agents[15]->test_event("ev") == 0) {
                // Kill node 2 once node 15 (below it) is receiving.
                std::string partial;
                if (std::chrono::steady_clock::now() - t0 > 50ms) {
                    cl.agents[2].reset();
                    killed = true;
                }
            }
            return done;
        },
        30000ms));
    assert_true(killed);
    assert_false(res.ok);
    assert_true(res.failed.contains(2));
    // Nodes outside node 2's subtree got everything.
    assert_int_equal(cl.agents[1]->test_event("ev"), 1);
    assert_false(res.failed.contains(1));
}

void test_abandoned_transfer_reclaimed(void **)
{
    Cluster cl(4, 2, 100ms);
    // An initiator starts a large transfer and dies after the first chunks.
    auto quitter = std::make_unique<Engine>(
        cl.base,
        [&] {
            EngineConfig c;
            c.nodes = cl.table;
            c.fanout = 2;
            c.chunk_size = 64 << 10;
            c.window = 2;
            c.timeout = 100ms;
            return c;
        }(),
        cl.auth, Logger("quitter"));
    quitter->xfer_and_signal(RangeSet::range(0, 4), "half", std::string(4 << 20, 'x'),
                             [](const XferResult &) {});
    assert_true(cl.initiator->run_until([&] { return cl.agents[3]->partial_transfers() == 1; }, 5000ms));
    quitter.reset();
    // Three timeouts later nothing of it is left on any node, and no event fired.
    assert_true(cl.initiator->run_until(
        [&] {
            for (auto &a : cl.agents)
                if (a->partial_transfers())
                    return false;
            return true;
        },
        3000ms));
    for (auto &a : cl.agents)
        assert_int_equal(a->test_event("half"), 0);
}

void test_silent_node_times_out(void **)
{
    Cluster cl(8, 2, 300ms);
    // Agent 3 is replaced by a socket that accepts and never answers.
    cl.agents[3].reset();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = cl.table[3];
    assert_int_equal(bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    listen(s, 8);
    auto t0 = std::chrono::steady_clock::now();
    auto r = cl.xfer(RangeSet::range(0, 8), "ev", "data", 10000ms);
    auto took = std::chrono::steady_clock::now() - t0;
    close(s);
    assert_false(r.ok);
    assert_true(r.failed.contains(3));
    assert_int_equal(r.failed.size(), 1); // its parent's timeout blames it alone
    assert_true(took < 5s);               // bounded: timeout x (tree levels + 1)
    assert_int_equal(cl.agents[0]->test_event("ev"), 1);
}

// Raw bytes to agent 0, made from the challenge the agent sent first;
// returns true if the agent closed the connection.
bool agent_closes_after(Cluster &cl, const std::function<std::string(const std::string &challenge)> &make)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = cl.table[0];
    if (connect(s, reinterpret_cast<sockaddr *>(&a), sizeof a) < 0) {
        close(s);
        return false;
    }
    std::string in;
    cl.initiator->run_until(
        [&] {
            char b[256];
            ssize_t n = recv(s, b, sizeof b, MSG_DONTWAIT);
            if (n > 0)
                in.append(b, static_cast<size_t>(n));
            return in.size() >= net::kHeaderSize &&
                   in.size() >= net::kHeaderSize + net::decode_header(in.data()).length;
        },
        3000ms);
    std::string challenge;
    if (in.size() >= net::kHeaderSize) {
        net::Reader r(std::string_view(in).substr(net::kHeaderSize));
        challenge = std::string(r.bytes(64));
    }
    std::string bytes = make(challenge);
    send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    bool closed = false;
    cl.initiator->run_until(
        [&] {
            char b[256];
            ssize_t n = recv(s, b, sizeof b, MSG_DONTWAIT);
            if (n == 0)
                closed = true;
            return closed;
        },
        3000ms);
    close(s);
    return closed;
}
bool agent_closes_after(Cluster &cl, const std::string &bytes)
{
    return agent_closes_after(cl, [&](const std::string &) { return bytes; });
}

// Connections that never authenticate (issue 39, hole 3): from one
// address, only max_unauthenticated_per_address are held, the others
// closed at accept; those held are closed once the hello deadline passes;
// and the agent still serves an authenticated initiator.
void test_unauthenticated_connections_bounded(void **)
{
    Cluster cl(2, 2);
    cl.agent_config[0].hello_timeout = 400ms;
    cl.agent_config[0].max_unauthenticated = 8;
    cl.agent_config[0].max_unauthenticated_per_address = 4;
    cl.restart(0);
    Engine &agent = *cl.agents[0];
    std::vector<int> socks;
    for (int i = 0; i < 6; ++i) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = cl.table[0];
        assert_int_equal(connect(s, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
        socks.push_back(s);
    }
    // Nothing sent: 4 held, 2 closed at once.
    cl.initiator->run_until([&] { return agent.unauthenticated() + agent.connections_refused() == 6; },
                            3000ms);
    assert_int_equal(agent.unauthenticated(), 4);
    assert_int_equal(agent.connections_refused(), 2);
    // Past the deadline (at most 1.25 of it): none held, every socket closed.
    auto closed = [&] {
        int n = 0;
        for (int s : socks) {
            char b[16];
            ssize_t r = recv(s, b, sizeof b, MSG_DONTWAIT);
            n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        }
        return n;
    };
    auto t0 = std::chrono::steady_clock::now();
    cl.initiator->run_until([&] { return agent.unauthenticated() == 0 && closed() == 6; }, 3000ms);
    assert_int_equal(agent.unauthenticated(), 0);
    assert_int_equal(agent.hellos_expired(), 4);
    assert_int_equal(closed(), 6);
    assert_true(std::chrono::steady_clock::now() - t0 < 1500ms);
    for (int s : socks)
        close(s);
    // An agent that authenticates is served as ever.
    auto r = cl.xfer(RangeSet::range(0, 2), "after", pattern(1000, 1));
    assert_true(r.ok);
    assert_int_equal(agent.test_event("after"), 1);
}

void test_bad_input_rejected(void **)
{
    Cluster cl(4, 2);
    uint64_t rejected = cl.agents[0]->frames_rejected();
    // Garbage.
    assert_true(agent_closes_after(cl, std::string(64, '\x42')));
    // A valid xfer frame without authentication: never acted on.
    net::Writer w;
    RangeSet::range(0, 1).encode(w);
    w.u64(1);
    w.bytes("sneaky");
    w.u64(0);
    w.u64(1);
    w.bytes("x");
    std::string frame;
    net::encode_frame(frame, net::MsgType::xfer, 1, w.data());
    assert_true(agent_closes_after(cl, frame));
    assert_int_equal(cl.agents[0]->test_event("sneaky"), 0);
    // A forged credential, then a replayed one, then one for another agent.
    auto hello = [](const std::string &cred) {
        net::Writer h;
        h.bytes(cred);
        std::string f;
        net::encode_frame(f, net::MsgType::hello, 0, h.data());
        return f;
    };
    assert_true(agent_closes_after(cl, hello("MUNGE:forged")));
    const std::string nonce = "0123456789abcdef0123456789abcdef";
    std::string good;
    // genuine (answers this connection's challenge): accepted, stays open
    assert_false(agent_closes_after(cl, [&](const std::string &challenge) {
        good = cl.auth.credential("storm:v2:0:4294967295:" + nonce + ":" + challenge);
        return hello(good);
    }));
    assert_true(agent_closes_after(cl, hello(good))); // replayed, to another connection
    // A hello captured where it was never decoded (by a program that bound
    // the port while the agent was down), shown to the agent on a new
    // connection: it answers another challenge.
    std::string captured = cl.auth.credential("storm:v2:0:4294967295:" + nonce + ":" + nonce);
    assert_true(agent_closes_after(cl, hello(captured)));
    assert_true(agent_closes_after(cl, [&](const std::string &challenge) {
        return hello(
            cl.auth.credential("storm:v2:2:4294967295:" + nonce + ":" + challenge)); // another agent's
    }));
    // A header announcing a huge control payload.
    std::string huge;
    net::encode_frame(huge, net::MsgType::caw, 1, "");
    huge[8] = '\x7f';
    assert_true(agent_closes_after(cl, huge));
    assert_true(cl.agents[0]->frames_rejected() >= rejected + 6);
    // The agent still works.
    assert_true(cl.xfer(RangeSet::range(0, 4), "after", "ok").ok);
    assert_int_equal(cl.agents[0]->test_event("after"), 1);
}

// Service frames (the reserved range of lib/net/frame.hpp) reach the
// handler a service registered, unread and in order, each class with its
// own payload limit; a user may send nothing else, an agent without a
// handler refuses them, and a type outside the range closes the connection
// before any handler sees it.
void test_service_frames_forwarded(void **)
{
    Cluster cl(2, 2);
    std::vector<std::pair<net::MsgType, std::string>> got;
    unsigned closed = 0;
    cl.agents[0]->on_service_frames([&](net::Connection &, const net::FrameHeader &h,
                                        std::string_view p) { got.emplace_back(h.type, std::string(p)); },
                                    [&](net::Connection &) { ++closed; });
    auto connect = [&](unsigned agent, net::Authenticator &auth, bool &gone) {
        auto c = net::Connection::connect(cl.base, cl.table[agent], agent, auth);
        c->on_frame([](net::Connection &, const net::FrameHeader &, std::string_view) {});
        c->on_close([&gone](net::Connection &, const std::string &) { gone = true; });
        return c;
    };
    auto run_until = [&](const std::function<bool()> &done) { return cl.initiator->run_until(done, 3000ms); };
    FakeAuth user(1000);
    bool gone = false;
    auto c = connect(0, user, gone);
    std::string big(net::kMaxControlPayload + 1, 'd');
    c->send(net::service_data(3), 1, big); // data class: beyond a control payload
    c->send(net::service_control(7), 2, "ctl");
    assert_true(test_helpers::contains(
        test_helpers::error_of<net::FrameError>([&] { c->send(net::service_control(7), 3, big); }),
        "exceeds the limit"));
    assert_true(run_until([&] { return got.size() == 2; }));
    assert_true(got[0].first == net::service_data(3) && got[0].second == big);
    assert_true(got[1].first == net::service_control(7) && got[1].second == "ctl");
    c->send(net::MsgType::heartbeat, 4, ""); // not a service frame: refused from a user
    assert_true(run_until([&] { return gone && closed == 1; }));
    // A daemon's type outside the range: refused on its header.
    uint64_t rejected = cl.agents[0]->frames_rejected();
    gone = false;
    auto d = connect(0, cl.auth, gone);
    d->send(static_cast<net::MsgType>(net::kServiceLast + 1), 5, "");
    assert_true(run_until([&] { return gone; }));
    assert_int_equal(got.size(), 2);
    assert_int_equal(cl.agents[0]->frames_rejected(), rejected + 1);
    // An agent without a handler refuses service frames, even a daemon's.
    gone = false;
    auto e = connect(1, cl.auth, gone);
    e->send(net::service_data(0), 6, "x");
    assert_true(run_until([&] { return gone; }));
    assert_int_equal(got.size(), 2);
    assert_true(cl.xfer(RangeSet::range(0, 2), "after", "ok").ok);
}

// Asynchronous sinks (Engine::add_async_sink): each node's answer for a
// chunk waits for its sink's done, leaves and inner nodes alike, so the
// initiator hears only once every node's work ran; a failure found late
// fails that node with its reason.  The chunks were forwarded at once.
void test_async_sink_answers_late(void **)
{
    Cluster cl(5, 2);
    std::vector<std::pair<unsigned, Engine::ChunkDone>> waiting;
    unsigned forwarded = 0;
    for (unsigned i = 0; i < 5; ++i)
        cl.agents[i]->add_async_sink("late:",
                                     [&, i](const std::string &, uint64_t, uint64_t, uint64_t,
                                            const storm::net::DataRef &, bool, Engine::ChunkDone done) {
                                         ++forwarded;
                                         waiting.emplace_back(i, std::move(done));
                                     });
    for (bool fail : {true, false}) {
        waiting.clear();
        forwarded = 0;
        bool done = false;
        XferResult res;
        cl.initiator->xfer_and_signal(RangeSet::range(0, 5), "late:x", "bytes", [&](const XferResult &r) {
            res = r;
            done = true;
        });
        // Every node got the chunk while none answered; nothing came back.
        assert_true(cl.initiator->run_until([&] { return forwarded == 5; }, 5000ms));
        assert_false(cl.initiator->run_until([&] { return done; }, 300ms));
        for (auto &[node, d] : waiting)
            d(fail && node == 2 ? "disk full on 2" : "");
        assert_true(cl.initiator->run_until([&] { return done; }, 5000ms));
        if (fail) {
            assert_false(res.ok);
            assert_string_equal(res.failed.str().c_str(), "2");
            assert_string_equal(res.reasons.at(2).c_str(), "disk full on 2");
        } else {
            assert_true(res.ok);
        }
    }
}

} // namespace

int main()
{
    storm::block_sigpipe(); // as the node agent's thread does
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xfer_small_and_large),
        cmocka_unit_test(test_xfer_subset),
        cmocka_unit_test(test_caw),
        cmocka_unit_test(test_caw_concurrent_same_value),
        cmocka_unit_test(test_dead_node_routed_around),
        cmocka_unit_test(test_restarted_node_reached_again),
        cmocka_unit_test(test_xfer_unacked),
        cmocka_unit_test(test_node_killed_mid_transfer),
        cmocka_unit_test(test_abandoned_transfer_reclaimed),
        cmocka_unit_test(test_silent_node_times_out),
        cmocka_unit_test(test_bad_input_rejected),
        cmocka_unit_test(test_unauthenticated_connections_bounded),
        cmocka_unit_test(test_service_frames_forwarded),
        cmocka_unit_test(test_async_sink_answers_late),
    };
    return cmocka_run_group_tests_name("engine", tests, nullptr, nullptr);
}
