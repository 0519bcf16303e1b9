/* msg_bw: FM-style point-to-point bandwidth over libstormmsg.
 *
 * Run as a step of two (or more: the others only take part in the barriers)
 * tasks with SwitchType=switch/rdma.  For each size S given (bytes; default
 * 64 256 1024 4096 16384 65536), rank 0 sends N messages of S bytes to
 * rank 1, rank 1 answers one finish message once it received them all;
 * rank 0 prints one line "S MB/s" (MB = 10^6 bytes).
 *
 * Usage: msg_bw [-n N] [size...]   (N default 1000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "switch_rdma/msg/storm_msg.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int die(const char *what)
{
    fprintf(stderr, "msg_bw: rank %d: %s: %s\n", storm_msg_rank(), what, storm_msg_error());
    return 1;
}

int main(int argc, char **argv)
{
    long n = 1000;
    int opt;
    while ((opt = getopt(argc, argv, "n:")) != -1) {
        if (opt == 'n' && (n = strtol(optarg, NULL, 10)) > 0)
            continue;
        fprintf(stderr, "usage: msg_bw [-n N] [size...]\n");
        return 2;
    }
    static const size_t defaults[] = {64, 256, 1024, 4096, 16384, 65536};
    size_t nsizes = argc > optind ? (size_t)(argc - optind) : sizeof defaults / sizeof defaults[0];
    size_t *sizes = calloc(nsizes, sizeof *sizes);
    size_t max = 1;
    for (size_t i = 0; i < nsizes; ++i) {
        sizes[i] = argc > optind ? strtoul(argv[optind + (int)i], NULL, 10) : defaults[i];
        if (sizes[i] > max)
            max = sizes[i];
    }
    if (storm_msg_init() != 0)
        return die("init");
    int rank = storm_msg_rank();
    if (storm_msg_size() < 2) {
        fprintf(stderr, "msg_bw: needs at least two tasks\n");
        return 2;
    }
    char *buf = malloc(max);
    memset(buf, 0x5a, max);
    for (size_t i = 0; i < nsizes; ++i) {
        if (storm_msg_barrier() != 0)
            return die("barrier");
        size_t s = sizes[i];
        if (rank == 0) {
            double t0 = now();
            for (long k = 0; k < n; ++k)
                if (storm_msg_send(1, 1, buf, s) != 0)
                    return die("send");
            char fin;
            if (storm_msg_recv(1, 2, &fin, 1, NULL, NULL) < 0)
                return die("recv finish");
            double t = now() - t0;
            printf("%zu %.2f\n", s, (double)s * (double)n / t / 1e6);
            fflush(stdout);
        } else if (rank == 1) {
            for (long k = 0; k < n; ++k)
                if (storm_msg_recv(0, 1, buf, max, NULL, NULL) < 0)
                    return die("recv");
            char fin = 1;
            if (storm_msg_send(0, 2, &fin, 1) != 0)
                return die("send finish");
        }
    }
    struct storm_msg_stats st;
    if (storm_msg_stats(&st) == 0 && rank < 2)
        fprintf(stderr, "msg_bw: rank %d: %llu packets sent, %llu received, %llu credit stalls, %u credits\n",
                rank, (unsigned long long)st.packets_sent, (unsigned long long)st.packets_received,
                (unsigned long long)st.credit_stalls, st.credits);
    if (storm_msg_finalize() != 0)
        return die("finalize");
    free(buf);
    free(sizes);
    return 0;
}
