// Dot product with cooperative groups: thread-block tiles of 32 reduce with
// cg::reduce, then one atomic per tile.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void dot(const float* __restrict__ a, const float* __restrict__ b, float* result, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  float acc = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += a[i] * b[i];
  const float sum = cg::reduce(tile, acc, cg::plus<float>());
  if (tile.thread_rank() == 0) atomicAdd(result, sum);
}
