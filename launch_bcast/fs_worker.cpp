#include "launch_bcast/fs_worker.hpp"

#include <cerrno>
#include <dlfcn.h>
#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>

#include <event2/event.h>

#include "lib/common/signals.hpp"
#include "lib/common/thread_name.hpp"
#include "lib/common/thread_nice.hpp"

namespace storm::bcast {

using Clock = std::chrono::steady_clock;

Inbox::Inbox(event_base *base)
{
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd_ < 0)
        throw std::system_error(errno, std::generic_category(), "eventfd");
    ev_ = event_new(
        base, fd_, EV_READ | EV_PERSIST,
        [](evutil_socket_t fd, short, void *arg) {
            uint64_t n;
            while (read(fd, &n, sizeof n) > 0) {
            }
            static_cast<Inbox *>(arg)->run();
        },
        this);
    if (!ev_ || event_add(ev_, nullptr) != 0) {
        if (ev_)
            event_free(ev_);
        ::close(fd_);
        throw std::system_error(ENOMEM, std::generic_category(), "the broadcast receiver's inbox event");
    }
}

Inbox::~Inbox()
{
    close();
    ::close(fd_);
}

void Inbox::post(std::function<void()> f)
{
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (closed_)
            return;
        queue_.push_back(std::move(f));
    }
    uint64_t one = 1;
    (void)!write(fd_, &one, sizeof one);
}

void Inbox::run()
{
    std::vector<std::function<void()>> todo;
    {
        std::lock_guard<std::mutex> lock(mu_);
        todo.swap(queue_);
    }
    for (auto &f : todo)
        f();
}

void Inbox::close()
{
    std::vector<std::function<void()>> dropped;
    {
        std::lock_guard<std::mutex> lock(mu_);
        closed_ = true;
        dropped.swap(queue_);
    }
    if (ev_) {
        event_free(ev_);
        ev_ = nullptr;
    }
}

struct FsWorker::State {
    std::shared_ptr<Inbox> inbox;
    std::function<void(const std::string &)> hook;
    mutable std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<std::string, Job>> queue;
    bool stopping = false;
    bool ended = false;
    std::string what;                   // the job at work, under mu
    std::atomic<Clock::rep> since{0};   // its last progress; 0 when idle
    static thread_local State *current; // the worker's own, on its thread

    void run()
    {
        current = this;
        for (;;) {
            std::pair<std::string, Job> job;
            {
                std::unique_lock<std::mutex> lock(mu);
                cv.wait(lock, [&] { return stopping || !queue.empty(); });
                if (queue.empty()) {
                    ended = true;
                    cv.notify_all();
                    return;
                }
                job = std::move(queue.front());
                queue.pop_front();
                what = job.first;
                since = Clock::now().time_since_epoch().count();
            }
            Done done;
            try {
                if (hook)
                    hook(job.first);
                done = job.second();
            } catch (...) {
                // Jobs report their failures in their Done; one that throws
                // anyway loses only its own result.
            }
            since = 0;
            if (done)
                inbox->post(std::move(done));
        }
    }
};

thread_local FsWorker::State *FsWorker::State::current = nullptr;

FsWorker::FsWorker(std::shared_ptr<Inbox> inbox, std::function<void(const std::string &)> hook)
    : state_(std::make_shared<State>())
{
    state_->inbox = std::move(inbox);
    state_->hook = std::move(hook);
    std::shared_ptr<State> st = state_;
    thread_ = std::thread([st] {
        block_all_signals();
        name_thread("storm-bcastfs");
        // A user's work: not at the raised priority of the agent that
        // started it (a failure leaves it there, which only favours it).
        (void)reset_thread_nice();
        st->run();
    });
}

namespace {

// Keeps the object holding this code mapped for the life of the process
// (RTLD_NODELETE): a detached worker may return from the kernel after the
// plugin was unloaded.
void keep_code_mapped()
{
    static std::once_flag once;
    std::call_once(once, [] {
        Dl_info info;
        if (dladdr(reinterpret_cast<void *>(&keep_code_mapped), &info) && info.dli_fname)
            (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    });
}

} // namespace

FsWorker::~FsWorker()
{
    if (!thread_.joinable())
        return;
    if (stop(std::chrono::milliseconds(100)))
        thread_.join();
    else
        abandon();
}

void FsWorker::abandon()
{
    if (!thread_.joinable())
        return;
    keep_code_mapped();
    thread_.detach();
}

void FsWorker::submit(std::string what, Job job)
{
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->queue.emplace_back(std::move(what), std::move(job));
    state_->cv.notify_all();
}

std::chrono::steady_clock::duration FsWorker::busy_for(std::string *what) const
{
    Clock::rep since = state_->since;
    if (since == 0)
        return Clock::duration::zero();
    if (what) {
        std::lock_guard<std::mutex> lock(state_->mu);
        *what = state_->what;
    }
    return Clock::now() - Clock::time_point(Clock::duration(since));
}

bool FsWorker::stop(std::chrono::milliseconds wait)
{
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->stopping = true;
    state_->cv.notify_all();
    return state_->cv.wait_for(lock, wait, [&] { return state_->ended; });
}

void FsWorker::progress()
{
    if (State *s = State::current)
        s->since = Clock::now().time_since_epoch().count();
}

} // namespace storm::bcast
