/* mpi_bw: the stock side of bench-switch's bandwidth figures: Open MPI's
 * point-to-point bandwidth, measured as FM's benchmark does (seed 002
 * section 4.1): rank 0 sends COUNT messages of SIZE bytes to rank 1, which
 * answers one finish message once all arrived; rank 0 times it.
 *
 *   mpi_bw COUNT SIZE...
 *
 * Rank 0 prints one line per size: "<size> <MB/s>" (MB = 10^6 bytes).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3 || atol(argv[1]) <= 0 || size != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_bw COUNT SIZE... (2 ranks)\n");
        MPI_Finalize();
        return 2;
    }
    long count = atol(argv[1]);
    for (int a = 2; a < argc; ++a) {
        long len = atol(argv[a]);
        char *buf = malloc(len > 0 ? (size_t)len : 1);
        char fin = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            for (long i = 0; i < count; ++i)
                MPI_Send(buf, (int)len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(&fin, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double t = MPI_Wtime() - t0;
            printf("%ld %.1f\n", len, (double)len * (double)count / t / 1e6);
            fflush(stdout);
        } else {
            for (long i = 0; i < count; ++i)
                MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&fin, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
