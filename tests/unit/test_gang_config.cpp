// Unit tests of the gang settings: the node side's (how jobs are stopped,
// whether an idle slot lends the node: agent/agent_config.hpp) and
// slurmctld's (quantum, fail-safe, multiprogramming level, the partitions
// that allow it: sched_gang/config.hpp), with the errors naming the
// setting; slurmctld's fault timeout, in the same SchedulerParameters.

#include <vector>

#include "agent/agent_config.hpp"
#include "sched_gang/config.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::gang;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

void test_config(void **)
{
    // The node side: how jobs are stopped (SwitchParameters).
    assert_true(storm::agent::AgentConfig::from_switch_parameters(nullptr).gang_freeze);
    assert_false(storm::agent::AgentConfig::from_switch_parameters("storm_gang_stop=signal").gang_freeze);
    assert_true(storm::agent::AgentConfig::from_switch_parameters(nullptr).gang_lend);
    assert_false(storm::agent::AgentConfig::from_switch_parameters("storm_gang_lend=no").gang_lend);
    assert_true(contains(error_of<storm::ConfigError>([] {
                             storm::agent::AgentConfig::from_switch_parameters("storm_gang_lend=maybe");
                         }),
                         "invalid value \"maybe\" for storm_gang_lend (allowed: yes or no)"));
    assert_true(contains(error_of<ConfigError>([] {
                             storm::agent::AgentConfig::from_switch_parameters("storm_gang_stop=thaw");
                         }),
                         "invalid value \"thaw\" for storm_gang_stop (allowed: freeze or signal)"));
    std::vector<PartitionInfo> parts = {{"debug", false, 1}, {"gang", true, 2}};
    auto c = GangConfig::parse(nullptr, parts, false, true);
    assert_int_equal(c.quantum.count(), 50000);
    assert_int_equal(c.failsafe.count(), 5000);
    assert_int_equal(c.mpl, 2);
    assert_int_equal(c.partitions.size(), 1);
    c = GangConfig::parse("bf_interval=30,storm_gang_quantum=2ms,storm_gang_mpl=1", parts, false, true);
    assert_int_equal(c.quantum.count(), 2000);
    assert_int_equal(c.mpl, 1);
    c = GangConfig::parse("storm_gang_quantum=1s", parts, false, true);
    assert_int_equal(c.failsafe.count(), 10000); // 10 quanta
    auto err = [&](const char *p, bool stock = false, bool sw = true) {
        return error_of<ConfigError>([&] { GangConfig::parse(p, parts, stock, sw); });
    };
    assert_true(contains(err("storm_gang_quantum=0"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_quantum=0ms"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_quantum=2"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_mpl=3"), "exceeds the 2 jobs per core that partition gang allows"));
    assert_true(contains(err("storm_gang_mpl=0"), "storm_gang_mpl"));
    assert_true(contains(err("storm_gang_quantum=100ms,storm_gang_failsafe=200ms"), "storm_gang_failsafe"));
    assert_true(contains(err("storm_gang_slots=2"), "storm_gang_slots"));
    // Fault detection: 5 s by default, 0 turns it off, 1s - 1h otherwise.
    assert_int_equal(GangConfig::parse(nullptr, parts, false, true).fault_timeout.count(), 5000);
    assert_int_equal(GangConfig::parse("storm_fault_timeout=0", parts, false, true).fault_timeout.count(), 0);
    assert_int_equal(GangConfig::parse("storm_fault_timeout=3s", parts, false, true).fault_timeout.count(),
                     3000);
    assert_int_equal(
        GangConfig::parse("storm_fault_timeout=1500ms", parts, false, true).fault_timeout.count(), 1500);
    assert_true(
        contains(err("storm_fault_timeout=500ms"), "invalid value \"500ms\" for storm_fault_timeout"));
    assert_true(contains(err("storm_fault_timeout=2h"), "storm_fault_timeout"));
    assert_true(contains(err("storm_fault_timeout=5"), "storm_fault_timeout"));
    assert_true(contains(err("storm_fault_timeout=61min"), "storm_fault_timeout"));
    assert_true(contains(err("storm_fault_timeout"), "storm_fault_timeout"));
    assert_true(contains(err(nullptr, true), "PreemptMode includes GANG"));
    assert_true(contains(err(nullptr, false, false), "switch/rdma"));
    std::vector<PartitionInfo> none = {{"debug", false, 1}, {"shared", false, 4}};
    assert_true(
        contains(error_of<ConfigError>([&] { GangConfig::parse("storm_gang_mpl=2", none, false, true); }),
                 "no partition"));
    assert_true(GangConfig::parse(nullptr, none, true, false).partitions.empty());
    std::vector<PartitionInfo> big = {{"huge", true, 65}};
    assert_true(
        contains(error_of<ConfigError>([&] { GangConfig::parse(nullptr, big, false, true); }), "FORCE:65"));
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests_name("gang_config", tests, nullptr, nullptr);
}
