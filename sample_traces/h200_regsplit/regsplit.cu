// Kernels whose register count makes the split of the register file over the SM's 4 sub-partitions change
// the resident blocks per SM (see README.md).  Each kernel is the same body capped at a different register
// count with __maxnreg__; the body keeps 128 accumulators live, so the compiler uses the whole cap (and spills
// the rest to local memory, which does not matter here: only the launch statistics are of interest).
// Grids are exact multiples of the resident slots (SMs x resident blocks, from cudaOccupancy at run time),
// plus one block, so the same capture also checks the wave count at and just past an exact multiple.
#include <cstdio>
#include <cuda_runtime.h>

#define NACC 128

#define BODY                                                                     \
    float acc[NACC];                                                             \
    int t = blockIdx.x * blockDim.x + threadIdx.x;                               \
    _Pragma("unroll") for (int j = 0; j < NACC; j++) acc[j] = in[(t + j) & 1023]; \
    for (int i = 0; i < iters; i++) {                                            \
        _Pragma("unroll") for (int j = 0; j < NACC; j++)                         \
            acc[j] = fmaf(acc[j], acc[(j + 1) % NACC], 1.0f);                    \
    }                                                                            \
    float s = 0.0f;                                                              \
    _Pragma("unroll") for (int j = 0; j < NACC; j++) s += acc[j];                \
    out[t] = s;

#define KERNEL(R) \
    extern "C" __global__ void __maxnreg__(R) regs##R(float* out, const float* in, int iters) { BODY }

KERNEL(40)
KERNEL(48)
KERNEL(64)
KERNEL(80)
KERNEL(104)

typedef void (*Kernel)(float*, const float*, int);

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e = (x);                                                              \
        if (e != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

int main() {
    struct { const char* name; Kernel k; int block; } cases[] = {
        {"regs40", regs40, 96},   // split: 16 resident blocks; one 64K file: 17
        {"regs48", regs48, 64},   // split: 20; unsplit: 21
        {"regs64", regs64, 128},  // control: 2048 registers per warp divide 16384, both 8
        {"regs80", regs80, 32},   // split: 24; unsplit: 25
        {"regs104", regs104, 64}, // split: 8; unsplit: 9
    };
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, cc %d.%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    float *out, *in;
    size_t most = 0;
    for (auto& c : cases) {
        int resident = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, c.k, c.block, 0));
        size_t n = (size_t)(2 * resident * prop.multiProcessorCount + 1) * c.block;
        if (n > most) most = n;
    }
    CHECK(cudaMalloc(&out, most * sizeof(float)));
    CHECK(cudaMalloc(&in, 1024 * sizeof(float)));
    CHECK(cudaMemset(in, 0, 1024 * sizeof(float)));
    for (auto& c : cases) {
        cudaFuncAttributes attr;
        CHECK(cudaFuncGetAttributes(&attr, c.k));
        int resident = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, c.k, c.block, 0));
        int slots = resident * prop.multiProcessorCount;
        int grids[] = {slots, 2 * slots, 2 * slots + 1};
        for (int g : grids) {
            printf("%s: %d registers/thread, block %d, cudaOccupancy resident %d, grid %d\n", c.name, attr.numRegs,
                   c.block, resident, g);
            c.k<<<g, c.block>>>(out, in, 2);
            CHECK(cudaGetLastError());
        }
    }
    CHECK(cudaDeviceSynchronize());
    return 0;
}
