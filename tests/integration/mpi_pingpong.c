/* Two ranks bounce a message for SECONDS seconds (argv[1], default 20),
 * computing about 1 ms between bounces: a communication-bound job for the
 * coscheduling test.  Rank 0 prints the round trips it completed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, x = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double secs = argc > 1 ? atof(argv[1]) : 20, end = MPI_Wtime() + secs;
    long rounds = 0;
    int go = 1;
    while (go && size >= 2 && rank < 2) {
        volatile double s = 0;
        for (int i = 0; i < 200000; i++)
            s += i * 0.5;
        if (rank == 0) {
            go = MPI_Wtime() < end;
            MPI_Send(&go, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        }
        rounds++;
    }
    if (rank == 0)
        printf("rounds %ld\n", rounds);
    MPI_Finalize();
    return 0;
}
