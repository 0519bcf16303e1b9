#include "lib/prim/queue.hpp"

#include <event2/event.h>

namespace storm::prim {

std::string queue_slot_event(const std::string &name, uint64_t slot)
{
    return "queue:" + name + ":" + std::to_string(slot);
}

std::string queue_dequeued_var(const std::string &name) { return "queue:" + name + ":dequeued"; }

RemoteQueueMaster::RemoteQueueMaster(Engine &engine, event_base *base, RangeSet set, std::string name,
                                     uint32_t length)
    : engine_(engine), base_(base), set_(std::move(set)), name_(std::move(name)), length_(length)
{
    if (length_ == 0)
        throw std::invalid_argument("remote queue " + name_ + ": length must be at least 1");
    backoff_ = evtimer_new(
        base_, [](evutil_socket_t, short, void *arg) { static_cast<RemoteQueueMaster *>(arg)->on_backoff(); },
        this);
}

RemoteQueueMaster::~RemoteQueueMaster()
{
    *alive_ = false;
    if (backoff_)
        event_free(backoff_);
}

void RemoteQueueMaster::enqueue(std::string data, Done done)
{
    pending_.emplace_back(std::move(data), std::move(done));
    next();
}

void RemoteQueueMaster::next()
{
    if (busy_ || pending_.empty())
        return;
    busy_ = true;
    await_space(0);
}

// AWAIT-SPACE: slot enqueued_ is free on a node once it dequeued at least
// enqueued_ - length + 1 items.
void RemoteQueueMaster::await_space(int attempt)
{
    attempt_ = attempt;
    std::weak_ptr<bool> alive = alive_;
    if (enqueued_ < length_) {
        // Nothing can be full yet.
        on_backoff();
        return;
    }
    int64_t need = static_cast<int64_t>(enqueued_ - length_ + 1);
    engine_.compare_and_write(
        set_, queue_dequeued_var(name_), Relation::ge, need, std::nullopt,
        [this, alive](const CawResult &r) {
            if (alive.expired() || !*alive.lock())
                return;
            if (!r.ok) {
                // A node does not answer: the enqueue fails, naming it.
                auto [data, done] = std::move(pending_.front());
                pending_.pop_front();
                busy_ = false;
                XferResult x;
                x.failed = r.failed;
                x.error = "queue " + name_ + ": " + r.error;
                done(x);
                next();
                return;
            }
            if (r.holds) {
                attempt_ = -1; // space: send now
                on_backoff();
                return;
            }
            // Some queue is full: back off exponentially (1 ms .. 256 ms).
            int shift = attempt_ < 8 ? attempt_ : 8;
            timeval tv{0, static_cast<suseconds_t>(1000 << shift)};
            attempt_++;
            evtimer_add(backoff_, &tv);
        },
        timeout_);
}

void RemoteQueueMaster::on_backoff()
{
    if (attempt_ > 0) {
        // A back-off ran out: check again.
        int a = attempt_;
        attempt_ = 0;
        await_space(a);
        return;
    }
    // Space on every node: XFER-AND-SIGNAL into the tail slot.
    auto [data, done] = std::move(pending_.front());
    pending_.pop_front();
    uint64_t slot = enqueued_ % length_;
    enqueued_++;
    std::weak_ptr<bool> alive = alive_;
    engine_.xfer_and_signal(
        set_, queue_slot_event(name_, slot), std::move(data),
        [this, alive, done = std::move(done)](const XferResult &r) {
            done(r);
            if (alive.expired() || !*alive.lock())
                return;
            busy_ = false;
            next();
        },
        timeout_);
}

RemoteQueueSlave::RemoteQueueSlave(Engine &engine, std::string name, uint32_t length)
    : engine_(engine), name_(std::move(name)), length_(length)
{
    if (length_ == 0)
        throw std::invalid_argument("remote queue " + name_ + ": length must be at least 1");
}

bool RemoteQueueSlave::try_dequeue(std::string &data)
{
    uint64_t slot = dequeued_ % length_, lap = dequeued_ / length_;
    if (engine_.test_event(queue_slot_event(name_, slot), &data) <= lap)
        return false;
    dequeued_++;
    engine_.set_variable(queue_dequeued_var(name_), static_cast<int64_t>(dequeued_));
    return true;
}

} // namespace storm::prim
