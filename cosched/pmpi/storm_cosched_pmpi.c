/* libstorm_cosched_pmpi: implicit coscheduling's hooks for unmodified MPI
 * programs (PMPI interposition, LD_PRELOADed by spank/storm's
 * --storm-cosched; see cosched/README.md).
 *
 *   MPI_Init, MPI_Init_thread   register the task with the node's local
 *                               scheduler (CMDREG): job SLURM_JOB_ID, rank
 *                               SLURM_PROCID, socket STORM_COSCHED_SOCKET
 *   receive completions         report message arrivals (CMDSCH): MPI_Recv,
 *                               MPI_Sendrecv(_replace), and MPI_Wait*,
 *                               MPI_Test* completing a request of MPI_Irecv
 *                               or MPI_Recv_init (tracked by handle)
 *   MPI_Finalize                unregister (CMDOUT); a task that dies is
 *                               unregistered by its connection closing
 *
 * Cheap by construction: an arrival costs a counter increment and a coarse
 * clock read; at most one SCHEDULE request per STORM_COSCHED_INTERVAL_US
 * (default 10000 us) stands for every arrival since the last, and none is
 * sent while the agent says the job is scheduled (its STATUS messages are
 * read at the same rate).  The sender's status is unknown here (status 2):
 * only libstormmsg, which prefixes it to every message, can tell.
 *
 * Everything fails open: no socket, a refusal or a broken connection
 * turns the hooks into plain pass-through (one line on stderr when
 * STORM_COSCHED_VERBOSE is set, and always for a refusal: the agent's
 * ERROR, or slurmstepd's STORM_COSCHED_REFUSED in a step that is not
 * coscheduled). */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/node/cosched_protocol.h"

/* Exported: the MPI_* entry points only (the build's visibility). */
#define EXPORT __attribute__((visibility("default")))

static int g_fd = -1;
static uint32_t g_job, g_rank;
static int g_scheduled;
static int g_verbose;
static uint64_t g_interval_ns = STORM_COSCHED_INTERVAL_US_DEFAULT * 1000ull;
static uint64_t g_last_ns;
static uint32_t g_pending, g_last_source = STORM_COSCHED_ANY;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* Receive requests (MPI_Irecv, MPI_Recv_init), by handle: open addressing. */
#define TRACK 4096
static MPI_Request g_recv[TRACK];
static unsigned char g_used[TRACK];
static unsigned char g_persistent[TRACK];

