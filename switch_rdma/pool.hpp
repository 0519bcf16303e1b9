// The node's buffer pool: the node agent's side of communication contexts.
//
// It owns, on the agent's loop thread:
//  - the control socket (control.hpp; a net::UnixServer) where slurmstepd
//    opens and closes the step's context and the tasks attach to it;
//  - each open context's window: a memfd holding one share per local task
//    (layout.hpp), mapped by the agent (and locked, pinned, once a task
//    attaches), whose queue headers it initialises, and handed to the
//    tasks at attach;
//  - the accounting of the pool (storm_pool_size bytes per node): divided
//    windows (B/n each) must fit beside each other and the resident
//    swapped window; a swapped window holds the whole pool while resident;
//  - the halt / swap / release protocol at each gang switch, as the gang
//    switcher's SwitchHook (lib/node/switch_hook.hpp):
//      halt:    the tasks of the leaving job's swapped context are asked
//               to halt (resident or not: the peers wait for their halt
//               marks); the switch waits until every one answers
//               halted (each collected every peer's halt mark: nothing of
//               the context is in flight towards this node), but at most
//               storm_pool_halt_wait: a halt that takes longer (a peer
//               node's tasks are stopped, starting up, or behind) finishes
//               later, and the context is swapped out then;
//      swap:    with the leaving job stopped, its shares' headers and valid
//               packets (or whole shares, storm_pool_swap=full) are copied
//               to the context's backing store and the context leaves the
//               pool's accounting; its window stays mapped and its pages
//               are kept (a task stopped inside its queues resumes on
//               them: the pool is an accounting, not one shared buffer).
//               The running job's swapped context (if the pool is free)
//               has its saved packets written back into its window and is
//               marked resident.  Nothing is copied before every thread
//               of the leaving tasks is seen stopped (/proc): until then a
//               timer checks again (200 us, doubling to 3.2 ms) and the
//               switch goes on without waiting; once they are, the swap
//               happens from the timer and the context that came in is
//               released; after 100 ms the context stays in the pool;
//      release: the tasks of the context swapped in are told to release:
//               they exchange ready marks with their peers and inject
//               again; the agent records when every one answered ready;
//  - the admissions of implicit coscheduling (lib/node/admissions.hpp):
//    while a context slurmctld marked coscheduled is open here (from
//    slurmstepd's open to its close, or to the pool's end), its job is
//    admitted; the local scheduler's verifier reads them on its thread.
//
// At a context's close (slurmstepd's, its id given to a new step, or the
// pool's end) the agent unmaps its window and closes its memfd; the pages
// are freed once the tasks, which map the window themselves until
// storm_msg_finalize() or their exit, unmap it too.
//
// A context fails, and its tasks' control channels are closed (their calls
// then fail with the reason), when a task reports failure (a peer died, or
// a mark did not come within its STORM_MSG_TIMEOUT), or its queue indices
// are corrupt.  A failed context never blocks a switch again.
//
// Statistics (stage times of the last 4096 switches, packets saved) are
// written every second they changed to `stats_path` (replace_file, with
// its spare kept), one "key value" per line, for storm-gang and the
// benchmarks.
//
// The sources, one concern each: pool.cpp (construction, start, the
// accounting), pool_control.cpp (the control socket, and which sender may
// make which request), pool_contexts.cpp (open, attach, fail, close),
// pool_switch.cpp (halt / swap / release), pool_stats.cpp (statistics);
// pool_internal.hpp holds what they share.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

#include "lib/node/admissions.hpp"
#include "lib/node/switch_hook.hpp"
#include "lib/common/log.hpp"
#include "lib/net/unix_server.hpp"
#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/pool_config.hpp"

struct event_base;
struct event;

namespace storm::rdma {

struct PoolSetup {
    std::string socket_path;    // <SlurmdSpoolDir>/storm-pool.sock
    std::string stats_path;     // <SlurmdSpoolDir>/storm-pool.stats ("" = none)
    in_addr_t self_addr = 0;    // this node's address (network order), as contexts list it
    std::vector<uid_t> trusted; // may open and close contexts (root, SlurmdUser)
    PoolConfig config;
    // Whether every thread of a task's process is stopped (before its
    // queues are copied); /proc by default (tests substitute it).
    std::function<bool(pid_t)> is_stopped;
    // Where the open coscheduled contexts' jobs are recorded (may be null:
    // not recorded).  Shared with the local scheduler's verifier.
    std::shared_ptr<node::Admissions> admissions;
};

class Pool : public node::SwitchHook {
public:
    Pool(event_base *base, PoolSetup setup, Logger log);
    ~Pool() override;
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;

