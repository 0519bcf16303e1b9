// The cgroup v2 freezer: the gang switcher's way to stop and continue a job
// where it can be used (SwitchParameters storm_gang_stop=freeze, the
// default); signals otherwise (switcher.hpp).
//
// Each job of this node gets a group
//     <slurmd's own cgroup>/<group>/job_<id>
// (`group` is one per slurmd, "storm-gang-<node>": the virtual nodes of a
// host share its hierarchy) into which its step processes are moved.
// Stopping the job is then one write of "1" to the group's cgroup.freeze,
// continuing it one write of "0", where signals cost a kill() per process
// and wake the tasks' parent (slurmstepd) with SIGCHLD at every switch.
// Processes a task forks are born in the group, frozen with it.  A frozen
// task still dies of SIGKILL (scancel, time limits), and the signals Slurm
// sends it (scontrol suspend's SIGSTOP) take effect when it is thawed.
//
// Only processes in slurmd's own cgroup are moved, i.e. where no Slurm
// cgroup plugin placed them (proctrack/pgid or linuxproc, no task/cgroup):
// the groups Slurm made are never touched, and nesting under slurmd's group
// keeps whatever limits the site set on it.  attach() hands back the others,
// and those it could not move, for the switcher to signal.
//
// The hierarchy is the cgroup2 mount of slurmd's mount namespace or, where
// none is visible (the virtual nodes' namespaces hide /sys/fs/cgroup), one
// the freezer mounts on `mount_dir`.
//
// Contract: the constructor throws std::runtime_error when the freezer
// cannot be used (no cgroup v2, no cgroup.freeze, no permission).  release()
// and the destructor thaw the job's group, move its processes back into
// slurmd's cgroup and remove the group (a group still busy with exiting
// processes is removed by retry()); <group>/ exists only while it holds
// job groups.  A crashed agent's leftovers are thawed,
// emptied and removed at construction: no job is left frozen.
// Single-threaded (the agent's loop); errors about one process or job are
// logged, never thrown.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

#include "lib/common/cgroupfs.hpp"
#include "lib/common/log.hpp"

namespace storm::gang {

// The names of the freezer's groups: a slurmd's ("storm-gang-<node>") and,
// under it, a job's ("job_<id>").  Also what a step's guard in slurmstepd
// looks for (step_guard.hpp).
inline std::string freeze_group_name(const std::string &node) { return "storm-gang-" + node; }
inline std::string job_group_name(uint32_t job) { return "job_" + std::to_string(job); }

struct FreezerSetup {
    std::string group = "storm-gang";
    std::string mount_dir = "/run/storm-gang/cgroup2";
    std::string mountinfo = "/proc/self/mountinfo";
    std::string proc_root = "/proc";
    std::string self_cgroup; // "" = this process's (from proc_root/self/cgroup)
};

class Freezer {
public:
    // `log`: the component's logger (the switcher's, as it was given it);
    // the freezer's lines add "gang: " themselves.
    Freezer(const FreezerSetup &setup, Logger log);
    ~Freezer();
    Freezer(const Freezer &) = delete;
    Freezer &operator=(const Freezer &) = delete;

    // Moves `pids` of `job` that are in slurmd's cgroup into the job's
    // group (made on first use, frozen or not as `frozen` says, so that a
    // process moved in while the job is stopped stops at once).  Returns
    // the pids it does not hold: in another cgroup, or not movable.
    std::vector<pid_t> attach(uint32_t job, const std::vector<pid_t> &pids, bool frozen);
    // Freezes or thaws the job's group (nothing if it has none).
    void set_frozen(uint32_t job, bool frozen);
    // Whether `pid` is in one of this freezer's groups and the kernel
    // reports that group wholly frozen (every task in it stopped).
    bool frozen(pid_t pid) const;
    // Whether process `pid` is in job `job`'s group now (one read of
    // /proc/PID/cgroup; false for a process that exited).  Unlike the rest,
    // callable from any thread: it reads only what construction set.
    bool holds(uint32_t job, pid_t pid) const;
    // Whether the job's group holds a live process (cgroup.events says
    // "populated 1": a process that exited leaves it at once, before it is
    // reaped).  False for a job without a group, true where it cannot be
    // read.  One pread.
    bool populated(uint32_t job) const;
    // Thaws the job's group, gives its processes back to slurmd's cgroup
    // and removes it; forgets the job.
    void release(uint32_t job);
    // Removes groups release() found still busy (call about once a second).
    void retry();

    // The processes of `job` in its group, as of the last attach().
    size_t held(uint32_t job) const
    {
        auto it = jobs_.find(job);
        return it == jobs_.end() ? 0 : it->second.held.size();
    }
    size_t jobs() const noexcept { return jobs_.size(); }
    std::string job_dir(uint32_t job) const;
    const std::string &base() const noexcept { return base_; }

private:
    // A job's group as /proc/PID/cgroup names it (from the root).
    std::string job_rel(uint32_t job) const;
    struct Job {
        int freeze_fd = -1; // the group's cgroup.freeze, open for writing
        int events_fd = -1; // its cgroup.events, open for reading
        bool frozen = false;
        std::set<pid_t> held;     // moved in (or born there), as last listed
        bool move_logged = false; // a failed move is logged once per job
    };
    bool make_group(uint32_t job, Job &j, bool frozen);
    void write_freeze(uint32_t job, Job &j, bool frozen);
    void empty_into_self(const std::string &dir);
    void remove_group(const std::string &dir);
    void remove_base();
    void sweep_leftovers();

    FreezerSetup setup_;
    Logger log_;
    std::string root_;       // the hierarchy's mount point
    std::string self_rel_;   // slurmd's cgroup, from the root ("/" or "/a/b")
    std::string self_dir_;   // root_ + self_rel_
    std::string base_;       // self_dir_ + "/" + group
    std::string base_rel_;   // the same from the root
    bool base_made_ = false; // base_ may exist: remove_base() tries to remove it
    std::map<uint32_t, Job> jobs_;
    cgroupfs::Remover remover_; // groups whose processes are still exiting
};

} // namespace storm::gang
