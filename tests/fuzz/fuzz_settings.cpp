// Fuzz target: Storm's settings as an administrator writes them in
// slurm.conf: SwitchParameters (agent/agent_config.hpp: the agent, the
// pool, coscheduling, multicast) and SchedulerParameters (gang
// scheduling, sched_gang/config.hpp).  A bad setting is a ConfigError that
// names it, never anything else.
#include <string>

#include "agent/agent_config.hpp"
#include "sched_gang/config.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace storm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::Pick in(data, size);
    std::string text(in.rest); // settings are C strings: NULs end them
    text = text.c_str();
    try {
        if (in.which % 2 == 0) {
            agent::AgentConfig::from_switch_parameters(text.c_str());
        } else {
            std::vector<gang::PartitionInfo> parts(2);
            parts[0].name = "gang";
            parts[0].force = true;
            parts[0].max_share = 4;
            parts[1].name = "debug";
            gang::GangConfig::parse(text.c_str(), parts, false, (in.which & 2) != 0);
        }
    } catch (const ConfigError &e) {
        FUZZ_REQUIRE(*e.what() != 0);
    }
    return 0;
}
