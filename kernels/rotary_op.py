"""Rotary position embedding as a torch operator (`torch.ops.tkpy.rotary`) with autograd: `q_out, k_out =
rotary(q, k, cos, sin, interleaved=False, position_offset=0)` rotates q and k (of their own head counts: GQA) in one
launch, GPT-NeoX's halves or GPT-J's interleaved pairs, over the first rotary_dim = 2 x cos.shape[1] elements of each
head (the rest passed through), at positions offset for decoding. The backward is the rotation by -theta (the same
operator, `inverse`). Kernel: kernels/rotary_kernel.py."""
from __future__ import annotations

import torch

from .op_support import check_device, define, direct_call_ok, needs_grad, resident_blocks
from .rotary_config import RotaryConfig
from .rotary_kernel import rotary_kernel
from .rotary_policy import INTERPRETER_SMS, config_for, grid_for
from .tensor_layout import row_view, tma_ready

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
TABLE_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "f32"}


def rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
           position_offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_out, k_out): q (batch, seq, heads_q, head_dim) and k (batch, seq, heads_k, head_dim), bf16 or fp16, rotated:
    position p of the sequence by the angles of row p + position_offset of cos and sin, of shape (max_seq,
    rotary_dim / 2), float32 or the inputs' dtype (rotary_dim <= head_dim; the rest of each head is passed through).
    Half-split (GPT-NeoX, `interleaved=False`): element i pairs with i + rotary_dim / 2; interleaved (GPT-J): 2i with
    2i + 1. x' = x cos - y sin, y' = y cos + x sin for each pair (x, y), in fp32, rounded once. head_dim a multiple of
    16 up to 256, rotary_dim a multiple of 16. CUDA tensors, or CPU tensors under TKPY_INTERPRET=1;
    differentiable in q and k (the backward rotates by -theta; cos and sin take no gradient)."""
    if direct_call_ok((q, k, cos, sin)):
        return _rotary(q, k, cos, sin, interleaved, position_offset, False)
    if needs_grad(cos, sin):
        raise ValueError("rotary: cos and sin take no gradient (detach them)")
    return rotary_op(q, k, cos, sin, interleaved, position_offset, False)


def checked(q, k, cos, sin, interleaved: bool, position_offset: int, sizes: bool = True, inverse: bool = False,
            options: dict | None = None) -> RotaryConfig | None:
    """The kernel's config (`options`: RotaryConfig fields over the policy's), or the ValueError the call raises
    before any GPU work. (`sizes` False: the fake implementation's checks, which a symbolic size would not pass: no
    config.)"""
    check_device("rotary", q)
    if q.dtype not in DTYPES:
        raise ValueError(f"rotary takes bf16 or fp16 q and k (fp32 math), got {q.dtype}")
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"rotary: q and k must be (batch, seq, heads, head_dim), got shapes {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    if k.dtype != q.dtype or k.device != q.device or (k.shape[0], k.shape[1], k.shape[3]) != (q.shape[0], q.shape[1],
                                                                                              q.shape[3]):
        raise ValueError(f"rotary: k must have q's batch, seq, head_dim, dtype and device; got {tuple(k.shape)} "
                         f"{k.dtype} on {k.device} against {tuple(q.shape)} {q.dtype} on {q.device}")
    if cos.dim() != 2 or sin.shape != cos.shape or cos.dtype != sin.dtype or cos.device != q.device or \
            sin.device != q.device:
        raise ValueError(f"rotary: cos and sin must be (max_seq, rotary_dim / 2) of one dtype on q's device ("
                         f"{q.device}); got {tuple(cos.shape)} {cos.dtype} on {cos.device} and {tuple(sin.shape)} "
                         f"{sin.dtype} on {sin.device}")
    if cos.dtype not in (torch.float32, q.dtype):
        raise ValueError(f"rotary: cos and sin must be float32 or q's dtype ({q.dtype}), got {cos.dtype}")
    if not sizes:
        return None
    if not isinstance(position_offset, int) or position_offset < 0 or position_offset + q.shape[1] > cos.shape[0]:
        raise ValueError(f"rotary: positions {position_offset}..{position_offset + q.shape[1] - 1} (position_offset "
                         f"{position_offset!r}, seq {q.shape[1]}) must lie in cos and sin's {cos.shape[0]} rows")
    try:
        return config_for(q.shape[3], 2 * cos.shape[1], q.shape[2], k.shape[2], DTYPES[q.dtype],
                          TABLE_DTYPES[cos.dtype], bool(interleaved), inverse, **(options or {}))
    except ValueError as e:
        raise ValueError(f"rotary: {str(e).removeprefix('RotaryConfig: ')} (q {tuple(q.shape)}, cos "
                         f"{tuple(cos.shape)})") from None


def launch(q, k, cos, sin, interleaved: bool, position_offset: int, inverse: bool, q_out, k_out,
           options: dict | None = None) -> None:
    """q_out, k_out (of q's and k's shapes, contiguous, written) = q, k rotated (by -theta when `inverse`).
    `options`: RotaryConfig fields over the policy's (benchmarks/bench_memory_bound.py --variants)."""
    c = checked(q, k, cos, sin, interleaved, position_offset, inverse=inverse, options=options)
    seq = q.shape[1]
    rows = q.shape[0] * seq
    if rows == 0:
        return
    tables = [t[position_offset:position_offset + seq] for t in (cos, sin)]
    tables = [t if tma_ready(t) else t.contiguous() for t in tables]
    wq, wk = c.width(c.heads_q), c.width(c.heads_k)
    views = [row_view(q, wq), row_view(k, wk), *tables, q_out.view(-1, wq), k_out.view(-1, wk)]
    kernel = rotary_kernel(c)
    kernel[(grid_for(c, rows, resident_blocks(kernel, c, views, INTERPRETER_SMS)),)](*views)


# -- the operator ------------------------------------------------------------------------------------------------

def _rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool,
            position_offset: int, inverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    q_out, k_out = q.new_empty(q.shape), k.new_empty(k.shape)
    launch(q, k, cos, sin, interleaved, position_offset, inverse, q_out, k_out)
    return q_out, k_out


def _fake(q, k, cos, sin, interleaved, position_offset, inverse):
    checked(q, k, cos, sin, interleaved, position_offset, sizes=False)
    return q.new_empty(q.shape), k.new_empty(k.shape)


def _setup(ctx, inputs, output):
    _, _, cos, sin, interleaved, position_offset, inverse = inputs
    ctx.save_for_backward(cos, sin)
    ctx.args = (interleaved, position_offset, not inverse)


def _gradient(ctx, grad_q, grad_k):
    cos, sin = ctx.saved_tensors
    dq, dk = rotary_op(grad_q.contiguous(), grad_k.contiguous(), cos, sin, *ctx.args)
    return dq, dk, None, None, None, None, None


rotary_op = define("rotary", _rotary, _fake, backward=_gradient, setup_context=_setup)
