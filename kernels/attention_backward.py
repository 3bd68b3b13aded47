"""attention_backward(): the gradients of attention (kernels/attention_forward.py) with respect to q, k and v, the
launch behind the torch operator `torch.ops.tkpy.attention_backward` (the attention operator's autograd formula,
kernels/attention_op.py): argument checks, head-dim padding, the workspaces and the four launches.

The kernels: attention_bwd_prep's prep_kernel (lse in the log2 domain, D = rowsum(dO * O), the dQ workspace zeroed),
attention_bwd_kernel's main kernel (dK, dV; and dQ by reduce-adds up to D128), then attention_bwd_prep's
convert_kernel (dQ in the input dtype), or the dQ pass (attention_bwd_dq_kernel: deterministic=True and past D128).
Their options are attention_bwd_config.AttentionBwdConfig's, the choices attention_bwd_policy's.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .attention_bwd_config import AttentionBwdConfig
from .attention_bwd_dq_kernel import _attention_bwd_dq
from .attention_bwd_kernel import _attention_bwd
from .attention_bwd_policy import lse_rows, native_dim
from .attention_bwd_prep import LOG2E, convert_kernel, prep_grid, prep_kernel
from .attention_config import DTYPES
from .attention_forward import _usable, causal_variant, checked
from .op_support import define
from .tensor_layout import ALIGN, cdiv, tma_ready


def attention_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, causal: bool | str = False, scale: float | None = None,
                       deterministic: bool = False, grad_lse: torch.Tensor | None = None):
    """(dq, dk, dv), the gradients of out = attention(q, k, v, causal, scale) given grad_out = d loss / d out, from
    the forward's output `out` and its log-sum-exp `lse` ((batch, heads, seq) fp32, natural log: attention(...,
    return_lse=True)'s); `grad_lse`, d loss / d lse where the loss uses it too (or None).

    Takes what attention() takes (bf16/fp16; head dims in multiples of 16 up to 256, those that are not multiples
    of 32 run on zero columns padded to the next; GQA/MQA: dk and dv summed over each key/value head's query heads;
    any lengths; causal True / "top_left" / "bottom_right"; any scale, also zero and negative). deterministic=True:
    the same inputs give bit-identical gradients from run to run (dQ from its own pass over the key tiles, in order,
    instead of reduce-adds). The gradients are new contiguous tensors in the inputs' dtype."""
    variant = causal_variant(causal)
    checked(q, k, v)
    _check_saved(grad_out, q, out, lse, grad_lse)
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    if not q.numel():                       # (no query rows: no gradient reaches k and v)
        return tuple(torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (q, k, v))
    dq, dk, dv = (torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v))
    _launch(grad_out, q, k, v, out, lse, dq, dk, dv, variant, scale, deterministic, grad_lse)
    return dq, dk, dv


def workspaces(q: torch.Tensor, atomic: bool) -> list[torch.Tensor]:
    """The kernels' fp32 workspaces for queries q (batch, heads, seq, head dim the kernels run): lse_log2 and D,
    (batch, heads, lse_rows(seq)), and where the main kernel accumulates dQ (atomic) its workspace, (batch, heads,
    lse_rows(seq), head dim). Their contents do not matter: the prep kernel writes them all."""
    (b, h, n, d), nq = q.shape, lse_rows(q.shape[2])
    rows = [torch.empty(b, h, nq, dtype=torch.float32, device=q.device) for _ in range(2)]
    return rows + ([torch.empty(b, h, nq, d, dtype=torch.float32, device=q.device)] if atomic else [])


