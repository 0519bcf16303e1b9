// How the local scheduler's decisions reach the CPU: every process of the
// scheduled job gets (nearly) all of it, each unscheduled job keeps a small
// share (storm_cosched_share percent) so that it notices messages.
//
// CgroupEnforcer (preferred): a cgroup v1 cpu hierarchy.  It uses the one
// mounted in slurmd's mount namespace (/proc/self/mountinfo: a "cgroup"
// mount whose options name the cpu controller) or, when none is visible
// (the virtual nodes' mount namespaces hide /sys/fs/cgroup), mounts one
// itself on <mount_dir> (mount -t cgroup -o cpu, or cpu,cpuacct when the
// kernel has them co-mounted).  Under it, <group>/ (one per slurmd: the
// virtual nodes of one host share the hierarchy) holds one cgroup per job,
// job_<id>, into which the job's processes are moved (cgroup.procs: all
// their threads; their later children follow by inheritance).  Weights:
//   unscheduled: cpu.shares = 1024
//   scheduled:   cpu.shares = 1024 * (100 - share) / share
// so with n jobs an unscheduled one gets 1 / (100/share - 1 + n - 1) of the
// CPU when all are busy: ~share percent.  cpu.shares is work-conserving (an
// unscheduled job also gets what the scheduled one leaves idle), unlike the
// paper's strict class scheduler; cpu.cfs_quota_us would make it strict.
//
// NiceEnforcer (fallback, logged once by make_enforcer): every thread of an
// unscheduled job's registered processes gets nice 19 (weight 15 against
// 1024: ~1.5%), those of the scheduled job their nice from before.
// Threads inherit it; processes the job starts later are not tracked.
//
// Contract, both: release(job) and the destructor give every process back
// what it had (its former cgroup, its former nice) and remove the job's
// cgroup: no job is left throttled when it unregisters or the agent stops.
// A crashed agent's leftovers (<group>/job_*) are emptied into the
// hierarchy's root and removed when the next one starts.  Single-threaded
// (the agent's loop); errors about one process are logged, never thrown.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "lib/common/cgroupfs.hpp"
#include "lib/common/log.hpp"

namespace storm::cosched {

class Enforcer {
public:
    virtual ~Enforcer() = default;
    virtual const char *name() const noexcept = 0;
    // Adds processes to the job (creating it); `scheduled` is its status.
    virtual void attach(uint32_t job, const std::vector<pid_t> &pids, bool scheduled) = 0;
    virtual void set_scheduled(uint32_t job, bool scheduled) = 0;
    // Gives the job's processes back what they had and forgets the job.
    virtual void release(uint32_t job) = 0;
    // Finishes what a release could not yet (called about once a second).
    virtual void retry() {}
};

struct EnforcerSetup {
    unsigned share_percent = 1;
    std::string group = "storm-cosched";              // per slurmd
    std::string mount_dir = "/run/storm-cosched/cpu"; // used when no cpu hierarchy is mounted
    std::string mountinfo = "/proc/self/mountinfo";
    std::string proc_root = "/proc";
    std::string cpu_root; // given: use this hierarchy (tests)
};

class CgroupEnforcer : public Enforcer {
public:
    // Throws std::runtime_error when no cpu hierarchy can be found or mounted.
    CgroupEnforcer(const EnforcerSetup &setup, Logger log);
    ~CgroupEnforcer() override;
    const char *name() const noexcept override { return "cgroup cpu.shares"; }
    void attach(uint32_t job, const std::vector<pid_t> &pids, bool scheduled) override;
    void set_scheduled(uint32_t job, bool scheduled) override;
    // A job's group that still holds exiting processes (rmdir: EBUSY) is
    // emptied and removed again by retry(), and at the latest when the
    // enforcer goes away.
    void release(uint32_t job) override;
    void retry() override;
    const std::string &root() const noexcept { return root_; }
    std::string job_dir(uint32_t job) const;
    // The cpu hierarchy mounted in this mount namespace ("" if none).
    static std::string find_cpu_mount(const std::string &mountinfo);

private:
    struct Job {
        std::map<pid_t, std::string> from; // pid -> its former cgroup (relative)
    };
    void sweep_leftovers();
    void empty_into(const std::string &dir, const std::string &target);

    EnforcerSetup setup_;
    Logger log_;
    std::string root_, base_;
    bool mounted_ = false;
    std::map<uint32_t, Job> jobs_;
    cgroupfs::Remover remover_; // groups whose processes are still exiting
};

class NiceEnforcer : public Enforcer {
public:
    NiceEnforcer(const EnforcerSetup &setup, Logger log);
    ~NiceEnforcer() override;
    const char *name() const noexcept override { return "nice 19"; }
    void attach(uint32_t job, const std::vector<pid_t> &pids, bool scheduled) override;
    void set_scheduled(uint32_t job, bool scheduled) override;
    void release(uint32_t job) override;

private:
    struct Job {
        std::vector<pid_t> pids;
        std::map<pid_t, int> nice; // per thread id: before we changed it
        bool scheduled = true;
    };
    void apply(Job &j, bool scheduled);

    EnforcerSetup setup_;
    Logger log_;
    std::map<uint32_t, Job> jobs_;
};

// The cgroup enforcer if it can be used, else the nice fallback (the
// reason logged once, a warning).  Both enforcers take the component's
// logger and add "cosched: " to their lines.
std::unique_ptr<Enforcer> make_enforcer(const EnforcerSetup &setup, const Logger &log);

} // namespace storm::cosched
