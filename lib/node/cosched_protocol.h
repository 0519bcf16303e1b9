/* The request channel between tasks and the node's local scheduler
 * (implicit coscheduling), shared by the agent (C++), the PMPI library (C)
 * and libstormmsg's hooks.
 *
 * Transport: a SOCK_SEQPACKET unix socket at
 * <SlurmdSpoolDir>/storm-cosched.sock (mode 0666; the tasks of coscheduled
 * steps find it in STORM_COSCHED_SOCKET).  Each task keeps one connection:
 * the kernel stamps it with the task's pid and uid (SO_PEERCRED), and
 * closes it when the task dies, which unregisters it.  One request per
 * packet.
 *
 * Every message is 16 bytes, integers big-endian:
 *   0  u8  version (STORM_COSCHED_VERSION)
 *   1  u8  type
 *   2  u8  status
 *   3  u8  zero
 *   4  u32 job    Slurm job id (SLURM_JOB_ID)
 *   8  u32 rank   REGISTER: the task's rank (SLURM_PROCID);
 *                 SCHEDULE: the sender's rank, or STORM_COSCHED_ANY
 *  12  u32 count  SCHEDULE: messages this request stands for (>= 1)
 *
 * task -> agent:
 *   REGISTER   'R' (CMDREG) first message on a connection; status 0, count 0;
 *              the task waits for the answer before sending anything else
 *              (the agent reads nothing more until it has checked it)
 *   UNREGISTER 'U' (CMDOUT) then the task closes; closing alone does too
 *   SCHEDULE   'S' (CMDSCH) messages arrived for `job` (the registered job)
 *              from rank `rank` whose job was scheduled (status 1), not
 *              scheduled (status 0: a false request, never preempts), or
 *              unknown (status 2: the PMPI hooks cannot see it; libstormmsg
 *              for a sender that is not coscheduled).  libstormmsg reads
 *              the sender's status byte and sends 1 or 2, never 0: it
 *              keeps its false arrivals to itself.
 * agent -> task:
 *   OK         'K' answer to REGISTER; status = 1 if the job is scheduled
 *   STATUS     'T' the job was scheduled (status 1) or descheduled (0):
 *              the status byte libstormmsg puts in front of every frame
 *              it sends (switch_rdma/msg/frames.hpp)
 *   ERROR      'E' answer to a refused REGISTER, followed by up to 240
 *              bytes of text (the reason); the agent then closes
 * Anything else (wrong size, version, type, fields, a SCHEDULE for another
 * job than the registered one, a second REGISTER) is logged by the agent
 * and closes the connection. */
#ifndef STORM_COSCHED_PROTOCOL_H
#define STORM_COSCHED_PROTOCOL_H

#include <stdint.h>

#define STORM_COSCHED_VERSION 1
#define STORM_COSCHED_MSG_SIZE 16
#define STORM_COSCHED_MAX_MSG 256
#define STORM_COSCHED_SOCKET_NAME "storm-cosched.sock"
#define STORM_COSCHED_SOCKET_ENV "STORM_COSCHED_SOCKET"
/* Set by slurmstepd (switch/rdma) instead of STORM_COSCHED_SOCKET in the
 * tasks of a step that is not coscheduled, on a node that coschedules
 * others: why (slurmctld did not mark the step's context coscheduled). */
#define STORM_COSCHED_REFUSED_ENV "STORM_COSCHED_REFUSED"
#define STORM_COSCHED_ANY 0xffffffffu

#define STORM_COSCHED_REGISTER 'R'
#define STORM_COSCHED_UNREGISTER 'U'
#define STORM_COSCHED_SCHEDULE 'S'
#define STORM_COSCHED_OK 'K'
#define STORM_COSCHED_STATUS 'T'
#define STORM_COSCHED_ERROR 'E'

#define STORM_COSCHED_NOT_SCHEDULED 0
#define STORM_COSCHED_SCHEDULED 1
#define STORM_COSCHED_UNKNOWN 2

/* The interval between two SCHEDULE requests of one task, in microseconds
 * (decimal), read by the PMPI library and libstormmsg; default 10000. */
#define STORM_COSCHED_INTERVAL_ENV "STORM_COSCHED_INTERVAL_US"
#define STORM_COSCHED_INTERVAL_US_DEFAULT 10000u

/* Encoding, header-only for C and C++ (the tasks' side: the PMPI library
 * and libstormmsg). */
static inline void storm_cosched_put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline uint32_t storm_cosched_get32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Fills m[STORM_COSCHED_MSG_SIZE] with one message. */
static inline void storm_cosched_encode(unsigned char *m, int type, int status, uint32_t job, uint32_t rank,
                                        uint32_t count)
{
    m[0] = STORM_COSCHED_VERSION;
    m[1] = (unsigned char)type;
    m[2] = (unsigned char)status;
    m[3] = 0;
    storm_cosched_put32(m + 4, job);
    storm_cosched_put32(m + 8, rank);
    storm_cosched_put32(m + 12, count);
}

#endif
