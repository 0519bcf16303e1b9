// The process switcher: the node side of gang scheduling, in the node agent
// (slurmd).
//
// It holds the table of gang-scheduled jobs the machine manager last sent
// ("gang:table") and, on each strobe ("gang:strobe") of that table's epoch,
// stops the processes of every job of this node not in the strobe's slot
// and then continues those in it: outgoing first, so the jobs of two slots
// never run at once.  Only the processes of a job's steps are switched
// (what srun launches), never slurmstepd, the batch script or srun, which
// keep serving the job's I/O and launch.
//
// How: with the cgroup v2 freezer where it can be used (`freeze` set:
// freezer.hpp; one write per job and switch, and the tasks' parents are
// not woken), else, and for processes the freezer cannot hold (in a cgroup
// of Slurm's), with SIGSTOP and SIGCONT.
//
// Processes are known by pidfd (no signal can hit a recycled pid).  A
// scanner thread asks Slurm for the processes of the table's jobs (the
// StepLister: slurmstepd's own list, proctrack's container) whenever the
// table changes and when a step starts (rescan(): slurmstepd opened the
// step's context), then 50 ms later and at doubling intervals up to
// `rescan`, or `rescan_held` while the freezer holds every process found
// (with proctrack/pgid each listing costs slurmstepd a scan of /proc, so
// the scanner tells the lister which processes the freezer holds: a step
// whose processes it all holds is not listed again, lib/node/step_lister.hpp);
// a process a job starts while it is stopped is stopped at the next scan,
// or at once where it is born in the job's frozen group.
//
// Fail-safe, so that no job is ever left stopped:
//  - no strobe for the table's fail-safe time: every stopped job is
//    continued (switching resumes with the next strobe);
//  - a job that leaves the table is continued, unless the table says Slurm
//    suspended it (scontrol suspend): those Slurm stopped, and Slurm
//    resumes them;
//  - the destructor (slurmd stopping) continues every job it stopped;
//  - the jobs of the current table are journaled in `journal_dir`; a new
//    agent (slurmd restarted after a crash) continues them in recover();
//  - but none of these continues a job whose slurmstepd marked a step
//    suspended by Slurm (step_guard.hpp: the table saying so may not have
//    come yet): its freezer group is thawed, and Slurm's SIGSTOP holds
//    until Slurm resumes it.
//
// Lending (SwitcherConfig::lend, on by default): a strobe whose slot has no
// job with a live process on this node stops nothing; the jobs that ran go
// on (the slot's jobs stay as they were).  A job's steps may end well
// before Slurm ends the job (the batch script's last commands,
// slurmstepd's own completion), a batch script may work alone on its first
// node between steps, and a slot may hold no job of this node: without
// lending, the node idles for each of those quanta.  A job is seen
// as idle here once its processes the last scan found have all exited
// (pidfd readable) and its freezer group is empty; the next scan that
// finds processes makes it busy again.  Only one slot's jobs still run on
// a node at a time.  Never while a job of the node has a context whose
// tasks follow the strobes (the hook's follows(): a swapped context's
// attached tasks, which the switch must stop for their queues to be
// swapped); the hook still sees every switch as every node makes it, so
// the contexts' epochs stay the same on all nodes.  Counted in gang:lent.
//
// Delivery delay: each applied strobe records now - its issue time (both
// CLOCK_REALTIME; the nodes' clocks must agree, as on one machine or under
// NTP); the p50, p99 and maximum of the last 4096 within the last 30 s are
// published every second as the engine variables gang:delay_p50_us, gang:delay_p99_us and
// gang:delay_max_us, beside gang:strobes (applied), gang:ignored (stale
// epoch), gang:epoch (low 62 bits), gang:jobs and gang:stopped, which
// COMPARE-AND-WRITE can query (storm-gang --nodes).
//
// Threading: everything but the scanner runs on the agent's loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "lib/common/log.hpp"
#include "lib/node/step_lister.hpp"
#include "lib/node/switch_hook.hpp"
#include "lib/common/realtime.hpp"
#include "lib/prim/engine.hpp"
#include "lib/net/mcast.hpp"
#include "sched_gang/freezer.hpp"
#include "sched_gang/protocol.hpp"

struct event_base;
struct event;

