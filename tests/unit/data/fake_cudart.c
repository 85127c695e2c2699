/* A host-memory stand-in for libcudart: enough of it for cuda_allreduce.c to run on a
 * machine without a GPU (MPI then moves host memory, which any MPI can). The test sets
 * FAKE_NDEV (GPUs seen, default 2) and FAKE_CORRUPT_RANK (that rank's copies back to
 * the host of 4 KiB or more get their last element changed). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaError_t cudaGetDeviceCount(int *count)
{
    const char *env = getenv("FAKE_NDEV");
    *count = env ? atoi(env) : 2;
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
    (void)device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake \"GPU\" %d", device);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    *ptr = malloc(size);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    const char *bad = getenv("FAKE_CORRUPT_RANK"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    memcpy(dst, src, count);
    if (kind == cudaMemcpyDeviceToHost && bad && rank && atoi(bad) == atoi(rank) && count >= 4096)
        ((float *)dst)[count / sizeof(float) - 1] += 1;
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
    return error == cudaErrorNoDevice ? "no CUDA-capable device is detected" : "fake error";
}
