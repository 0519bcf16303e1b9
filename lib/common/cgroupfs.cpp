#include "lib/common/cgroupfs.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace storm::cgroupfs {

bool write_text(const std::string &path, const std::string &text)
{
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = write(fd, text.data(), text.size());
    int e = errno;
    close(fd);
    errno = e;
    return n == static_cast<ssize_t>(text.size());
}

bool has_token(const std::string &list, const std::string &token)
{
    std::stringstream ss(list);
    std::string t;
    while (std::getline(ss, t, ','))
        if (t == token)
            return true;
    return false;
}

bool mkdirs(const std::string &path)
{
    for (size_t i = 1; i <= path.size(); ++i)
        if (i == path.size() || path[i] == '/')
            if (mkdir(path.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST)
                return false;
    return true;
}

std::vector<pid_t> read_pids(const std::string &file)
{
    std::vector<pid_t> pids;
    std::ifstream in(file);
    pid_t p;
    while (in >> p)
        pids.push_back(p);
    return pids;
}

std::string find_mount(const std::string &mountinfo, const std::string &fstype, const std::string &option)
{
    std::ifstream in(mountinfo);
    std::string line;
    while (std::getline(in, line)) {
        size_t dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        std::stringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
        std::string id, parent, dev, root, point, type, source, options;
        pre >> id >> parent >> dev >> root >> point;
        post >> type >> source >> options;
        if (type == fstype && root == "/" && (option.empty() || has_token(options, option)))
            return point;
    }
    return "";
}

std::string cgroup_of(const std::string &proc_root, pid_t pid, const std::string &controller)
{
    std::ifstream in(proc_root + "/" + std::to_string(pid) + "/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos)
            continue;
        std::string controllers = line.substr(a + 1, b - a - 1);
        if (controller.empty() ? line.compare(0, a, "0") == 0 && controllers.empty()
                               : has_token(controllers, controller))
            return line.substr(b + 1);
    }
    return "";
}

std::vector<std::string> job_groups(const std::string &base)
{
    std::vector<std::string> dirs;
    DIR *d = opendir(base.c_str());
    if (!d)
        return dirs;
    while (dirent *e = readdir(d))
        if (std::strncmp(e->d_name, "job_", 4) == 0)
            dirs.push_back(base + "/" + e->d_name);
    closedir(d);
    return dirs;
}

void empty_into(const std::string &dir, const std::string &target, const std::string &fallback,
                const std::function<void(pid_t, int)> &failed)
{
    for (int pass = 0; pass < 5; ++pass) {
        auto pids = read_pids(dir + "/cgroup.procs");
        if (pids.empty())
            return;
        for (pid_t p : pids)
            if (!write_text(target + "/cgroup.procs", std::to_string(p)) &&
                !write_text(fallback + "/cgroup.procs", std::to_string(p)) && errno != ESRCH)
                failed(p, errno);
    }
}

Remover::Remover(Logger log, std::function<void(const std::string &)> empty)
    : log_(std::move(log)), empty_(std::move(empty))
{
}

void Remover::remove(const std::string &dir)
{
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT)
        return;
    if (errno == EBUSY)
        busy_.emplace(dir, 0);
    else
        log_.error("cannot remove %s: %s", dir.c_str(), std::strerror(errno));
}

void Remover::retry()
{
    for (auto it = busy_.begin(); it != busy_.end();) {
        empty_(it->first);
        if (rmdir(it->first.c_str()) == 0 || errno == ENOENT) {
            it = busy_.erase(it);
            continue;
        }
        if (errno != EBUSY || ++it->second == 30) { // half a minute: something lives there
            log_.error("cannot remove %s: %s", it->first.c_str(), std::strerror(errno));
            it = busy_.erase(it);
            continue;
        }
        ++it;
    }
}

void Remover::drain()
{
    for (int i = 0; i < 20 && !busy_.empty(); ++i) {
        retry();
        if (!busy_.empty())
            usleep(50000);
    }
    for (const auto &[dir, n] : busy_)
        log_.error("cannot remove %s: %s", dir.c_str(), std::strerror(EBUSY));
    busy_.clear();
}

} // namespace storm::cgroupfs
