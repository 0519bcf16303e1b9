// The machine manager: gang scheduling's controller side, inside slurmctld
// (seed 000 section 2.1; run by the sched/gang plugin).
//
// It keeps the gang matrix of the running jobs of gang partitions (Matrix),
// sends every node that runs one of them the table of jobs and slots when
// the matrix changes ("gang:table"), and every quantum a strobe naming the
// slot to run ("gang:strobe"), both with XFER-AND-SIGNAL from its own
// Engine (a pure initiator) on its own thread and libevent loop.  The
// strobe is also the nodes' heartbeat: their fail-safe continues every job
// when strobes stop.
//
// Flow: a strobe at least every 20 ms is answered (XFER-AND-SIGNAL), at most
// one at a time; at shorter quanta the strobes between them go unanswered
// (Engine::xfer_unacked: half the messages).  With every strobe answered
// (quanta of 20 ms and more), a quantum whose strobe would overtake the
// previous one is skipped (counted "late").  Nodes that fail
// a strobe or a table are reported and left out of strobes for a while
// (seed 000's fault detection: 1 s, doubling while they keep failing, up to
// `isolate`), then readmitted with a fresh copy of the table.
//
// Status: every second and at each table the manager rewrites
// `status_path` (key: value lines, atomically) for storm-gang.
//
// Threading: submit() and set_timing() may be called from any thread; the
// rest runs on the manager's thread.  Contract: start() throws if the
// thread or loop cannot be set up; stop() (also the destructor) joins it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>

#include "lib/common/log.hpp"
#include "lib/common/realtime.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/net/mcast.hpp"
#include "lib/prim/engine.hpp"
#include "sched_gang/matrix.hpp"
#include "sched_gang/protocol.hpp"

struct event_base;
struct event;

namespace storm::gang {

struct Timing {
    std::chrono::microseconds quantum{50000};
    std::chrono::milliseconds failsafe{5000};
    unsigned max_slots = 2; // MPL
};

struct ManagerConfig {
    std::vector<sockaddr_in> nodes; // Storm's node table, agent port set
    std::vector<std::string> names;
    unsigned fanout = 8;
    Timing timing;
    std::chrono::milliseconds isolate{60000}; // longest isolation (it starts at 1 s and doubles)
    std::string status_path;                  // "" = none
    unsigned rt_priority = 0;                 // SCHED_FIFO while jobs are gang-scheduled (0 = never)
    // storm_mcast: strobes also go to GROUP:PORT+1 (protocol.hpp), from
    // the address this host reaches the nodes with; off when mcast.port is 0.
    net::McastConfig mcast;
};

// What the gang partitions hold now, as Slurm sees it.
struct Snapshot {
    std::vector<JobShape> running;
    std::vector<uint32_t> suspended; // by Slurm (scontrol suspend)
};

class MachineManager {
public:
    // `log`: the component's logger (slurmctld's sched/gang); the manager's
    // lines add "gang: ", its engine's do not.
    MachineManager(ManagerConfig config, std::unique_ptr<net::Authenticator> auth, Logger log);
    ~MachineManager();
    MachineManager(const MachineManager &) = delete;
    MachineManager &operator=(const MachineManager &) = delete;

    void start();
    void stop() noexcept;
    void submit(Snapshot s);
    void set_timing(const Timing &t);

    // The time each job spent stopped since the last call: strobed slots
    // that are neither its home nor one of its alternatives (any thread).
    // slurmctld moves the job's end time on by it, as Slurm does for the
    // time a job spends suspended, so that its time limit counts the time
    // it ran.
    std::map<uint32_t, std::chrono::microseconds> take_stopped();

    // Counters (any thread).
    uint64_t strobes() const noexcept { return strobes_.load(); }
    uint64_t tables() const noexcept { return tables_.load(); }

private:
    void run() noexcept;
    void housekeeping();
    void strobe();
    void send_table(const net::RangeSet &to);
    bool multicast(const Strobe &s);
    // Strobes go by multicast: the socket is open and the table carries a key.
    bool multicasting() const noexcept { return strobe_sock_ && table_.has_key; }
    // The strobe timer's period: the quantum, or with one slot (nothing to
    // switch) the heartbeat's (strobe_period()).
    void arm_strobe();
    std::chrono::microseconds strobe_period() const;
    // The interval between answered strobes (the heartbeat).
    int64_t answer_us() const;
    void write_status();
    net::RangeSet active(const net::RangeSet &set) const;
    void isolate(const net::RangeSet &failed, const char *what, const std::string &why);
    std::string names(const net::RangeSet &set) const;

    ManagerConfig cfg_;
    std::unique_ptr<net::Authenticator> auth_;
    Logger log_;        // the manager's lines: "gang: "
    Logger engine_log_; // as given: the engine's lines carry no service name
    event_base *base_ = nullptr;
    event *strobe_ev_ = nullptr, *house_ev_ = nullptr;
    std::unique_ptr<prim::Engine> engine_;
    std::unique_ptr<net::GroupSocket> strobe_sock_; // strobes by multicast
    uint64_t mc_sent_ = 0, mc_errors_ = 0;
    std::string mc_group_;
    std::thread thread_;
    std::atomic<bool> running_{false};

    // From other threads.
    std::mutex mu_;
    std::optional<Snapshot> pending_;
    std::optional<Timing> pending_timing_;
    std::map<uint32_t, std::chrono::microseconds> stopped_; // take_stopped()

    // Loop state.
    Timing timing_;
    Matrix matrix_;
    std::vector<uint32_t> suspended_;
    uint64_t epoch_;
    Table table_;
    net::RangeSet gang_nodes_;  // nodes of the current table's jobs
    net::RangeSet table_nodes_; // nodes sent the current table
    std::map<uint32_t, std::chrono::steady_clock::time_point> isolated_;
    std::map<uint32_t, std::chrono::milliseconds> backoff_; // last isolation of nodes not back yet
    unsigned slot_ = 0;
    std::optional<std::chrono::steady_clock::time_point> slot_since_; // slot_ runs since
    std::chrono::microseconds armed_{0};                              // the strobe timer's period
    uint64_t seq_ = 0, late_ = 0, failed_strobes_ = 0;
    bool in_flight_ = false;
    RealtimeWhile realtime_{cfg_.rt_priority};
    bool status_error_logged_ = false;
    std::chrono::steady_clock::time_point sent_at_{}, last_status_{};
    std::vector<uint32_t> rtt_us_;
    size_t rtt_next_ = 0;
    uint64_t strobes_last_status_ = 0;
    double rate_ = 0;
    std::atomic<uint64_t> strobes_{0}, tables_{0};
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace storm::gang
