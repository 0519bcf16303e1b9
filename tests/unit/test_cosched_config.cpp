// Unit tests of the coscheduling settings (cosched/config.hpp, read from
// SwitchParameters by agent/agent_config.hpp): the defaults, each
// setting, and each bad value named with what is allowed.

#include <string>

#include "agent/agent_config.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

void test_config(void **)
{
    auto c = agent::AgentConfig::from_switch_parameters(nullptr);
    assert_false(c.cosched.enabled());
    assert_int_equal(c.cosched.slice.count(), 15000000);
    assert_int_equal(c.cosched.gmet.count(), 5000000);
    assert_int_equal(c.cosched.share_percent, 1);
    c = agent::AgentConfig::from_switch_parameters("storm_cosched_partitions=work:debug,storm_cosched_slice="
                                                   "2s,storm_cosched_gmet=500ms,storm_cosched_share=5");
    assert_true(c.cosched.enabled() && c.cosched.covers("debug") && !c.cosched.covers("gang"));
    assert_int_equal(c.cosched.slice.count(), 2000000);
    assert_int_equal(c.cosched.gmet.count(), 500000);
    assert_int_equal(c.cosched.share_percent, 5);
    // A slice shorter than the default GMET lowers the GMET's default.
    c = agent::AgentConfig::from_switch_parameters("storm_cosched_slice=1s");
    assert_int_equal(c.cosched.gmet.count(), 1000000);
    auto err = [](const char *text) {
        return error_of<ConfigError>([&] { agent::AgentConfig::from_switch_parameters(text); });
    };
    std::string e = err("storm_cosched_slice=5ms");
    assert_true(contains(e, "storm_cosched_slice") && contains(e, "\"5ms\"") && contains(e, "10ms"));
    e = err("storm_cosched_slice=1s,storm_cosched_gmet=2s");
    assert_true(contains(e, "storm_cosched_gmet") && contains(e, "\"2s\"") && contains(e, "1s"));
    e = err("storm_cosched_share=0");
    assert_true(contains(e, "storm_cosched_share") && contains(e, "1 to 50"));
    e = err("storm_cosched_share=51");
    assert_true(contains(e, "storm_cosched_share"));
    e = err("storm_cosched_gmet=fast");
    assert_true(contains(e, "storm_cosched_gmet"));
    e = err("storm_cosched_partitions=work::debug");
    assert_true(contains(e, "storm_cosched_partitions") && contains(e, "work::debug"));
    e = err("storm_cosched_partitions");
    assert_true(contains(e, "storm_cosched_partitions"));
    e = err("storm_cosched_timeslice=1s");
    assert_true(contains(e, "unknown key storm_cosched_timeslice") && contains(e, "storm_cosched_slice"));
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests_name("cosched_config", tests, nullptr, nullptr);
}
