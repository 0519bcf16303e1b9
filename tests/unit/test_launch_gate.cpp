// Unit tests of the launch gate (launch_bcast/gate.cpp): slurmstepd held
// on every node until the broadcast's file is in place there, and failed
// with the broadcast; the gate's socket (trusted uids only, malformed
// requests, waiters that go away, ended sessions forgotten), the
// variable's format, and a held step hearing from its agent.

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <event2/thread.h>

#include "tests/unit/bcast_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace bcast_fixture;
using test_helpers::contains;

namespace {

// srun --bcast's overlap: the client opens the broadcast, slurmstepd waits
// on every node's gate while nothing is streamed yet, and each is let go
// only once the file is in place on its node (every node confirmed every
// byte).  A session the node never saw is refused at once; a waiter that
// comes after the commit goes at once.
void test_launch_gate_holds_until_commit(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    std::string data = make_file(src, 2 << 20, 0755);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(5, t.path);
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(5)), scan(src));
    uint64_t sid = b.open();
    assert_int_not_equal(sid, 0);
    assert_int_equal(b.open(), sid); // again: at once, the same session
    Waiters w(bc, 5, {sid}, out);
    std::this_thread::sleep_for(200ms);
    assert_int_equal(w.answered(), 0); // held: not a byte was streamed yet
    assert_true(listing(out).size() == 5 && listing(out)[0].rfind(".slurm_bcast_42.0_node0.storm-", 0) == 0);
    b.finish();
    w.join();
    for (unsigned i = 0; i < 5; ++i) {
        assert_string_equal(w.results[i]->error.c_str(), "");
        assert_true(w.results[i]->in_place);
        assert_true(slurp(out + "/slurm_bcast_42.0_node" + std::to_string(i)) == data);
    }
    // After the commit: at once.
    gate::wait(bc.gate(2), 42, 0, {sid});
    // A session this node never saw.
    std::string err = test_helpers::error_of<std::runtime_error>([&] {
        gate::wait(bc.gate(1), 42, 0, {sid, sid + 1});
    });
    assert_true(contains(err, "broadcast " + session_hex(sid + 1) + " is unknown on this node"));
}

// A node dying mid-transfer: no waiter anywhere is let go.  The live
// nodes' waiters hear that the head aborted the broadcast, the dying
// node's that its agent stopped; and no node has the file.
void test_launch_gate_fails_with_the_broadcast(void **)
{
    if (geteuid() != 0)
        skip();
    TempDir t;
    std::string src = t.path + "/prog";
    make_file(src, 4 << 20, 0755);
    std::string out = open_to_all(t.path + "/out");
    BcastCluster bc(6, t.path);
    bc.kill_after(4, 20);
    FakeAuth user(kUser);
    Broadcast b(user, bc.options(out + "/", cred(6)), scan(src));
    uint64_t sid = b.open();
    Waiters w(bc, 6, {sid}, out);
    std::this_thread::sleep_for(100ms);
    std::string err = test_helpers::error_of<BcastError>([&] { b.finish(); });
    assert_true(contains(err, "node4: "));
    w.join();
    for (unsigned i = 0; i < 6; ++i) {
        const auto &r = *w.results[i];
        assert_false(r.in_place);
        assert_true(contains(r.error, "broadcast " + session_hex(sid) +
                                          " failed: " + (i == 4 ? "the agent is stopping" : "")));
    }
    assert_int_equal(bc.sessions_left(), 0);
    assert_true(listing(out).empty());
}

