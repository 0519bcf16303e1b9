// Shared fixture of the coscheduling tests (cosched/): a clock the test
// moves by hand for the scheduler, and the log lines captured (a test's
// main sets capture_sink as the log sink; a test clears g_log before what
// it checks, then asks logged()).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cosched/scheduler.hpp"
#include "lib/common/log.hpp"
#include "tests/unit/helpers.hpp"

namespace cosched_fixture {

using namespace storm;
using namespace storm::cosched;
using test_helpers::contains;

inline std::vector<std::string> g_log;
inline void capture_sink(LogLevel, const char *line) { g_log.emplace_back(line); }
inline bool logged(const std::string &part)
{
    return std::any_of(g_log.begin(), g_log.end(), [&](const std::string &l) { return contains(l, part); });
}

struct FakeClock {
    Scheduler::Clock::time_point t = Scheduler::Clock::time_point{} + std::chrono::hours(1);
    Scheduler::Now now()
    {
        return [this] { return t; };
    }
};

} // namespace cosched_fixture
