// Half of an LTO-IR pair: a device function defined in its own module.
// Linked with lto_kernel.cu by nvJitLink, which inlines it across modules.
extern "C" __device__ float smooth_relu(float x) { return x > 0.f ? x + 0.5f * __expf(-x) : 0.5f * __expf(x); }
