// Unit tests of the strict parameter parser (lib/common/params.*) and of the
// node agent's settings (agent/agent_config.hpp), and of replace_file
// (lib/common/files.hpp).
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>

#include <string>

#include "agent/agent_config.hpp"
#include "lib/common/files.hpp"
#include "lib/common/params.hpp"
#include "tests/unit/helpers.hpp"

using storm::ConfigError;
using storm::ParamList;

namespace {

using test_helpers::contains;

// The ConfigError message of f(), or "" if f() did not throw.
template <class F> std::string error_of(F f) { return test_helpers::error_of<ConfigError>(f); }

void test_empty_and_null(void **)
{
    ParamList a(nullptr, "X", "");
    a.reject_unknown();
    ParamList b("   ", "X", "");
    b.reject_unknown();
    assert_int_equal(b.take_uint("k", 0, 10, 7), 7);
}

void test_uint_values_and_ranges(void **)
{
    ParamList p(" storm_agent_port = 7000 ,storm_fanout=2", "SwitchParameters", "");
    assert_int_equal(p.take_uint("storm_agent_port", 1, 65535, 1), 7000);
    assert_int_equal(p.take_uint("storm_fanout", 2, 64, 8), 2);
    p.reject_unknown();

    std::string e = error_of([] {
        ParamList q("storm_fanout=1", "SwitchParameters", "");
        q.take_uint("storm_fanout", 2, 64, 8);
    });
    assert_true(contains(e, "SwitchParameters"));
    assert_true(contains(e, "storm_fanout"));
    assert_true(contains(e, "\"1\""));
    assert_true(contains(e, "from 2 to 64"));

    for (const char *bad : {"storm_fanout=", "storm_fanout", "storm_fanout=-3", "storm_fanout=4x",
                            "storm_fanout=99999999999999999999999"}) {
        e = error_of([bad] {
            ParamList q(bad, "S", "");
            q.take_uint("storm_fanout", 2, 64, 8);
        });
        assert_true(contains(e, "storm_fanout"));
    }
}

void test_syntax_errors(void **)
{
    assert_true(contains(error_of([] { ParamList("a=1,,b=2", "S", ""); }), "empty item"));
    assert_true(contains(error_of([] { ParamList("a=1,", "S", ""); }), "empty item"));
    assert_true(contains(error_of([] { ParamList("=3", "S", ""); }), "no key"));
    assert_true(contains(error_of([] { ParamList("a=1,a=2", "S", ""); }), "more than once"));
}

void test_unknown_keys_named(void **)
{
    std::string e = error_of([] {
        ParamList p("storm_fanout=4,storm_fanuot=3", "SwitchParameters", "");
        p.take_uint("storm_agent_port", 1, 65535, 6830);
        p.take_uint("storm_fanout", 2, 64, 8);
        p.reject_unknown();
    });
    assert_true(contains(e, "unknown key storm_fanuot"));
    assert_true(contains(e, "known: storm_agent_port, storm_fanout"));
}

void test_prefix_leaves_foreign_keys(void **)
{
    // SchedulerParameters is shared with backfill: only storm_* is ours.
    ParamList p("bf_interval=30,default_queue_depth=100,storm_quantum=2ms", "SchedulerParameters", "storm_");
    assert_false(p.has("bf_interval"));
    assert_int_equal(p.take_duration_us("storm_quantum", 1000, 60000000, 50000), 2000);
    p.reject_unknown();

    std::string e = error_of([] {
        ParamList q("bf_interval=30,storm_bogus=1", "SchedulerParameters", "storm_");
        q.reject_unknown();
    });
    assert_true(contains(e, "storm_bogus"));
    assert_false(contains(e, "bf_interval"));
}

void test_durations(void **)
{
    struct {
        const char *text;
        uint64_t us;
    } ok[] = {{"q=1ms", 1000}, {"q=250us", 250}, {"q=5s", 5000000}, {"q=2min", 120000000}};
    for (auto &c : ok) {
        ParamList p(c.text, "S", "");
        assert_int_equal(p.take_duration_us("q", 1, 3600000000ULL, 0), c.us);
    }
    for (const char *bad : {"q=0ms", "q=5", "q=ms", "q=1h", "q=1.5ms", "q=2hours"}) {
        std::string e = error_of([bad] {
            ParamList p(bad, "S", "");
            p.take_duration_us("q", 1000, 60000000, 50000);
        });
        assert_true(contains(e, "from 1ms to 1min"));
    }
    assert_string_equal(storm::format_duration_us(1500).c_str(), "1500us");
    assert_string_equal(storm::format_duration_us(3000000).c_str(), "3s");
}

void test_bools(void **)
{
    ParamList p("a,b=no,c=1", "S", "");
    assert_true(p.take_bool("a", false));
    assert_false(p.take_bool("b", true));
    assert_true(p.take_bool("c", false));
    assert_true(p.take_bool("d", true));
    assert_true(contains(error_of([] {
                             ParamList q("a=maybe", "S", "");
                             q.take_bool("a", false);
                         }),
                         "\"maybe\""));
}

void test_agent_config(void **)
{
    auto d = storm::agent::AgentConfig::from_switch_parameters(nullptr);
    assert_int_equal(d.port, storm::agent::AgentConfig::default_port);
    assert_int_equal(d.fanout, storm::agent::AgentConfig::default_fanout);
    auto c = storm::agent::AgentConfig::from_switch_parameters("storm_agent_port=16830,storm_fanout=16");
    assert_int_equal(c.port, 16830);
    assert_int_equal(c.fanout, 16);
    assert_true(
        contains(error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_agent_port=0"); }),
                 "storm_agent_port"));
    assert_true(contains(error_of([] { storm::agent::AgentConfig::from_switch_parameters("mtu=9000"); }),
                         "unknown key mtu"));
    // The agent's nice value: -10 unless given, -20 to 19.
    assert_int_equal(d.nice, -10);
    assert_int_equal(storm::agent::AgentConfig::from_switch_parameters("storm_agent_nice=-20").nice, -20);
    assert_int_equal(storm::agent::AgentConfig::from_switch_parameters("storm_agent_nice=5").nice, 5);
    assert_int_equal(storm::agent::AgentConfig::from_switch_parameters("storm_agent_nice=0").nice, 0);
    for (const char *bad : {"storm_agent_nice=-21", "storm_agent_nice=20", "storm_agent_nice=--1",
                            "storm_agent_nice=-", "storm_agent_nice=1x", "storm_agent_nice"})
        assert_true(contains(error_of([bad] { storm::agent::AgentConfig::from_switch_parameters(bad); }),
                             "for storm_agent_nice (allowed: an integer from -20 to 19)"));
    // Multicast: off by default; a group and port, an MTU, a wait.
    assert_false(d.mcast.enabled());
    auto m = storm::agent::AgentConfig::from_switch_parameters(
        "storm_mcast=239.255.77.1:6831,storm_mcast_mtu=9000,storm_mcast_wait=5ms");
    assert_true(m.mcast.enabled());
    assert_int_equal(m.mcast.port, 6831);
    assert_int_equal(ntohl(m.mcast.group.s_addr), 0xefff4d01u);
    assert_int_equal(m.mcast.mtu, 9000);
    assert_int_equal(m.mcast.wait.count(), 5);
    assert_true(contains(
        error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast=10.0.0.1:6831"); }),
        "invalid value \"10.0.0.1:6831\" for storm_mcast ('10.0.0.1' is not a multicast group "
        "(224.0.0.0/4)"));
    assert_true(
        contains(error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast=239.1.1.1"); }),
                 "is not GROUP:PORT"));
    assert_true(contains(
        error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast=239.1.1.1:0"); }),
        "is not a port from 1 to 65535"));
    assert_true(contains(
        error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast=239.1.1.1:65535"); }),
        "gang strobes use PORT+1: PORT at most 65534"));
    assert_true(
        contains(error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast_mtu=100"); }),
                 "storm_mcast_mtu"));
    assert_true(
        contains(error_of([] { storm::agent::AgentConfig::from_switch_parameters("storm_mcast_wait=0"); }),
                 "storm_mcast_wait"));
}

} // namespace

