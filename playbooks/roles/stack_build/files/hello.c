/* mpicluster's post-build check: every rank reports in, rank 0 counts them. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = 0, one = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("hello from %d of %d ranks\n", sum, size);
    MPI_Finalize();
    return (rank != 0 || sum == size) ? 0 : 1; /* only rank 0 holds the sum */
}
