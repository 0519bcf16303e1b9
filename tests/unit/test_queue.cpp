// Unit tests of remote queues with global flow control and of heartbeats
// with fault detection (lib/prim/queue.*, heartbeat.*), on agents in one
// process: nothing is lost or reordered when a node stops dequeuing (the
// master waits), a killed or stalled node is reported by the heartbeat
// master, and only that node.

#include "lib/common/signals.hpp"
#include "lib/net/wire.hpp"
#include "lib/prim/heartbeat.hpp"
#include "lib/prim/queue.hpp"
#include "lib/prim/termination.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace prim_fixture;

namespace {

void test_queue_flow_control(void **)
{
    Cluster cl(6, 2);
    RangeSet all = RangeSet::range(0, 6);
    const uint32_t len = 4;
    RemoteQueueMaster q(*cl.initiator, cl.base, all, "q", len);
    std::vector<std::unique_ptr<RemoteQueueSlave>> slaves;
    for (auto &a : cl.agents)
        slaves.push_back(std::make_unique<RemoteQueueSlave>(*a, "q", len));
    int done = 0;
    bool all_ok = true;
    for (int i = 0; i < 10; ++i)
        q.enqueue("item" + std::to_string(i), [&](const XferResult &r) {
            all_ok = all_ok && r.ok;
            ++done;
        });
    // Nobody dequeues: exactly `len` items get through, the rest wait.
    cl.initiator->run_until([&] { return done >= 4; }, 5000ms);
    cl.initiator->run_until([] { return false; }, 200ms);
    assert_int_equal(done, 4);
    assert_int_equal(q.waiting(), 6);
    // Every node but node 3 drains; node 3 still blocks the master.
    std::vector<std::vector<std::string>> got(6);
    auto drain = [&](size_t k) {
        std::string d;
        while (slaves[k]->try_dequeue(d))
            got[k].push_back(d);
    };
    for (size_t k = 0; k < 6; ++k)
        if (k != 3)
            drain(k);
    cl.initiator->run_until([] { return false; }, 300ms);
    assert_int_equal(done, 4);
    // Node 3 drains too, then everybody keeps draining until all arrived.
    assert_true(cl.initiator->run_until(
        [&] {
            for (size_t k = 0; k < 6; ++k)
                drain(k);
            return done == 10;
        },
        10000ms));
    for (size_t k = 0; k < 6; ++k)
        drain(k);
    assert_true(all_ok);
    for (size_t k = 0; k < 6; ++k) {
        assert_int_equal(got[k].size(), 10);
        for (int i = 0; i < 10; ++i)
            assert_string_equal(got[k][i].c_str(),
                                ("item" + std::to_string(i)).c_str()); // in order, none lost
        assert_int_equal(cl.agents[k]->variable(queue_dequeued_var("q")), 10);
    }
}

void test_heartbeat_fault_detection(void **)
{
    Cluster cl(12, 3, 300ms);
    RangeSet all = RangeSet::range(0, 12);
    std::vector<std::unique_ptr<HeartbeatReceiver>> recv;
    for (auto &a : cl.agents) {
        recv.push_back(std::make_unique<HeartbeatReceiver>(*a, "main", 16));
        auto *r = recv.back().get();
        a->on_signal([r](const std::string &ev, uint64_t, const std::string &) { r->on_signal(ev); });
    }
    HeartbeatMaster::Config hc;
    hc.interval = 20ms;
    hc.tolerance = 3;
    hc.check_every = 2;
    HeartbeatMaster hb(*cl.initiator, cl.base, all, hc);
    std::vector<std::pair<std::string, std::string>> faults;
    hb.on_fault([&](const RangeSet &f, const std::string &why) { faults.emplace_back(f.str(), why); });
    hb.start();
    // Healthy: beats flow, nothing reported.
    cl.initiator->run_until([&] { return hb.issued() >= 15; }, 5000ms);
    assert_true(faults.empty());
    for (auto &r : recv)
        assert_true(r->last_seen() + 4 >= hb.issued());
    // Node 7 stalls: its agent stops draining (beats still arrive, unread),
    // so its queue fills and its "seen" stops.  Node 10 dies.
    cl.agents[7]->on_signal(nullptr);
    cl.agents[10].reset();
    assert_true(cl.initiator->run_until([&] { return hb.faulty().size() == 2; }, 10000ms));
    std::set<uint32_t> expect{7, 10};
    assert_true(hb.faulty() == expect);
    assert_int_equal(faults.size(), 2); // each reported once
    // Isolated: the beats reach the healthy nodes again.
    uint64_t mark = hb.issued();
    assert_true(cl.initiator->run_until([&] { return hb.issued() >= mark + 10; }, 5000ms));
    cl.initiator->run_until([] { return false; }, 100ms);
    for (size_t k = 0; k < recv.size(); ++k)
        if (k != 7 && k != 10)
            assert_true(recv[k]->last_seen() + 4 >= hb.issued());
    hb.stop();
}

void test_termination_detection(void **)
{
    Cluster cl(10, 3);
    // The master is node 0 (announcements arrive at its engine); the job
    // runs on nodes 2-9, designated node 2.
    RangeSet job = RangeSet::range(2, 10);
    TerminationDetector det(*cl.agents[0], cl.base, 5ms);
    bool ended = false;
    TerminationDetector::Result res{};
    det.watch("42", job, [&](const std::string &j, const TerminationDetector::Result &r) {
        assert_string_equal(j.c_str(), "42");
        res = r;
        ended = true;
    });
    // Nothing ends: no detection, and no COMPARE-AND-WRITE at all (blocked).
    cl.initiator->run_until([] { return false; }, 100ms);
    assert_false(ended);
    // The designated node ends first and announces; the others not yet.
    bool sent = false;
    announce_termination(*cl.agents[2], "42", true, 0, [&](const XferResult &r) { sent = r.ok; });
    cl.initiator->run_until([&] { return sent; }, 2000ms);
    cl.initiator->run_until([] { return false; }, 60ms);
    assert_false(ended); // polling, but nodes 3-9 still run
    for (uint32_t n = 3; n < 10; ++n)
        announce_termination(*cl.agents[n], "42", false, 0, nullptr);
    assert_true(cl.initiator->run_until([&] { return ended; }, 2000ms));
    assert_true(res.ok);
    assert_true(res.polls >= 2);
    assert_int_equal(det.watching(), 0);
    for (uint32_t n = 2; n < 10; ++n)
        assert_int_equal(cl.agents[n]->variable(terminated_var("42")), 0); // flags reset
    // A node dies before it ends: detection fails and names it.
    det.watch("43", job, [&](const std::string &, const TerminationDetector::Result &r) {
        res = r;
        ended = true;
    });
    ended = false;
    cl.agents[5].reset();
    announce_termination(*cl.agents[2], "43", true, 0, nullptr);
    assert_true(cl.initiator->run_until([&] { return ended; }, 20000ms));
    assert_false(res.ok);
    assert_string_equal(res.failed.str().c_str(), "5");
}

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_flow_control),
        cmocka_unit_test(test_heartbeat_fault_detection),
        cmocka_unit_test(test_termination_detection),
    };
    return cmocka_run_group_tests_name("queue", tests, nullptr, nullptr);
}
