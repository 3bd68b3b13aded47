"""What the torch-facing kernels share about tensors: whether TMA reads one in place (tkpy's rule: tk.tma_layout,
tk.tma_ready, named here with tk.cdiv for the kernels that take them from this module), padded copies where it
cannot."""
from __future__ import annotations

import torch

from tkpy import ALIGNMENT as ALIGN, cdiv, tma_layout, tma_ready  # noqa: F401 - tkpy's one definition of each


def padded_like(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised (rows, cols) tensor like x whose rows start 16 bytes apart (a view of a wider one)."""
    rows, cols = x.shape
    per = ALIGN // x.element_size()
    return x.new_empty(rows, cdiv(cols, per) * per)[:, :cols]


def padded_copy(x: torch.Tensor) -> torch.Tensor:
    """x copied into padded_like(x)."""
    return padded_like(x).copy_(x)


def row_view(t: torch.Tensor, width: int) -> torch.Tensor:
    """t as (rows, width), read in place where its rows are 16-byte aligned with a contiguous last dim (a strided view
    too), else copied."""
    rows = t.reshape(-1, width)
    return rows if tma_ready(rows) else rows.clone(memory_format=torch.contiguous_format)
