// Acting as a job's user for file system access, from one thread of a
// daemon running as root (the node agent inside slurmd).
//
// Linux keeps credentials per thread; the raw system calls change only the
// calling thread's file system uid, gid and groups (glibc's wrappers would
// change every thread of slurmd).  While an AsUser is alive, files this
// thread creates belong to the user, and every permission check (open,
// mkdir, rename, unlink, chmod, utimes) is the user's: root's capabilities
// for the file system are dropped with the uid (see setfsuid(2)).  So is
// CAP_SYS_RESOURCE, which setfsuid keeps and which lets a write exceed the
// file owner's disk quota and reserved blocks: the user's quota holds for
// everything written meanwhile, writes included, as for stock sbcast,
// whose child becomes the user.
//
// Contract: the constructor throws std::system_error if it cannot switch;
// the destructor restores root and the original groups.  Not reentrant.
// A process not running as root can act only as itself (tests).
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace storm::bcast {

class AsUser {
public:
    AsUser(uid_t uid, gid_t gid, const std::vector<gid_t> &groups);
    ~AsUser();
    AsUser(const AsUser &) = delete;
    AsUser &operator=(const AsUser &) = delete;

private:
    bool switched_ = false;
    bool dropped_resource_ = false; // CAP_SYS_RESOURCE was effective and is off
    std::vector<gid_t> saved_groups_;
};

// The user's supplementary groups (getgrouplist), with `gid` first.
std::vector<gid_t> groups_of(const std::string &user, gid_t gid);

} // namespace storm::bcast
