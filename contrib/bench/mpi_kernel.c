/* mpi_kernel: a stencil-like Open MPI kernel for the implicit coscheduling
 * benchmark.  Each of ROUNDS rounds computes WORK thousand iterations, then
 * makes EXCHANGES halo exchanges of BYTES with both ring neighbours, with
 * point-to-point calls only (MPI_Irecv, MPI_Send, MPI_Waitall), the calls
 * the PMPI coscheduling hooks see.  Collectives are avoided on purpose:
 * their arrivals are not reported (cosched/README.md).
 *
 *   mpi_kernel ROUNDS WORK EXCHANGES BYTES
 *
 * heavy (LU/SP/BT-like: many small messages):  mpi_kernel 4000 W 4 1024
 * moderate:                                     mpi_kernel 500 W 1 16384
 * light (EP-like: almost none):                 mpi_kernel 10 W 1 8
 *
 * Rank 0 prints "START <ns> END <ns>" (CLOCK_REALTIME) around the rounds,
 * after a first exchange so that every rank has started.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void exchange(int rank, int size, char *out, char *in_l, char *in_r, int bytes, int tag)
{
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    MPI_Request r[2];
    MPI_Irecv(in_l, bytes, MPI_BYTE, left, tag, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(in_r, bytes, MPI_BYTE, right, tag + 1, MPI_COMM_WORLD, &r[1]);
    MPI_Send(out, bytes, MPI_BYTE, right, tag, MPI_COMM_WORLD);
    MPI_Send(out, bytes, MPI_BYTE, left, tag + 1, MPI_COMM_WORLD);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5 || atol(argv[1]) <= 0 || atol(argv[2]) < 0 || atol(argv[3]) <= 0 || atol(argv[4]) <= 0) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_kernel ROUNDS WORK EXCHANGES BYTES\n");
        MPI_Finalize();
        return 2;
    }
    long rounds = atol(argv[1]), work = atol(argv[2]) * 1000L;
    int exchanges = atoi(argv[3]), bytes = atoi(argv[4]);
    char *out = malloc((size_t)bytes), *in_l = malloc((size_t)bytes), *in_r = malloc((size_t)bytes);
    if (!out || !in_l || !in_r) {
        fprintf(stderr, "mpi_kernel: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(out, rank, (size_t)bytes);
    exchange(rank, size, out, in_l, in_r, bytes, 0);
    long long t0 = now_ns();
    volatile unsigned long x = 1;
    unsigned long y = x;
    for (long i = 0; i < rounds; i++) {
        for (long k = 0; k < work; k++)
            y = y * 6364136223846793005UL + 1442695040888963407UL;
        for (int e = 0; e < exchanges; e++)
            exchange(rank, size, out, in_l, in_r, bytes, 2 + 2 * e);
    }
    x = y;
    if (rank == 0)
        printf("START %lld END %lld\n", t0, now_ns());
    free(out);
    free(in_l);
    free(in_r);
    MPI_Finalize();
    return 0;
}
