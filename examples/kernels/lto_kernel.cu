// The other half of the LTO-IR pair: calls a device function from another module.
extern "C" __device__ float smooth_relu(float x);

extern "C" __global__ void activate(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = smooth_relu(in[i]);
}
