// A process tree as the kernel's children files tell it
// (/proc/PID/task/TID/children, Linux 3.5+ with CONFIG_PROC_CHILDREN, as
// Debian's kernels have it): the processes started by some roots, and the
// processes those started, without reading the rest of /proc.
//
// Contract:
//  - the roots first, then their descendants, each process once; a root
//    that does not exist (any more) is left out, and so are its
//    descendants;
//  - at most `limit` processes: past it, `truncated` is set and the rest
//    is left out;
//  - nullopt where the kernel has no children files (the caller must list
//    another way);
//  - cost: a directory read per process found and one small read per
//    thread of it, whatever else runs on the host;
//  - a snapshot: a process forked while the tree is read may be missing,
//    one that just exited may be listed, and a process whose parent exited
//    before it was read (it was handed to init) is not a descendant any
//    more.  Callers list again.
// Thread safe (reads only).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace storm {

struct ProcessTree {
    std::vector<pid_t> pids;
    bool truncated = false; // more than the limit: the rest is left out
};

std::optional<ProcessTree> process_tree(const std::vector<pid_t> &roots, size_t limit,
                                        const std::string &proc = "/proc");

} // namespace storm
