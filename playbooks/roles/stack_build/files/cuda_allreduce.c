/* mpicluster's GPU smoke test: MPI_Allreduce on device memory (CUDA-aware MPI).
 *
 * Run by the smoke test as: mpirun -np <GPUs> ... cuda_allreduce [ELEMENTS...]
 * Each rank takes GPU (OMPI_COMM_WORLD_LOCAL_RANK, else 0) modulo the GPUs it sees,
 * before MPI_Init (so that the MPI library, UCX's CUDA transports among it, finds the
 * rank's own GPU current rather than GPU 0), fills N floats there with rank+1 and sums them across ranks with MPI_Allreduce on
 * the device pointer itself; every element must then be size*(size+1)/2. Timings are
 * taken on a zeroed buffer after a warm-up (the slowest rank's average). Rank 0
 * prints one JSON line shaped like the smoke test's allreduce.py, plus each rank's
 * device name. A CUDA error names host, rank and call, and aborts with status 2.
 */
#define _POSIX_C_SOURCE 200112L

#include <mpi.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAME_LEN 256
#define MAX_SIZES 64

static int rank = 0;
static char host[NAME_LEN] = "?";

static void cuda_check(cudaError_t err, const char *call)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "cuda_allreduce: %s rank %d: %s failed: %s\n", host, rank, call,
                cudaGetErrorString(err));
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

#define CUDA(call) cuda_check((call), #call)

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_strings(const char *names, int n)
{
    int i;
    putchar('[');
    for (i = 0; i < n; i++) {
        if (i)
            printf(", ");
        json_string(names + (size_t)i * NAME_LEN);
    }
    putchar(']');
}

static int parse_sizes(int argc, char **argv, long *counts)
{
    static const long defaults[] = {1, 1024, 1048576, 16777216};
    int i, n = 0;
    if (argc < 2) {
        for (i = 0; i < 4; i++)
            counts[i] = defaults[i];
        return 4;
    }
    for (i = 1; i < argc && n < MAX_SIZES; i++) {
        char *end;
        long count = strtol(argv[i], &end, 10);
        if (*argv[i] == '\0' || *end != '\0' || count < 1 || count > INT_MAX / 4) {
            if (rank == 0)
                fprintf(stderr, "cuda_allreduce: not an element count: %s\n", argv[i]);
            return -1;
        }
        counts[n++] = count;
    }
    return n;
}

/* One size: returns the slowest rank's seconds per allreduce (rank 0 only), sets
 * *wrong to whether this rank saw a wrong element. */
