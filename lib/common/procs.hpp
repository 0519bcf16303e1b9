// What /proc says of a process: stopped, a kernel thread.
#pragma once

#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/types.h>
#include <unistd.h>

namespace storm {

// The fields of a /proc/.../stat file after "pid (comm) ", read into `buf`
// (state first): null if it cannot be read (the process or thread just
// ended), "?" if it is malformed.
inline const char *stat_fields(const std::string &path, char (&buf)[512])
{
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nullptr;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return nullptr;
    buf[n] = 0;
    const char *rp = std::strrchr(buf, ')');
    return rp && rp[1] == ' ' ? rp + 2 : "?";
}

// Every thread of `pid` is stopped (SIGSTOP: state T or t) or gone.  A
// signal takes effect asynchronously: a thread may run a little after
// kill() returned.
inline bool threads_stopped(pid_t pid)
{
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR *d = opendir(dir.c_str());
    if (!d)
        return true; // gone
    bool stopped = true;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.')
            continue;
        char buf[512];
        const char *f = stat_fields(dir + "/" + e->d_name + "/stat", buf);
        if (!f)
            continue; // the thread just ended
        char st = f[0];
        if (st != 'T' && st != 't' && st != 'Z' && st != 'X') {
            stopped = false;
            break;
        }
    }
    closedir(d);
    return stopped;
}

// Whether `pid` is a kernel thread (PF_KTHREAD in /proc/PID/stat's flags).
// proctrack/pgid lists the processes of process group 0, the kernel's
// threads, for a step whose container is not set up yet.
inline bool kernel_thread(pid_t pid)
{
    char buf[512];
    const char *f = stat_fields("/proc/" + std::to_string(pid) + "/stat", buf);
    if (!f)
        return false;
    // state ppid pgrp session tty_nr tpgid flags
    unsigned long flags = 0;
    char st;
    int ppid, pgrp, session, tty, tpgid;
    if (sscanf(f, "%c %d %d %d %d %d %lu", &st, &ppid, &pgrp, &session, &tty, &tpgid, &flags) != 7)
        return false;
    constexpr unsigned long kPfKthread = 0x00200000;
    return (flags & kPfKthread) != 0;
}

} // namespace storm
