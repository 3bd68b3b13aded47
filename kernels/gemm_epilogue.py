"""The GEMM epilogue `act(scale * acc + bias)` on fp32 accumulators, which kernels/gemm_kernel.py's product kernels and
kernels/gemm_splitk.py's reduction both trace (so that neither imports the other's module for it)."""
from __future__ import annotations

import math

import tkpy as tk

GELU_C = math.sqrt(2 / math.pi)
# Activations as elementwise functions of the fp32 accumulator (tk.map traces them into one C++ lambda).
# GELU is the tanh approximation (torch's gelu(approximate="tanh")), written with one exp:
# 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y)), -2y = x (-2 sqrt(2/pi) 0.044715 x^2 - 2 sqrt(2/pi)).
ACTIVATIONS = {
    "relu": lambda x: tk.relu(x),
    "silu": lambda x: x / (1.0 + tk.exp(-x)),
    "gelu": lambda x: x / (1.0 + tk.exp(x * (x * x * (-2 * GELU_C * 0.044715) - 2 * GELU_C))),
}


def load_bias(g, bias_vec, col) -> None:
    """The bias values of the columns at `col`, in units of the vector's length (none past N)."""
    tk.load(bias_vec, g.Bias, (0, col), masked=True)


def apply_epilogue(g, acc, bias_vec, scale: bool, activation) -> None:
    """act(scale * acc + bias) on a warp's accumulator (or a column piece of it), in place; `bias_vec`
    (None: no bias) holds the bias of its columns."""
    if scale:
        tk.mul(acc, acc, g.alpha)
    if bias_vec is not None:
        tk.add_col(acc, acc, bias_vec)
    if activation:
        tk.map(acc, ACTIVATIONS[activation], acc)
