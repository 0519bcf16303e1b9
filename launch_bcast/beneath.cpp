#include "launch_bcast/beneath.hpp"

#include "launch_bcast/fs_worker.hpp"

#include <atomic>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace storm::bcast::beneath {

namespace {

std::atomic<bool> g_openat2{true};
std::atomic<void (*)(int, int)> g_removal_pass{nullptr};

// openat2(2), or -1 with ENOSYS where the kernel (or the test) says no.
int openat2_beneath(int root, const std::string &rel, int flags, mode_t mode)
{
#ifdef SYS_openat2
    if (g_openat2.load(std::memory_order_relaxed)) {
        open_how how{};
        how.flags = static_cast<uint64_t>(flags);
        how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        int fd;
        do
            fd = static_cast<int>(syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how));
        while (fd < 0 && errno == EAGAIN); // a rename elsewhere raced the lookup
        if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
            return fd; // EPERM: a seccomp filter that does not know it
    }
#endif
    errno = ENOSYS;
    return -1;
}

// The walk: each directory component with O_NOFOLLOW | O_DIRECTORY.
int walk(int root, const std::string &rel, int flags, mode_t mode)
{
    int cur = root;
    size_t start = 0;
    for (;;) {
        size_t slash = rel.find('/', start);
        std::string part = rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        int fd;
        if (slash == std::string::npos)
            fd = openat(cur, part.c_str(), flags, mode);
        else
            fd = openat(cur, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        if (cur != root)
            ::close(cur);
        if (fd < 0 || slash == std::string::npos) {
            errno = e;
            return fd;
        }
        cur = fd;
        start = slash + 1;
    }
}

// Splits `rel` at its last '/': the directory part ("" for a single
// component) and the last component.
void split(const std::string &rel, std::string &dir, std::string &name)
{
    size_t slash = rel.rfind('/');
    dir = slash == std::string::npos ? "" : rel.substr(0, slash);
    name = rel.substr(slash == std::string::npos ? 0 : slash + 1);
}

// The directory `dir` beneath `root` (O_PATH), a duplicate of `root` for "".
int open_dir(int root, const std::string &dir)
{
    if (dir.empty())
        return fcntl(root, F_DUPFD_CLOEXEC, 0);
    return open(root, dir, O_PATH | O_DIRECTORY);
}

} // namespace

void use_openat2(bool on) { g_openat2.store(on); }

void on_removal_pass(void (*hook)(int dir, int pass)) { g_removal_pass.store(hook); }

int open(int root, const std::string &rel, int flags, mode_t mode)
{
    if (rel.empty() || rel.front() == '/') {
        errno = EINVAL;
        return -1;
    }
    flags |= O_NOFOLLOW | O_CLOEXEC;
    int fd = openat2_beneath(root, rel, flags, mode);
    if (fd >= 0 || errno != ENOSYS)
        return fd;
    return walk(root, rel, flags, mode);
}

int open_parent(int root, const std::string &rel, std::string &name)
{
    std::string dir;
    split(rel, dir, name);
    return open_dir(root, dir);
}

int ParentCache::at(int root, const std::string &rel, std::string &name)
{
    std::string dir;
    split(rel, dir, name);
    if (fd_ >= 0 && dir == dir_)
        return fd_;
    reset();
    dir_ = std::move(dir);
    fd_ = open_dir(root, dir_);
    return fd_;
}

void ParentCache::reset()
{
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
}

int remove_tree(int dir, const std::string &name)
{
    FsWorker::progress(); // one entry: a step of a worker's job (a large tree takes many)
    struct stat st;
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : errno;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT ? 0 : errno;
    int fd = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EACCES && st.st_uid == geteuid()) {
        // A tree the user made read-only (it was committed with its modes).
        fchmodat(dir, name.c_str(), 0700, 0);
        fd = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0)
        return errno;
    struct stat now;
    if (fstat(fd, &now) == 0 && (now.st_mode & 0700) != 0700)
        fchmod(fd, (now.st_mode & 07777) | 0700); // fails harmlessly if not the owner's
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        ::close(fd);
        return e;
    }
    // Entries made while it ran (the user's, in a directory they can
    // write) are found by another pass, three at most.
    int rc = 0;
    for (int pass = 0; pass < 3; ++pass) {
        std::vector<std::string> names;
        rewinddir(d);
        while (dirent *e = readdir(d))
            if (std::string n = e->d_name; n != "." && n != "..")
                names.push_back(std::move(n));
        rc = 0;
        for (const auto &n : names)
            if (int e = remove_tree(dirfd(d), n); e && !rc)
                rc = e;
        if (rc)
            break;
        if (auto hook = g_removal_pass.load(std::memory_order_relaxed))
            hook(dirfd(d), pass);
        rc = unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : errno;
        if (rc != ENOTEMPTY)
            break;
    }
    closedir(d);
    return rc;
}

} // namespace storm::bcast::beneath
