// 1-D stencil of radius R with a shared-memory halo; R is a macro (-DRADIUS=).
#ifndef RADIUS
#define RADIUS 3
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
extern "C" __global__ void stencil1d(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tmp[BLOCK + 2 * RADIUS];
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const int l = threadIdx.x + RADIUS;
  tmp[l] = g < n ? in[g] : 0.f;
  if (threadIdx.x < RADIUS) {
    tmp[l - RADIUS] = g >= RADIUS ? in[g - RADIUS] : 0.f;
    tmp[l + BLOCK] = g + BLOCK < n ? in[g + BLOCK] : 0.f;
  }
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int o = -RADIUS; o <= RADIUS; ++o) s += tmp[l + o];
  if (g < n) out[g] = s / (2 * RADIUS + 1);
}