static void say(const char *fmt, const char *what)
{
    fprintf(stderr, "storm-cosched: rank %u of job %u: ", g_rank, g_job);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int send_msg(int type, int status, uint32_t rank, uint32_t count)
{
    unsigned char m[STORM_COSCHED_MSG_SIZE];
    storm_cosched_encode(m, type, status, g_job, rank, count);
    ssize_t n;
    do
        n = send(g_fd, m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof m ? 0 : -1;
}

static void disconnect(const char *why)
{
    if (g_fd < 0)
        return;
    if (why && g_verbose)
        say("coscheduling off: %s", why);
    close(g_fd);
    g_fd = -1;
}

/* STATUS messages the agent pushed since the last look (non-blocking). */
static void read_status(void)
{
    unsigned char m[STORM_COSCHED_MAX_MSG];
    for (;;) {
        ssize_t n = recv(g_fd, m, sizeof m, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            disconnect("the node agent closed the connection");
            return;
        }
        if (n == STORM_COSCHED_MSG_SIZE && m[1] == STORM_COSCHED_STATUS)
            g_scheduled = m[2] == STORM_COSCHED_SCHEDULED;
    }
}

static uint32_t env_u32(const char *name, int *ok)
{
    const char *v = getenv(name);
    char *end = NULL;
    unsigned long x = v && *v ? strtoul(v, &end, 10) : 0;
    *ok = v && *v && end && !*end && x <= 0xfffffffful;
    return (uint32_t)x;
}

static void do_register(void)
{
    const char *path = getenv(STORM_COSCHED_SOCKET_ENV);
    int ok_job, ok_rank;
    g_verbose = getenv("STORM_COSCHED_VERBOSE") != NULL;
    g_job = env_u32("SLURM_JOB_ID", &ok_job);
    g_rank = env_u32("SLURM_PROCID", &ok_rank);
    int ok_iv;
    uint32_t iv = env_u32(STORM_COSCHED_INTERVAL_ENV, &ok_iv);
    if (ok_iv)
        g_interval_ns = (uint64_t)iv * 1000ull;
    const char *refused = getenv(STORM_COSCHED_REFUSED_ENV);
    if ((!path || !*path) && refused && *refused) {
        /* slurmstepd's word: this step is not coscheduled (always said:
         * the user asked for coscheduling). */
        say("slurmstepd refused coscheduling: %s", refused);
        return;
    }
    if (!path || !*path || !ok_job || !g_job) {
        if (g_verbose)
            say("coscheduling off: %s", !path || !*path ? "no " STORM_COSCHED_SOCKET_ENV : "no SLURM_JOB_ID");
        return;
    }
    if (!ok_rank)
        g_rank = STORM_COSCHED_ANY;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path)
        return;
    strcpy(sa.sun_path, path);
    g_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (g_fd < 0)
        return;
    if (connect(g_fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        disconnect(strerror(errno));
        return;
    }
    if (send_msg(STORM_COSCHED_REGISTER, 0, g_rank, 0) != 0) {
        disconnect(strerror(errno));
        return;
    }
    struct pollfd p = {g_fd, POLLIN, 0};
    unsigned char m[STORM_COSCHED_MAX_MSG + 1];
    ssize_t n = poll(&p, 1, 5000) == 1 ? recv(g_fd, m, sizeof m - 1, 0) : -1;
    if (n == STORM_COSCHED_MSG_SIZE && m[1] == STORM_COSCHED_OK) {
        g_scheduled = m[2] == STORM_COSCHED_SCHEDULED;
        g_last_ns = now_ns();
        if (g_verbose)
            say("registered (%s)", g_scheduled ? "scheduled" : "not scheduled");
        return;
    }
    if (n > STORM_COSCHED_MSG_SIZE && m[1] == STORM_COSCHED_ERROR) {
        m[n] = 0;
        say("the node agent refused coscheduling: %s", (const char *)m + STORM_COSCHED_MSG_SIZE);
    }
    disconnect(n < 0 ? "no answer from the node agent" : "unexpected answer from the node agent");
}

/* ---- arrivals -------------------------------------------------------------- */

static size_t slot_of(MPI_Request r)
{
    uintptr_t h = (uintptr_t)r;
    return (size_t)((h >> 4) ^ (h >> 16)) % TRACK;
}

static void track(MPI_Request r, int persistent)
{
    if (g_fd < 0 || r == MPI_REQUEST_NULL)
        return;
    pthread_mutex_lock(&g_mu);
    size_t i = slot_of(r);
    for (size_t k = 0; k < TRACK; ++k, i = (i + 1) % TRACK)
        if (!g_used[i] || g_recv[i] == r) {
            g_used[i] = 1;
            g_recv[i] = r;
            g_persistent[i] = (unsigned char)persistent;
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

/* Was `r` a receive request?  Forgets it unless persistent (or `drop`). */
static int take(MPI_Request r, int drop)
{
    if (r == MPI_REQUEST_NULL)
        return 0;
    int found = 0;
    pthread_mutex_lock(&g_mu);
    size_t i = slot_of(r);
    for (size_t k = 0; k < TRACK && g_used[i]; ++k, i = (i + 1) % TRACK)
        if (g_recv[i] == r) {
            found = 1;
            if (drop || !g_persistent[i]) {
                /* Backward-shift deletion keeps the probe chains intact. */
                size_t j = i;
                for (;;) {
                    g_used[j] = 0;
                    size_t n = (j + 1) % TRACK;
                    for (;; n = (n + 1) % TRACK) {
                        if (!g_used[n])
                            goto done;
                        size_t home = slot_of(g_recv[n]);
                        if ((j <= n) ? (home <= j || home > n) : (home <= j && home > n))
                            break;
                    }
                    g_recv[j] = g_recv[n];
                    g_persistent[j] = g_persistent[n];
                    g_used[j] = 1;
                    j = n;
                }
            }
            break;
        }
done:
    pthread_mutex_unlock(&g_mu);
    return found;
}

static void arrived(int count, int source)
{
    if (g_fd < 0 || count <= 0)
        return;
    pthread_mutex_lock(&g_mu);
    g_pending += (uint32_t)count;
    if (source >= 0)
        g_last_source = (uint32_t)source;
    uint64_t t = now_ns();
    if (t - g_last_ns >= g_interval_ns) {
        g_last_ns = t;
        read_status();
        if (g_fd >= 0 && !g_scheduled && g_pending) {
            if (send_msg(STORM_COSCHED_SCHEDULE, STORM_COSCHED_UNKNOWN, g_last_source, g_pending) == 0) {
                g_pending = 0;
                g_last_source = STORM_COSCHED_ANY;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                disconnect(strerror(errno));
            } /* else: a full socket; the next request carries these too */
        } else {
            g_pending = 0; /* scheduled: nothing to ask for */
            g_last_source = STORM_COSCHED_ANY;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

static int source_of(const MPI_Status *st) { return st && st != MPI_STATUS_IGNORE ? st->MPI_SOURCE : -1; }

/* ---- the hooks ------------------------------------------------------------- */

EXPORT int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        do_register();
    return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        do_register();
    return rc;
}

EXPORT int MPI_Finalize(void)
{
    if (g_fd >= 0) {
        send_msg(STORM_COSCHED_UNREGISTER, 0, g_rank, 0);
        disconnect(NULL);
    }
    return PMPI_Finalize();
}

EXPORT int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                    MPI_Status *status)
{
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Recv(buf, count, type, source, tag, comm, st);
    if (rc == MPI_SUCCESS)
        arrived(1, st->MPI_SOURCE);
    return rc;
}

EXPORT int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
                        int rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm,
                        MPI_Status *status)
{
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, st);
    if (rc == MPI_SUCCESS)
        arrived(1, st->MPI_SOURCE);
    return rc;
}

EXPORT int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype type, int dest, int stag, int source,
                                int rtag, MPI_Comm comm, MPI_Status *status)
{
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Sendrecv_replace(buf, count, type, dest, stag, source, rtag, comm, st);
    if (rc == MPI_SUCCESS)
        arrived(1, st->MPI_SOURCE);
    return rc;
}

EXPORT int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                     MPI_Request *req)
{
    int rc = PMPI_Irecv(buf, count, type, source, tag, comm, req);
    if (rc == MPI_SUCCESS)
        track(*req, 0);
    return rc;
}

EXPORT int MPI_Recv_init(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                         MPI_Request *req)
{
    int rc = PMPI_Recv_init(buf, count, type, source, tag, comm, req);
    if (rc == MPI_SUCCESS)
        track(*req, 1);
    return rc;
}

EXPORT int MPI_Request_free(MPI_Request *req)
{
    take(*req, 1);
    return PMPI_Request_free(req);
}

EXPORT int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    MPI_Request h = *req;
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Wait(req, st);
    if (rc == MPI_SUCCESS && take(h, 0))
        arrived(1, source_of(st));
    return rc;
}

