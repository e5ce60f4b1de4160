"""Five Triton kernels of the kinds real models run, and how to compile each
for a named target without a GPU (the ptxas inside Triton's wheel does the
last step). The tests and the benchmark of progcache.triton compile these.

    compile_kernel("softmax")                       # sm_90 by default
    compile_kernel("matmul", constexprs={"BLOCK_M": 128})
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def layer_norm(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, o_ptr, stride_qm, stride_kn, stride_vn, stride_om, n_ctx, scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr):
    # One block of queries against every key block, with the online softmax
    # of flash attention (forward only, one head).
    start_m = tl.program_id(0)
    rm = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, HEAD)
    q = tl.load(q_ptr + rm[:, None] * stride_qm + rd[None, :])
    m_i = tl.zeros((BLOCK_M, ), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M, ), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD), dtype=tl.float32)
    for start_n in range(0, n_ctx, BLOCK_N):
        rn = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + rn[None, :] * stride_kn + rd[:, None])
        qk = tl.dot(q, k) * scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + rn[:, None] * stride_vn + rd[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    tl.store(o_ptr + rm[:, None] * stride_om + rd[None, :], (acc / l_i[:, None]).to(tl.float16))


# name -> (function, signature, default constexprs)
KERNELS = {
    "vector_add": (vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "softmax": (softmax, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32",
                          "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
    "matmul": (matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                        "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32",
                        "stride_cm": "i32", "stride_cn": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                        "BLOCK_K": "constexpr"}, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "layer_norm": (layer_norm, {"x_ptr": "*fp32", "y_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32",
                                "stride": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"},
                   {"BLOCK": 1024}),
    "attention": (attention, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp32",
                              "stride_qm": "i32", "stride_kn": "i32", "stride_vn": "i32", "stride_om": "i32",
                              "n_ctx": "i32", "scale": "fp32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                              "HEAD": "constexpr"}, {"BLOCK_M": 64, "BLOCK_N": 64, "HEAD": 64}),
}

TARGET = GPUTarget("cuda", 90, 32)


def compile_kernel(name: str, constexprs: dict | None = None, target: GPUTarget = TARGET):
    """triton.compile of one kernel of KERNELS for `target`; returns Triton's
    CompiledKernel (through whatever cache manager Triton is configured with)."""
    fn, signature, defaults = KERNELS[name]
    return triton.compile(ASTSource(fn, signature, {**defaults, **(constexprs or {})}), target=target)
