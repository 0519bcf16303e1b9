// Termination detection (seed 000, Algorithms 8 and 9), on the primitives.
//
// Node side (announce): when every local process of job J has ended, the
// node sets its global flag "terminated:J" to 1; the job's designated node
// (its first) also XFER-AND-SIGNALs the announcement event
// "terminated:announce:J" to the master's node.
//
// Master side (detect): the master blocks -- without any network traffic --
// until the announcement arrives (TEST-EVENT, checked every `interval`;
// SPMD processes end together, so the first node's end means the others'
// is near), then polls every `interval` with COMPARE-AND-WRITE(set,
// terminated:J = 1, write terminated:J := 0) until it holds everywhere, and
// reports the job ended.  Nodes that do not answer end the detection with
// a failure that names them.
//
// Why nothing in the running system calls it (only test_queue does), and
// why it stays.  In Slurm, a job's end is Slurm's to detect: slurmd and
// slurmstepd report each step's and job's completion to slurmctld by
// Slurm's own RPCs, and slurmctld alone frees the job's nodes, with no
// plugin hook to take that over; sched/gang reads which jobs still run
// from slurmctld's job list too.  Running this detector beside Slurm would add
// traffic whose answer nobody acts on.  A broadcast's completion needs no
// detection either: the head learns it from the client's close and checks
// it with one COMPARE-AND-WRITE ("bcast:<sid>:complete"), which is this
// algorithm's second phase without its wait.  It stays as the third of
// seed 000's resource-management functions built on the primitives
// (beside queue.hpp and heartbeat.hpp), tested, for a master that learns
// of an end only from the nodes: a launcher that starts jobs through the
// agents itself, or a scheduler that must reclaim a job's slot the moment
// its processes ended everywhere, before Slurm's completion arrives.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "lib/prim/engine.hpp"

struct event;

namespace storm::prim {

std::string terminated_var(const std::string &job);
std::string announce_event(const std::string &job);

// Node side: call when this node's processes of `job` have all ended.
// `designated` nodes also announce it to `master` (a node index).
void announce_termination(Engine &engine, const std::string &job, bool designated, uint32_t master,
                          Engine::XferDone done);

class TerminationDetector {
public:
    // `engine` must be the master node's engine (announcements arrive there).
    TerminationDetector(Engine &engine, event_base *base, std::chrono::milliseconds interval);
    ~TerminationDetector();

    struct Result {
        bool ok; // false: some nodes did not answer
        RangeSet failed;
        unsigned polls; // COMPARE-AND-WRITEs it took after the announcement
    };
    using Done = std::function<void(const std::string &job, const Result &)>;
    void watch(const std::string &job, const RangeSet &set, Done done);
    size_t watching() const noexcept { return jobs_.size(); }

private:
    struct Job {
        RangeSet set;
        Done done;
        bool announced = false;
        bool polling = false;
        unsigned polls = 0;
    };
    void tick();

    Engine &engine_;
    event *timer_ = nullptr;
    std::map<std::string, Job> jobs_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace storm::prim
