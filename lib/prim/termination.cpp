#include "lib/prim/termination.hpp"

#include <event2/event.h>

#include "lib/common/timeval.hpp"

namespace storm::prim {

std::string terminated_var(const std::string &job) { return "terminated:" + job; }
std::string announce_event(const std::string &job) { return "terminated:announce:" + job; }

void announce_termination(Engine &engine, const std::string &job, bool designated, uint32_t master,
                          Engine::XferDone done)
{
    engine.set_variable(terminated_var(job), 1);
    if (designated)
        engine.xfer_and_signal(RangeSet::single(master), announce_event(job), job, std::move(done));
    else if (done)
        done(XferResult{true, {}, "", {}});
}

TerminationDetector::TerminationDetector(Engine &engine, event_base *base, std::chrono::milliseconds interval)
    : engine_(engine)
{
    if (interval.count() <= 0)
        throw std::invalid_argument("termination detection: the interval must be positive");
    timer_ = event_new(
        base, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *arg) { static_cast<TerminationDetector *>(arg)->tick(); }, this);
    timeval tv = to_timeval(interval);
    evtimer_add(timer_, &tv);
}

TerminationDetector::~TerminationDetector()
{
    *alive_ = false;
    if (timer_)
        event_free(timer_);
}

void TerminationDetector::watch(const std::string &job, const RangeSet &set, Done done)
{
    Job j;
    j.set = set;
    j.done = std::move(done);
    jobs_[job] = std::move(j);
}

void TerminationDetector::tick()
{
    std::weak_ptr<bool> alive = alive_;
    for (auto &kv : jobs_) {
        const std::string &name = kv.first;
        Job &j = kv.second;
        if (!j.announced) {
            // Local check only: no traffic until the first node announces.
            if (engine_.test_event(announce_event(name)) == 0)
                continue;
            j.announced = true;
        }
        if (j.polling)
            continue;
        j.polling = true;
        j.polls++;
        engine_.compare_and_write(j.set, terminated_var(name), Relation::eq, 1,
                                  Engine::Write{terminated_var(name), 0},
                                  [this, alive, name](const CawResult &r) {
                                      if (alive.expired() || !*alive.lock())
                                          return;
                                      auto it = jobs_.find(name);
                                      if (it == jobs_.end())
                                          return;
                                      it->second.polling = false;
                                      if (r.ok && !r.holds)
                                          return; // not everywhere yet: poll again next tick
                                      Job j = std::move(it->second);
                                      jobs_.erase(it);
                                      j.done(name, Result{r.ok, r.failed, j.polls});
                                  });
    }
}

} // namespace storm::prim
