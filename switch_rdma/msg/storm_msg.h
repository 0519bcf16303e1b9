/* libstormmsg: user-level messaging over a job step's communication
 * context (Slurm SwitchType=switch/rdma with Storm).
 *
 * A task finds its context in its environment (STORM_CTX, STORM_POOL_SOCKET,
 * SLURM_PROCID), attaches to its node's agent and exchanges messages with
 * the step's other tasks through queues in the node's buffer pool; the
 * library's progress thread plays the NIC (FM's flow control: credits per
 * peer) and takes part in the gang switches' halt / flush / release.
 *
 * Implicit coscheduling (cosched/README.md): when STORM_COSCHED_SOCKET is
 * set (switch/rdma sets it where the node agent runs the local scheduler),
 * storm_msg_init() registers the task with its node's local scheduler and
 * storm_msg_finalize() unregisters it (a task that dies is unregistered by
 * its connection closing); every frame carries the sender's status, and
 * arrivals from scheduled senders ask for this task's job to be scheduled.
 * A refusal or an unreachable agent prints one line on stderr and the task
 * goes on without coscheduling; without the variable nothing changes.
 *
 * Conventions: calls return 0 (or a count) on success and -1 on failure,
 * with errno set and storm_msg_error() describing it.  Once the context
 * failed (a peer died, a switch's mark did not come within STORM_MSG_TIMEOUT
 * seconds, default 30), every call returns -1 with that reason.  Calls are
 * thread-safe once storm_msg_init() returned.  Tags are >= 0.
 */
#ifndef STORM_MSG_H
#define STORM_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STORM_MSG_API __attribute__((visibility("default")))
#else
#define STORM_MSG_API
#endif

#define STORM_MSG_ANY (-1) /* any source / any tag in storm_msg_recv() */

/* Attaches to the context: 0, or -1 (no STORM_CTX: "no communication
 * context: STORM_CTX is not set (is SwitchType=switch/rdma?)"; a context
 * without a key: "... has no key (format version 3 or older) ..."; agent
 * unreachable; attach refused, with the agent's reason; queue header not as
 * announced; no credits: "the pool is too small for ..."; a peer's port
 * held by a process without the context's key; peers not reachable within
 * the timeout).  Returns once connected to every peer, each of which
 * proved the context's key.  Connections refused meanwhile (a hello
 * without the key, replayed, of another step) print one line each on
 * stderr, at most 8. */
STORM_MSG_API int storm_msg_init(void);

/* This task's rank and the context's task count (-1 before init). */
STORM_MSG_API int storm_msg_rank(void);
STORM_MSG_API int storm_msg_size(void);

/* Sends len bytes (any length, 0 included) to rank dst (itself included)
 * with tag >= 0.  Blocks until the whole message is in the send queue
 * (buf may be reused on return); delivery is asynchronous.  0 or -1. */
STORM_MSG_API int storm_msg_send(int dst, int tag, const void *buf, size_t len);

/* Receives the first message matching src and tag (STORM_MSG_ANY for
 * either) into buf; blocks until one arrives.  Messages of one sender with
 * the same tag are received in send order.  Returns its length and sets
 * *out_src, *out_tag (either may be NULL).  A matching message longer than
 * cap is not received: -1 with errno EMSGSIZE, the message stays queued
 * (nothing is lost) and storm_msg_error() gives its length, source and tag:
 * receive it again with a buffer of at least that length (see also
 * storm_msg_probe()).  Messages not received yet wait in private memory. */
STORM_MSG_API ssize_t storm_msg_recv(int src, int tag, void *buf, size_t cap, int *out_src, int *out_tag);

/* Length of the first message matching src and tag that arrived already
 * (sets *out_src, *out_tag), or -1 with errno EAGAIN if none did. */
STORM_MSG_API ssize_t storm_msg_probe(int src, int tag, int *out_src, int *out_tag);

/* Returns once every task of the context called it.  0 or -1. */
STORM_MSG_API int storm_msg_barrier(void);

/* Collective end: waits until this task's messages are sent and every
 * task finalizes, returns every peer's credits, detaches.  Messages never
 * received are dropped.  0 or -1; the context is gone either way (the
 * statistics stay readable). */
STORM_MSG_API int storm_msg_finalize(void);

/* The last failure's description (never NULL). */
STORM_MSG_API const char *storm_msg_error(void);

struct storm_msg_stats {
    uint64_t packets_sent;     /* injected towards peers */
    uint64_t packets_received; /* arrived from peers */
    uint64_t messages_sent;
    uint64_t messages_received;
    uint64_t credit_stalls;   /* times injection waited for a peer's credits */
    uint64_t halts;           /* halt{e} handled */
    uint64_t releases;        /* release{e} handled */
    uint64_t resident_waits;  /* times the application waited for its queues */
    uint64_t credits_missing; /* credits not (yet) returned by the peers */
    uint32_t credits;         /* initial credits per peer */
};
/* Fills *s (also after storm_msg_finalize()).  0 or -1 before init. */
STORM_MSG_API int storm_msg_stats(struct storm_msg_stats *s);

/* Implicit coscheduling as this task sees it.  Arrivals are data packets
 * (a zero-length message, a barrier's included) that came while this
 * task's job was not scheduled. */
struct storm_msg_cosched_stats {
    int32_t status;             /* this job: 1 scheduled, 0 not, 2 not coscheduled (no
                                   STORM_COSCHED_SOCKET, refused, or the agent went away) */
    uint32_t pending;           /* counted arrivals not reported yet */
    uint64_t status_pushes;     /* the agent's status changes received */
    uint64_t arrivals;          /* from scheduled (or not coscheduled) senders: asked for */
    uint64_t false_arrivals;    /* from senders running unscheduled: never reported */
    uint64_t requests;          /* schedule requests sent, each for >= 1 arrival */
    uint64_t requests_deferred; /* found the agent's socket full: merged into a later one */
};
/* Fills *s (also after storm_msg_finalize(): status 2 then).  0 or -1
 * before init. */
STORM_MSG_API int storm_msg_cosched_stats(struct storm_msg_cosched_stats *s);

#ifdef __cplusplus
}
#endif

#endif /* STORM_MSG_H */