static double run_size(long count, int iterations, float expected, float *host_buf, int *wrong)
{
    size_t bytes = (size_t)count * sizeof(float);
    float *dev_buf;
    double start, seconds, slowest = 0.0;
    long i;
    int it;

    CUDA(cudaMalloc((void **)&dev_buf, bytes));
    for (i = 0; i < count; i++)
        host_buf[i] = (float)(rank + 1);

    /* Timed on zeros, which stay zeros however often they are summed. */
    CUDA(cudaMemset(dev_buf, 0, bytes));
    CUDA(cudaDeviceSynchronize());
    MPI_Allreduce(MPI_IN_PLACE, dev_buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    start = MPI_Wtime();
    for (it = 0; it < iterations; it++)
        MPI_Allreduce(MPI_IN_PLACE, dev_buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    seconds = (MPI_Wtime() - start) / iterations;
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* Checked once, from rank+1 everywhere. */
    CUDA(cudaMemcpy(dev_buf, host_buf, bytes, cudaMemcpyHostToDevice));
    CUDA(cudaDeviceSynchronize());
    MPI_Allreduce(MPI_IN_PLACE, dev_buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CUDA(cudaMemcpy(host_buf, dev_buf, bytes, cudaMemcpyDeviceToHost));
    *wrong = 0;
    for (i = 0; i < count; i++) {
        if (host_buf[i] != expected) {
            *wrong = 1;
            break;
        }
    }
    CUDA(cudaFree(dev_buf));
    return slowest;
}

static void print_result(long count, int iterations, double seconds, int size, const int *flags)
{
    long long bytes = (long long)count * (long long)sizeof(float);
    double algbw = seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
    double busbw = size > 1 ? algbw * 2.0 * (size - 1) / size : algbw;
    int r, exact = 1, listed = 0;
    for (r = 0; r < size; r++)
        exact = exact && !flags[r];
    printf("{\"elements\": %ld, \"bytes\": %lld, \"iterations\": %d, \"seconds\": %.9g, "
           "\"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, \"exact\": %s, \"wrong_ranks\": [",
           count, bytes, iterations, seconds, algbw, busbw, exact ? "true" : "false");
    for (r = 0; r < size; r++) {
        if (flags[r])
            printf("%s%d", listed++ ? ", " : "", r);
    }
    printf("]}");
}

static void *allocate(size_t n, size_t each)
{
    void *p = calloc(n ? n : 1, each);
    if (!p) {
        fprintf(stderr, "cuda_allreduce: %s rank %d: out of memory\n", host, rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static int iterations_for(long count)
{
    long wanted = (1L << 22) / count;
    return wanted < 3 ? 3 : (wanted > 100 ? 100 : (int)wanted);
}

int main(int argc, char **argv)
{
    long counts[MAX_SIZES], largest = 0;
    int size, nsizes, ndev = 0, local_rank = 0, i, len;
    int *flags = NULL;
    double seconds[MAX_SIZES];
    char *hosts = NULL, *devices = NULL, library[MPI_MAX_LIBRARY_VERSION_STRING];
    char device[NAME_LEN];
    const char *env;
    float *host_buf, expected;
    struct cudaDeviceProp prop;
    cudaError_t count_err, set_err = cudaSuccess;

    /* The device first: mpirun sets the local rank before MPI_Init, and the MPI library
     * binds its CUDA resources to the device current at MPI_Init. Errors are reported
     * once MPI can abort the job. */
    env = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env)
        local_rank = atoi(env);
    count_err = cudaGetDeviceCount(&ndev);
    if (count_err == cudaSuccess && ndev > 0)
        set_err = cudaSetDevice(local_rank % ndev);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (gethostname(host, NAME_LEN) != 0)
        strcpy(host, "?");
    host[NAME_LEN - 1] = '\0';

    nsizes = parse_sizes(argc, argv, counts);
    if (nsizes < 0)
        MPI_Abort(MPI_COMM_WORLD, 1);

    cuda_check(count_err, "cudaGetDeviceCount(&ndev)");
    if (ndev < 1) {
        fprintf(stderr, "cuda_allreduce: %s rank %d: no CUDA device\n", host, rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    cuda_check(set_err, "cudaSetDevice(local_rank % ndev)");
    CUDA(cudaGetDeviceProperties(&prop, local_rank % ndev));
    snprintf(device, NAME_LEN, "%s", prop.name);

    if (rank == 0) {
        hosts = allocate((size_t)size, NAME_LEN);
        devices = allocate((size_t)size, NAME_LEN);
        flags = allocate((size_t)size * (size_t)nsizes, sizeof(int));
    }
    MPI_Gather(host, NAME_LEN, MPI_CHAR, hosts, NAME_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(device, NAME_LEN, MPI_CHAR, devices, NAME_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);

    for (i = 0; i < nsizes; i++)
        largest = counts[i] > largest ? counts[i] : largest;
    host_buf = allocate((size_t)largest, sizeof(float));
    expected = (float)((double)size * (size + 1) / 2);
    for (i = 0; i < nsizes; i++) {
        int wrong;
        seconds[i] = run_size(counts[i], iterations_for(counts[i]), expected, host_buf, &wrong);
        MPI_Gather(&wrong, 1, MPI_INT, rank == 0 ? flags + (size_t)i * size : NULL, 1, MPI_INT,
                   0, MPI_COMM_WORLD);
    }

    MPI_Get_library_version(library, &len);
    library[strcspn(library, "\n")] = '\0';
    if (rank == 0) {
        printf("{\"ranks\": %d, \"hosts\": ", size);
        json_strings(hosts, size);
        printf(", \"library\": ");
        json_string(library);
        printf(", \"results\": [");
        for (i = 0; i < nsizes; i++) {
            if (i)
                printf(", ");
            print_result(counts[i], iterations_for(counts[i]), seconds[i], size,
                         flags + (size_t)i * size);
        }
        printf("], \"devices\": ");
        json_strings(devices, size);
        printf("}\n");
        fflush(stdout);
    }
    free(host_buf);
    free(hosts);
    free(devices);
    free(flags);
    MPI_Finalize();
    return 0;
}