// The gate's socket: only the trusted uids may ask; a malformed request is
// answered with an error and leaves the gate working; the variable's
// format.
void test_launch_gate_requests(void **)
{
    TempDir t;
    event_base *base = event_base_new();
    std::string sock = t.path + "/g.sock";
    auto spin = [&] {
        for (int i = 0; i < 20; ++i)
            event_base_loop(base, EVLOOP_NONBLOCK);
    };
    // The error a waiter on `path` gets, while this thread runs the loop.
    auto refusal = [&](const std::string &path, std::vector<uint64_t> sids) {
        std::atomic<bool> done{false};
        std::string e;
        std::thread c([&] {
            e = test_helpers::error_of<std::runtime_error>([&] { gate::wait(path, 1, 0, sids); });
            done = true;
        });
        for (int i = 0; i < 2000 && !done; ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        c.join();
        return e;
    };
    {
        LaunchGate g(base, sock, {geteuid() + 1}, Logger("gate"));
        g.start();
        assert_true(contains(refusal(sock, {7}), "only slurmstepd may hold a step"));
    }
    // Every gate is gone before the loop it listens on: a gate freed after
    // event_base_free() would free its events into freed memory.
    {
        LaunchGate g(base, sock, {geteuid()}, Logger("gate"));
        g.start();
        g.opened(9);
        std::atomic<int> phase{0};
        std::string junk;
        std::thread c([&] {
            junk = net::unix_request(sock, "junk", 2000);
            phase = 1;
            gate::wait(sock, 1, 0, {9}); // answered once session 9 ends
            phase = 2;
        });
        for (int i = 0; i < 2000 && !(phase == 1 && g.waiters() == 1); ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        assert_int_equal(g.waiters(), 1);
        assert_true(contains(junk, "malformed request"));
        g.ended(9, "");
        for (int i = 0; i < 2000 && phase != 2; ++i) {
            spin();
            std::this_thread::sleep_for(1ms);
        }
        c.join();
        assert_int_equal(phase, 2);
        assert_int_equal(g.waiters(), 0);
        // A waiter whose slurmstepd goes away is dropped.
        g.opened(10);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, sock.c_str());
        assert_int_equal(connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        std::string req = gate::hold(1, 0, {10});
        assert_int_equal(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
        for (int i = 0; i < 200 && g.waiters() == 0; ++i)
            spin();
        assert_int_equal(g.waiters(), 1);
        close(fd);
        for (int i = 0; i < 200 && g.waiters() == 1; ++i)
            spin();
        assert_int_equal(g.waiters(), 0);
        // Ended sessions are forgotten after `keep` (here 0 s).
        {
            LaunchGate quick(base, t.path + "/q.sock", {geteuid()}, Logger("gate"), std::chrono::seconds(0));
            quick.start();
            quick.opened(11);
            quick.ended(11, "");
            std::this_thread::sleep_for(5ms);
            quick.sweep();
            assert_true(contains(refusal(t.path + "/q.sock", {11}), "is unknown on this node"));
        }
    }
    event_base_free(base);
    // The variable.
    assert_string_equal(gate::format({1, 0xabcdef0123456789ull}).c_str(),
                        "0000000000000001,abcdef0123456789");
    assert_true(gate::parse("0000000000000001,abcdef0123456789") ==
                (std::vector<uint64_t>{1, 0xabcdef0123456789ull}));
    for (const char *bad : {"", "1", "0000000000000001,", "ABCDEF0123456789", "000000000000000g"})
        assert_true(contains(test_helpers::error_of<std::invalid_argument>([&] { gate::parse(bad); }),
                             "is not a broadcast's session id"));
    std::string many;
    for (int i = 0; i <= 16; ++i)
        many += (i ? "," : "") + gate::format({static_cast<uint64_t>(i)});
    assert_true(contains(test_helpers::error_of<std::invalid_argument>([&] { gate::parse(many); }),
                         "more than 16 broadcasts"));
}

// A held step hears from its agent every `still` interval, so it waits as
// long as its broadcast lives, beyond its limit for silence; an agent that
// says nothing for that long (its loop stuck) fails the step, with the
// reason, instead of holding it for ever.
void test_launch_gate_still(void **)
{
    TempDir t;
    event_base *base = event_base_new();
    std::string sock = t.path + "/s.sock";
    auto run_loop_until = [&](std::chrono::steady_clock::time_point until, const std::atomic<bool> &done) {
        while (std::chrono::steady_clock::now() < until && !done) {
            event_base_loop(base, EVLOOP_NONBLOCK);
            std::this_thread::sleep_for(1ms);
        }
    };
    {
        LaunchGate g(base, sock, {geteuid()}, Logger("gate"), std::chrono::minutes(10), 50ms);
        g.start();
        g.opened(21);
        std::atomic<bool> done{false};
        std::string err = "not answered";
        std::thread c([&] {
            err = test_helpers::error_of<std::runtime_error>([&] { gate::wait(sock, 1, 0, {21}, 300ms); });
            done = true;
        });
        // Held for 1 s, over three times the waiter's 300 ms.
        run_loop_until(std::chrono::steady_clock::now() + 1s, done);
        assert_false(done);
        assert_int_equal(g.waiters(), 1);
        g.ended(21, "");
        run_loop_until(std::chrono::steady_clock::now() + 5s, done);
        c.join();
        assert_string_equal(err.c_str(), ""); // let go: its program is in place
        // The loop stops running (a stuck agent): the step gives up after
        // its limit, and says why.
        g.opened(22);
        auto t0 = std::chrono::steady_clock::now();
        std::string stuck =
            test_helpers::error_of<std::runtime_error>([&] { gate::wait(sock, 1, 0, {22}, 300ms); });
        auto took = std::chrono::steady_clock::now() - t0;
        assert_true(contains(stuck, "said nothing for 300 ms while it held the step"));
        assert_true(took >= 300ms && took < 5s);
    }
    event_base_free(base);
}

} // namespace

int main()
{
    evthread_use_pthreads();
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_launch_gate_holds_until_commit),
        cmocka_unit_test(test_launch_gate_fails_with_the_broadcast),
        cmocka_unit_test(test_launch_gate_requests),
        cmocka_unit_test(test_launch_gate_still),
    };
    return cmocka_run_group_tests_name("launch_gate", tests, nullptr, nullptr);
}
