// y = a*x + y, templated on the element type: the "hello world" of JIT.
template <typename T>
__global__ void saxpy(T a, const T* __restrict__ x, T* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
