// Unit tests of select/gang's packing policy (sched_gang/packing.hpp): edge
// cases, and a simulator that runs one deterministic stream of job arrivals
// and departures through Storm's gang matrix twice, placed once by a model
// of plain cons_tres (first fit: lowest numbered free nodes of the lowest
// row) and once by buddy packing, and compares slots and idle cells.

#include <cinttypes>
#include <cstdio>
#include <deque>
#include <map>

#include "sched_gang/matrix.hpp"
#include "sched_gang/packing.hpp"
#include "tests/unit/cmocka.hpp"

using namespace storm::gang;

namespace {

std::vector<uint32_t> all_nodes(uint32_t n)
{
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < n; ++i)
        v.push_back(i);
    return v;
}

std::vector<uint32_t> range(uint32_t lo, uint32_t hi)
{
    std::vector<uint32_t> v;
    for (uint32_t i = lo; i < hi; ++i)
        v.push_back(i);
    return v;
}

void test_too_large(void **)
{
    PackView v{16, {}};
    auto p = place(v, all_nodes(16), 17, 8);
    assert_int_equal(p.kind, Placement::none);
    assert_true(p.nodes.empty());
    // More nodes than the candidates, although the machine is big enough.
    p = place(v, range(0, 4), 5, 8);
    assert_int_equal(p.kind, Placement::none);
    assert_int_equal(place(v, all_nodes(16), 0, 8).kind, Placement::none);
    assert_int_equal(first_fit(v, all_nodes(16), 17, 8).kind, Placement::none);
}

void test_empty_machine(void **)
{
    PackView v{16, {}};
    auto p = place(v, all_nodes(16), 3, 8);
    assert_int_equal(p.kind, Placement::new_slot);
    assert_int_equal(p.slot, 0);
    assert_true(p.nodes == range(0, 3));
    // The whole machine.
    p = place(v, all_nodes(16), 16, 8);
    assert_true(p.nodes == all_nodes(16));
    // A machine that is not a power of two: the tree's missing leaves are
    // never free.
    PackView odd{12, {}};
    p = place(odd, all_nodes(12), 12, 8);
    assert_true(p.nodes == all_nodes(12));
    p = place(odd, all_nodes(12), 5, 8);
    assert_int_equal(p.nodes.size(), 5);
}

void test_buddy_alignment(void **)
{
    // Node 0 busy: a 2-node job takes the aligned pair 2-3, not 1-2.
    PackView v{16, {{0}}};
    auto p = place(v, all_nodes(16), 2, 8);
    assert_int_equal(p.kind, Placement::existing);
    assert_int_equal(p.slot, 0);
    assert_true(p.nodes == range(2, 4));
    assert_true(first_fit(v, all_nodes(16), 2, 8).nodes == range(1, 3));
    // Best fit: 0-3 and 8-9 busy; the pair goes to 10-11 (its buddy 8-9 is
    // busy), keeping the aligned block 4-7 whole.
    v.slots = {{0, 1, 2, 3, 8, 9}};
    p = place(v, all_nodes(16), 2, 8);
    assert_true(p.nodes == range(10, 12));
    // A 3-node job goes into a 4-block and leaves its fourth node free
    // next to nothing else: 4-7 is the tightest 4-block with 3 free.
    v.slots = {{0, 1, 2, 3, 8, 9}};
    p = place(v, all_nodes(16), 3, 8);
    assert_int_equal(p.nodes.size(), 3);
    assert_true(p.nodes[0] >= 4 && p.nodes[2] < 8);
    // No aligned block holds it: the job spans blocks of the lowest slot
    // that has enough free nodes rather than opening a slot.
    v.slots = {{0, 2, 4, 6, 8, 10, 12, 14}};
    p = place(v, all_nodes(16), 4, 8);
    assert_int_equal(p.kind, Placement::existing);
    assert_int_equal(p.nodes.size(), 4);
    for (uint32_t n : p.nodes)
        assert_int_equal(n % 2, 1);
}

