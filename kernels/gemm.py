"""C = epilogue(A @ B) on Hopper through tkpy's block templates: the kernel is load, compute, finish, store.

Each task is a 128 x BN tile of C (BN = 256, or 128 or 64 when that keeps clearly more SMs busy, as
for small products or few rows): two consumer warpgroups each own 64 rows and accumulate in fp32
registers with wgmma, while a producer warpgroup streams 64-wide K slices of A and B with TMA through a
ring of stages. Blocks are persistent (one per SM) and walk the tiles in L2-friendly groups. The
epilogue goes through shared memory (the LCSF template): the consumers apply scale, bias and activation
in registers, copy the tile to a ring of two output stages in 128-byte-wide column pieces (stmatrix)
and go on with the next tile while a storer warp TMA-stores the pieces, so the stores overlap the next
tile's main loop. (The LCF variant, masked stores straight from the registers, is kept as
`epilogue="registers"` for comparison.)

`matmul(a, b)` takes bf16 or fp16 inputs, B as a (K, N) row-major tensor or as `w.T` of an (N, K)
one (the nn.Linear weight layout; the kernel then multiplies by B^T tiles), writes bf16, fp16 or fp32,
and fuses `act(scale * A @ B + bias)`. Any M, N, K: TMA zero-fills the parts of boxes past the
tensors, so K tails add zeros and edge tiles compute on zeros, and TMA stores clip what lies past
C's last row or column. One kernel per (dtype, out dtype, B layout, epilogue, BN) is generated and
cached (`matmul_template`). The tile width follows the SMs (`_block_n`): e.g. 1024 x 1024 x 1024 has 32
tiles of 128 x 256 for an H200's 132 SMs but 128 of 128 x 64, so it runs in 64-wide tiles.

Products with few output tiles next to the SMs (e.g. M = 128 against a 4096 x 8192 weight) may split
each tile's K steps over several tasks whose fp32 partial sums a second kernel adds up before the
epilogue (kernels/gemm_splitk.py; deterministic by default).

Clusters that share A (`matmul_template(cluster=2)`, `matmul(cluster=2)`): two blocks on horizontally
adjacent tiles (the same 128 rows of A, consecutive column tiles; the template's cluster_along="cols")
run their tasks in lockstep; block rank r loads the r-th 64-row half of A's K slice and multicasts it
into both blocks' stage, and each loads its own B slice. Each block still receives a whole stage (its
`expect` counts all of it), and a stage is released to both blocks, since either may refill it. A block
then reads half as much of A from L2: with 64-wide tiles a step's L2 traffic drops from 24 KB to 16 KB a
block, which is what bounds small products (e.g. 128 x 8192 x 8192 reads 384 MB from L2 unclustered,
256 MB clustered). `matmul` uses it by itself where the column tile count is even and the tile width is
in CLUSTER_A_WIDTHS (`_cluster`), like cuBLAS's 128 x 64 1x2-cluster kernels for those shapes.
(`MatmulCluster2`, clusters on vertically adjacent tiles that multicast halves of B, measured slower
than unclustered tiles on the H200, see benchmarks/RESULTS.md; it stays as the template's row-cluster
example and test.)
"""
from __future__ import annotations

import functools
import math

import torch

import tkpy as tk
from .op_support import check_device, refuse_overlap
from .tensor_layout import ALIGN, cdiv, padded_copy, padded_like, tma_layout
from tkpy import bf16, f32, fp16
from tkpy.templates import multiprocessors, shared

BM, BN, BK = 128, 256, 64
HALF = BN // 2

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


WIDTHS = (256, 128, 64)             # the tile widths BN, widest first
# TFLOP/s of each width with every SM busy (4096^3 bf16 on the H200, benchmarks/RESULTS.md run 21): the
# per-tile cost model of _block_n.
TILE_RATE = {256: 662, 128: 579, 64: 475}
# Input stages per tile width, as many as fit beside the 32 KB of two output stages in the 227 KB of shared
# memory (a stage holds A's 128 x 64 slice, 16 KB, and B's 64 x BN one): 4 x 48 KB, 6 x 32 KB, 8 x 24 KB
# (8 is also the template's most).
STAGES = {256: 4, 128: 6, 64: 8}
# Tile widths at which matmul shares A in clusters of two column-adjacent blocks by itself, when the
# column tile count is even (`_cluster`); () never. Off: on the H200 (RESULTS.md run 27) sharing A was
# slower at every shape tried, e.g. 1024^3 279 vs 348 TFLOP/s and 128 x 8192 x 8192 nt 350 vs 393 with
# 64-wide tiles; 128-wide ones likewise. matmul(cluster=2) still asks for it.
CLUSTER_A_WIDTHS = ()
CLUSTERS = (1, 2)                   # matmul_template's cluster: 1, or 2 blocks sharing A
EPILOGUES = ("tma", "registers")
SPLITS = (None, "ordered", "atomic")


