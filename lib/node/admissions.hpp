// Which jobs may register with the local scheduler (implicit coscheduling):
// those with a coscheduled step open on this node.
//
// The trust chain: slurmctld decides (switch/rdma marks a step's
// communication context "coscheduled" when the job's partition is among
// its storm_cosched_partitions, context.hpp); slurmstepd, as root, opens
// the context on the node agent's pool socket before the tasks start and
// closes it after they are gone; the pool records each open coscheduled
// context here; the channel's verifier (channel.hpp, make_verifier) admits
// a registration only for a job recorded here.  Nothing the task's user
// controls (its environment) enters the decision.
//
// Contract: thread safe.  The pool writes it on the node agent's loop, the
// verifier reads it on the channel's worker thread.  A job is admitted
// while at least one of its coscheduled contexts is open (a count per
// job); close() of a job with none is ignored.  Each admission records the
// job's owner (the context's uid, which slurmctld wrote): only processes
// of that uid may register for the job.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace storm::node {

class Admissions {
public:
    // A coscheduled context of `job`, owned by `uid`, was opened on this node.
    void open(uint32_t job, uint32_t uid)
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++open_[job];
        owner_[job] = uid;
    }
    // One was closed.
    void close(uint32_t job)
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = open_.find(job);
        if (it != open_.end() && --it->second == 0) {
            open_.erase(it);
            owner_.erase(job);
        }
    }
    // Whether `job` is admitted and owned by `uid`.
    bool admitted_for(uint32_t job, uint32_t uid) const
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = owner_.find(job);
        return it != owner_.end() && it->second == uid;
    }
    // How many coscheduled contexts of `job` are open here (0: not admitted).
    uint32_t steps(uint32_t job) const
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = open_.find(job);
        return it == open_.end() ? 0 : it->second;
    }
    bool admitted(uint32_t job) const { return steps(job) != 0; }
    // How many jobs are admitted.
    size_t jobs() const
    {
        std::lock_guard<std::mutex> lk(mu_);
        return open_.size();
    }

private:
    mutable std::mutex mu_;
    std::map<uint32_t, uint32_t> open_;  // job -> open coscheduled contexts
    std::map<uint32_t, uint32_t> owner_; // job -> its owner's uid
};

} // namespace storm::node
