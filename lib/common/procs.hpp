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
        int fd = open((dir + "/" + e->d_name + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; // the thread just ended
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        const char *rp = std::strrchr(buf, ')');
        char st = rp && rp[1] == ' ' ? rp[2] : '?';
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
    int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    // After "pid (comm) ": state ppid pgrp session tty_nr tpgid flags
    const char *p = std::strrchr(buf, ')');
    if (!p)
        return false;
    unsigned long flags = 0;
    char st;
    int ppid, pgrp, session, tty, tpgid;
    if (sscanf(p + 1, " %c %d %d %d %d %d %lu", &st, &ppid, &pgrp, &session, &tty, &tpgid, &flags) != 7)
        return false;
    constexpr unsigned long kPfKthread = 0x00200000;
    return (flags & kPfKthread) != 0;
}

} // namespace storm
