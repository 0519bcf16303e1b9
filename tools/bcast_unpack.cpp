#include "tools/bcast_unpack.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
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

std::string venv_relocate_command(const std::string &script)
{
    return "exec \"$STORM_BCAST_DEST/bin/python3\" " + sh_quote(script) + " \"$STORM_BCAST_DEST\"";
}

NodeRun run_on_nodes(uint32_t job, const std::vector<std::string> &nodes, const std::string &node_list,
                     const std::string &dir, const std::string &dest, const std::string &command)
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
    std::map<std::string, int> status;
    FILE *f = fdopen(out[0], "r");
    if (!f) {
        ::close(out[0]);
    } else {
        char line[1024];
        const size_t tag = std::strlen(kTag);
        while (std::fgets(line, sizeof line, f)) {
            std::string l(line);
            if (!l.empty() && l.back() == '\n')
                l.pop_back();
            size_t sp = l.rfind(' ');
            if (l.compare(0, tag, kTag) != 0 || sp == std::string::npos || sp < tag) {
                std::fprintf(stderr, "%s\n", l.c_str()); // not ours: the user's
                continue;
            }
            status[l.substr(tag, sp - tag)] = std::atoi(l.c_str() + sp + 1);
        }
        std::fclose(f);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    NodeRun r;
    r.srun_status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    for (const auto &node : nodes) {
        auto it = status.find(node);
        if (it == status.end())
            r.failed.push_back(node + " (no answer)");
        else if (it->second != 0)
            r.failed.push_back(node + " (exit " + std::to_string(it->second) + ")");
    }
    return r;
}

} // namespace storm::tools
