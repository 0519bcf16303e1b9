#include "launch_bcast/as_user.hpp"

#include <cerrno>
#include <grp.h>
#include <linux/capability.h>
#include <string>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <system_error>
#include <unistd.h>

namespace storm::bcast {

namespace {

long raw_setgroups(const std::vector<gid_t> &g)
{
    return syscall(SYS_setgroups, g.size(), g.empty() ? nullptr : g.data());
}

// Turns CAP_SYS_RESOURCE in this thread's effective set on or off (the raw
// system calls: credentials are per thread).  Returns whether it was on
// before; throws std::system_error if it cannot be changed.
bool set_sys_resource(bool on)
{
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0}; // 0: this thread
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &h, d) != 0)
        throw std::system_error(errno, std::generic_category(), "capget");
    const unsigned word = CAP_SYS_RESOURCE / 32, bit = 1u << (CAP_SYS_RESOURCE % 32);
    bool was = d[word].effective & bit;
    if (was == on)
        return was;
    if (on)
        d[word].effective |= bit;
    else
        d[word].effective &= ~bit;
    if (syscall(SYS_capset, &h, d) != 0)
        throw std::system_error(errno, std::generic_category(), "capset CAP_SYS_RESOURCE");
    return was;
}

} // namespace

AsUser::AsUser(uid_t uid, gid_t gid, const std::vector<gid_t> &groups)
{
    if (geteuid() != 0) {
        if (uid != geteuid())
            throw std::system_error(EPERM, std::generic_category(),
                                    "cannot act as uid " + std::to_string(uid) + " without root");
        return;
    }
    int n = getgroups(0, nullptr);
    saved_groups_.resize(n > 0 ? n : 0);
    if (n > 0 && getgroups(n, saved_groups_.data()) != n)
        throw std::system_error(errno, std::generic_category(), "getgroups");
    dropped_resource_ = set_sys_resource(false);
    if (raw_setgroups(groups) != 0) {
        int e = errno;
        if (dropped_resource_)
            set_sys_resource(true);
        throw std::system_error(e, std::generic_category(), "setgroups");
    }
    // setfsgid/setfsuid return the previous value and never fail visibly:
    // read back to check.
    syscall(SYS_setfsgid, gid);
    syscall(SYS_setfsuid, uid);
    switched_ = true;
    if (static_cast<uid_t>(syscall(SYS_setfsuid, static_cast<uid_t>(-1))) != uid ||
        static_cast<gid_t>(syscall(SYS_setfsgid, static_cast<gid_t>(-1))) != gid) {
        this->~AsUser();
        switched_ = false;
        throw std::system_error(EPERM, std::generic_category(),
                                "cannot switch the file system ids to " + std::to_string(uid) + ":" +
                                    std::to_string(gid));
    }
}

AsUser::~AsUser()
{
    if (!switched_)
        return;
    syscall(SYS_setfsuid, 0);
    syscall(SYS_setfsgid, 0);
    raw_setgroups(saved_groups_);
    if (dropped_resource_) {
        try {
            set_sys_resource(true);
        } catch (const std::system_error &) {
            // Stays off: root's writes obey quotas too, which fails safe.
        }
        dropped_resource_ = false;
    }
    switched_ = false;
}

std::vector<gid_t> groups_of(const std::string &user, gid_t gid)
{
    int n = 64;
    std::vector<gid_t> g(n);
    if (getgrouplist(user.c_str(), gid, g.data(), &n) < 0) {
        g.resize(n);
        if (getgrouplist(user.c_str(), gid, g.data(), &n) < 0)
            return {gid};
    }
    g.resize(n);
    return g;
}

} // namespace storm::bcast
