// Unit tests of the switch's flush state machine (switch_rdma/msg/flush.hpp,
// seed 002 figure 3): every interleaving of the local halt (release) with
// the peers' halt (ready) marks completes exactly once, at the right event.
#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <vector>

#include "switch_rdma/msg/flush.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::rdma::msg;
using test_helpers::contains;
using test_helpers::error_of;
using Answer = Flush::Answer;
using Phase = Flush::Phase;

namespace {

// Events: -1 the local halt (release), p >= 1 peer p's mark; self is rank 0.
void run_interleavings(bool release)
{
    for (uint32_t peers = 1; peers <= 4; ++peers) {
        std::vector<int> ev{-1};
        for (uint32_t p = 1; p <= peers; ++p)
            ev.push_back(static_cast<int>(p));
        std::sort(ev.begin(), ev.end());
        size_t orders = 0;
        do {
            Flush f(peers + 1, 0, 4);
            if (release) { // reach halted at epoch 5 first
                f.local_halt(5);
                for (uint32_t p = 1; p <= peers; ++p)
                    f.arrived_halt(p, 5);
                assert_true(f.phase() == Phase::halted);
            }
            size_t answers = 0;
            bool local = false;
            uint32_t marks = 0;
            for (size_t i = 0; i < ev.size(); ++i) {
                Answer a;
                if (ev[i] < 0) {
                    a = release ? f.local_release(5) : f.local_halt(5);
                    local = true;
                    assert_false(f.may_inject() && i + 1 < ev.size());
                } else {
                    a = release ? f.arrived_ready(static_cast<uint32_t>(ev[i]), 5)
                                : f.arrived_halt(static_cast<uint32_t>(ev[i]), 5);
                    ++marks;
                }
                bool complete = local && marks == peers;
                if (complete) {
                    assert_true(a == (release ? Answer::ready : Answer::halted));
                    ++answers;
                } else {
                    assert_true(a == Answer::none);
                    // Before the local event the task still runs (halt) or
                    // is still halted (release); after it, it waits.
                    if (!local)
                        assert_true(f.phase() == (release ? Phase::halted : Phase::running));
                    else {
                        assert_true(f.waiting());
                        assert_int_equal(f.arrived(), marks);
                        assert_true(f.missing() > 0);
                    }
                }
            }
            assert_int_equal(answers, 1);
            assert_true(f.phase() == (release ? Phase::running : Phase::halted));
            assert_int_equal(f.epoch(), 5);
            assert_true(f.may_inject() == release);
            ++orders;
        } while (std::next_permutation(ev.begin(), ev.end()));
        size_t fact = 1;
        for (size_t k = 2; k <= ev.size(); ++k)
            fact *= k;
        assert_int_equal(orders, fact);
    }
}

void test_halt_interleavings(void **) { run_interleavings(false); }
void test_release_interleavings(void **) { run_interleavings(true); }

// A peer released, sent its ready, and was already halted again (next
// epoch) before this task's release: both marks are kept.
// The agent's next switch comes before a release completed: the halt ends
// the release; the task halts once every peer's READY and HALT arrived.
void test_halt_during_release(void **)
{
    Flush f(3, 0, 1, true); // attached halted at epoch 1
    assert_true(f.local_release(1) == Answer::none);
    assert_true(f.arrived_ready(1, 1) == Answer::none);
    assert_false(f.may_inject());
    assert_true(f.local_halt(9) == Answer::none);
    assert_false(f.may_inject());
    assert_true(f.arrived_halt(1, 9) == Answer::none);
    assert_int_equal(f.missing(), 2);
    assert_true(f.arrived_ready(2, 1) == Answer::none);
    assert_true(f.arrived_halt(2, 9) == Answer::halted);
    assert_true(f.local_release(9) == Answer::none);
    f.arrived_ready(1, 9);
    assert_true(f.arrived_ready(2, 9) == Answer::ready);
    assert_true(f.may_inject());
}

void test_later_epoch_early(void **)
{
    Flush f(3, 1, 0);
    f.local_halt(1);
    f.arrived_halt(0, 1);
    assert_true(f.arrived_halt(2, 1) == Answer::halted);
    // Peers 0 and 2 got their release first: ready(1) then halt(2).
    assert_true(f.peer_halted(0));
    assert_true(f.arrived_ready(0, 1) == Answer::none);
    assert_false(f.peer_halted(0)); // it may send data again
    assert_true(f.arrived_halt(0, 2) == Answer::none);
    assert_true(f.peer_halted(0));
    assert_true(f.arrived_ready(2, 1) == Answer::none);
    assert_true(f.phase() == Phase::halted);
    assert_true(f.local_release(1) == Answer::ready);
    assert_true(f.may_inject());
    // Peer 0's halt(2) came early; peer 2's comes after the local halt.
    assert_true(f.local_halt(2) == Answer::none);
    assert_int_equal(f.missing(), 2);
    assert_true(f.arrived_halt(2, 2) == Answer::halted);
    // Many cycles in a row.
    for (uint64_t e = 3; e < 300; ++e) {
        f.arrived_ready(0, e - 1);
        f.arrived_ready(2, e - 1);
        assert_true(f.local_release(e - 1) == Answer::ready);
        f.arrived_halt(2, e);
        assert_true(f.local_halt(e) == Answer::none);
        assert_true(f.arrived_halt(0, e) == Answer::halted);
    }
}

void test_protocol_errors(void **)
{
    Flush f(2, 0, 3);
    assert_true(contains(error_of<FlushError>([&] { f.arrived_halt(1, 3); }), "halt mark for epoch 3"));
    assert_true(contains(error_of<FlushError>([&] { f.arrived_ready(1, 4); }), "ready mark for epoch 4"));
    assert_true(
        contains(error_of<FlushError>([&] { f.local_release(4); }), "release for epoch 4 while running"));
    assert_true(contains(error_of<FlushError>([&] { f.local_halt(3); }), "halt for epoch 3"));
    assert_true(contains(error_of<FlushError>([&] { f.arrived_halt(0, 4); }), "not a peer"));
    assert_true(contains(error_of<FlushError>([&] { f.arrived_halt(2, 4); }), "not a peer"));
    f.arrived_halt(1, 4);
    // A halt that does not increase the peer's epoch.
    assert_true(contains(error_of<FlushError>([&] { f.arrived_halt(1, 4); }), "after its marks halt 4"));
    assert_true(f.local_halt(4) == Answer::halted);
    assert_true(contains(error_of<FlushError>([&] { f.local_halt(4); }), "while halted"));
    assert_true(contains(error_of<FlushError>([&] { f.local_release(3); }), "release for epoch 3"));
    // A peer that was never released halts again (no ready in between),
    // and so does this task, from halted: both at epoch 5.
    assert_true(f.local_halt(5) == Answer::none);
    assert_true(f.arrived_halt(1, 5) == Answer::halted);
    // A later halt supersedes one still collecting marks.
    assert_true(f.local_halt(6) == Answer::none);
    assert_true(f.local_halt(7) == Answer::none);
    assert_true(f.arrived_halt(1, 6) == Answer::none);
    assert_true(f.arrived_halt(1, 7) == Answer::halted);
    // A halted start (attached while swapped out).
    Flush g(2, 1, 7, true);
    assert_true(g.phase() == Phase::halted);
    g.arrived_ready(0, 7);
    assert_true(g.local_release(7) == Answer::ready);
    assert_true(contains(error_of<std::invalid_argument>([] { Flush(2, 0, 0, true); }), "epoch >= 1"));
}

void test_failed_and_gone_peers(void **)
{
    // A peer that left counts as having sent every mark.
    Flush f(4, 0, 0);
    f.arrived_halt(1, 1);
    assert_true(f.local_halt(1) == Answer::none);
    assert_true(f.peer_gone(2) == Answer::none);
    assert_int_equal(f.missing(), 3);
    assert_true(f.peer_gone(3) == Answer::halted);
    assert_true(f.arrived_halt(3, 9) == Answer::none); // ignored once gone
    assert_true(f.local_release(1) == Answer::none);
    assert_true(f.arrived_ready(1, 1) == Answer::ready);
    // A failed machine completes nothing, whatever arrives.
    Flush g(3, 0, 0);
    g.local_halt(1);
    g.arrived_halt(1, 1);
    g.set_failed();
    assert_true(g.phase() == Phase::failed);
    assert_false(g.may_inject());
    assert_false(g.waiting());
    assert_true(g.arrived_halt(2, 1) == Answer::none);
    assert_true(g.local_release(1) == Answer::none);
    assert_true(g.peer_gone(2) == Answer::none);
    assert_true(g.phase() == Phase::failed);
}

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_halt_interleavings), cmocka_unit_test(test_release_interleavings),
        cmocka_unit_test(test_later_epoch_early),  cmocka_unit_test(test_halt_during_release),
        cmocka_unit_test(test_protocol_errors),    cmocka_unit_test(test_failed_and_gone_peers),
    };
    return cmocka_run_group_tests_name("msg_flush", tests, nullptr, nullptr);
}
