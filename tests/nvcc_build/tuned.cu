// A kernel whose constant lives in a header of the project's.
#include "tuning.h"

__global__ void tuned_scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= TUNING_SCALE;
}
