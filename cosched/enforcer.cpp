#include "cosched/enforcer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <stdexcept>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/cgroupfs.hpp"

namespace storm::cosched {

namespace {

using cgroupfs::mkdirs;
using cgroupfs::write_text;

// The pid's cgroup in the hierarchy holding the cpu controller ("" if none).
std::string cpu_cgroup_of(const std::string &proc_root, pid_t pid)
{
    return cgroupfs::cgroup_of(proc_root, pid, "cpu");
}

unsigned scheduled_shares(unsigned percent) { return 1024u * (100u - percent) / percent; }

} // namespace

// ---- cgroup -------------------------------------------------------------------

std::string CgroupEnforcer::find_cpu_mount(const std::string &mountinfo)
{
    return cgroupfs::find_mount(mountinfo, "cgroup", "cpu");
}

CgroupEnforcer::CgroupEnforcer(const EnforcerSetup &setup, Logger log)
    : setup_(setup), log_(log.child("cosched")),
      remover_(log_, [this](const std::string &dir) { empty_into(dir, root_); })
{
    root_ = setup_.cpu_root.empty() ? find_cpu_mount(setup_.mountinfo) : setup_.cpu_root;
    if (root_.empty()) {
        const std::string &dir = setup_.mount_dir;
        if (!mkdirs(dir))
            throw std::runtime_error("no cpu cgroup hierarchy is mounted and mkdir " + dir +
                                     " failed: " + std::strerror(errno));
        if (mount("cgroup", dir.c_str(), "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "cpu") != 0 &&
            mount("cgroup", dir.c_str(), "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "cpu,cpuacct") != 0)
            throw std::runtime_error("no cpu cgroup hierarchy is mounted and mounting one on " + dir +
                                     " failed: " + std::strerror(errno));
        root_ = dir;
        mounted_ = true;
        log_.info("mounted a cgroup v1 cpu hierarchy on %s", dir.c_str());
    }
    base_ = root_ + "/" + setup_.group;
    if (!mkdirs(base_))
        throw std::runtime_error("cannot create " + base_ + ": " + std::strerror(errno));
    if (access((base_ + "/cgroup.procs").c_str(), W_OK) != 0 ||
        access((base_ + "/cpu.shares").c_str(), W_OK) != 0)
        throw std::runtime_error(base_ + " is not a writable cgroup with cpu.shares");
    sweep_leftovers();
}

CgroupEnforcer::~CgroupEnforcer()
{
    while (!jobs_.empty())
        release(jobs_.begin()->first);
    remover_.drain();     // exiting processes: up to 1 s
    rmdir(base_.c_str()); // fails, harmlessly, if something else lives there
}

std::string CgroupEnforcer::job_dir(uint32_t job) const { return base_ + "/job_" + std::to_string(job); }

void CgroupEnforcer::empty_into(const std::string &dir, const std::string &target)
{
    cgroupfs::empty_into(dir, target, root_, [&](pid_t p, int e) {
        log_.error("cannot move pid %d out of %s: %s", p, dir.c_str(), std::strerror(e));
    });
}

void CgroupEnforcer::sweep_leftovers()
{
    for (const auto &dir : cgroupfs::job_groups(base_)) {
        empty_into(dir, root_);
        if (rmdir(dir.c_str()) != 0)
            log_.error("cannot remove %s, left by an earlier node agent: %s", dir.c_str(),
                       std::strerror(errno));
        else
            log_.info("released %s, left by an earlier node agent", dir.c_str());
    }
}

void CgroupEnforcer::attach(uint32_t job, const std::vector<pid_t> &pids, bool scheduled)
{
    std::string dir = job_dir(job);
    bool fresh = !jobs_.count(job);
    Job &j = jobs_[job];
    if (fresh) {
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
            log_.error("cannot create %s: %s", dir.c_str(), std::strerror(errno));
        set_scheduled(job, scheduled);
    }
    for (pid_t p : pids) {
        if (j.from.count(p))
            continue;
        std::string from = cpu_cgroup_of(setup_.proc_root, p);
        if (from.rfind("/" + setup_.group + "/", 0) == 0)
            from = "/"; // already ours (another job's step?): back to the root
        if (!write_text(dir + "/cgroup.procs", std::to_string(p))) {
            if (errno != ESRCH)
                log_.error("cannot move pid %d of job %u into %s: %s", p, job, dir.c_str(),
                           std::strerror(errno));
            continue;
        }
        j.from[p] = from.empty() ? "/" : from;
    }
}

void CgroupEnforcer::set_scheduled(uint32_t job, bool scheduled)
{
    unsigned shares = scheduled ? scheduled_shares(setup_.share_percent) : 1024;
    std::string f = job_dir(job) + "/cpu.shares";
    if (!write_text(f, std::to_string(shares)))
        log_.error("cannot write %u to %s: %s", shares, f.c_str(), std::strerror(errno));
}

void CgroupEnforcer::release(uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return;
    std::string dir = job_dir(job);
    std::string fallback = "/";
    for (const auto &[p, from] : it->second.from) {
        std::string target = root_ + (from == "/" ? "" : from);
        if (!write_text(target + "/cgroup.procs", std::to_string(p)) &&
            !write_text(root_ + "/cgroup.procs", std::to_string(p)) && errno != ESRCH)
            log_.error("cannot move pid %d of job %u back: %s", p, job, std::strerror(errno));
        fallback = from;
    }
    // Children they started since: where their parents came from.
    empty_into(dir, root_ + (fallback == "/" ? "" : fallback));
    remover_.remove(dir); // a process still exiting in it: again at retry()
    jobs_.erase(it);
}

void CgroupEnforcer::retry() { remover_.retry(); }

// ---- nice ----------------------------------------------------------------------

NiceEnforcer::NiceEnforcer(const EnforcerSetup &setup, Logger log) : setup_(setup), log_(log.child("cosched"))
{
}

NiceEnforcer::~NiceEnforcer()
{
    while (!jobs_.empty())
        release(jobs_.begin()->first);
}

void NiceEnforcer::apply(Job &j, bool scheduled)
{
    j.scheduled = scheduled;
    for (pid_t p : j.pids) {
        DIR *d = opendir((setup_.proc_root + "/" + std::to_string(p) + "/task").c_str());
        if (!d)
            continue; // gone
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
            if (!scheduled) {
                errno = 0;
                int before = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
                if (errno != 0)
                    continue;
                j.nice.emplace(tid, before);
                if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19) != 0 && errno != ESRCH)
                    log_.error("cannot renice thread %d: %s", tid, std::strerror(errno));
            } else {
                auto it = j.nice.find(tid);
                if (it != j.nice.end()) {
                    setpriority(PRIO_PROCESS, static_cast<id_t>(tid), it->second);
                    j.nice.erase(it);
                }
            }
        }
        closedir(d);
    }
    if (scheduled)
        j.nice.clear(); // threads that are gone
}

void NiceEnforcer::attach(uint32_t job, const std::vector<pid_t> &pids, bool scheduled)
{
    Job &j = jobs_[job];
    for (pid_t p : pids)
        if (std::find(j.pids.begin(), j.pids.end(), p) == j.pids.end())
            j.pids.push_back(p);
    apply(j, scheduled);
}

void NiceEnforcer::set_scheduled(uint32_t job, bool scheduled)
{
    auto it = jobs_.find(job);
    if (it != jobs_.end())
        apply(it->second, scheduled);
}

void NiceEnforcer::release(uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return;
    apply(it->second, true);
    jobs_.erase(it);
}

std::unique_ptr<Enforcer> make_enforcer(const EnforcerSetup &setup, const Logger &log)
{
    try {
        return std::make_unique<CgroupEnforcer>(setup, log);
    } catch (const std::exception &e) {
        log.child("cosched").warning("cannot use a cpu cgroup (%s): unscheduled jobs get nice 19 instead",
                                     e.what());
        return std::make_unique<NiceEnforcer>(setup, log);
    }
}

} // namespace storm::cosched
