#include "lib/net/auth_offload.hpp"

#include <cerrno>
#include <cstdint>
#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"

namespace storm::net {

AuthOffload::AuthOffload(event_base *base, unsigned max_threads)
    : base_(base), max_threads_(max_threads ? max_threads : 1)
{
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0)
        throw std::system_error(errno, std::generic_category(), "eventfd");
    ev_ = event_new(base_, efd_, EV_READ | EV_PERSIST, on_wake, this);
    if (!ev_ || event_add(ev_, nullptr) < 0) {
        if (ev_)
            event_free(ev_);
        ::close(efd_);
        throw std::system_error(ENOMEM, std::generic_category(), "cannot watch the munge threads' results");
    }
}

AuthOffload::~AuthOffload()
{
    {
        std::lock_guard<std::mutex> l(mu_);
        stopping_ = true;
        jobs_.clear();
    }
    cv_.notify_all();
    for (auto &t : threads_)
        t.join();
    event_free(ev_);
    ::close(efd_);
}

void AuthOffload::submit(Job job)
{
    Job here; // run on the loop: no thread could be started, and none runs
    {
        std::lock_guard<std::mutex> l(mu_);
        jobs_.push_back(std::move(job));
        if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
            try {
                threads_.emplace_back([this] { work(); });
            } catch (const std::system_error &) {
                // No thread to be had (the process's limit): the threads
                // there are take it, or, with none, the loop does, as
                // without an offload.
                if (threads_.empty()) {
                    here = std::move(jobs_.back());
                    jobs_.pop_back();
                }
            }
        }
    }
    cv_.notify_one();
    if (here) {
        Done done;
        try {
            done = here();
        } catch (...) {
        }
        if (done)
            done();
    }
}

unsigned AuthOffload::threads() const
{
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<unsigned>(threads_.size());
}

void AuthOffload::work()
{
    name_thread("storm-auth");
    block_all_signals();
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
        ++idle_;
        cv_.wait(l, [this] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (stopping_)
            return;
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        l.unlock();
        Done done;
        try {
            done = job();
        } catch (...) {
        }
        l.lock();
        if (done && !stopping_) {
            done_.push_back(std::move(done));
            uint64_t one = 1;
            (void)!::write(efd_, &one, sizeof one);
        }
    }
}

void AuthOffload::on_wake(int fd, short, void *arg)
{
    auto *self = static_cast<AuthOffload *>(arg);
    uint64_t n;
    (void)!::read(fd, &n, sizeof n);
    std::deque<Done> ready;
    {
        std::lock_guard<std::mutex> l(self->mu_);
        ready.swap(self->done_);
    }
    // A result may destroy this offload (its connection's handler tears
    // the engine down): nothing of `self` is touched after the first.
    for (auto &d : ready)
        d();
}

} // namespace storm::net
