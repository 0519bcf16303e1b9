#include "lib/common/process_tree.hpp"

#include <cerrno>
#include <deque>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace storm {

namespace {

// One children file's pids, appended to `out`: false if the file is
// missing while its thread still exists (no children files in this
// kernel).  A thread that just ended has nothing to add.
bool read_children(const std::string &thread_dir, std::vector<pid_t> &out)
{
    std::string path = thread_dir + "/children";
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        struct stat st;
        return !(errno == ENOENT && stat(thread_dir.c_str(), &st) == 0);
    }
    // Space-separated decimal pids, read in pieces: a number may straddle
    // two reads.
    char buf[4096];
    long cur = -1;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; ++i) {
            char c = buf[i];
            if (c >= '0' && c <= '9') {
                cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
                if (cur > 0x7fffffffL)
                    cur = 0x7fffffffL; // not a pid: dropped below
            } else {
                if (cur > 0 && cur < 0x7fffffffL)
                    out.push_back(static_cast<pid_t>(cur));
                cur = -1;
            }
        }
    }
    if (cur > 0 && cur < 0x7fffffffL)
        out.push_back(static_cast<pid_t>(cur));
    close(fd);
    return true;
}

} // namespace

std::optional<ProcessTree> process_tree(const std::vector<pid_t> &roots, size_t limit,
                                        const std::string &proc)
{
    ProcessTree tree;
    std::set<pid_t> seen; // a pid reused while the tree is read must not loop
    std::deque<pid_t> todo;
    for (pid_t r : roots)
        if (r > 0 && seen.insert(r).second)
            todo.push_back(r);
    if (seen.size() > limit) {
        tree.truncated = true;
        return tree;
    }
    std::vector<pid_t> children;
    while (!todo.empty()) {
        pid_t pid = todo.front();
        todo.pop_front();
        std::string dir = proc + "/" + std::to_string(pid) + "/task";
        DIR *d = opendir(dir.c_str());
        if (!d)
            continue; // gone
        tree.pids.push_back(pid);
        children.clear();
        bool supported = true;
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] == '.')
                continue;
            if (!read_children(dir + "/" + e->d_name, children)) {
                supported = false;
                break;
            }
        }
        closedir(d);
        if (!supported)
            return std::nullopt;
        for (pid_t c : children)
            if (seen.insert(c).second) {
                if (seen.size() > limit) { // counts the ones still to read too
                    tree.truncated = true;
                    return tree;
                }
                todo.push_back(c);
            }
    }
    return tree;
}

} // namespace storm
