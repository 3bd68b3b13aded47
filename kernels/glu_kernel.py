"""The bodies of the gated-activation kernels (SwiGLU, GeGLU; kernels/glu.py is the API): one pass each way.

Forward: out = act(gate) * up. Backward, from gate, up and dout: dup = dout act(gate), dgate = dout up act'(gate).
act is silu (x sigmoid(x)), gelu (x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2) or its tanh approximation (x (1 +
tanh(k0 (x + k1 x^3))) / 2, as torch's approximate="tanh"). Every tensor is rows of `width` elements (gate and up may
be the halves of one tensor: strided views); a warp takes a piece of a row at a time, contig vectors in fp32 (16-byte
loads converting from the 16-bit dtype), the math in fp32, the results rounded as they are stored; the blocks' warps
loop over the (row, piece) pairs, a persistent grid. Elements past a row's end load as 0 and are not stored.
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools
import math

import tkpy as tk
from tkpy import bf16, fp16

from .glu_config import GluConfig
from .row_split import piece_place, piece_tasks

DTYPES = {"bf16": bf16, "fp16": fp16}
INV_SQRT2 = 1 / math.sqrt(2)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
K0, K1 = math.sqrt(2 / math.pi), 0.044715               # gelu's tanh approximation


def _gate(activation: str):
    """(f, the factor vector's map): act(x) = x * f(x) for silu and gelu (f: sigmoid, Phi); tanh(k0 (x + k1 x^3))
    for gelu_tanh (act = x (1 + t) / 2)."""
    if activation == "silu":
        return lambda x: tk.sigmoid(x)
    if activation == "gelu":
        return lambda x: 0.5 + 0.5 * tk.erf(x * INV_SQRT2)
    return lambda x: tk.tanh(K0 * (x + K1 * x * x * x))


def _act(activation: str):
    """act(x) from x and the factor f."""
    if activation == "gelu_tanh":
        return lambda x, t: 0.5 * x * (1.0 + t)
    return lambda x, f: x * f


def _slope(activation: str):
    """act'(x) from x and the factor f."""
    if activation == "silu":
        return lambda x, s: s * (1.0 + x * (1.0 - s))
    if activation == "gelu":
        return lambda x, p: p + x * tk.exp(-0.5 * x * x) * INV_SQRT_2PI
    return lambda x, t: 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * K0 * (1.0 + 3 * K1 * x * x)


@functools.cache
def forward_kernel(c: GluConfig):
    """out = act(gate) * up."""
    dt, n = DTYPES[c.dtype], c.width
    rows = tk.gl[dt, "R", n]
    gate_of, act = _gate(c.activation), _act(c.activation)

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def glu_forward(gate: rows, up: rows, out: rows):
        g, u = tk.rv(tk.f32, c.piece, "contig"), tk.rv(tk.f32, c.piece, "contig")
        for task in piece_tasks(c, gate.rows):
            row, part = piece_place(c, task)
            tk.load(g, gate, (row, part), fill=0.0)
            tk.load(u, up, (row, part), fill=0.0)
            tk.map(u, lambda x, y: act(x, gate_of(x)) * y, g, u)
            tk.store(out, u, (row, part), masked=True)
    return glu_forward


@functools.cache
def backward_kernel(c: GluConfig):
    """dgate = dout * up * act'(gate), dup = dout * act(gate)."""
    dt, n = DTYPES[c.dtype], c.width
    rows = tk.gl[dt, "R", n]
    gate_of, act, slope = _gate(c.activation), _act(c.activation), _slope(c.activation)

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def glu_backward(dout: rows, gate: rows, up: rows, dgate: rows, dup: rows):
        g, u, d, f = (tk.rv(tk.f32, c.piece, "contig", name=name) for name in ("g", "u", "d", "f"))
        for task in piece_tasks(c, gate.rows):
            row, part = piece_place(c, task)
            tk.load(d, dout, (row, part), fill=0.0)
            tk.load(g, gate, (row, part), fill=0.0)
            tk.load(u, up, (row, part), fill=0.0)
            tk.map(f, gate_of, g)
            tk.map(u, lambda x, f, y, d: d * y * slope(x, f), g, f, u, d)     # u: dgate
            tk.map(g, lambda x, f, d: d * act(x, f), g, f, d)                 # g: dup
            tk.store(dgate, u, (row, part), masked=True)
            tk.store(dup, g, (row, part), masked=True)
    return glu_backward
