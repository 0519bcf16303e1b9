// Unit tests of the node's step listing (agent/step_listing.hpp): which
// steps are listed again and what a settled step hands back.
#include <stdexcept>

#include "tests/unit/cmocka.hpp"

#include <map>
#include <set>
#include <vector>

#include "agent/step_listing.hpp"

using storm::agent::StepListing;
using Step = StepListing::Step;

namespace {

// A node's steps and their processes, as slurmstepd would list them, and
// which processes the caller holds.
struct Node {
    std::map<Step, std::vector<pid_t>> steps;
    std::set<Step> ended; // listed as running, gone by the time it is asked
    std::set<pid_t> held;
    std::vector<Step> asked; // the steps listed, in order
    bool fail = false;

    StepListing listing()
    {
        return StepListing(
            [this] {
                if (fail)
                    throw std::runtime_error("cannot list the steps in /spool");
                std::vector<Step> v;
                for (auto &[s, p] : steps)
                    v.push_back(s);
                return v;
            },
            [this](const Step &s) -> std::optional<std::vector<pid_t>> {
                asked.push_back(s);
                if (ended.count(s))
                    return std::nullopt;
                return steps.at(s);
            });
    }
    storm::node::HeldTest holds()
    {
        return [this](uint32_t, pid_t p) { return held.count(p) > 0; };
    }
};

bool same(const Step &a, const Step &b) { return !(a < b) && !(b < a); }

// A step whose processes are all held is listed once, then handed back
// from its listing; a new step of the job is listed; other jobs are not.
void test_settled_not_listed_again(void **)
{
    Node n;
    n.steps = {{{1, 0, 0}, {100, 101}}, {{2, 0, 0}, {200}}};
    auto l = n.listing();
    auto out = l({1}, n.holds()); // not held yet: listed
    assert_int_equal(n.asked.size(), 1);
    assert_true(same(n.asked[0], {1, 0, 0}));
    assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {100, 101}}}));
    assert_int_equal(l.settled(), 0);
    n.held = {100, 101}; // the caller moved them into the job's group
    l({1}, n.holds());
    assert_int_equal(n.asked.size(), 2); // listed again: now all held, settled
    assert_int_equal(l.settled(), 1);
    n.steps[{1, 0, 0}].push_back(102); // born in the group: not seen, not needed
    for (int i = 0; i < 3; ++i) {
        out = l({1}, n.holds());
        assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {100, 101}}}));
    }
    assert_int_equal(n.asked.size(), 2);
    assert_int_equal(l.listings(), 2);
    // A new step of job 1: listed; the settled one is not.
    n.steps[{1, 1, 0}] = {110};
    out = l({1}, n.holds());
    assert_int_equal(n.asked.size(), 3);
    assert_true(same(n.asked[2], {1, 1, 0}));
    assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {100, 101, 110}}}));
    // Its process is not held: listed at every call until it is.
    l({1}, n.holds());
    assert_int_equal(n.asked.size(), 4);
    n.held.insert(110);
    l({1}, n.holds());
    l({1}, n.holds());
    assert_int_equal(n.asked.size(), 5);
    assert_int_equal(l.settled(), 2);
}

// A settled step whose listed processes are no longer held (they exited)
// is listed again; one holding a process the caller does not hold is never
// settled; an empty listing (no task yet) does not settle a step.
void test_listed_again(void **)
{
    Node n;
    n.steps = {{{1, 0, 0}, {100}}, {{1, 1, 0}, {}}};
    n.held = {100};
    auto l = n.listing();
    l({1}, n.holds());
    assert_int_equal(n.asked.size(), 2);
    assert_int_equal(l.settled(), 1); // step 1.1 listed nothing
    l({1}, n.holds());
    assert_int_equal(n.asked.size(), 3); // 1.1 again
    assert_true(same(n.asked[2], {1, 1, 0}));
    n.held.clear(); // 100 exited
    n.steps[{1, 0, 0}] = {105};
    auto out = l({1}, n.holds());
    assert_int_equal(n.asked.size(), 5);
    assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {105}}}));
    assert_int_equal(l.settled(), 0);
    // Partly held: never settled.
    n.held = {105};
    n.steps[{1, 0, 0}] = {105, 106};
    for (int i = 0; i < 3; ++i)
        l({1}, n.holds());
    assert_int_equal(n.asked.size(), 11);
    assert_int_equal(l.settled(), 0);
}

// Without a HeldTest every step is listed, and a settled step stays
// settled for the caller that holds its processes; a step that ended is
// left out and forgotten; a failed listing of the steps throws.
void test_without_held_and_ended(void **)
{
    Node n;
    n.steps = {{{1, 0, 0}, {100}}, {{3, 0, 1}, {300}}};
    n.held = {100, 300};
    auto l = n.listing();
    l({1, 3}, n.holds());
    assert_int_equal(l.settled(), 2);
    for (int i = 0; i < 2; ++i) {
        auto out = l({1, 3}, {});
        assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {100}}, {3, {300}}}));
    }
    assert_int_equal(n.asked.size(), 6);
    assert_int_equal(l.settled(), 2);
    l({1, 3}, n.holds());
    assert_int_equal(n.asked.size(), 6);
    // Step 3.0 ends: gone from the steps, forgotten.
    n.steps.erase({3, 0, 1});
    auto out = l({1, 3}, n.holds());
    assert_true((out == std::map<uint32_t, std::vector<pid_t>>{{1, {100}}}));
    assert_int_equal(l.settled(), 1);
    // A step listed as running that ends before it is asked: absent.
    n.steps[{4, 0, 0}] = {400};
    n.ended = {{4, 0, 0}};
    out = l({4}, n.holds());
    assert_true(out.empty());
    n.fail = true;
    bool threw = false;
    try {
        l({1}, n.holds());
    } catch (const std::runtime_error &) {
        threw = true;
    }
    assert_true(threw);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settled_not_listed_again),
        cmocka_unit_test(test_listed_again),
        cmocka_unit_test(test_without_held_and_ended),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