def _load_bias(g, bias_vec, col) -> None:
    """The bias values of the columns at `col`, in units of the vector's length (none past N)."""
    tk.load(bias_vec, g.Bias, (0, col), masked=True)


def _apply_epilogue(g, acc, bias_vec, scale: bool, activation) -> None:
    """act(scale * acc + bias) on a warp's accumulator (or a column piece of it), in place; `bias_vec`
    (None: no bias) holds the bias of its columns."""
    if scale:
        tk.mul(acc, acc, g.alpha)
    if bias_vec is not None:
        tk.add_col(acc, acc, bias_vec)
    if activation:
        tk.map(acc, ACTIVATIONS[activation], acc)


@functools.cache
def matmul_template(dtype=bf16, out=bf16, b_transposed: bool = False, bias=None, scale: bool = False,
                    activation: str | None = None, bn: int = BN, epilogue: str = "tma", split: str | None = None,
                    stages: int | None = None, output_stages: int = 2, cluster: int = 1):
    """The GEMM kernel for one combination: `dtype` of A and B (bf16/fp16), `out` dtype of C, B given as
    (N, K) tiles when `b_transposed`, the `bias` vector's dtype (None: no bias), a runtime `scale`, an
    `activation` from ACTIVATIONS, the tile width `bn` (one of WIDTHS: 256, 128 or 64), and
    - epilogue "tma" (the LCSF template: the consumers copy their accumulators to shared output stages in
      128-byte-wide column pieces and go on with the next tile while a storer warp TMA-stores them; TMA
      clips the edge tiles) or "registers" (the LCF template: masked stores straight from the registers);
    - split None, or split-K ("ordered" / "atomic"): C is then an fp32 workspace of partial sums, (S, M, N)
      with split s at depth s ("ordered") or (1, M, N) zero-filled and added into by TMA ("atomic"); a
      runtime `splits` says how many tasks share each tile's K steps (schedule.SplitK), and the epilogue is
      left to `splitk_reduce_kernel`;
    - stages: input stages (default STAGES[bn]); output_stages: pieces of C in shared memory at a time (the
      TMA epilogue; e.g. 3 input and 4 output stages hold a whole 128 x 256 bf16 tile);
    - cluster 1, or 2: clusters of two blocks on horizontally adjacent tiles that share A (the template's
      cluster_along="cols"): block rank r loads A's r-th 64-row half and multicasts it to both; each loads
      its own B. The column tile count, cdiv(N, bn), must then be even (an ArgumentError otherwise)."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {activation!r}")
    if epilogue not in EPILOGUES or split not in SPLITS:
        raise ValueError(f"epilogue must be one of {EPILOGUES} and split one of {SPLITS}; got {epilogue!r}, {split!r}")
    if bn not in WIDTHS:
        raise ValueError(f"bn must be one of {WIDTHS}, got {bn!r}")
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster!r}")
    if split and (out != f32 or bias is not None or scale or activation or epilogue != "tma"):
        raise ValueError("a split-K kernel writes fp32 partial sums through TMA; the epilogue comes after the reduction")
    stages = stages or STAGES[bn]
    plain = (dtype, out, b_transposed, bias, scale, activation, bn, epilogue, split, stages, output_stages,
             cluster) == (bf16, bf16, False, None, False, None, BN, "tma", None, STAGES[BN], 2, 1)
    tags = [dtype.name, out.name, "nt" if b_transposed else "nn", bias is not None and f"bias_{bias.name}",
            scale and "scale", activation, f"n{bn}", epilogue == "registers" and "regstore", split and f"splitk_{split}",
            stages != STAGES[bn] and f"{stages}stages", output_stages != 2 and f"{output_stages}out",
            cluster > 1 and f"cluster{cluster}a"]
    name = "matmul" if plain else "matmul_" + "_".join(t for t in tags if t)
    # Columns of C per output piece: one 128-byte swizzle panel (64 of bf16/fp16, 32 of fp32), or the whole
    # tile if narrower; a 64-wide tile is one piece in bf16/fp16, two in fp32.
    piece_cols = min(128 // out.nbytes, bn)
    pieces = bn // piece_cols
    clustering = dict(cluster=cluster, cluster_along="cols") if cluster > 1 else {}

    class Product:
        """What both epilogues share: the tiles, the TMA loads and the wgmma main loop."""

        A: tk.gl[dtype, "M", "K"]
        B: tk.gl[dtype, "N", "K"] if b_transposed else tk.gl[dtype, "K", "N"]
        if split:
            C: tk.gl[f32, "S", "M", "N"]
            splits: int
        else:
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
            k = task.k0 + k                  # the K step (a split-K task starts at its share's first)
            tk.tma.expect(arrived, inp)          # the whole stage, A's halves from the cluster included
            if cluster > 1:                      # half `rank` of A, to both blocks of the cluster
                tk.tma.load_async(inp.a[task.rank], g.A, (task.row * 2 + task.rank, k), arrived, multicast=0b11)
            else:
                for i in range(2):
                    tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
            tk.tma.load_async(inp.b, g.B, (task.col, k) if b_transposed else (k, task.col), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, bn)
            if bias is not None:             # the bias of the columns the epilogue works on at a time
                st.bias = tk.rv(f32, bn if epilogue == "registers" else piece_cols, "align")

        def start(self, st, task):
            tk.zero(st.acc)

        def compute(self, st, inp, k):
            mma = tk.warpgroup.mma_ABt if b_transposed else tk.warpgroup.mma_AB
            mma(st.acc, inp.a[tk.warpgroup.id()], inp.b)

    if epilogue == "registers":
        @tk.lcf(consumer_warpgroups=2, stages=stages, persistent=True, name=name, **clustering)
        class Matmul(Product):
            def finish(self, g, st, task):
                if bias is not None:         # loaded first: its latency overlaps the scaling
                    _load_bias(g, st.bias, task.col)
                _apply_epilogue(g, st.acc, getattr(st, "bias", None), scale, activation)
                tk.warpgroup.store(g.C, st.acc, (task.row * 2 + tk.warpgroup.id(), task.col), masked=True)
        return Matmul

    @tk.lcsf(consumer_warpgroups=2, stages=stages, output_stages=output_stages, persistent=True, name=name,
             scheduler=tk.templates.SplitK(lambda g: g.splits) if split else None, **clustering)
    class Matmul(Product):
        outputs = dict(c=shared(out, BM // 2, piece_cols, count=2))    # a piece of each consumer's 64 rows
        output_pieces = pieces

        def finish(self, g, st, task, stage, piece):
            """The epilogue piece by piece, so that only one piece's bias values are live next to the
            accumulator; the next piece's are loaded as soon as this piece's are used."""
            acc = st.acc[:, piece * piece_cols:(piece + 1) * piece_cols]
            if bias is not None and piece == 0:
                _load_bias(g, st.bias, task.col * pieces)
            _apply_epilogue(g, acc, getattr(st, "bias", None), scale, activation)
            tk.warpgroup.store(stage.c[tk.warpgroup.id()], acc)
            if bias is not None and piece + 1 < pieces:
                _load_bias(g, st.bias, task.col * pieces + piece + 1)

        def store(self, g, task, stage, piece):
            col = task.col * pieces + piece
            for i in range(2):
                if split == "ordered":
                    tk.tma.store_async(g.C, stage.c[i], (task.split, task.row * 2 + i, col))
                elif split == "atomic":
                    tk.tma.store_add_async(g.C, stage.c[i], (0, task.row * 2 + i, col))
                else:
                    tk.tma.store_async(g.C, stage.c[i], (task.row * 2 + i, col))
    return Matmul


Matmul = matmul_template()           # the plain bf16 GEMM (kernel name "matmul")


def _tasks(self, g):
    return cdiv(g.C.rows, BM), cdiv(g.C.cols, BN)


def _iters(self, g):
    return cdiv(g.A.cols, BK)


@tk.lcf(consumer_warpgroups=2, stages=4, persistent=True, cluster=2, name="matmul_cluster2")
class MatmulCluster2:
    """Clusters of two blocks on vertically adjacent tiles; B's slice is split in halves, each block
    loads one and multicasts it to both. (Slower than unclustered tiles on the H200; matmul does not use
    it: its clusters share A, matmul_template(cluster=2).)"""

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


# -- the launch (the torch operator is kernels/matmul_op.py) --------------------------------------------------

def checked(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
            out_dtype: torch.dtype | None, out: torch.Tensor | None = None, cluster: int | None = None,
            block_n: int | None = None, split_k: int | None = None, scale: float | None = None) -> torch.dtype:
    """The output dtype of matmul on these arguments, or a ValueError naming what it cannot take. Reads only
    shapes, dtypes and devices: the operator's fake implementation checks with it too."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul expects a (M, K) @ b (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise ValueError(f"matmul expects a and b both bf16 or both fp16; got {a.dtype} and {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"matmul: a is on {a.device}, b on {b.device}")
    (m, _), n = a.shape, b.shape[1]
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else a.dtype
    if out_dtype not in DTYPES:
        raise ValueError(f"matmul's output must be bf16, fp16 or fp32; got {out_dtype}")
    if out is not None and (out.shape != (m, n) or out.dtype != out_dtype or out.device != a.device):
        raise ValueError(f"out must be a ({m}, {n}) {out_dtype} tensor on {a.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {activation!r}")
    if bias is not None and (bias.shape != (n,) or not bias.is_floating_point() or bias.device != a.device):
        raise ValueError(f"bias must be a ({n},) float tensor on {a.device}; got {tuple(bias.shape)} "
                         f"{bias.dtype} on {bias.device}")
    if cluster is not None and (type(cluster) is not int or cluster not in CLUSTERS):
        raise ValueError(f"cluster must be None, 1 or 2, got {cluster!r}")
    if block_n is not None and block_n not in WIDTHS:
        raise ValueError(f"block_n must be 256, 128 or 64, got {block_n}")
    if split_k is not None and not (type(split_k) is int and split_k >= 1):
        raise ValueError(f"split_k must be None or a positive int, got {split_k!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    if cluster == 2 and split_k not in (None, 1):
        raise ValueError("cluster=2 does not split K")
    check_device("matmul", a)
    return out_dtype


def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, bias: torch.Tensor | None = None,
        activation: str | None = None, scale: float | None = None, out_dtype: torch.dtype | None = None,
        cluster: int | None = None, block_n: int | None = None, split_k: int | None = None,
        deterministic: bool = True) -> torch.Tensor:
    """matmul's launch (tkpy.kernels.matmul documents the arguments): the kernel(s) for this shape, written into
    `out` or a new tensor, which it returns. What depends only on the arguments' shapes, strides, dtypes and
    options (the checks, the layout, the kernels and their grid) is decided once per such signature (_CALLS);
    a call then only checks its pointers, allocates and launches."""
    signature = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.device,
                 bias is None or (bias.shape, bias.stride(), bias.dtype, bias.device),
                 out is None or (out.shape, out.stride(), out.dtype, out.device), activation, type(scale),
                 out_dtype, cluster, block_n, split_k, deterministic, tk.interpret_requested())
    call = _CALLS.get(signature)
    if call is None:
        call = _CALLS[signature] = _Call(a, b, out, bias, activation, scale, out_dtype, cluster, block_n, split_k,
                                         deterministic)
    return call(a, b, out, bias, scale)


