/* msg_alltoall: every rank sends M messages to every other rank, each
 * carrying (src, seq) and a body derived from them, and checks that it
 * receives exactly M messages from every peer, each once, in order and
 * intact; then a barrier.  Prints
 *   msg_alltoall: rank R ok: N messages from P peers in order
 * or an error, and exits non-zero on any violation.
 *
 * Usage: msg_alltoall [M [max_size]]   (defaults 200, 20000 bytes)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "switch_rdma/msg/storm_msg.h"

#define TAG 7

struct head {
    uint32_t src, seq, len;
};

static size_t size_of(uint32_t src, uint32_t dst, uint32_t seq, size_t max)
{
    uint64_t h = (uint64_t)src * 7919u + (uint64_t)dst * 104729u + (uint64_t)seq * 2654435761u;
    size_t s = sizeof(struct head) + (size_t)(h % (max + 1));
    return s > max ? max : s;
}

static unsigned char body_byte(uint32_t src, uint32_t seq, size_t i)
{
    return (unsigned char)(src * 31u + seq * 7u + (uint32_t)i);
}

static int fail(int rank, const char *what)
{
    fprintf(stderr, "msg_alltoall: rank %d: %s: %s\n", rank, what, storm_msg_error());
    return 1;
}

int main(int argc, char **argv)
{
    uint32_t m = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 200;
    size_t max = argc > 2 ? strtoul(argv[2], NULL, 10) : 20000;
    if (max < sizeof(struct head))
        max = sizeof(struct head);
    if (storm_msg_init() != 0)
        return fail(-1, "init");
    int rank = storm_msg_rank(), size = storm_msg_size();
    unsigned char *buf = malloc(max);
    uint32_t *next = calloc((size_t)size, sizeof *next);
    for (uint32_t seq = 0; seq < m; ++seq)
        for (int d = 1; d < size; ++d) {
            int dst = (rank + d) % size;
            size_t len = size_of((uint32_t)rank, (uint32_t)dst, seq, max);
            struct head h = {(uint32_t)rank, seq, (uint32_t)len};
            memcpy(buf, &h, sizeof h);
            for (size_t i = sizeof h; i < len; ++i)
                buf[i] = body_byte(h.src, seq, i);
            if (storm_msg_send(dst, TAG, buf, len) != 0)
                return fail(rank, "send");
        }
    uint64_t total = (uint64_t)m * (uint64_t)(size - 1);
    for (uint64_t k = 0; k < total; ++k) {
        int src, tag;
        ssize_t n = storm_msg_recv(STORM_MSG_ANY, STORM_MSG_ANY, buf, max, &src, &tag);
        if (n < 0)
            return fail(rank, "recv");
        struct head h;
        if ((size_t)n < sizeof h || tag != TAG || src == rank || src < 0 || src >= size) {
            fprintf(stderr, "msg_alltoall: rank %d: bad message of %zd bytes from %d tag %d\n", rank, n, src,
                    tag);
            return 1;
        }
        memcpy(&h, buf, sizeof h);
        if (h.src != (uint32_t)src || h.seq != next[src] || h.len != (uint32_t)n ||
            (size_t)n != size_of(h.src, (uint32_t)rank, h.seq, max)) {
            fprintf(
                stderr,
                "msg_alltoall: rank %d: from rank %d expected seq %u, got src %u seq %u len %u (%zd bytes)\n",
                rank, src, next[src], h.src, h.seq, h.len, n);
            return 1;
        }
        for (size_t i = sizeof h; i < (size_t)n; ++i)
            if (buf[i] != body_byte(h.src, h.seq, i)) {
                fprintf(stderr, "msg_alltoall: rank %d: message %u of rank %d corrupt at byte %zu\n", rank,
                        h.seq, src, i);
                return 1;
            }
        if (++next[src] > m) {
            fprintf(stderr, "msg_alltoall: rank %d: more than %u messages from rank %d\n", rank, m, src);
            return 1;
        }
    }
    if (storm_msg_barrier() != 0)
        return fail(rank, "barrier");
    /* Nothing more may be pending: no duplicate, no stray message. */
    int s, t;
    if (storm_msg_probe(STORM_MSG_ANY, STORM_MSG_ANY, &s, &t) >= 0) {
        fprintf(stderr, "msg_alltoall: rank %d: an extra message from rank %d\n", rank, s);
        return 1;
    }
    printf("msg_alltoall: rank %d ok: %llu messages from %d peers in order\n", rank,
           (unsigned long long)total, size - 1);
    fflush(stdout);
    if (storm_msg_finalize() != 0)
        return fail(rank, "finalize");
    free(next);
    free(buf);
    return 0;
}
