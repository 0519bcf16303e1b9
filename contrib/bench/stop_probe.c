/* stop_probe: what one gang switch costs on this machine with each way of
 * stopping and continuing a job's processes, outside Slurm and Storm alike,
 * so that the node agent's choice (sched_gang/README.md) rests on a
 * measurement anyone can repeat.
 *
 *   stop_probe MODE SWITCHES QUANTUM_US
 *
 * MODE: "signals" (SIGSTOP / SIGCONT to every process, as the switcher and
 * stock Slurm's suspend do), "freezer-v1" (freezer.state of a cgroup v1
 * freezer group) or "freeze-v2" (cgroup.freeze of a cgroup v2 group).
 * Two jobs, each a parent that forks two spinning tasks and waits for them
 * with WUNTRACED | WCONTINUED, as slurmstepd does; every QUANTUM_US one job
 * is stopped and the other continued, SWITCHES times.  Prints one line:
 *
 *   stop_probe: MODE: N switches: call p50 X us p99 Y us; stopped after
 *   p50 A us p99 B us; switcher Z us and parents W us of CPU per switch
 *
 * "call" is the wall time of the stop and continue calls of one switch;
 * "stopped after", from a further 200 switches, the time from the calls
 * until every task of the outgoing job is stopped (state T) or its group
 * frozen, polled; the CPU figures come from getrusage over the first N
 * switches (the switcher) and from the parents' own rusage over all of
 * them (their wake-ups on the tasks' state changes).  Exit 3 when
 * MODE's hierarchy is not mounted or not writable (the line says so).
 * Everything it made (processes, cgroups) is gone when it exits, whatever
 * the outcome.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { SIGNALS, FREEZER_V1, FREEZE_V2 };

static enum mode mode;
static char group[2][256]; /* cgroup directories, "" if none */
static pid_t parent[2] = {-1, -1};
static pid_t task[2][2];
static int state_fd[2] = {-1, -1};

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, text, strlen(text)) < 0) {
        }
        close(fd);
    }
}

/* Continues everything, ends the processes, removes the groups. */
static void cleanup(void)
{
    for (int j = 0; j < 2; ++j) {
        if (state_fd[j] >= 0) {
            if (write(state_fd[j], mode == FREEZER_V1 ? "THAWED" : "0", mode == FREEZER_V1 ? 6 : 1) < 0) {
            }
            close(state_fd[j]);
            state_fd[j] = -1;
        }
        if (parent[j] > 0) {
            for (int k = 0; k < 2; ++k)
                if (task[j][k] > 0) {
                    kill(task[j][k], SIGCONT);
                    kill(task[j][k], SIGKILL);
                }
            waitpid(parent[j], NULL, 0);
            parent[j] = -1;
        }
    }
    for (int j = 0; j < 2; ++j)
        if (group[j][0]) {
            for (int tries = 0; tries < 100 && rmdir(group[j]) < 0 && errno == EBUSY; ++tries)
                usleep(10000);
            group[j][0] = 0;
        }
}

/* Groups left by a run that was killed (SIGKILL leaves no time to clean
 * up): thawed, emptied and removed. */
static void sweep(const char *root, const char *state, const char *thawed)
{
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid, j;
        if (sscanf(e->d_name, "storm-stop-probe-%d-%d", &pid, &j) != 2 ||
            (kill(pid, 0) == 0 || errno != ESRCH))
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s/%s", root, e->d_name, state);
        write_file(path, thawed);
        snprintf(path, sizeof path, "%s/%s/cgroup.procs", root, e->d_name);
        FILE *f = fopen(path, "r");
        int p;
        while (f && fscanf(f, "%d", &p) == 1)
            kill(p, SIGKILL);
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        for (int tries = 0; tries < 100 && rmdir(path) < 0 && errno == EBUSY; ++tries)
            usleep(10000);
    }
    closedir(d);
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void fail(const char *what)
{
    fprintf(stderr, "stop_probe: %s: %s\n", what, strerror(errno));
    cleanup();
    exit(1);
}