namespace storm::gang {

// The processes of a job's steps, and the hook around each switch (the
// communication contexts' halt / swap / release): lib/node/.
using node::StepLister;
using node::SwitchHook;

struct SwitcherConfig {
    uint32_t self = 0;
    std::string journal_dir;                // "" = no journal
    std::chrono::milliseconds rescan{1000}; // steady-state interval between scans
    // SCHED_FIFO priority of the loop thread while the table holds jobs of
    // this node (lib/common/realtime.hpp); 0 = never.
    unsigned rt_priority = 0;
    // Strobes by multicast (protocol.hpp): GROUP:PORT+1 of storm_mcast,
    // joined on `iface` (this node's address); off when mcast.port is 0.
    net::McastConfig mcast;
    // The cgroup v2 freezer's groups on this node: jobs are stopped with it
    // where it can be used, unless `signals_only`.  Either way a crashed
    // agent's frozen groups are thawed at start, so that changing the
    // setting never leaves a job frozen.  None: signals, no freezer at all.
    std::optional<FreezerSetup> freeze;
    bool signals_only = false;
    // A slot whose jobs have no live process on this node (their steps
    // ended, or the job is between steps, or it has no job here at all)
    // lends the node: the strobe stops nothing, and the jobs that ran go
    // on, instead of the node idling for the quantum.  Not while a job of
    // the node has a context the hook follows (SwitchHook::follows).
    bool lend = true;
    // The steady-state interval between scans while the freezer holds
    // every process the scans found of the node's jobs (none is left to
    // signals): their children are born in the job's group, frozen or not
    // with it, and a step that starts makes the pool ask for a scan at once
    // (rescan()).  Each scan asks every step's slurmstepd, which with
    // proctrack/pgid reads all of /proc: with 64 virtual nodes on one
    // machine and two jobs each, about a quarter of the CPU at 1 s.
    std::chrono::milliseconds rescan_held{5000};
};

class Switcher : public node::SwitchControl {
public:
    // `log`: the component's logger (the node agent's); the switcher's lines
    // add "gang: ", and so do its freezer's (it hands the freezer `log`).
    Switcher(event_base *base, prim::Engine &engine, StepLister lister, SwitcherConfig config, Logger log);
    ~Switcher() override;
    Switcher(const Switcher &) = delete;
    Switcher &operator=(const Switcher &) = delete;

    // Continues the processes of the jobs a previous agent journaled.
    // Call once, before the first table.
    void recover();
    // The engine's sink for events "gang:" (Engine::add_sink): a table may
    // come in several chunks.  Returns "" or why this node failed the
    // transfer: a malformed message (logged and dropped), or a strobe of
    // another epoch than the table it holds ("stale table", so that the
    // manager sends the table again: a restarted agent holds none).
    std::string on_chunk(const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                         std::string_view data);
    // A whole message at once (tests); false for events that are not gang's.
    bool on_signal(const std::string &event, const std::string &data);
    // A datagram of the strobe group (and tests): applied if it is a strobe
    // of the held table, sealed under its key, newer than any applied;
    // otherwise counted and dropped (a forged one logged).
    void on_datagram(std::string_view d);

    // The halt / swap / release of communication contexts at each switch
    // (none by default).  The hook must outlive the switcher or be reset.
    void set_hook(SwitchHook *hook) noexcept { hook_ = hook; }
    // The hook's answer to halt(): the leaving jobs have halted (or failed).
    void halted() override;
    // A step of a job may be starting on this node (slurmstepd opened its
    // communication context): scan now and again 50 ms later, doubling
    // from there, instead of waiting up to `rescan`.  Thread safe.
    void rescan() override;

