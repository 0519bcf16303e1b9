/* An unmodified MPI program for test_cosched_pmpi: N rounds of a message to
 * itself (MPI_Irecv + MPI_Waitall, then MPI_Sendrecv), 20 ms apart.  Run as
 * a singleton (no mpirun) with the PMPI library preloaded. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 50, x = 0, y = 0;
    for (int i = 0; i < n; ++i) {
        MPI_Request r[2];
        MPI_Irecv(&y, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &r[0]);
        MPI_Isend(&x, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        MPI_Sendrecv(&x, 1, MPI_INT, 0, 2, &y, 1, MPI_INT, 0, 2, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        usleep(20000);
    }
    MPI_Finalize();
    return 0;
}