static double cpu_us(const struct rusage *r)
{
    return (r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e6 + r->ru_utime.tv_usec + r->ru_stime.tv_usec;
}

/* A job: a parent that forks two spinning tasks into `grp` (if any),
 * reports their pids on `out`, reaps them, and writes its own CPU time (us)
 * on `out` when they are gone. */
static void job(int j, int out)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* nothing outlives the probe */
    for (int k = 0; k < 2; ++k) {
        pid_t t = fork();
        if (t < 0)
            _exit(1);
        if (t == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (group[j][0]) {
                char path[300], pid[32];
                snprintf(path, sizeof path, "%s/cgroup.procs", group[j]);
                snprintf(pid, sizeof pid, "%d\n", getpid());
                write_file(path, pid);
            }
            for (volatile unsigned long x = 0;; ++x) {
            }
        }
        if (write(out, &t, sizeof t) != sizeof t)
            _exit(1);
    }
    int alive = 2, st;
    while (alive > 0) {
        pid_t r = waitpid(-1, &st, WUNTRACED | WCONTINUED);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (WIFEXITED(st) || WIFSIGNALED(st)))
            alive--;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double us = cpu_us(&ru);
    if (write(out, &us, sizeof us) < 0) {
    }
    _exit(0);
}

/* Stops job j (run 0) or continues it (run 1). */
static void set_running(int j, int run)
{
    static const char *const freezer_v1[2] = {"FROZEN", "THAWED"}, *const freeze_v2[2] = {"1", "0"};
    if (mode == SIGNALS) {
        for (int k = 0; k < 2; ++k)
            kill(task[j][k], run ? SIGCONT : SIGSTOP);
        return;
    }
    const char *text = mode == FREEZER_V1 ? freezer_v1[run] : freeze_v2[run];
    if (write(state_fd[j], text, strlen(text)) < 0)
        fail(run ? "thaw" : "freeze");
}

