// Marks functions that both the CPU reference and the CUDA kernels call, so that the two
// sides share one definition of every bit-exact rule (reduction order, grid scale).
#pragma once

#if defined(__CUDACC__)
#define FOLD_HD __host__ __device__ __forceinline__
#else
#define FOLD_HD inline
#endif
