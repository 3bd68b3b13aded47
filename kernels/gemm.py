"""C = epilogue(A @ B) on Hopper through tkpy's LCF block template: the kernel is just load, compute, finish.

Each task is a 128 x BN tile of C (BN = 256, or 128 when that fills more SMs): two consumer
warpgroups each own 64 rows and accumulate in fp32 registers with wgmma, while a producer warpgroup
streams 64-wide K slices of A and B with TMA through a ring of stages. Blocks are persistent (one per
SM) and walk the tiles in L2-friendly groups.

`matmul(a, b)` takes bf16 or fp16 inputs, B as a (K, N) row-major tensor or as `w.T` of an (N, K)
one (the nn.Linear weight layout; the kernel then multiplies by B^T tiles), writes bf16, fp16 or fp32,
and fuses `act(scale * A @ B + bias)`. Any M, N, K: TMA zero-fills the parts of boxes past the
tensors, so K tails add zeros and edge tiles compute on zeros, and the stores skip what lies past
C's last row or column. One kernel per (dtype, out dtype, B layout, epilogue, BN) is generated and
cached (`matmul_template`).

`matmul(..., cluster=2)` runs the plain bf16 product in clusters of two blocks that take vertically
adjacent tiles and share B: each loads half of B's slice and multicasts it to both, halving B's L2
traffic. On the H200 it measured slower than the plain version (see benchmarks/RESULTS.md), so it is
not the default.
"""
from __future__ import annotations

import functools
import math

import torch

import tkpy as tk
from tkpy import bf16, f32, fp16
from tkpy.interpret.launch import interpret_requested
from tkpy.templates import shared

BM, BN, BK = 128, 256, 64
HALF = BN // 2
ALIGN = 16            # bytes: TMA (and tkpy's gl) want 16-byte aligned pointers and row strides

DTYPES = {torch.bfloat16: bf16, torch.float16: fp16, torch.float32: f32}
GELU_C = math.sqrt(2 / math.pi)
# Activations as elementwise functions of the fp32 accumulator (tk.map traces them into one C++ lambda).
# GELU is the tanh approximation (torch's gelu(approximate="tanh")), written with one exp:
# 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y)), -2y = x (-2 sqrt(2/pi) 0.044715 x^2 - 2 sqrt(2/pi)).
ACTIVATIONS = {
    "relu": lambda x: tk.relu(x),
    "silu": lambda x: x / (1.0 + tk.exp(-x)),
    "gelu": lambda x: x / (1.0 + tk.exp(x * (x * x * (-2 * GELU_C * 0.044715) - 2 * GELU_C))),
}


def cdiv(a, b):
    return (a + b - 1) // b