void test_new_slot_only(void **)
{
    // Slot 0 has 4 free nodes; an 8-node job needs a new slot, lined up
    // with slot 0's full block 0-7 rather than the ragged 8-15.
    PackView v{16, {range(0, 12)}};
    auto p = place(v, all_nodes(16), 8, 8);
    assert_int_equal(p.kind, Placement::new_slot);
    assert_int_equal(p.slot, 1);
    assert_true(p.nodes == range(0, 8));
    // The matrix is full (max_slots): no answer.
    p = place(v, all_nodes(16), 8, 1);
    assert_int_equal(p.kind, Placement::none);
    // A lower slot is preferred to a higher one.
    v.slots = {range(0, 16), range(0, 8)};
    p = place(v, all_nodes(16), 4, 8);
    assert_int_equal(p.kind, Placement::existing);
    assert_int_equal(p.slot, 1);
    assert_true(p.nodes == range(8, 12));
}

void test_candidates_restricted(void **)
{
    PackView v{16, {{0, 1}}};
    std::vector<uint32_t> cand{3, 5, 6, 7, 9};
    auto p = place(v, cand, 2, 8);
    assert_int_equal(p.kind, Placement::existing);
    assert_true(p.nodes == (std::vector<uint32_t>{6, 7})); // the aligned pair
    p = place(v, cand, 5, 8);
    assert_true(p.nodes == cand);
    assert_int_equal(place(v, cand, 6, 8).kind, Placement::none);
    // Candidates busy in slot 0: a new slot on the candidates only.
    p = place(v, {0, 1}, 2, 8);
    assert_int_equal(p.kind, Placement::new_slot);
    assert_true(p.nodes == (std::vector<uint32_t>{0, 1}));
    // Out-of-range indices are ignored.
    p = place(v, {2, 3, 99}, 2, 8);
    assert_true(p.nodes == (std::vector<uint32_t>{2, 3}));
}

void test_pack_view(void **)
{
    // Core-level cells: jobs 1 and 2 hold different cores of node 3 and
    // share slot 0; node 3 counts once, busy.  Job 3 collides with job 1 on
    // node 5's core 0: slot 1.
    Matrix m(8);
    JobShape a{1, {uint64_t(3) << 20 | 0, uint64_t(5) << 20 | 0}, {}};
    JobShape b{2, {uint64_t(3) << 20 | 1}, {}};
    JobShape c{3, {uint64_t(5) << 20 | 0, uint64_t(6) << 20 | 0}, {}};
    m.update({a, b, c});
    PackView v = pack_view(m, 8);
    assert_int_equal(v.slots.size(), 2);
    assert_true(v.slots[0] == (std::vector<uint32_t>{3, 5}));
    assert_true(v.slots[1] == (std::vector<uint32_t>{5, 6}));
    // A 2-node job fits slot 0 on an aligned free pair (0-1).
    auto p = place(v, all_nodes(8), 2, 8);
    assert_int_equal(p.slot, 0);
    assert_true(p.nodes == range(0, 2));
}

// ---- the simulator ----------------------------------------------------------

struct Lcg {
    uint64_t s;
    uint32_t next()
    {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<uint32_t>(s >> 33);
    }
    uint32_t in(uint32_t lo, uint32_t hi) { return lo + next() % (hi - lo + 1); } // [lo, hi]
};

struct SimJob {
    uint32_t id, size, life;
};

struct Figures {
    double slots = 0, idle = 0;
    uint64_t placed = 0;
};

using Policy = Placement (*)(const PackView &, const std::vector<uint32_t> &, uint32_t, unsigned);

std::vector<JobShape> shapes(const std::map<uint32_t, std::vector<uint32_t>> &running)
{
    std::vector<JobShape> out;
    for (const auto &[id, nodes] : running) {
        JobShape j;
        j.job_id = id;
        for (uint32_t n : nodes)
            j.cells.push_back(uint64_t(n) << 20); // whole nodes
        out.push_back(std::move(j));
    }
    return out;
}

