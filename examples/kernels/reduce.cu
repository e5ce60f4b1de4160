// Block-wise sum reduction, templated on element type and block size, with a
// warp-shuffle final stage. One partial sum per block.
template <typename T, int BLOCK>
__global__ void reduce_sum(const T* __restrict__ in, T* __restrict__ partial, int n) {
  static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of two");
  __shared__ T smem[BLOCK];
  const int tid = threadIdx.x;
  T acc = T(0);
  for (int i = blockIdx.x * BLOCK + tid; i < n; i += gridDim.x * BLOCK) acc += in[i];
  smem[tid] = acc;
  __syncthreads();
  for (int s = BLOCK / 2; s >= 32; s >>= 1) {
    if (tid < s) smem[tid] += smem[tid + s];
    __syncthreads();
  }
  if (tid < 32) {
    T v = smem[tid];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (tid == 0) partial[blockIdx.x] = v;
  }
}
