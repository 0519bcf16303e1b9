#include "sched_gang/freezer.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/common/cgroupfs.hpp"

namespace storm::gang {

using cgroupfs::write_text;

Freezer::Freezer(const FreezerSetup &setup, Logger log)
    : setup_(setup), log_(log.child("gang")),
      remover_(log_, [this](const std::string &dir) { empty_into_self(dir); })
{
    root_ = cgroupfs::find_mount(setup_.mountinfo, "cgroup2", "");
    if (root_.empty()) {
        const std::string &dir = setup_.mount_dir;
        if (!cgroupfs::mkdirs(dir))
            throw std::runtime_error("no cgroup v2 hierarchy is mounted and mkdir " + dir +
                                     " failed: " + std::strerror(errno));
        if (mount("cgroup2", dir.c_str(), "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
            throw std::runtime_error("no cgroup v2 hierarchy is mounted and mounting one on " + dir +
                                     " failed: " + std::strerror(errno));
        root_ = dir;
        log_.info("mounted the cgroup v2 hierarchy on %s", dir.c_str());
    }
    self_rel_ =
        setup_.self_cgroup.empty() ? cgroupfs::cgroup_of(setup_.proc_root, getpid(), "") : setup_.self_cgroup;
    if (self_rel_.empty() || self_rel_[0] != '/')
        throw std::runtime_error("slurmd's cgroup v2 group is unknown (no \"0::\" line in " +
                                 setup_.proc_root + "/" + std::to_string(getpid()) + "/cgroup)");
    std::string self = self_rel_ == "/" ? "" : self_rel_;
    self_dir_ = root_ + self;
    base_rel_ = self + "/" + setup_.group;
    base_ = root_ + base_rel_;
    if (mkdir(base_.c_str(), 0755) != 0 && errno != EEXIST)
        throw std::runtime_error("cannot create " + base_ + ": " + std::strerror(errno));
    if (access((base_ + "/cgroup.freeze").c_str(), W_OK) != 0)
        throw std::runtime_error(base_ + " has no writable cgroup.freeze (" + std::strerror(errno) +
                                 "; the kernel needs 5.2 or later)");
    if (access((self_dir_ + "/cgroup.procs").c_str(), W_OK) != 0)
        throw std::runtime_error("cannot move processes back into " + self_dir_ + ": " +
                                 std::strerror(errno));
    sweep_leftovers();
    base_made_ = true;
    remove_base(); // made again with the first job's group
}

Freezer::~Freezer()
{
    while (!jobs_.empty())
        release(jobs_.begin()->first);
    remover_.drain();     // exiting processes: up to 1 s
    rmdir(base_.c_str()); // fails, harmlessly, while something else lives there
}

std::string Freezer::job_dir(uint32_t job) const { return base_ + "/" + job_group_name(job); }

std::string Freezer::job_rel(uint32_t job) const { return base_rel_ + "/" + job_group_name(job); }

void Freezer::write_freeze(uint32_t job, Job &j, bool frozen)
{
    j.frozen = frozen;
    if (pwrite(j.freeze_fd, frozen ? "1" : "0", 1, 0) != 1)
        log_.error("cannot %s job %u (%s/cgroup.freeze): %s", frozen ? "freeze" : "thaw", job,
                   job_dir(job).c_str(), std::strerror(errno));
}

bool Freezer::make_group(uint32_t job, Job &j, bool frozen)
{
    std::string dir = job_dir(job);
    if (mkdir(base_.c_str(), 0755) == 0 || errno == EEXIST)
        base_made_ = true;
    if (!base_made_ || (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)) {
        log_.warning("cannot create %s: %s (job %u is switched with signals)", dir.c_str(),
                     std::strerror(errno), job);
        return false;
    }
    j.freeze_fd = open((dir + "/cgroup.freeze").c_str(), O_WRONLY | O_CLOEXEC);
    if (j.freeze_fd < 0) {
        log_.warning("cannot open %s/cgroup.freeze: %s (job %u is switched with signals)", dir.c_str(),
                     std::strerror(errno), job);
        rmdir(dir.c_str());
        return false;
    }
    // Without it the job never lends its slot (switcher.hpp).
    j.events_fd = open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
    write_freeze(job, j, frozen);
    return true;
}

bool Freezer::holds(uint32_t job, pid_t pid) const
{
    return cgroupfs::cgroup_of(setup_.proc_root, pid, "") == job_rel(job);
}

std::vector<pid_t> Freezer::attach(uint32_t job, const std::vector<pid_t> &pids, bool frozen)
{
    auto it = jobs_.try_emplace(job).first;
    Job &j = it->second;
    std::string dir_rel = job_rel(job), procs = job_dir(job) + "/cgroup.procs";
    std::vector<pid_t> rest;
    std::set<pid_t> held;
    for (pid_t p : pids) {
        if (j.held.count(p)) {
            held.insert(p);
            continue;
        }
        std::string cg = cgroupfs::cgroup_of(setup_.proc_root, p, "");
        if (cg.empty())
            continue;        // gone
        if (cg == dir_rel) { // born in the group
            held.insert(p);
            continue;
        }
        if (cg != self_rel_ || (j.freeze_fd < 0 && !make_group(job, j, frozen))) {
            rest.push_back(p); // Slurm's cgroup, or no group: signals
            continue;
        }
        if (!write_text(procs, std::to_string(p))) {
            if (errno == ESRCH)
                continue;
            if (!j.move_logged)
                log_.warning("cannot move pid %d of job %u into %s: %s (switched with signals; logged once "
                             "per job)",
                             p, job, job_dir(job).c_str(), std::strerror(errno));
            j.move_logged = true;
            rest.push_back(p);
            continue;
        }
        held.insert(p);
    }
    j.held = std::move(held);
    if (j.freeze_fd >= 0 && j.frozen != frozen)
        write_freeze(job, j, frozen);
    if (j.freeze_fd < 0)
        jobs_.erase(it); // nothing to freeze here
    return rest;
}

void Freezer::set_frozen(uint32_t job, bool frozen)
{
    auto it = jobs_.find(job);
    if (it != jobs_.end() && it->second.freeze_fd >= 0)
        write_freeze(job, it->second, frozen);
}

bool Freezer::populated(uint32_t job) const
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return false;
    char buf[256];
    ssize_t n = it->second.events_fd < 0 ? -1 : pread(it->second.events_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return true; // unknown: count it as busy (the job keeps its slot)
    buf[n] = '\0';
    const char *p = std::strstr(buf, "populated ");
    return !p || p[10] != '0';
}

bool Freezer::frozen(pid_t pid) const
{
    std::string cg = cgroupfs::cgroup_of(setup_.proc_root, pid, "");
    if (cg.rfind(base_rel_ + "/job_", 0) != 0)
        return false;
    std::ifstream in(root_ + cg + "/cgroup.events");
    std::string key, value;
    while (in >> key >> value)
        if (key == "frozen")
            return value == "1";
    return false;
}

void Freezer::empty_into_self(const std::string &dir)
{
    cgroupfs::empty_into(dir, self_dir_, self_dir_, [&](pid_t p, int e) {
        log_.error("cannot move pid %d out of %s: %s", p, dir.c_str(), std::strerror(e));
    });
}

// A group still busy with exiting processes is removed by retry(); with no
// job group left, nothing of the freezer's stays in the hierarchy, even if
// slurmd is then killed.
void Freezer::remove_group(const std::string &dir)
{
    remover_.remove(dir);
    remove_base();
}

// Once it is gone (or something else lives there: EBUSY, then tried again
// with the next group's removal), the retries leave it alone.
void Freezer::remove_base()
{
    if (base_made_ && jobs_.empty() && remover_.idle() && (rmdir(base_.c_str()) == 0 || errno == ENOENT))
        base_made_ = false;
}

void Freezer::release(uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return;
    std::string dir = job_dir(job);
    if (it->second.freeze_fd >= 0) {
        write_freeze(job, it->second, false);
        close(it->second.freeze_fd);
    }
    if (it->second.events_fd >= 0)
        close(it->second.events_fd);
    jobs_.erase(it);
    empty_into_self(dir);
    remove_group(dir);
}

void Freezer::retry()
{
    remover_.retry();
    remove_base();
}

void Freezer::sweep_leftovers()
{
    for (const auto &dir : cgroupfs::job_groups(base_)) {
        if (!write_text(dir + "/cgroup.freeze", "0"))
            log_.error("cannot thaw %s, left by an earlier node agent: %s", dir.c_str(),
                       std::strerror(errno));
        empty_into_self(dir);
        if (rmdir(dir.c_str()) != 0)
            log_.error("cannot remove %s, left by an earlier node agent: %s", dir.c_str(),
                       std::strerror(errno));
        else
            log_.info("thawed and released %s, left by an earlier node agent", dir.c_str());
    }
}

} // namespace storm::gang
