// The non-finite test behind the executor's finite check (Note [finite check] in
// runtime/executor.h): a flag set when any float is NaN or an infinity.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace remat {
namespace {

// Each block ORs its threads' findings and one thread stores the flag: no atomics needed, as
// every store writes the same value.
__global__ void flag_nonfinite_kernel(const float* x, int64_t n, unsigned int* flag) {
  int bad = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    bad |= !isfinite(x[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

}  // namespace

void flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream) {
  if (n <= 0) return;
  flag_nonfinite_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, n, flag);
  REMAT_CUDA_LAUNCH_CHECK();
}

}  // namespace remat
