// The buffer pool's statistics: the stage times of the last 4096 switches
// (halt, swap, release) and its counters, written to PoolSetup::stats_path
// once a second when they changed, one "key value" per line (replace_file,
// its spare kept); a write that fails is one verbose line and is tried
// again at the next change.
#include "switch_rdma/pool.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include "lib/common/files.hpp"
#include "lib/common/percentile.hpp"
#include "switch_rdma/pool_internal.hpp"

namespace storm::rdma {

namespace {

constexpr size_t kStages = 4096;

} // namespace

void Pool::Stage::add(uint32_t v)
{
    if (us.size() < kStages)
        us.push_back(v);
    else
        us[next] = v;
    next = (next + 1) % kStages;
}

void Pool::on_stats_timer(int, short, void *arg)
{
    auto *self = static_cast<Pool *>(arg);
    if (self->stats_dirty_)
        self->write_stats();
}

void Pool::write_stats()
{
    stats_dirty_ = false;
    if (setup_.stats_path.empty())
        return;
    std::string s;
    auto line = [&](const char *k, uint64_t v) { s += std::string(k) + " " + std::to_string(v) + "\n"; };
    line("contexts", windows_.size());
    s += "resident " + (resident_ < 0 ? std::string("none") : std::to_string(resident_)) + "\n";
    line("used_bytes", used_bytes());
    line("pool_bytes", setup_.config.pool_size);
    line("switches", switches_);
    line("swaps", swaps_);
    line("packets_saved", packets_saved_);
    line("failures", failures_);
    for (auto [name, st] : {std::pair<const char *, Stage *>{"halt", &halt_us_},
                            {"swap", &swap_us_},
                            {"release", &release_us_}}) {
        std::vector<uint32_t> v = st->us;
        line((std::string(name) + "_count").c_str(), v.size());
        line((std::string(name) + "_p50_us").c_str(), v.empty() ? 0 : percentile(v, 0.5));
        line((std::string(name) + "_p99_us").c_str(), v.empty() ? 0 : percentile(v, 0.99));
    }
    if (!replace_file(setup_.stats_path, s, 0644, Spare::keep))
        log_.verbose("cannot write %s: %s", setup_.stats_path.c_str(), std::strerror(errno));
}

} // namespace storm::rdma