_CALLS: dict = {}


class _Call:
    """run for one signature of arguments: the checks passed, the layout known, the kernels (`launch`) made on the
    first call, as _plan reads tensors."""

    def __init__(self, a, b, out, bias, activation, scale, out_dtype, cluster, block_n, split_k, deterministic):
        self.out_dtype = checked(a, b, bias, activation, out_dtype, out, cluster, block_n, split_k, scale)
        (self.m, self.k), self.n, self.device = a.shape, b.shape[1], a.device
        self.b_transposed = b.stride(0) == 1 and b.stride(1) != 1 and self.n > 1   # b = w.T of a row-major w
        self.bias_ready = bias is None or (bias.dtype in DTYPES and bias.stride(0) == 1)
        operand_b = b.T if self.b_transposed else b
        self.strides_ready = (tma_layout(a), tma_layout(operand_b),   # (a new output is contiguous)
                              tma_layout(out) if out is not None else self.n * self.out_dtype.itemsize % ALIGN == 0)
        self.options = (activation, cluster, block_n, split_k, deterministic)
        self.launch = None

    def __call__(self, a, b, out, bias, scale):
        m, n, k = self.m, self.n, self.k
        activation = self.options[0]
        if out is not None:
            refuse_overlap("matmul", out, a=a, b=b, bias=bias)
        if bias is not None and not (self.bias_ready and bias.data_ptr() % ALIGN == 0):
            bias = _aligned((bias if bias.dtype in DTYPES else bias.float()).contiguous())
        if scale is not None:
            scale = float(scale)
        result = out if out is not None else torch.empty(m, n, dtype=self.out_dtype, device=self.device)
        if m == 0 or n == 0:
            return result
        if k == 0:                   # no K steps: the epilogue of a zero product
            return result.copy_(_epilogue(torch.zeros(m, n, device=self.device), bias, activation, scale))
        a_ready, b_ready, c_ready = self.strides_ready
        b = b.T if self.b_transposed else b
        a_ = a if a_ready and a.data_ptr() % ALIGN == 0 else padded_copy(a)
        b_ = b if b_ready and b.data_ptr() % ALIGN == 0 else padded_copy(b)
        c = result if c_ready and result.data_ptr() % ALIGN == 0 else padded_like(result)
        extras = (() if bias is None else (bias,)) + (() if scale is None else (scale,))
        if self.launch is None:
            self.launch = _plan(a_, b_, c, extras, self.out_dtype, self.b_transposed, bias, scale, *self.options)
        self.launch(a_, b_, c, extras)
        if c is not result:
            result.copy_(c)
        return result