EXPORT int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    MPI_Request h = *req;
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Test(req, flag, st);
    if (rc == MPI_SUCCESS && *flag && take(h, 0))
        arrived(1, source_of(st));
    return rc;
}

/* The handles of an array call, saved before MPI nulls them. */
#define SMALL 64
static MPI_Request *save(int n, const MPI_Request *reqs, MPI_Request *small)
{
    MPI_Request *h = n <= SMALL ? small : malloc(sizeof(MPI_Request) * (size_t)n);
    if (h)
        memcpy(h, reqs, sizeof(MPI_Request) * (size_t)n);
    return h;
}

static void unsave(MPI_Request *h, MPI_Request *small)
{
    if (h != small)
        free(h);
}

EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status)
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Waitany(n, reqs, index, st);
    if (rc == MPI_SUCCESS && h && *index >= 0 && *index < n && take(h[*index], 0))
        arrived(1, source_of(st));
    unsave(h, small);
    return rc;
}

EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = PMPI_Testany(n, reqs, index, flag, st);
    if (rc == MPI_SUCCESS && h && *flag && *index >= 0 && *index < n && take(h[*index], 0))
        arrived(1, source_of(st));
    unsave(h, small);
    return rc;
}

static void completed_all(int n, MPI_Request *h, MPI_Status *sts)
{
    int got = 0, source = -1;
    for (int i = 0; h && i < n; ++i)
        if (take(h[i], 0)) {
            ++got;
            if (sts != MPI_STATUSES_IGNORE)
                source = sts[i].MPI_SOURCE;
        }
    arrived(got, source);
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[])
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    int rc = PMPI_Waitall(n, reqs, sts);
    if (rc == MPI_SUCCESS)
        completed_all(n, h, sts);
    unsave(h, small);
    return rc;
}

EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[])
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    int rc = PMPI_Testall(n, reqs, flag, sts);
    if (rc == MPI_SUCCESS && *flag)
        completed_all(n, h, sts);
    unsave(h, small);
    return rc;
}

static void completed_some(int out, const int *idx, MPI_Request *h, MPI_Status *sts)
{
    int got = 0, source = -1;
    for (int k = 0; h && k < out; ++k)
        if (take(h[idx[k]], 0)) {
            ++got;
            if (sts != MPI_STATUSES_IGNORE)
                source = sts[k].MPI_SOURCE;
        }
    arrived(got, source);
}

EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *out, int idx[], MPI_Status sts[])
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    int rc = PMPI_Waitsome(n, reqs, out, idx, sts);
    if (rc == MPI_SUCCESS && *out != MPI_UNDEFINED)
        completed_some(*out, idx, h, sts);
    unsave(h, small);
    return rc;
}

EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *out, int idx[], MPI_Status sts[])
{
    MPI_Request small[SMALL], *h = save(n, reqs, small);
    int rc = PMPI_Testsome(n, reqs, out, idx, sts);
    if (rc == MPI_SUCCESS && *out != MPI_UNDEFINED)
        completed_some(*out, idx, h, sts);
    unsave(h, small);
    return rc;
}
