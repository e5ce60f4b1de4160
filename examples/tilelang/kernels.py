"""tilelang kernels for progcache's tilelang tests and benchmark: each is
built by ``prim_func(name, params)`` and compiled by ``compile_kernel(name,
params)`` for sm_90a (no GPU is needed to compile; nvcc from the CUDA
toolkit is)."""

import tilelang
import tilelang.language as T

TARGET = {"kind": "cuda", "arch": "sm_90a"}


def vector_add(N=4096, block=256, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


def scale(N=4096, block=256, factor=2.0, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] * factor

    return main


def matmul(M=1024, N=1024, K=1024, block_M=64, block_N=64, block_K=32, dtype="float16", accum_dtype="float"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


KERNELS = {"vector_add": (vector_add, [2]), "scale": (scale, [1]), "matmul": (matmul, [2])}


def prim_func(name, params=None):
    build, _ = KERNELS[name]
    return build(**(params or {}))


def compile_kernel(name, params=None, execution_backend="tvm_ffi"):
    _, out_idx = KERNELS[name]
    return tilelang.compile(prim_func(name, params), out_idx=out_idx, target=TARGET,
                            execution_backend=execution_backend)
