/* mpi_sync: a bulk-synchronous Open MPI kernel for the gang scheduling
 * benchmark: ITERATIONS rounds of WORK thousand iterations of computation
 * followed by MPI_Barrier (a few milliseconds per round), the pattern that
 * suffers when the ranks of a job are not scheduled together.
 *
 *   mpi_sync ITERATIONS WORK
 *
 * Rank 0 prints "START <ns> END <ns>" (CLOCK_REALTIME) around the rounds.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 3 || atol(argv[1]) <= 0 || atol(argv[2]) <= 0) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_sync ITERATIONS WORK\n");
        MPI_Finalize();
        return 2;
    }
    long iters = atol(argv[1]), work = atol(argv[2]) * 1000L;
    MPI_Barrier(MPI_COMM_WORLD);
    long long t0 = now_ns();
    volatile unsigned long x = 1;
    unsigned long y = x;
    for (long i = 0; i < iters; i++) {
        for (long k = 0; k < work; k++)
            y = y * 6364136223846793005UL + 1442695040888963407UL;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    x = y;
    if (rank == 0)
        printf("START %lld END %lld\n", t0, now_ns());
    MPI_Finalize();
    return 0;
}
