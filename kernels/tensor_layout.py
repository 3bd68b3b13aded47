"""Padded copies for the torch-facing kernels, of tensors that TMA cannot read in place (tk.tma_layout /
tk.tma_ready say which; tk.cdiv is the one ceiling division)."""
from __future__ import annotations

import torch

import tkpy as tk

ALIGN = tk.ALIGNMENT    # bytes: TMA (and tkpy's gl) want 16-byte aligned pointers and strides of the outer dims


def padded_like(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised (rows, cols) tensor like x whose rows start 16 bytes apart (a view of a wider one)."""
    rows, cols = x.shape
    per = ALIGN // x.element_size()
    return x.new_empty(rows, tk.cdiv(cols, per) * per)[:, :cols]


def padded_copy(x: torch.Tensor) -> torch.Tensor:
    """x copied into padded_like(x)."""
    return padded_like(x).copy_(x)