// replace_file: the new content whole, with its mode, in place of the old
// (swapped in, the old one removed) or where there was none; nothing else
// left in the directory; a directory it cannot write: false with errno.
// With Spare::keep, the old one kept and written over by the next call.
void test_replace_file(void **)
{
    char d[] = "/tmp/storm-files-test.XXXXXX";
    assert_non_null(mkdtemp(d));
    std::string dir = d, path = dir + "/status";
    auto read = [](const std::string &p) {
        std::ifstream in(p);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    auto entries = [&] {
        int n = 0;
        DIR *dp = opendir(dir.c_str());
        while (dirent *e = readdir(dp))
            n += e->d_name[0] != '.';
        closedir(dp);
        return n;
    };
    assert_true(storm::replace_file(path, "first\n", 0600));
    assert_true(read(path) == "first\n");
    assert_true(storm::replace_file(path, "second, longer\n", 0644));
    assert_true(read(path) == "second, longer\n");
    struct stat st;
    assert_int_equal(stat(path.c_str(), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(entries(), 1);
    assert_false(storm::replace_file(dir + "/missing/status", "x", 0644));
    assert_int_equal(errno, ENOENT);

    // Spare::keep: the replaced file stays as status.new with the old
    // content, and the calls after that swap the same two inodes (none is
    // created), each time with the new content whole and the new mode.
    assert_true(storm::replace_file(path, "third\n", 0600, storm::Spare::keep));
    assert_true(read(path) == "third\n");
    assert_true(read(path + ".new") == "second, longer\n");
    assert_int_equal(entries(), 2);
    struct stat a, b;
    assert_int_equal(stat(path.c_str(), &a), 0);
    assert_int_equal(stat((path + ".new").c_str(), &b), 0);
    for (int i = 0; i < 4; ++i) {
        std::string text = "call " + std::to_string(i) + (i % 2 ? " (longer)\n" : "\n");
        mode_t mode = i % 2 ? 0644 : 0640;
        assert_true(storm::replace_file(path, text, mode, storm::Spare::keep));
        assert_true(read(path) == text);
        assert_int_equal(stat(path.c_str(), &st), 0);
        assert_int_equal(st.st_mode & 0777, mode);
        assert_true(st.st_ino == (i % 2 ? a.st_ino : b.st_ino));
        assert_int_equal(entries(), 2);
    }
    // A spare that is a symbolic link is not followed: the call fails and
    // the link's target is untouched.
    std::string target = dir + "/target";
    assert_true(storm::replace_file(target, "target\n", 0600));
    assert_int_equal(unlink((path + ".new").c_str()), 0);
    assert_int_equal(symlink(target.c_str(), (path + ".new").c_str()), 0);
    assert_false(storm::replace_file(path, "via a link\n", 0644, storm::Spare::keep));
    assert_int_equal(errno, ELOOP);
    assert_true(read(target) == "target\n");
    assert_true(read(path) == "call 3 (longer)\n");
    // remove_file takes the file and its spare.
    assert_true(storm::replace_file(path, "last\n", 0644, storm::Spare::keep));
    assert_int_equal(entries(), 3);
    storm::remove_file(path);
    assert_int_equal(access(path.c_str(), F_OK), -1);
    assert_int_equal(access((path + ".new").c_str(), F_OK), -1);
    assert_int_equal(unlink(target.c_str()), 0);
    assert_int_equal(rmdir(d), 0);
}

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_null),
        cmocka_unit_test(test_uint_values_and_ranges),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_unknown_keys_named),
        cmocka_unit_test(test_prefix_leaves_foreign_keys),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_bools),
        cmocka_unit_test(test_agent_config),
        cmocka_unit_test(test_replace_file),
    };
    return cmocka_run_group_tests_name("params", tests, nullptr, nullptr);
}
