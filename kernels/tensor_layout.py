"""What the torch-facing kernels share about tensors: whether TMA reads one in place, padded copies where it cannot,
and the one `cdiv`."""
from __future__ import annotations

import torch

import tkpy as tk

ALIGN = 16              # bytes: TMA (and tkpy's gl) want 16-byte aligned pointers and strides of the outer dims


def cdiv(a, b):
    return (a + b - 1) // b


def tma_layout(x: torch.Tensor) -> bool:
    """Whether TMA reads x's strides in place: unit last-dim stride, every other stride a multiple of 16 bytes, no
    dim repeated by a stride of 0 (as from .expand()). Its pointer must be 16-byte aligned too (tma_ready)."""
    esize = x.element_size()
    return x.stride(-1) == 1 and all(s * esize % ALIGN == 0 for s in x.stride()[:-1]) and tk.broadcast_dim(x) is None


def tma_ready(x: torch.Tensor) -> bool:
    """tma_layout(x) and a 16-byte aligned pointer."""
    return tma_layout(x) and x.data_ptr() % ALIGN == 0


def padded_like(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised (rows, cols) tensor like x whose rows start 16 bytes apart (a view of a wider one)."""
    rows, cols = x.shape
    per = ALIGN // x.element_size()
    return x.new_empty(rows, cdiv(cols, per) * per)[:, :cols]


def padded_copy(x: torch.Tensor) -> torch.Tensor:
    """x copied into padded_like(x)."""
    return padded_like(x).copy_(x)
