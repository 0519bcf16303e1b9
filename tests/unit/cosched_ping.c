/* An unmodified MPI program for test_cosched_pmpi, run as a singleton (no
 * mpirun) with the PMPI library preloaded; messages go to itself.
 *
 *   cosched_ping N        N rounds of MPI_Irecv + MPI_Waitall, then
 *                         MPI_Sendrecv, 20 ms apart
 *   cosched_ping all N    N rounds of every receive path the library
 *                         reports, RECEIVES_PER_ROUND receives a round,
 *                         plus sends that must not count; prints
 *                         "receives R" (R = the receives it made) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WIDE 100 /* outstanding receives at once: fills the library's table */

static int all_paths(int n)
{
    int x = 7, y = 0, ys[WIDE], flag = 0, idx = 0, out = 0, idxs[2 * WIDE];
    long receives = 0;
    MPI_Request r[2 * WIDE], p;
    MPI_Status st[2 * WIDE];
    MPI_Recv_init(&y, 1, MPI_INT, 0, 9, MPI_COMM_SELF, &p);
    for (int i = 0; i < n; ++i) {
        /* Irecv + Waitall (with a send among the requests) */
        MPI_Irecv(&y, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &r[0]);
        MPI_Isend(&x, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &r[1]);
        MPI_Waitall(2, r, st);
        receives += 1;
        /* Sendrecv, Sendrecv_replace */
        MPI_Sendrecv(&x, 1, MPI_INT, 0, 2, &y, 1, MPI_INT, 0, 2, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        MPI_Sendrecv_replace(&y, 1, MPI_INT, 0, 2, 0, 2, MPI_COMM_SELF, &st[0]);
        receives += 2;
        /* Irecv + Test until done; the send waited alone (not a receive) */
        MPI_Irecv(&y, 1, MPI_INT, 0, 3, MPI_COMM_SELF, &r[0]);
        MPI_Isend(&x, 1, MPI_INT, 0, 3, MPI_COMM_SELF, &r[1]);
        MPI_Wait(&r[1], MPI_STATUS_IGNORE);
        do
            MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
        while (!flag);
        receives += 1;
        /* a persistent receive, started and waited */
        MPI_Start(&p);
        MPI_Send(&x, 1, MPI_INT, 0, 9, MPI_COMM_SELF);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
        receives += 1;
        /* Waitany twice over a receive and a send */
        MPI_Irecv(&y, 1, MPI_INT, 0, 4, MPI_COMM_SELF, &r[0]);
        MPI_Isend(&x, 1, MPI_INT, 0, 4, MPI_COMM_SELF, &r[1]);
        MPI_Waitany(2, r, &idx, &st[0]);
        MPI_Waitany(2, r, &idx, &st[0]);
        receives += 1;
        /* Testany until the receive is done */
        MPI_Isend(&x, 1, MPI_INT, 0, 5, MPI_COMM_SELF, &r[1]);
        MPI_Wait(&r[1], MPI_STATUS_IGNORE);
        MPI_Irecv(&y, 1, MPI_INT, 0, 5, MPI_COMM_SELF, &r[0]);
        do
            MPI_Testany(1, r, &idx, &flag, &st[0]);
        while (!flag);
        receives += 1;
        /* WIDE receives outstanding, completed by Waitsome / Testsome / Testall */
        for (int k = 0; k < WIDE; ++k) {
            MPI_Irecv(&ys[k], 1, MPI_INT, 0, 100 + k, MPI_COMM_SELF, &r[k]);
            MPI_Isend(&x, 1, MPI_INT, 0, 100 + k, MPI_COMM_SELF, &r[WIDE + k]);
        }
        int left = 2 * WIDE;
        while (left > 0) {
            if (i % 3 == 0)
                MPI_Waitsome(2 * WIDE, r, &out, idxs, st);
            else if (i % 3 == 1)
                MPI_Testsome(2 * WIDE, r, &out, idxs, st);
            else {
                MPI_Testall(2 * WIDE, r, &flag, st);
                out = flag ? left : 0;
            }
            if (out != MPI_UNDEFINED)
                left -= out;
            else
                left = 0;
        }
        receives += WIDE;
        /* a receive request freed before completion is forgotten: its
         * message is then received by a plain Recv */
        MPI_Irecv(&y, 1, MPI_INT, 0, 6, MPI_COMM_SELF, &r[0]);
        MPI_Cancel(&r[0]);
        MPI_Request_free(&r[0]);
        MPI_Send(&x, 1, MPI_INT, 0, 7, MPI_COMM_SELF);
        MPI_Recv(&y, 1, MPI_INT, 0, 7, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        receives += 1;
    }
    MPI_Request_free(&p);
    printf("receives %ld\n", receives);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc > 2 && !strcmp(argv[1], "all")) {
        int rc = all_paths(atoi(argv[2]));
        MPI_Finalize();
        return rc;
    }
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
