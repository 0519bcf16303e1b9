// The request channel from tasks to the local scheduler, on the node
// agent's loop (lib/node/cosched_protocol.h has the message format).
//
// Why a unix socket and not the paper's shared memory: a shared request
// region is writable by every task of every user, so nothing says who
// wrote a request, a task could forge requests for other users' jobs, and
// a task that dies leaves no trace.  A SOCK_SEQPACKET connection gives all
// three for free: the kernel's SO_PEERCRED names the peer's pid and uid,
// and the connection closes when the task dies (it unregisters).  A request
// costs one send() of 16 bytes; the PMPI hooks batch arrivals so that a
// task sends at most one per storm_cosched_rate interval (see the library).
//
// Registration is checked by a Verifier: the job must have a coscheduled
// step open on this node (admissions.hpp: slurmctld marked its context
// coscheduled, slurmstepd opened it on the agent), and the peer's pid must
// be a process of the job it names (make_verifier(): the job's steps as
// slurmstepd lists them, through the agent's StepLister, and SLURM_JOB_ID
// in /proc/<pid>/environ).  The verifier may block (it asks slurmstepd), so
// it runs on the channel's own worker thread, one registration at a time;
// the connection is not read meanwhile, and the answer (OK or ERROR) comes
// back to the loop through a pipe.  Registrations wait in turns between
// uids (fair_queue.hpp): a user holding up to kDefaultPerUid registrations
// in the queue delays another user's by at most one check of its own (the
// one running), not by all of them.  Every refusal and every malformed
// message is one log line naming the pid, the uid and why; the connection
// is closed.
//
// The listening socket (mode 0666, a stale one replaced, its file removed
// with the channel) is a net::UnixServer (lib/net/unix_server.hpp): at most
// kDefaultPerUid connections per uid, and a connection that sent no
// well-formed REGISTER within kDefaultFirstRequest of its accept is closed
// (one warning line).  A registered task is never cut for being idle: it
// may wait for its job's turn as long as it lives.
//
// Contract: everything runs on the loop thread.  The Handler outlives the
// channel.  The destructor closes every connection without calling the
// handler (the owner releases its jobs itself).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "lib/node/admissions.hpp"
#include "cosched/fair_queue.hpp"
#include "cosched/scheduler.hpp"
#include "lib/common/log.hpp"
#include "lib/net/unix_server.hpp"
#include "lib/node/step_lister.hpp"

struct event_base;
struct event;

namespace storm::cosched {

using node::Admissions;

// A registration's check: "" and the job's processes on this node (which
// the enforcement moves), or why the pid may not register for the job.
struct Verdict {
    std::string error;
    std::vector<pid_t> procs;
};
using Verifier = std::function<Verdict(pid_t pid, uid_t uid, uint32_t job)>;

// The agent's verifier, in this order:
//  - /proc/<pid>/environ must name the job (SLURM_JOB_ID; a cheap early
//    refusal with a clear reason, not a proof);
//  - `admissions` must admit the job: a coscheduled context of it is open
//    on this node (null admits no job).  This is the trusted check: the
//    task's environment cannot change it.  SLURM_JOB_PARTITION from the
//    environ and `partitions` (storm_cosched_partitions) only word the
//    refusal: "... (its partition "debug" is not coscheduled)";
//  - with a lister, the pid must be among the job's step processes it
//    lists (blocks for one query of the job's slurmstepds; a listing that
//    has the pid is reused for 2 s, so that the tasks of a job registering
//    together cost one query).
// Not thread safe: the channel calls it from its one worker thread (the
// admissions are thread safe).
Verifier make_verifier(node::StepLister lister, std::shared_ptr<const Admissions> admissions,
                       std::vector<std::string> partitions, std::string proc_root = "/proc");

class Channel {
public:
    class Handler {
    public:
        virtual ~Handler() = default;
        // A verified registration; returns whether the job is scheduled (the
        // OK's status).
        virtual bool on_register(int conn, pid_t pid, uint32_t job, uint32_t rank,
                                 const std::vector<pid_t> &procs) = 0;
        // A registered connection unregistered or closed (the task died).
        virtual void on_unregister(int conn, pid_t pid, uint32_t job) = 0;
        virtual void on_schedule(int conn, uint32_t job, uint32_t rank, Sender sender, uint32_t count) = 0;
    };

    // `log`: the component's logger; the channel's lines add "cosched: "
    // (its socket's, net::UnixServer's, carry "cosched: " as their prefix).
    Channel(event_base *base, std::string socket_path, Verifier verifier, Handler &handler, Logger log);
    ~Channel();
    Channel(const Channel &) = delete;
    Channel &operator=(const Channel &) = delete;

    // Binds the socket (replacing a stale one); throws std::system_error.
    void start();
    // Tells a registered connection its job's status (STATUS); best effort.
    void send_status(int conn, bool scheduled);
    size_t connections() const noexcept { return clients_.size(); }
    uint64_t refused() const noexcept { return refused_; }

private:
    struct Client {
        int fd = -1;
        event *ev = nullptr;
        pid_t pid = 0;
        uid_t uid = 0;
        uint32_t job = 0;    // 0 until registered
        uint64_t serial = 0; // its registration, while being verified
        uint32_t want_job = 0, want_rank = 0;
    };
    struct Check {
        int fd;
        uint64_t serial;
        pid_t pid;
        uid_t uid;
        uint32_t job;
        Verdict verdict;
    };
    void on_client(int fd, const ucred &cred);
    static void on_readable(int fd, short, void *arg);
    static void on_verified(int fd, short, void *arg);
    void worker() noexcept;
    void finish_register(Client &c, Verdict &v);
    void read_client(Client &c);
    void handle(Client &c, const unsigned char *m, size_t n);
    void drop(int fd, const std::string &why, bool log_error);
    void refuse(Client &c, const std::string &why);

    event_base *base_;
    Verifier verifier_;
    Handler &handler_;
    Logger log_;
    net::UnixServer server_;
    std::map<int, std::unique_ptr<Client>> clients_;
    uint64_t refused_ = 0;
    uint64_t next_serial_ = 0;

    // The worker: checks_ in, done_ out (then a byte on wake_[1]).
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false;
    FairQueue<uid_t, Check> checks_; // in turns between uids
    std::deque<Check> done_;
    int wake_[2] = {-1, -1};
    event *wake_ev_ = nullptr;
    std::thread thread_;
};

} // namespace storm::cosched
