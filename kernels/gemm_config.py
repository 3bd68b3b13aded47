"""The configs of kernels/gemm_kernel.py's GEMMs: MatmulConfig (bf16/fp16 inputs, the fused epilogue, split-K) and
MatmulFP8Config (fp8 inputs, column scales), frozen dataclasses of the options a kernel takes, which check them,
resolve their defaults (gemm_policy's tables) and derive the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

import torch

import tkpy as tk
from tkpy import bf16, f32, fp16

from .gemm_epilogue import ACTIVATIONS
from .gemm_policy import FP8_STAGES, FP8_WIDTHS, OUTPUT_STAGES, STAGES, WIDTHS

INPUTS = (bf16, fp16)               # the types of A and B of MatmulConfig's kernels
DTYPES = {torch.bfloat16: bf16, torch.float16: fp16, torch.float32: f32}    # C's (and the bias's) types
FP8 = {torch.float8_e4m3fn: tk.fp8e4m3, torch.float8_e5m2: tk.fp8e5m2}       # A's and B's of MatmulFP8Config's
SPLITS = (None, "ordered", "atomic")


class _Tiles:
    """What both configs share: a 128 x block_n tile of C leaves in pieces of one 128-byte swizzle panel (64
    columns of bf16/fp16, 32 of fp32), or the whole tile if narrower; the input stages' default."""

    def _resolve(self, kind: str, widths: tuple, stages: dict) -> None:
        if self.out not in DTYPES.values():
            raise ValueError(f"{kind}: the output must be bf16, fp16 or fp32, got {self.out!r}")
        if self.block_n not in widths:
            raise ValueError(f"{kind}: block_n must be one of {widths}, got {self.block_n!r}")
        if self.stages is None:
            object.__setattr__(self, "stages", stages[self.block_n])

    @property
    def piece_cols(self) -> int:
        return min(128 // self.out.nbytes, self.block_n)

    @property
    def pieces(self) -> int:
        return self.block_n // self.piece_cols


@dataclass(frozen=True)
class MatmulConfig(_Tiles):
    """The options of the GEMM kernel (gemm_kernel.matmul_template): `dtype` of A and B (bf16/fp16), `out` dtype of
    C, B given as (N, K) tiles when `b_transposed`, the `bias` vector's dtype (None: no bias), a runtime `scale`,
    an `activation` from ACTIVATIONS, the tile width `block_n` (one of WIDTHS), and
    - split None, or split-K ("ordered" / "atomic"): C is then an fp32 workspace of partial sums, (S, M, N) with
      split s at depth s ("ordered") or (1, M, N) zero-filled and added into by TMA ("atomic"); a runtime `splits`
      says how many tasks share each tile's K steps (schedule.SplitK), and the epilogue is left to
      gemm_splitk.reduce_kernel;
    - stages: input stages (None: STAGES[block_n], resolved at construction, so that configs of the same kernel
      compare equal); output_stages: pieces of C in shared memory at a time (e.g. 3 input and 4 output stages hold
      a whole 128 x 256 bf16 tile). The template checks that the stages fit in shared memory.
    `name` is the kernel's: "matmul" for the defaults, else the options spelled out."""

    dtype: object = bf16
    out: object = bf16
    b_transposed: bool = False
    bias: object = None
    scale: bool = False
    activation: str | None = None
    block_n: int = WIDTHS[0]
    split: str | None = None
    stages: int | None = None
    output_stages: int = OUTPUT_STAGES

    def __post_init__(self) -> None:
        if self.dtype not in INPUTS:
            raise ValueError(f"matmul: A and B must be bf16 or fp16 (fp8: MatmulFP8Config), got {self.dtype!r}")
        if self.bias is not None and self.bias not in DTYPES.values():
            raise ValueError(f"matmul: the bias must be bf16, fp16 or fp32 (or None), got {self.bias!r}")
        for option in ("b_transposed", "scale"):
            if getattr(self, option) not in (True, False):
                raise ValueError(f"matmul: {option} must be True or False, got {getattr(self, option)!r}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {self.activation!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.split and (self.out != f32 or self.bias is not None or self.scale or self.activation):
            raise ValueError("a split-K kernel writes fp32 partial sums through TMA; the epilogue comes after the "
                             "reduction")
        self._resolve("matmul", WIDTHS, STAGES)

    @property
    def name(self) -> str:
        if self == MatmulConfig():
            return "matmul"
        tags = [self.dtype.name, self.out.name, "nt" if self.b_transposed else "nn",
                self.bias is not None and f"bias_{self.bias.name}", self.scale and "scale", self.activation,
                f"n{self.block_n}", self.split and f"splitk_{self.split}",
                self.stages != STAGES[self.block_n] and f"{self.stages}stages",
                self.output_stages != OUTPUT_STAGES and f"{self.output_stages}out"]
        return "matmul_" + "_".join(t for t in tags if t)


@dataclass(frozen=True)
class MatmulFP8Config(_Tiles):
    """The options of the fp8 GEMM kernel (gemm_kernel.fp8_matmul_template): the fp8 kinds of A and B (e4m3 / e5m2
    each), the `out` dtype of C (bf16, fp16 or fp32), the tile width `block_n` (one of FP8_WIDTHS) and the input
    stages (None: FP8_STAGES[block_n], resolved at construction). `name` is the kernel's."""

    a_dtype: object = tk.fp8e4m3
    b_dtype: object = tk.fp8e4m3
    out: object = bf16
    block_n: int = FP8_WIDTHS[0]
    stages: int | None = None

    def __post_init__(self) -> None:
        for option in ("a_dtype", "b_dtype"):
            if getattr(self, option) not in FP8.values():
                raise ValueError(f"matmul_fp8: {option} must be fp8e4m3 or fp8e5m2, got {getattr(self, option)!r}")
        self._resolve("matmul_fp8", FP8_WIDTHS, FP8_STAGES)

    @property
    def name(self) -> str:
        return f"matmul_fp8_{self.a_dtype.name[3:]}_{self.b_dtype.name[3:]}_{self.out.name}_n{self.block_n}" + (
            f"_{self.stages}stages" if self.stages != FP8_STAGES[self.block_n] else "")
