// Small helpers for cgroup file systems (v1 and v2), shared by the
// components that move a job's processes into groups of their own (the
// coscheduler's cpu groups, the gang switcher's freezer groups).
//
// Contract: nothing here throws; a failed write returns false with errno
// set, a missing file reads as empty.  Single-threaded.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include "lib/common/log.hpp"

namespace storm::cgroupfs {

// Writes `text` to an existing control file in one write().
bool write_text(const std::string &path, const std::string &text);
// Whether the comma-separated `list` holds `token`.
bool has_token(const std::string &list, const std::string &token);
// mkdir -p (mode 0755).
bool mkdirs(const std::string &path);
// The pids listed in a cgroup.procs file.
std::vector<pid_t> read_pids(const std::string &file);
// The mount point of a whole hierarchy (its root mounted) in `mountinfo`:
// file system type `fstype` ("cgroup" or "cgroup2") with `option` among its
// super options ("" for any).  "" if none is mounted.
std::string find_mount(const std::string &mountinfo, const std::string &fstype, const std::string &option);
// A process's cgroup (path from the hierarchy's root) in /proc/PID/cgroup:
// the v2 entry ("0::") when `controller` is empty, else the v1 hierarchy
// whose controllers include it.  "" if none (or the process is gone).
std::string cgroup_of(const std::string &proc_root, pid_t pid, const std::string &controller);
// The groups named job_* right under `base` (full paths).
std::vector<std::string> job_groups(const std::string &base);
// Moves every process of group `dir` into group `target`, or where that
// fails into `fallback`; a few passes (a process forking meanwhile).
// `failed(pid, errno)` hears of each process that could be moved nowhere.
void empty_into(const std::string &dir, const std::string &target, const std::string &fallback,
                const std::function<void(pid_t, int)> &failed);

// Removes job groups, keeping those whose last processes are still exiting
// (rmdir: EBUSY) to empty and remove again at each retry(), for half a
// minute of retries about a second apart; then it logs and gives up.
class Remover {
public:
    // `empty(dir)` moves what is left in a group out of it; `log` is the
    // owner's, already carrying its service's name (Logger::child).
    Remover(Logger log, std::function<void(const std::string &)> empty);
    // Now, or at a later retry() if busy.
    void remove(const std::string &dir);
    void retry();
    // At the end: retries for up to a second, then logs what is left.
    void drain();
    bool idle() const noexcept { return busy_.empty(); }

private:
    Logger log_;
    std::function<void(const std::string &)> empty_;
    std::map<std::string, int> busy_; // group -> attempts
};

} // namespace storm::cgroupfs
