#include "agent/step_listing.hpp"

#include <algorithm>

namespace storm::agent {

std::map<uint32_t, std::vector<pid_t>> StepListing::operator()(const std::set<uint32_t> &jobs,
                                                               const node::HeldTest &held)
{
    std::vector<Step> steps = steps_();
    std::map<uint32_t, std::vector<pid_t>> out;
    std::map<Step, std::vector<pid_t>> settle; // what this call learnt: settled (pids) or not (absent)
    std::set<Step> unsettle;
    for (const Step &s : steps) {
        if (!jobs.count(s.job))
            continue;
        if (held) {
            std::vector<pid_t> kept;
            bool was = false;
            {
                std::lock_guard<std::mutex> lk(mu_);
                auto it = settled_.find(s);
                if (it != settled_.end()) {
                    was = true;
                    kept = it->second;
                }
            }
            if (was) {
                kept.erase(std::remove_if(kept.begin(), kept.end(), [&](pid_t p) { return !held(s.job, p); }),
                           kept.end());
                if (!kept.empty()) {
                    auto &v = out[s.job];
                    v.insert(v.end(), kept.begin(), kept.end());
                    continue;
                }
                unsettle.insert(s); // its processes exited: list it again
            }
        }
        auto pids = list_(s);
        {
            std::lock_guard<std::mutex> lk(mu_);
            ++listings_;
        }
        if (!pids)
            continue; // ended
        auto &v = out[s.job];
        v.insert(v.end(), pids->begin(), pids->end());
        if (!held)
            continue;
        if (!pids->empty() &&
            std::all_of(pids->begin(), pids->end(), [&](pid_t p) { return held(s.job, p); }))
            settle[s] = *pids;
        else
            unsettle.insert(s);
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (auto &[s, pids] : settle)
        settled_[s] = std::move(pids);
    for (const Step &s : unsettle)
        settled_.erase(s);
    // Steps that ended are forgotten (a step id is not reused within a job).
    std::set<Step> running(steps.begin(), steps.end());
    for (auto it = settled_.begin(); it != settled_.end();)
        it = running.count(it->first) ? std::next(it) : settled_.erase(it);
    return out;
}

uint64_t StepListing::listings() const
{
    std::lock_guard<std::mutex> lk(mu_);
    return listings_;
}

size_t StepListing::settled() const
{
    std::lock_guard<std::mutex> lk(mu_);
    return settled_.size();
}

} // namespace storm::agent
