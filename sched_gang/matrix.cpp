#include "sched_gang/matrix.hpp"

#include <algorithm>

namespace storm::gang {

bool Matrix::fits(const Slot &s, const JobShape &j) const
{
    for (uint64_t c : j.cells)
        if (s.used.count(c))
            return false;
    return true;
}

bool Matrix::update(const std::vector<JobShape> &running)
{
    std::map<uint32_t, const JobShape *> now;
    for (const auto &j : running)
        now[j.job_id] = &j;

    // Jobs that ended (or whose cells changed: a resized job is placed anew).
    for (auto it = jobs_.begin(); it != jobs_.end();) {
        auto n = now.find(it->first);
        if (n != now.end() && n->second->cells == it->second.cells) {
            it->second.nodes = n->second->nodes;
            ++it;
            continue;
        }
        Slot &s = slots_[home_[it->first]];
        for (uint64_t c : it->second.cells)
            s.used.erase(c);
        s.jobs.erase(it->first);
        home_.erase(it->first);
        it = jobs_.erase(it);
    }
    // Slots that emptied go; later slots move down (their jobs stay together).
    for (size_t s = slots_.size(); s-- > 0;) {
        if (!slots_[s].jobs.empty())
            continue;
        slots_.erase(slots_.begin() + static_cast<long>(s));
        for (auto &h : home_)
            if (h.second > s)
                --h.second;
    }
    // New jobs, first fit in order of job id.
    for (const auto &[id, j] : now) {
        if (jobs_.count(id))
            continue;
        unsigned s = 0;
        while (s < slots_.size() && !fits(slots_[s], *j))
            ++s;
        if (s == slots_.size())
            slots_.emplace_back();
        for (uint64_t c : j->cells)
            slots_[s].used.insert(c);
        slots_[s].jobs.insert(id);
        home_[id] = s;
        jobs_[id] = *j;
    }
    auto before = masks_;
    compute_masks();
    return before != masks_;
}

void Matrix::compute_masks()
{
    masks_.clear();
    for (const auto &[id, s] : home_)
        if (s < kMaxSlots)
            masks_[id] = uint64_t(1) << s;
        else
            masks_[id] = ~uint64_t(0); // beyond what a strobe can name: never stopped
    // Alternative scheduling: fill each slot's idle cells with jobs of other
    // slots that fit entirely.
    for (unsigned s = 0; s < slots_.size() && s < kMaxSlots; ++s) {
        Slot fill = slots_[s];
        for (const auto &[id, j] : jobs_) {
            if (home_[id] == s || !fits(fill, j))
                continue;
            for (uint64_t c : j.cells)
                fill.used.insert(c);
            masks_[id] |= uint64_t(1) << s;
        }
    }
}

std::map<uint32_t, unsigned> Matrix::homes() const { return home_; }

std::vector<uint32_t> Matrix::slot_jobs(unsigned s) const
{
    if (s >= slots_.size())
        return {};
    return {slots_[s].jobs.begin(), slots_[s].jobs.end()};
}

size_t Matrix::total_cells() const
{
    std::set<uint64_t> all;
    for (const auto &[id, j] : jobs_)
        all.insert(j.cells.begin(), j.cells.end());
    return all.size();
}

size_t Matrix::idle_cells(unsigned s) const
{
    if (s >= slots_.size() || s >= kMaxSlots)
        return 0;
    std::set<uint64_t> busy;
    for (const auto &[id, j] : jobs_)
        if (masks_.at(id) & (uint64_t(1) << s))
            busy.insert(j.cells.begin(), j.cells.end());
    return total_cells() - busy.size();
}

} // namespace storm::gang