@torch.no_grad()
def _launch(grad_out, q, k, v, out, lse, dq, dk, dv, variant, scale: float, deterministic: bool = False,
            grad_lse=None, workspace: list | None = None, options: dict | None = None) -> None:
    """The four launches on checked inputs (q of at least one row) into contiguous dq, dk and dv (their contents do not
    matter); `variant` causal_variant's, `workspace` workspaces()'s for the head dim the kernels run (native_dim) or
    None (new ones), `options` AttentionBwdConfig fields over the policy's (benchmarks, profiles)."""
    (b, h, n, d), (hkv, nk) = q.shape, k.shape[1:3]
    run = native_dim(d)
    if run != d:                            # zero columns: the same scores and row sums
        q, k, v, out, grad_out = (F.pad(x, (0, run - d)) for x in (q, k, v, out, grad_out))
    config = AttentionBwdConfig(run, DTYPES[q.dtype], variant is not None, deterministic, **(options or {}))
    q, k, v, grad_out = (_usable(x) for x in (q, k, v, grad_out))
    rows, delta, *accumulator = workspace if workspace is not None else workspaces(q, not config.dq_pass)
    prep_kernel(run, config.dtype, not config.dq_pass)[prep_grid(b, h, rows.shape[2])](
        _usable(out), grad_out, _aligned(lse), rows, delta, *accumulator)
    if grad_lse is not None:                # d lse_i / d s_ij = P_ij: dS = P * (dP - (D - d lse))
        delta[..., :n] -= grad_lse
    scalars = [scale * LOG2E, scale] + ([] if variant is None else [0 if variant == "top_left" else nk - n])
    padded = [torch.empty(b, x, m, run, dtype=q.dtype, device=q.device) for x, m in ((h, n), (hkv, nk), (hkv, nk))] \
        if run != d else [dq, dk, dv]
    _attention_bwd(config)(q, k, v, grad_out, rows, delta, *padded[1:], *accumulator, *scalars)
    if config.dq_pass:
        _attention_bwd_dq(config)(q, k, v, grad_out, rows, delta, padded[0], *scalars)
    else:
        convert_kernel(run, config.dtype)[prep_grid(b, h, rows.shape[2])](accumulator[0], padded[0], scale)
    if run != d:
        for grad, full in zip((dq, dk, dv), padded):
            grad.copy_(full[..., :d])


def _check_saved(grad_out, q, out, lse, grad_lse) -> None:
    """ValueErrors naming what does not match q: grad_out and out its shape and dtype, lse and grad_lse fp32 of
    (batch, heads, seq)."""
    for name, x in (("grad_out", grad_out), ("out", out)):
        if not isinstance(x, torch.Tensor) or x.shape != q.shape or x.dtype != q.dtype or x.device != q.device:
            raise ValueError(f"attention backward: {name} must be a tensor of q's shape, dtype and device "
                             f"{tuple(q.shape)} {q.dtype} {q.device}; got {_describe(x)}")
    for name, x in (("lse", lse), ("grad_lse", grad_lse)):
        if x is None and name == "grad_lse":
            continue
        if not isinstance(x, torch.Tensor) or x.shape != q.shape[:3] or x.dtype != torch.float32 or \
                x.device != q.device:
            raise ValueError(f"attention backward: {name} must be an fp32 tensor of shape {tuple(q.shape[:3])} "
                             f"(batch, heads, seq) on {q.device}; got {_describe(x)}")


def _aligned(lse: torch.Tensor) -> torch.Tensor:
    """lse, or a copy whose rows start 16 bytes apart (prep_kernel reads it as a (batch, heads, seq) tensor)."""
    if tma_ready(lse):
        return lse
    b, h, n = lse.shape
    return lse.new_empty(b, h, cdiv(n, ALIGN // 4) * (ALIGN // 4))[..., :n].copy_(lse)


def _describe(x) -> str:
    return f"{tuple(x.shape)} {x.dtype} {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__


def _impl(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
          lse: torch.Tensor, grad_lse: Optional[torch.Tensor] = None, causal: Optional[str] = None,
          scale: Optional[float] = None,
          deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_backward(grad_out, q, k, v, out, lse, causal or False, scale, deterministic, grad_lse)


def _fake(grad_out, q, k, v, out, lse, grad_lse=None, causal=None, scale=None, deterministic=False):
    causal_variant(causal or False)
    checked(q, k, v)
    _check_saved(grad_out, q, out, lse, grad_lse)
    return tuple(torch.empty_like(x, memory_format=torch.contiguous_format) for x in (q, k, v))


attention_backward_op = define("attention_backward", _impl, _fake,
                               differentiable="attention's double backward is not implemented")
