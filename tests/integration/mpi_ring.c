/* A token travels once around all ranks; rank 0 checks it came back with
 * every rank's contribution.  Each rank prints its host so the test can
 * check that ranks ran on different virtual nodes. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, len, token = 0;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    if (size > 1) {
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += 1 << rank % 16;
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }
    printf("rank %d of %d on %s\n", rank, size, host);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        int expect = 1;
        for (int r = 1; r < size; r++)
            expect += 1 << r % 16;
        printf("ring %s: token %d, expected %d\n", token == expect || size == 1 ? "ok" : "BROKEN", token,
               expect);
    }
    MPI_Finalize();
    return 0;
}