    // For tests and status.
    uint64_t epoch() const noexcept { return epoch_; }
    uint64_t applied() const noexcept { return applied_; }
    uint64_t ignored() const noexcept { return ignored_; }
    uint64_t failsafes() const noexcept { return failsafes_; }
    // Strobes that lent the node (SwitcherConfig::lend).
    uint64_t lent() const noexcept { return lent_; }
    uint64_t mcast_applied() const noexcept { return mc_applied_; }
    uint64_t mcast_rejected() const noexcept { return mc_rejected_; }
    size_t jobs() const noexcept { return jobs_.size(); }
    bool stopped(uint32_t job) const;
    // The job's processes this node knows: signalled ones and those in its
    // freezer group.
    size_t processes(uint32_t job) const;
    // Whether jobs are stopped with the freezer on this node.
    bool freezing() const noexcept { return freezer_ != nullptr; }
    // Whether `pid` is in a frozen group of this switcher (a stop the pool
    // must not wait for as a SIGSTOP: frozen tasks sleep, state S).
    bool frozen(pid_t pid) const { return freezer_ && freezer_->frozen(pid); }

private:
    struct Proc {
        pid_t pid;
        int fd; // pidfd
    };
    struct Job {
        uint64_t mask = 0;
        bool stopped = false;
        // Out of the running slot as every node switches it: what the hook
        // sees.  The same as `stopped` but where this node lends a slot.
        bool out = false;
        std::vector<Proc> procs; // switched with signals (the others are in its freezer group)
        // No live process here since the last scan (which alone brings new
        // ones): the job's slots lend the node.
        bool idle = false;
        bool idle_logged = false;
    };
    bool lends(uint64_t bit);
    bool busy_here(uint32_t id, Job &j);
    void on_table(const Table &t);
    std::string on_strobe(const Strobe &s, bool replay = false);
    void finish_switch(uint64_t bit, uint64_t seq, bool lend);
    void signal_job(uint32_t id, Job &j, int sig);
    void stop_job(uint32_t id, Job &j);
    // Thaws and continues job `id` (with `sigcont` false: thaws only, for
    // a job Slurm suspended, whose SIGSTOP must hold).
    void continue_job(uint32_t id, Job &j, bool sigcont = true);
    void continue_all(const char *why);
    // Wake-ups, so that an agent wakes for strobes and little else (at
    // 1000 virtual nodes on one host every wake-up of every agent counts):
    //  - the tick, every second: statistics, and the freezer's retries;
    //  - the scanner's eventfd, when a scan has found the jobs' processes
    //    (take_found());
    //  - the fail-safe timer, one-shot at the last strobe plus the table's
    //    fail-safe time, pushed back by every strobe (arm_failsafe()).
    void tick();
    static void on_tick(int, short, void *arg);
    static void on_wake(int fd, short, void *arg);
    void take_found();
    void arm_failsafe();
    void on_failsafe();
    static void on_failsafe_ev(int, short, void *arg);
    void free_events() noexcept;
    void scanner() noexcept;
    void write_journal();
    // Removes the journal and the record beside it (a clean stop, nothing
    // switched, or a predecessor's journal dealt with).
    void remove_journal();
    void publish_stats();

    event_base *base_;
    prim::Engine &engine_;
    StepLister lister_;
    SwitcherConfig cfg_;
    Logger log_;
    event *tick_ = nullptr;
    event *failsafe_ev_ = nullptr;
    event *wake_ev_ = nullptr;
    int wake_fd_ = -1; // eventfd: the scanner posted found_
    // The freezer holds every process found of the table's jobs (the
    // loop thread sets it, the scanner reads it: cfg_.rescan_held).
    std::atomic<bool> all_held_{false};
    SwitchHook *hook_ = nullptr;
    std::unique_ptr<Freezer> freezer_;
    // A switch waiting for the hook's halted(): its slot bit and strobe, and
    // the strobes that came meanwhile, applied in order once it finishes
    // (every node must switch the same jobs at the same strobes: their
    // contexts' halt and ready marks follow the strobes' sequence).
    bool halting_ = false;
    uint64_t halting_bit_ = 0, halting_seq_ = 0;
    bool halting_lend_ = false;
    std::deque<Strobe> deferred_;

    uint64_t epoch_ = 0;
    uint32_t failsafe_ms_ = 0;
    uint32_t quantum_us_ = 0;
    std::map<uint32_t, Job> jobs_;
    bool failsafe_active_ = false;
    RealtimeWhile realtime_{cfg_.rt_priority};
    uint64_t table_origin_ = 0;
    std::string table_part_; // a table arriving in chunks
    std::chrono::steady_clock::time_point last_strobe_{};
    uint64_t applied_ = 0, ignored_ = 0, failsafes_ = 0, lent_ = 0;
    // Strobes of this table apply once, in increasing sequence (a strobe
    // may come by multicast and again down the tree).
    uint64_t last_seq_ = 0;
    std::optional<StrobeKey> key_; // the table's, when strobes come by multicast
    std::unique_ptr<net::GroupSocket> strobe_sock_;
    uint64_t mc_applied_ = 0, mc_rejected_ = 0;
    bool mc_reject_logged_ = false; // once per table
    struct Delay {
        std::chrono::steady_clock::time_point at;
        uint32_t us;
    };
    std::vector<Delay> delays_us_; // ring of the last kDelays
    size_t delay_next_ = 0;

    // Scanner thread: wanted_ (the table's jobs) in, found_ (pidfds) out.
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false, rescan_now_ = false;
    std::set<uint32_t> wanted_;
    bool found_ready_ = false;
    std::map<uint32_t, std::vector<Proc>> found_;
    std::string scan_error_;
    std::thread thread_;
};

} // namespace storm::gang
