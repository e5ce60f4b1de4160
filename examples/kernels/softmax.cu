// Row-wise numerically stable softmax: one warp per row.
extern "C" __global__ void softmax_rows(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const float* x = in + static_cast<long long>(warp) * cols;
  float* y = out + static_cast<long long>(warp) * cols;
  float m = -__int_as_float(0x7f800000);  // -inf without <cmath>
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __expf(x[c] - m);
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  const float inv = 1.f / s;
  for (int c = lane; c < cols; c += 32) y[c] = __expf(x[c] - m) * inv;
}
