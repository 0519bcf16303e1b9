#include "launch_bcast/libraries.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <fcntl.h>
#include <spawn.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace storm::bcast {

namespace {

std::string base_name(const std::string &p) { return p.substr(p.rfind('/') + 1); }
std::string dir_name(const std::string &p) { return p.substr(0, p.rfind('/') + 1); }

// Runs `ldd -- FILE` (no shell: the name is one argument, whatever it
// holds), its stdout and stderr into `out`; its wait status, or throws
// when it cannot be started.  posix_spawn: safe in srun's threads too.
int run_ldd(const std::string &file, std::string &out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        throw BcastError(std::string("cannot run ldd: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, p[1], STDERR_FILENO);
    std::string name = file;
    char ldd[] = "ldd", dashes[] = "--";
    char *argv[] = {ldd, dashes, name.data(), nullptr};
    pid_t pid;
    int rc = posix_spawnp(&pid, "ldd", &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    if (rc != 0) {
        ::close(p[0]);
        throw BcastError(std::string("cannot run ldd: ") + std::strerror(rc));
    }
    char buf[4096];
    for (;;) {
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(p[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    return ws;
}

std::vector<std::string> excluded_dirs(const std::string &exclude)
{
    std::vector<std::string> dirs;
    if (strcasecmp(exclude.c_str(), "none") == 0)
        return dirs;
    for (size_t s = 0; s <= exclude.size();) {
        size_t e = exclude.find(',', s);
        if (e == std::string::npos)
            e = exclude.size();
        std::string p = exclude.substr(s, e - s);
        while (p.size() > 1 && p.back() == '/')
            p.pop_back();
        if (!p.empty())
            dirs.push_back(p);
        s = e + 1;
    }
    return dirs;
}

// The directory's entries, by name: a name seen again must be the same
// link or the same file.
struct Gather {
    Source src;
    std::map<std::string, size_t> names; // entry index by name
    std::map<std::pair<dev_t, ino_t>, bool> files;

    void link(const std::string &name, const std::string &target, const struct stat &st)
    {
        auto it = names.find(name);
        if (it != names.end()) {
            const Entry &e = src.entries[it->second];
            if (e.kind != Entry::symlink || e.target != target)
                throw BcastError("two different libraries named " + name);
            return;
        }
        Entry e;
        e.path = name;
        e.kind = Entry::symlink;
        e.target = target;
        e.atime = st.st_atime;
        e.mtime = st.st_mtime;
        names.emplace(name, src.entries.size());
        src.add_other(std::move(e));
    }

    void file(const std::string &name, const std::string &path, const struct stat &st)
    {
        auto it = names.find(name);
        if (it != names.end()) {
            const Entry &e = src.entries[it->second];
            struct stat old;
            if (e.kind != Entry::file || stat(src.paths[it->second].c_str(), &old) != 0 ||
                old.st_dev != st.st_dev || old.st_ino != st.st_ino)
                throw BcastError("two different libraries named " + name + " (" + path + ")");
            return;
        }
        if (access(path.c_str(), R_OK) != 0)
            throw BcastError("cannot read " + path + ": " + std::strerror(errno));
        Entry e;
        e.path = name;
        e.kind = Entry::file;
        e.mode = st.st_mode & 07777;
        e.size = static_cast<uint64_t>(st.st_size);
        e.atime = st.st_atime;
        e.mtime = st.st_mtime;
        names.emplace(name, src.entries.size());
        src.add_file(std::move(e), path, st);
    }

    // `path` and the links it is found through, down to the file.
    void chain(std::string path)
    {
        for (int hops = 0; hops <= 40; ++hops) {
            struct stat st;
            if (lstat(path.c_str(), &st) != 0)
                throw BcastError("cannot read " + path + ": " + std::strerror(errno));
            if (S_ISREG(st.st_mode)) {
                file(base_name(path), path, st);
                return;
            }
            if (!S_ISLNK(st.st_mode))
                throw BcastError(path + " is not a file");
            std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
            ssize_t n = readlink(path.c_str(), target.data(), target.size());
            if (n < 0 || static_cast<size_t>(n) >= target.size())
                throw BcastError("cannot read the symbolic link " + path);
            target.resize(static_cast<size_t>(n));
            while (target.size() > 1 && target.back() == '/')
                target.pop_back();
            std::string next = target.front() == '/' ? target : dir_name(path) + target;
            // A link to the same name elsewhere (/lib64/ld-linux... to
            // /lib/x86_64-linux-gnu/ld-linux...) is not one of the chain.
            if (base_name(next) != base_name(path))
                link(base_name(path), base_name(next), st);
            path = next;
        }
        throw BcastError(path + ": more than 40 symbolic links");
    }
};

} // namespace

std::vector<std::string> parse_library_list(const std::string &text)
{
    std::vector<std::string> libs;
    size_t line = 0;
    for (size_t s = 0; s < text.size();) {
        size_t e = text.find('\n', s);
        if (e == std::string::npos)
            e = text.size();
        std::string l = text.substr(s, e - s);
        s = e + 1;
        ++line;
        if (l.empty() || l[0] == '#')
            continue;
        if (l.find('\0') != std::string::npos)
            throw BcastError("library list, line " + std::to_string(line) + ": a NUL byte");
        if (l[0] != '/')
            throw BcastError("library list, line " + std::to_string(line) + ": \"" + l +
                             "\" is not an absolute path");
        libs.push_back(std::move(l));
    }
    return libs;
}

std::vector<std::string> ldd(const std::string &file, bool *dynamic)
{
    if (dynamic)
        *dynamic = true;
    std::vector<std::string> libs;
    std::string out, missing;
    int rc = run_ldd(file, out);
    for (size_t at = 0, nl; at < out.size(); at = nl + 1) {
        nl = out.find('\n', at);
        if (nl == std::string::npos)
            nl = out.size();
        std::string l = out.substr(at, nl - at);
        size_t arrow = l.find(" => ");
        if (arrow != std::string::npos && l.compare(arrow + 4, 9, "not found") == 0) {
            size_t b = l.find_first_not_of(" \t");
            missing += (missing.empty() ? "" : ", ") + l.substr(b, arrow - b);
            continue;
        }
        size_t start = arrow != std::string::npos ? arrow + 4 : l.find_first_not_of(" \t");
        if (start == std::string::npos || l[start] != '/')
            continue;
        // "PATH (0xADDRESS)": the path ends before the last " (".
        size_t end = l.rfind(" (");
        if (end == std::string::npos || end <= start)
            continue;
        libs.push_back(l.substr(start, end - start));
    }
    if (!missing.empty())
        throw BcastError(file + " needs " + missing + ", which the dynamic loader does not find here");
    if (rc != 0) {
        if (out.find("not a dynamic executable") != std::string::npos) {
            if (dynamic)
                *dynamic = false;
            return {};
        }
        while (!out.empty() && out.back() == '\n')
            out.pop_back();
        throw BcastError("ldd " + file + " failed" + (out.empty() ? "" : ": " + out));
    }
    return libs;
}

std::vector<std::string> read_library_list(const std::string &file)
{
    if (file.empty())
        return {};
    FILE *f = std::fopen(file.c_str(), "re");
    if (!f)
        throw BcastError("cannot read " + file + ": " + std::strerror(errno));
    std::string text;
    char buf[4096];
    size_t n;
    while (text.size() <= (1u << 20) && (n = std::fread(buf, 1, sizeof buf, f)) > 0)
        text.append(buf, n);
    const bool bad = std::ferror(f);
    std::fclose(f);
    if (bad || text.size() > (1u << 20))
        throw BcastError("cannot read " + file + (bad ? "" : ": over 1 MiB"));
    try {
        return parse_library_list(text);
    } catch (const BcastError &e) {
        throw BcastError(file + ": " + e.what());
    }
}

Source scan_libraries(const std::string &program, const std::vector<std::string> &dlopened,
                      const std::string &exclude)
{
    Gather g;
    Entry top;
    top.kind = Entry::directory;
    top.mode = 0755;
    top.atime = top.mtime = time(nullptr);
    g.src.add_other(top);
    const auto excl = excluded_dirs(exclude);
    auto excluded = [&](const std::string &p) {
        for (const auto &x : excl)
            if (p.compare(0, x.size() + 1, x + "/") == 0)
                return true;
        return false;
    };
    for (const auto &lib : ldd(program, nullptr))
        if (!excluded(lib))
            g.chain(lib);
    for (const auto &lib : dlopened) {
        struct stat st;
        if (stat(lib.c_str(), &st) != 0)
            throw BcastError("cannot read " + lib + ": " + std::strerror(errno));
        bool dynamic = true;
        auto deps = ldd(lib, &dynamic);
        if (!dynamic)
            throw BcastError(lib + " is not a shared library");
        g.chain(lib);
        for (const auto &d : deps)
            if (!excluded(d))
                g.chain(d);
    }
    return std::move(g.src);
}

} // namespace storm::bcast