def _plan(a, b, c, extras, out_dtype, b_transposed, bias, scale, activation, cluster, block_n, split_k,
          deterministic):
    """How to run one shape and combination: a callable (a, b, c, extras) launching the kernel(s)."""
    from . import gemm_splitk          # it imports this module

    (m, k), n = a.shape, c.shape[1]
    dtype, out, bias_dtype = DTYPES[a.dtype], DTYPES[out_dtype], None if bias is None else DTYPES[bias.dtype]
    sms = multiprocessors(a)
    bn, splits = block_n or _block_n(m, n, a), 1
    if split_k is None:
        if cluster != 2:             # (clusters do not split K)
            bn, splits = gemm_splitk.plan(m, n, k, sms, bn, block_n_forced=block_n is not None)
    elif split_k > 1:
        bn, splits = block_n or BN, split_k
    if splits > 1:
        return gemm_splitk.split_plan(dtype, out, b_transposed, bias_dtype, scale is not None, activation, bn,
                                      splits, deterministic, m, n)
    blocks = _cluster(bn, n) if cluster is None else cluster
    if blocks > 1 and cdiv(n, bn) % blocks:
        raise ValueError(f"cluster={blocks} pairs adjacent column tiles: N = {n} makes {cdiv(n, bn)} tiles of {bn} "
                         "columns, an odd number")
    clustering = dict(cluster=blocks) if blocks > 1 else {}     # (the unclustered kernels' cache key as it was)
    template = matmul_template(dtype, out, b_transposed, bias_dtype, scale is not None, activation, bn, **clustering)
    return _direct(template, (a, b, c) + extras)


