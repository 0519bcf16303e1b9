// The munge calls of connections' set-up, off the event loop.
//
// A connection's handshake (connection.hpp) encodes and decodes munge
// credentials, each a round trip to munged.  On a busy machine munged
// answers late: at 1000 virtual nodes on two cores a call took seconds,
// and an agent routing a broadcast around a silent one connects to a
// hundred of its nodes at once.  Made on the loop, those calls held the
// head's loop for over 20 s: it answered no heartbeat, and slurmctld's
// fault detection drained a node that was alive (and requeued its job).
// So a loop's connections hand their munge calls to a few threads of
// their own ("storm-auth"), and the loop goes on with everything else.
//
// Contract: submit() from the loop thread only.  A job runs on one of at
// most `max_threads` threads (started as jobs wait, kept until the
// destructor), and touches nothing of the loop's; the function it returns
// runs on the loop, in the order results arrive.  Where no thread can be
// started and none runs, submit() runs the job and its result at once, on
// the loop.  A job that throws is dropped (jobs catch what they report).  The destructor drops what has not
// started, waits for the jobs at work (each a munge call, bounded by its
// own retries) and runs none of their results.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct event;
struct event_base;

namespace storm::net {

class AuthOffload {
public:
    using Done = std::function<void()>;
    using Job = std::function<Done()>;

    // Throws std::system_error if its eventfd or event cannot be made.
    explicit AuthOffload(event_base *base, unsigned max_threads = 4);
    ~AuthOffload();
    AuthOffload(const AuthOffload &) = delete;
    AuthOffload &operator=(const AuthOffload &) = delete;

    void submit(Job job);
    unsigned threads() const; // started so far

private:
    static void on_wake(int fd, short, void *arg);
    void work();

    event_base *base_;
    unsigned max_threads_;
    int efd_ = -1;
    event *ev_ = nullptr;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    std::deque<Done> done_;
    std::vector<std::thread> threads_;
    unsigned idle_ = 0;
    bool stopping_ = false;
};

} // namespace storm::net