@functools.cache
def matmul_template(dtype=bf16, out=bf16, b_transposed: bool = False, bias=None, scale: bool = False,
                    activation: str | None = None, bn: int = BN):
    """The LCF GEMM for one combination: `dtype` of A and B (bf16/fp16), `out` dtype of C, B given as
    (N, K) tiles when `b_transposed`, the `bias` vector's dtype (None: no bias), a runtime `scale`, an
    `activation` from ACTIVATIONS, and the tile width `bn` (256 or 128)."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {activation!r}")
    plain = (dtype, out, b_transposed, bias, scale, activation, bn) == (bf16, bf16, False, None, False, None, BN)
    tags = [dtype.name, out.name, "nt" if b_transposed else "nn", bias is not None and f"bias_{bias.name}",
            scale and "scale", activation, f"n{bn}"]
    name = "matmul" if plain else "matmul_" + "_".join(t for t in tags if t)

    @tk.lcf(consumer_warpgroups=2, stages=4 if bn == 256 else 6, persistent=True, name=name)
    class Matmul:
        A: tk.gl[dtype, "M", "K"]
        B: tk.gl[dtype, "N", "K"] if b_transposed else tk.gl[dtype, "K", "N"]
        C: tk.gl[out, "M", "N"]
        if bias is not None:
            Bias: tk.gl[bias, "N"]
        if scale:
            alpha: float
        inputs = dict(a=shared(dtype, BM // 2, BK, count=2),
                      b=shared(dtype, bn, BK) if b_transposed else shared(dtype, BK, bn))

        def tasks(self, g):
            return cdiv(g.C.rows, BM), cdiv(g.C.cols, bn)

        def iters(self, g):
            return cdiv(g.A.cols, BK)

        def load(self, g, task, inp, k, arrived):
            tk.tma.expect(arrived, inp)
            for i in range(2):
                tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
            tk.tma.load_async(inp.b, g.B, (task.col, k) if b_transposed else (k, task.col), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, bn)
            if bias is not None:
                st.bias = tk.row_vec(st.acc)

        def start(self, st, task):
            tk.zero(st.acc)

        def compute(self, st, inp, k):
            mma = tk.warpgroup.mma_ABt if b_transposed else tk.warpgroup.mma_AB
            mma(st.acc, inp.a[tk.warpgroup.id()], inp.b)

        def finish(self, g, st, task):
            if bias is not None:             # loaded first: its latency overlaps the scaling
                tk.load(st.bias, g.Bias, (0, task.col), masked=True)
            if scale:
                tk.mul(st.acc, st.acc, g.alpha)
            if bias is not None:
                tk.add_col(st.acc, st.acc, st.bias)
            if activation:
                tk.map(st.acc, ACTIVATIONS[activation], st.acc)
            tk.warpgroup.store(g.C, st.acc, (task.row * 2 + tk.warpgroup.id(), task.col), masked=True)

    return Matmul


Matmul = matmul_template()           # the plain bf16 GEMM (kernel name "matmul")


def _tasks(self, g):
    return cdiv(g.C.rows, BM), cdiv(g.C.cols, BN)


def _iters(self, g):
    return cdiv(g.A.cols, BK)


@tk.lcf(consumer_warpgroups=2, stages=4, persistent=True, cluster=2, name="matmul_cluster2")
class MatmulCluster2:
    """Clusters of two blocks on vertically adjacent tiles; B's slice is split in halves, each block
    loads one and multicasts it to both."""

    A: tk.gl[bf16, "M", "K"]
    B: tk.gl[bf16, "K", "N"]
    C: tk.gl[bf16, "M", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, HALF, count=2))

    tasks, iters = _tasks, _iters

    def load(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
        tk.tma.load_async(inp.b[task.rank], g.B, (k, task.col * 2 + task.rank), arrived, multicast=0b11)

    def setup(self, st):
        st.acc_left = tk.rt(f32, 16, HALF)
        st.acc_right = tk.rt(f32, 16, HALF)

    def start(self, st, task):
        tk.zero(st.acc_left)
        tk.zero(st.acc_right)

    def compute(self, st, inp, k):
        a = inp.a[tk.warpgroup.id()]
        tk.warpgroup.mma_AB(st.acc_left, a, inp.b[0])
        tk.warpgroup.mma_AB(st.acc_right, a, inp.b[1])

    def finish(self, g, st, task):
        row = task.row * 2 + tk.warpgroup.id()
        tk.warpgroup.store(g.C, st.acc_left, (row, task.col * 2), masked=True)
        tk.warpgroup.store(g.C, st.acc_right, (row, task.col * 2 + 1), masked=True)


# -- the torch-facing function ----------------------------------------------------------------------------

def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *, bias: torch.Tensor | None = None,
           activation: str | None = None, scale: float | None = None, out_dtype: torch.dtype | None = None,
           cluster: int = 1, block_n: int | None = None) -> torch.Tensor:
    """`activation(scale * (a @ b) + bias)` with fp32 accumulation, written to `out` (or a new tensor).

    a: (M, K), b: (K, N), both bf16 or both fp16. b may be row-major, or the transpose of a row-major
    (N, K) tensor (`w.T`, strides (1, K)): that layout is read as is. Other layouts are copied first.
    bias: (N,) added to every row (any float dtype; bf16/fp16/fp32 are read as is). activation: None,
    "relu", "silu" or "gelu" (the tanh approximation, torch's gelu(approximate="tanh")). scale: a number.
    Output dtype: `out_dtype`, else out's, else the inputs'; bf16, fp16 or fp32.

    Any M, N, K. TMA needs 16-byte aligned base pointers and row strides (K, or N for a row-major b, a
    multiple of 8 elements): an operand that is not is first copied into a padded buffer (one extra
    read and write of it), and so is C (computed into a padded buffer, then copied into place).
    `cluster=2`: the 2-block multicast variant (plain bf16 only; M must span an even number of 128-row
    tiles). `block_n`: force the tile width (256 or 128; default: 128 when 256-wide tiles would leave
    more than half of the SMs idle)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expects a (M, K) @ b (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise ValueError(f"expects a and b both bf16 or both fp16; got {a.dtype} and {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"a is on {a.device}, b on {b.device}")
    (m, k), n = a.shape, b.shape[1]
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else a.dtype
    if out_dtype not in DTYPES:
        raise ValueError(f"the output must be bf16, fp16 or fp32; got {out_dtype}")
    if out is not None:
        if out.shape != (m, n) or out.dtype != out_dtype or out.device != a.device:
            raise ValueError(f"out must be a ({m}, {n}) {out_dtype} tensor on {a.device}; got "
                             f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {activation!r}")
    if bias is not None:
        if bias.shape != (n,) or not bias.is_floating_point() or bias.device != a.device:
            raise ValueError(f"bias must be a ({n},) float tensor on {a.device}; got {tuple(bias.shape)} "
                             f"{bias.dtype} on {bias.device}")
        bias = bias if bias.dtype in DTYPES else bias.float()
        bias = _aligned(bias.contiguous())
    if scale is not None:
        scale = float(scale)
    result = out if out is not None else torch.empty(m, n, dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return result
    if k == 0:                       # no K steps: the epilogue of a zero product
        return result.copy_(_epilogue(torch.zeros(m, n, device=a.device), bias, activation, scale))

    b_transposed = b.stride(0) == 1 and b.stride(1) != 1 and n > 1     # b = w.T of a row-major (N, K) w
    if cluster == 2:
        plain = a.dtype == out_dtype == torch.bfloat16 and not b_transposed
        if not plain or bias is not None or activation is not None or scale is not None:
            raise ValueError("cluster=2 is the plain bf16 (M, K) @ (K, N) -> bf16 product only")
    elif cluster != 1:
        raise ValueError(f"cluster must be 1 or 2, got {cluster}")
    if block_n not in (None, 128, 256):
        raise ValueError(f"block_n must be 128 or 256, got {block_n}")
    a_, b_ = _tma_ready(a), _tma_ready(b.T if b_transposed else b)
    c = result if _tma_ready(result, copy=False) is not None else _padded_like(result)
    args = (a_, b_, c) + (() if bias is None else (bias,)) + (() if scale is None else (scale,))
    key = (m, n, k, a.dtype, out_dtype, b_transposed, bias is None or bias.dtype, scale is None, activation,
           block_n, cluster, a.device, interpret_requested())
    plan = _PLANS.get(key)
    if plan is None:                 # the kernel and its grid, once per shape and combination
        if cluster == 2:
            template = MatmulCluster2
        else:
            template = matmul_template(DTYPES[a.dtype], DTYPES[out_dtype], b_transposed,
                                       None if bias is None else DTYPES[bias.dtype], scale is not None, activation,
                                       block_n or _block_n(m, n, a))
        plan = _PLANS[key] = template.kernel, template.grid(*args)
    kernel, grid = plan
    kernel[grid](*args)
    if c is not result:
        result.copy_(c)
    return result


_PLANS: dict = {}


def _epilogue(acc: torch.Tensor, bias, activation, scale) -> torch.Tensor:
    """The epilogue in torch on an fp32 product (for K = 0, and the tests' reference)."""
    if scale is not None:
        acc = acc * scale
    if bias is not None:
        acc = acc + bias.to(acc.dtype)
    if activation == "gelu":
        return torch.nn.functional.gelu(acc, approximate="tanh")
    if activation == "silu":
        return torch.nn.functional.silu(acc)
    if activation == "relu":
        return torch.relu(acc)
    return acc


def _block_n(m: int, n: int, a: torch.Tensor) -> int:
    """256-wide tiles, unless 128-wide ones keep clearly more SMs busy (small M or N)."""
    from tkpy.templates.lcf import _multiprocessors
    sms = _multiprocessors(a)

    def busy(bn):                    # fraction of the SMs' slots over all waves that hold a task
        tasks = cdiv(m, BM) * cdiv(n, bn)
        return tasks / (cdiv(tasks, sms) * sms)
    return 128 if busy(128) * 0.9 > busy(256) else 256


def _tma_ready(x: torch.Tensor, copy: bool = True):
    """x if TMA can read it in place (unit column stride, 16-byte aligned pointer and row stride), else
    (copy=True) a view of a padded copy whose rows are 16-byte aligned, or (copy=False) None."""
    size = x.element_size()
    if x.stride(-1) == 1 and x.data_ptr() % ALIGN == 0 and x.stride(0) * size % ALIGN == 0:
        return x
    if not copy:
        return None
    padded = _padded_like(x)
    padded.copy_(x)
    return padded


def _padded_like(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of x's shape and dtype whose rows start 16 bytes apart (a view)."""
    rows, cols = x.shape
    per = ALIGN // x.element_size()
    return torch.empty(rows, cdiv(cols, per) * per, dtype=x.dtype, device=x.device)[:, :cols]


def _aligned(v: torch.Tensor) -> torch.Tensor:
    """A contiguous vector at a 16-byte aligned address (a copy if it is not)."""
    return v if v.data_ptr() % ALIGN == 0 else v.clone()