def _direct(template, args):
    """One launch of `template`'s kernel on its grid for these shapes (`.template` says which)."""
    kernel, grid = template.kernel, template.grid(*args)

    def run(a, b, c, extras):
        kernel[grid](a, b, c, *extras)
    run.template = template
    return run


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
    """The tile width with the least modelled time: waves of tasks over the SMs, times one tile's work
    (proportional to its width) over the rate a full machine of such tiles sustains (TILE_RATE). Narrow
    tiles fill the SMs when there are few tasks, wide ones do more per byte. E.g. on 132 SMs: 1024^3
    -> 64 (64 tiles of 128 x 64 in one wave, against 16 of 256 columns); 1024 x 3072 -> 256 (96 tiles in
    one wave beat 384 narrow ones in three); 4096^3 -> 256."""
    sms = multiprocessors(a)

    def time(bn):
        return cdiv(cdiv(m, BM) * cdiv(n, bn), sms) * bn / TILE_RATE[bn]
    return min(WIDTHS, key=lambda bn: (time(bn), -bn))


def _cluster(bn: int, n: int) -> int:
    """Blocks per cluster sharing A that matmul runs by itself for `bn`-wide tiles of N columns: 2 when bn is
    in CLUSTER_A_WIDTHS and the column tile count is even, else 1 (an odd count falls back to unclustered
    tiles rather than pair the last tile with one past N)."""
    return 2 if bn in CLUSTER_A_WIDTHS and cdiv(n, bn) % 2 == 0 else 1


def _aligned(v: torch.Tensor) -> torch.Tensor:
    """A contiguous vector at a 16-byte aligned address (a copy if it is not)."""
    return v if v.data_ptr() % ALIGN == 0 else v.clone()