    // Binds the control socket (replacing a stale one); throws
    // std::system_error / std::runtime_error.
    void start();
    // The switcher whose halted() the pool calls (may be null).
    void set_switcher(node::SwitchControl *s) noexcept { switcher_ = s; }

    bool halt(const std::set<uint32_t> &leaving, uint64_t seq, uint32_t quantum_us = 0) override;
    void swap(const std::set<uint32_t> &leaving, const std::set<uint32_t> &running, uint64_t seq) override;
    void release(const std::set<uint32_t> &running, uint64_t seq) override;
    // Whether one of `jobs` has a swapped context here (not failed) with a
    // task attached: its tasks must be stopped for its queues to swap.
    bool follows(const std::set<uint32_t> &jobs) const override;

    // For tests and status.
    size_t contexts() const noexcept { return windows_.size(); }
    uint64_t used_bytes() const noexcept;
    int resident_context() const noexcept;                    // -1: none
    bool switch_halting() const noexcept { return halting_; } // a switch waits for halts

private:
    struct Client;
    struct Window;
    struct Stage {
        std::vector<uint32_t> us;
        size_t next = 0;
        void add(uint32_t v);
    };

    // The control socket (pool_control.cpp): routes_ lists each request
    // type with who may send it and its handler; handle() checks the sender.
    enum class Sender;
    struct Request;
    struct Route;
    static const Route routes_[];

    void on_client(int fd, const ucred &cred);
    static void on_readable(int fd, short, void *arg);
    static void on_halt_timeout(int, short, void *arg);
    static void on_stats_timer(int, short, void *arg);
    void read_client(Client &c);
    void handle(Client &c, const std::string &msg, int passed_fd);
    void drop(int fd, const char *why);
    bool reply(Client &c, const std::string &msg, int fd = -1);

    void on_open(Client &c, const Context &ctx);
    void on_close(Client &c, const control::Ids &ids);
    void on_failed(Client &c, const std::string &why);
    void open_context(Client &c, const Context &ctx);
    // Every open window goes in and out of windows_ through these two (its
    // job's coscheduling admission follows).
    void add_window(std::unique_ptr<Window> w);
    void erase_window(std::map<uint32_t, std::unique_ptr<Window>>::iterator it);
    void close_context(uint32_t id, const char *why);
    void attach(Client &c, const control::Ids &ids);
    void start_pinning(Window &w);
    static void on_pin_timer(int, short, void *arg);
    void pin_some(Window &w);
    void fail_context(Window &w, const std::string &why);
    void on_halted(Client &c, uint64_t epoch);
    void on_ready(Client &c, uint64_t epoch);
    void window_halted(Window &w);
    bool halt_answered(Window &w, int fd);
    bool switch_waits() const;
    void finish_halt();
    void load_running();
    bool leaves_pool(const Window &w) const;
    const Client *running_task(const Window &w) const;
    void wait_stopped(Window &w);
    void arm_stop_timer(Window &w);
    void stop_waiting(Window &w);
    static void on_stop_timer(int, short, void *arg);
    void check_stopped(Window &w);
    void swap_out_late(Window &w);
    void release_window(Window &w);
    void release_task(Window &w, int fd);

    void save_out(Window &w);
    bool load_in(Window &w);
    void set_resident(Window &w, bool on);
    void write_stats();

    event_base *base_;
    PoolSetup setup_;
    Logger log_;             // the component's child "rdma"
    net::UnixServer server_; // the control socket (the component's logger, prefix "rdma")
    node::SwitchControl *switcher_ = nullptr;
    event *halt_timer_ = nullptr;
    event *stats_timer_ = nullptr;
    std::map<int, std::unique_ptr<Client>> clients_;      // by fd
    std::string rx_;                                      // read_client()'s buffer
    std::map<uint32_t, std::unique_ptr<Window>> windows_; // by context id
    int resident_ = -1;                                   // the swapped context holding the pool

    // The switch in progress waits for halts (at most halt_wait), and the
    // jobs running since the last switch.
    bool halting_ = false;
    std::set<uint32_t> running_jobs_;

    Stage halt_us_, swap_us_, release_us_;
    uint64_t switches_ = 0, swaps_ = 0, packets_saved_ = 0, failures_ = 0;
    bool stats_dirty_ = true;
};

} // namespace storm::rdma
