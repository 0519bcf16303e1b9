#include "lib/common/process_tree.hpp"

#include <cerrno>
#include <cstdlib>
#include <deque>
#include <dirent.h>
#include <set>
#include <sys/stat.h>

#include "lib/common/files.hpp"

namespace storm {

namespace {

// One children file's pids (space-separated decimals), appended to `out`:
// false if the file is missing while its thread still exists (no children
// files in this kernel).  A thread that just ended has nothing to add.
bool read_children(const std::string &thread_dir, std::vector<pid_t> &out)
{
    std::string path = thread_dir + "/children";
    auto text = read_file(path);
    if (!text) {
        struct stat st;
        return !(stat(path.c_str(), &st) != 0 && errno == ENOENT && stat(thread_dir.c_str(), &st) == 0);
    }
    for (const char *p = text->c_str();;) {
        char *end;
        long pid = std::strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 0 && pid < 0x7fffffffL)
            out.push_back(static_cast<pid_t>(pid));
        p = end;
    }
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
