#include "tools/bcast_unpack.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <csignal>
#include <map>
#include <poll.h>
#include <set>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace storm::tools {

namespace {

// What each task runs: the command, its output to stderr, then one line
// on stdout saying how it ended on that node.
constexpr const char *kWrapper =
    "sh -c \"$1\" >&2; rc=$?; echo \"storm-bcast-unpack ${SLURMD_NODENAME:-$(hostname)} $rc\"";
constexpr const char *kTag = "storm-bcast-unpack ";

} // namespace

std::string sh_quote(const std::string &s)
{
    std::string q = "'";
    for (char c : s)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string venv_relocate_command(const std::string &program)
{
    return "exec \"$STORM_BCAST_DEST/bin/python3\" -c " + sh_quote(program) + " \"$STORM_BCAST_DEST\"";
}

NodeRun run_on_nodes(uint32_t job, const std::vector<std::string> &nodes, const std::string &node_list,
                     const std::string &dir, const std::string &dest, const std::string &command,
                     std::chrono::seconds timeout)
{
    const std::string n = std::to_string(nodes.size());
    std::vector<std::string> args = {"srun",
                                     "--jobid=" + std::to_string(job),
                                     "--overlap",
                                     "--nodes=" + n,
                                     "--ntasks=" + n,
                                     "--ntasks-per-node=1",
                                     "--nodelist=" + node_list,
                                     "--chdir=" + dir,
                                     "--export=ALL",
                                     "--job-name=storm-bcast-unpack",
                                     "/bin/sh",
                                     "-c",
                                     kWrapper,
                                     "storm-bcast-unpack",
                                     command};
    std::vector<char *> argv;
    for (auto &a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        ::close(out[0]);
        ::close(out[1]);
        throw std::runtime_error(std::string("fork: ") + std::strerror(e));
    }
    if (pid == 0) {
        int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        setenv("STORM_BCAST_DEST", dest.c_str(), 1);
        execvp("srun", argv.data());
        std::fprintf(stderr, "storm-bcast: cannot run srun: %s\n", std::strerror(errno));
        _exit(127);
    }
    ::close(out[1]);
    // srun's output, a line at a time, until it closes it (it ended) or
    // the deadline passes (then the step is cancelled, see the contract).
    using Clock = std::chrono::steady_clock;
    const bool bounded = timeout.count() > 0;
    Clock::time_point deadline = Clock::now() + timeout;
    std::map<std::string, int> status;
    std::set<std::string> running; // their step was cancelled
    bool timed_out = false, killed = false;
    const size_t tag = std::strlen(kTag);
    auto take_line = [&](const std::string &l) {
        size_t sp = l.rfind(' ');
        if (l.compare(0, tag, kTag) != 0 || sp == std::string::npos || sp < tag) {
            std::fprintf(stderr, "%s\n", l.c_str()); // not ours: the user's
            return;
        }
        status[l.substr(tag, sp - tag)] = std::atoi(l.c_str() + sp + 1);
    };
    std::string buf;
    char chunk[4096];
    for (;;) {
        int wait_ms = -1;
        if (bounded || timed_out) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            wait_ms = left > 0 ? static_cast<int>(left) : 0;
        }
        pollfd p{out[0], POLLIN, 0};
        int rc = poll(&p, 1, wait_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0) {
            if (!timed_out) {
                // The step ran out of time: the nodes that have not said
                // how it ended are still running it.
                timed_out = true;
                for (const auto &node : nodes)
                    if (!status.count(node))
                        running.insert(node);
                kill(pid, SIGTERM);
                deadline = Clock::now() + std::chrono::seconds(10);
            } else if (!killed) {
                killed = true;
                kill(pid, SIGKILL);
                break;
            }
            continue;
        }
        ssize_t n = rc < 0 ? -1 : read(out[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        buf.append(chunk, static_cast<size_t>(n));
        for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1))
            take_line(buf.substr(0, nl));
        if (buf.size() > 65536) { // a line that long is the user's output
            take_line(buf);
            buf.clear();
        }
    }
    if (!buf.empty())
        take_line(buf);
    ::close(out[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    NodeRun r;
    r.srun_status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r.timed_out = timed_out;
    for (const auto &node : nodes) {
        auto it = status.find(node);
        if (running.count(node))
            r.failed.push_back(node + " (still running)");
        else if (it == status.end())
            r.failed.push_back(node + " (no answer)");
        else if (it->second != 0)
            r.failed.push_back(node + " (exit " + std::to_string(it->second) + ")");
    }
    return r;
}

} // namespace storm::tools