// One stream (seeded) through one policy: each step, jobs whose time is up
// leave, one job of 1..max_size nodes arrives with probability 3/4, and the
// queue is served in order (a job that fits nowhere within `mpl` slots
// waits, later ones may pass it).  Slots and idle cells are sampled after
// every step.
Figures simulate(Policy policy, uint32_t nodes, uint32_t max_size, unsigned mpl, uint64_t seed,
                 unsigned steps)
{
    Lcg rng{seed};
    Matrix m(mpl);
    std::map<uint32_t, std::vector<uint32_t>> running;
    std::map<uint32_t, uint32_t> ends;
    std::deque<SimJob> queue;
    Figures f;
    uint32_t next_id = 1;
    auto all = all_nodes(nodes);
    for (unsigned t = 0; t < steps; ++t) {
        for (auto it = ends.begin(); it != ends.end();) {
            if (it->second > t) {
                ++it;
                continue;
            }
            running.erase(it->first);
            it = ends.erase(it);
        }
        m.update(shapes(running));
        if (rng.in(0, 3) != 0)
            queue.push_back({next_id++, rng.in(1, max_size), rng.in(4, 40)});
        for (auto q = queue.begin(); q != queue.end();) {
            Placement p = policy(pack_view(m, nodes), all, q->size, mpl);
            if (p.kind == Placement::none) {
                ++q;
                continue;
            }
            assert_int_equal(p.nodes.size(), q->size);
            running[q->id] = p.nodes;
            ends[q->id] = t + q->life;
            m.update(shapes(running));
            assert_int_equal(m.homes().at(q->id), p.slot); // the matrix agrees
            assert_false(m.overflowed());
            ++f.placed;
            q = queue.erase(q);
        }
        f.slots += m.slots();
        for (unsigned s = 0; s < m.slots(); ++s)
            f.idle += static_cast<double>(m.idle_cells(s));
    }
    f.slots /= steps;
    f.idle /= steps;
    return f;
}

void compare(uint32_t nodes, uint32_t max_size)
{
    const unsigned mpl = 8, steps = 3000;
    Figures a{}, b{};
    const uint64_t seeds[] = {1, 2, 3, 4, 5};
    for (uint64_t seed : seeds) {
        Figures x = simulate(first_fit, nodes, max_size, mpl, seed, steps);
        Figures y = simulate(place, nodes, max_size, mpl, seed, steps);
        a.slots += x.slots / 5;
        a.idle += x.idle / 5;
        a.placed += x.placed;
        b.slots += y.slots / 5;
        b.idle += y.idle / 5;
        b.placed += y.placed;
    }
    printf("packing %2u nodes, jobs 1-%u nodes, MPL %u, 5 x %u steps:\n", nodes, max_size, mpl, steps);
    printf("  cons_tres model (first fit): %.3f slots, %7.2f idle cells on average, %" PRIu64 " jobs\n",
           a.slots, a.idle, a.placed);
    printf("  buddy packing:               %.3f slots, %7.2f idle cells on average, %" PRIu64 " jobs\n",
           b.slots, b.idle, b.placed);
    printf("  idle cells: %.1f%% fewer\n", a.idle > 0 ? 100.0 * (a.idle - b.idle) / a.idle : 0.0);
    assert_true(b.slots <= a.slots + 1e-9);
    assert_true(b.idle < a.idle);
}

void test_compare_16(void **) { compare(16, 8); }
void test_compare_64(void **) { compare(64, 32); }

} // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_empty_machine),
        cmocka_unit_test(test_buddy_alignment),
        cmocka_unit_test(test_new_slot_only),
        cmocka_unit_test(test_candidates_restricted),
        cmocka_unit_test(test_pack_view),
        cmocka_unit_test(test_compare_16),
        cmocka_unit_test(test_compare_64),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