/* Whether every task of job j is stopped (signals) or frozen (freezers). */
static int stopped(int j)
{
    char path[320], buf[512];
    for (int k = 0; k < (mode == SIGNALS ? 2 : 1); ++k) {
        if (mode == SIGNALS)
            snprintf(path, sizeof path, "/proc/%d/stat", (int)task[j][k]);
        else
            snprintf(path, sizeof path, "%s/%s", group[j],
                     mode == FREEZER_V1 ? "freezer.state" : "cgroup.events");
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            return 0;
        buf[n] = 0;
        if (mode == SIGNALS) {
            const char *p = strrchr(buf, ')');
            if (!p || (p[2] != 'T' && p[2] != 't'))
                return 0;
        } else if (!strstr(buf, mode == FREEZER_V1 ? "FROZEN" : "frozen 1")) {
            return 0;
        }
    }
    return 1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: stop_probe signals|freezer-v1|freeze-v2 SWITCHES QUANTUM_US\n");
        return 2;
    }
    const char *root = NULL, *state = NULL;
    if (strcmp(argv[1], "signals") == 0) {
        mode = SIGNALS;
    } else if (strcmp(argv[1], "freezer-v1") == 0) {
        mode = FREEZER_V1;
        root = "/sys/fs/cgroup/freezer";
        state = "freezer.state";
    } else if (strcmp(argv[1], "freeze-v2") == 0) {
        mode = FREEZE_V2;
        root = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? "/sys/fs/cgroup"
                                                                      : "/sys/fs/cgroup/unified";
        state = "cgroup.freeze";
    } else {
        fprintf(stderr, "stop_probe: unknown mode '%s'\n", argv[1]);
        return 2;
    }
    int switches = atoi(argv[2]), quantum = atoi(argv[3]);
    if (switches < 10 || quantum < 100) {
        fprintf(stderr, "stop_probe: at least 10 switches and a quantum of at least 100 us\n");
        return 2;
    }
    sweep("/sys/fs/cgroup/freezer", "freezer.state", "THAWED");
    sweep("/sys/fs/cgroup", "cgroup.freeze", "0");
    sweep("/sys/fs/cgroup/unified", "cgroup.freeze", "0");
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    for (int j = 0; j < 2 && root; ++j) {
        snprintf(group[j], sizeof group[j], "%s/storm-stop-probe-%d-%d", root, (int)getpid(), j);
        if (mkdir(group[j], 0755) < 0) {
            printf("stop_probe: %s: cannot make a group under %s: %s\n", argv[1], root, strerror(errno));
            group[j][0] = 0;
            cleanup();
            return 3;
        }
        char path[300];
        snprintf(path, sizeof path, "%s/%s", group[j], state);
        state_fd[j] = open(path, O_WRONLY | O_CLOEXEC);
        if (state_fd[j] < 0) {
            printf("stop_probe: %s: no %s: %s\n", argv[1], path, strerror(errno));
            cleanup();
            return 3;
        }
    }
    int pipes[2][2];
    for (int j = 0; j < 2; ++j) {
        if (pipe(pipes[j]) < 0)
            fail("pipe");
        parent[j] = fork();
        if (parent[j] < 0)
            fail("fork");
        if (parent[j] == 0) {
            close(pipes[j][0]);
            job(j, pipes[j][1]);
        }
        close(pipes[j][1]);
        for (int k = 0; k < 2; ++k)
            if (read(pipes[j][0], &task[j][k], sizeof(pid_t)) != sizeof(pid_t))
                fail("a job did not start");
    }
    usleep(50000); /* the tasks are in their groups and spinning */
    /* The switcher runs at real-time priority, as the node agent does
     * (its children, forked before, keep the normal policy). */
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
        fail("SCHED_FIFO");
    double *call = malloc(sizeof *call * (size_t)switches);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    set_running(1, 0);
    int cur = 0;
    struct timespec q = {quantum / 1000000, (quantum % 1000000) * 1000L};
    for (int s = 0; s < switches; ++s) {
        nanosleep(&q, NULL);
        double t0 = now_us();
        set_running(cur, 0);
        set_running(1 - cur, 1);
        call[s] = now_us() - t0;
        cur = 1 - cur;
    }
    getrusage(RUSAGE_SELF, &r1);
    /* Then, apart (the polling costs CPU): how long after the calls the
     * job is really stopped, polled for up to 100 ms. */
    int checks = switches < 200 ? switches : 200;
    double *done = malloc(sizeof *done * (size_t)checks);
    for (int s = 0; s < checks; ++s) {
        nanosleep(&q, NULL);
        double t0 = now_us();
        set_running(cur, 0);
        set_running(1 - cur, 1);
        struct timespec poll = {0, 20000};
        while (!stopped(cur) && now_us() - t0 < 100000)
            nanosleep(&poll, NULL);
        done[s] = now_us() - t0;
        cur = 1 - cur;
    }
    /* The parents' CPU: end the tasks, read what each parent used. */
    double parents = 0;
    for (int j = 0; j < 2; ++j) {
        if (state_fd[j] >= 0)
            set_running(j, 1);
        for (int k = 0; k < 2; ++k) {
            kill(task[j][k], SIGCONT);
            kill(task[j][k], SIGKILL);
        }
        double us = 0;
        if (read(pipes[j][0], &us, sizeof us) == sizeof us)
            parents += us;
        waitpid(parent[j], NULL, 0);
        parent[j] = -1;
    }
    cleanup();
    qsort(call, (size_t)switches, sizeof *call, cmp);
    qsort(done, (size_t)checks, sizeof *done, cmp);
    printf(
        "stop_probe: %s: %d switches: call p50 %.0f us p99 %.0f us; stopped after p50 %.0f us p99 %.0f us; "
        "switcher %.1f us and parents %.1f us of CPU per switch\n",
        argv[1], switches, call[switches / 2], call[switches * 99 / 100], done[checks / 2],
        done[checks * 99 / 100], (cpu_us(&r1) - cpu_us(&r0)) / switches, parents / (switches + checks));
    free(call);
    free(done);
    return 0;
}
