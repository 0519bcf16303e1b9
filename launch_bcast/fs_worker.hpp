// A thread for the file system work of one broadcast on a node, off the
// agent's event loop.
//
// The node agent's loop must never wait on a file system the user
// controls: a hung NFS server, a slow disk, a FIFO where a file was.  So a
// Receiver gives each broadcast session a worker: the loop submits the
// session's jobs (open the destination, stage the tree, write a chunk,
// commit, remove), the worker runs them in order, and each job's result
// (a function) comes back to the loop through the receiver's Inbox.  The
// loop watches how long the job at work has made no progress (busy_for())
// and gives up on a session whose file system stopped answering; the
// worker stays stuck where it is, and runs what is queued behind (the
// session's removal) if the file system ever answers.
//
// Credentials are per thread: a job that acts as the user does so with its
// own AsUser, on the worker.
//
// Contract: submit() from the loop thread only; jobs run on the worker in
// order and never touch loop-owned state (they return a function that
// does, run on the loop).  A job calls FsWorker::progress() between steps
// of a long job (one per entry of a tree) so that only a step that hangs
// counts.  The destructor does not wait for a worker stuck in the kernel:
// it waits up to 100 ms (what is queued runs first), then lets the thread go on alone (detached; it holds
// only its own state, never the Receiver's) and keeps the code it runs mapped, so that an agent unloading its
// plugin at shutdown does not pull the code from under a thread that wakes later.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct event;
struct event_base;

namespace storm::bcast {

// What workers hand back to the loop: functions run on the loop thread,
// in the order posted, woken by an eventfd read by an event of the loop.
// Shared with the workers (a stuck one outlives the receiver): once
// closed, what is posted is dropped.
class Inbox {
public:
    // Throws std::system_error if the eventfd or the event cannot be made.
    explicit Inbox(event_base *base);
    ~Inbox();
    Inbox(const Inbox &) = delete;
    Inbox &operator=(const Inbox &) = delete;

    void post(std::function<void()> f); // any thread
    void run();                         // the loop: runs what was posted
    void close();                       // the loop: frees the event; later posts are dropped

private:
    std::mutex mu_;
    std::vector<std::function<void()>> queue_;
    bool closed_ = false;
    int fd_ = -1;
    event *ev_ = nullptr;
};

class FsWorker {
public:
    using Done = std::function<void()>; // run on the loop
    using Job = std::function<Done()>;  // run on the worker
    // `hook`, if set, is called on the worker before each job with its
    // description (tests: to make a job block).  Throws std::system_error
    // if the thread cannot be started.
    FsWorker(std::shared_ptr<Inbox> inbox, std::function<void(const std::string &)> hook = {});
    ~FsWorker();
    FsWorker(const FsWorker &) = delete;
    FsWorker &operator=(const FsWorker &) = delete;

    // Queues `job`; `what` says what it does, for the messages of a
    // deadline ("writing /x/.f.storm-..."); its Done, if any, runs on the
    // loop.
    void submit(std::string what, Job job);
    // How long the job at work has gone without progress, and what it is;
    // zero when idle.
    std::chrono::steady_clock::duration busy_for(std::string *what = nullptr) const;
    // Whether the thread ended or ends within `wait` (it ends once its
    // queue is empty, after stop()).
    bool stop(std::chrono::milliseconds wait);
    // Lets the thread go on alone now (a worker that did not stop).
    void abandon();

    // On the worker, from a job: a step finished (the next one's time
    // starts now).  Does nothing on any other thread.
    static void progress();

private:
    struct State;
    std::shared_ptr<State> state_;
    std::thread thread_;
};

} // namespace storm::bcast
