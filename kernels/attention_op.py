"""`tkpy.kernels.attention_forward` as the torch operator `torch.ops.tkpy.attention`, with its autograd formula, and an
SDPA drop-in.

The forward is kernels/attention_forward.py's, the backward kernels/attention_backward.py's (the operator
`torch.ops.tkpy.attention_backward`): the operator saves q, k, v, its output and the log-sum-exp, which attention()
asks the forward for whenever an input requires grad. `scaled_dot_product_attention` takes
torch.nn.functional.scaled_dot_product_attention's arguments and runs tkpy's attention wherever that computes the
same thing; elsewhere (a mask tensor, dropout, a dtype or head dim tkpy does not take) it raises NotImplementedError
naming the reason, or with `fallback=True` calls torch's SDPA.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import attention_forward as kernel
from .attention_backward import attention_backward_op
from .op_support import define, direct_call_ok, needs_grad


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool | str = False,
              scale: float | None = None, return_lse: bool = False, deterministic: bool = False):
    """softmax(q k^T * scale [+ causal mask]) v for (batch, heads, seq, head_dim) tensors.

    - dtypes: bf16 or fp16 (all three the same); head dims: multiples of 16 from 16 to 256; CUDA tensors (or
      CPU tensors under TKPY_INTERPRET=1, which runs tkpy's CPU interpreter).
    - k and v: (batch, kv_heads, seq_k, head_dim) with kv_heads dividing heads: grouped-query and multi-query
      attention (query head h reads key/value head h // (heads / kv_heads), as torch's enable_gqa). Any seq
      and seq_k >= 1, equal or not.
    - causal=True is torch's `scaled_dot_product_attention(is_causal=True)`: the top-left aligned mask, query i
      sees keys j <= i. causal="bottom_right" aligns the diagonal to the last key instead (FlashAttention's
      causal, torch.nn.attention.bias.causal_lower_right): query i sees keys j <= i + seq_k - seq; query rows
      that see no key output 0 with a log-sum-exp of -inf.
    - scale: defaults to 1 / sqrt(head_dim); any value.
    - return_lse: also return the fp32 natural-log log-sum-exp of each row's scaled scores, (batch, heads, seq).
    - Differentiable in q, k and v (and through the log-sum-exp): kernels/attention_backward.py's kernels.
      deterministic=True (or torch.use_deterministic_algorithms(True)): gradients bit-identical from run to run.
    Inputs whose last dim is contiguous with 16-byte aligned strides are read in place (e.g. a (B, N, H, D)
    tensor transposed to (B, H, N, D)); others are copied. The output is a new contiguous tensor.
    torch.compile sees it as torch.ops.tkpy.attention. kernels/attention_kernel.py says how the kernels run,
    kernels/attention_policy.py which one a shape takes."""
    variant = kernel.causal_variant(causal)
    if direct_call_ok((q, k, v)):
        return kernel.forward(q, k, v, variant or False, scale, return_lse)
    o, lse = attention_op(q, k, v, variant, scale, return_lse or needs_grad(q, k, v), deterministic)
    return (o, lse) if return_lse else o


def _impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: Optional[str] = None,
          scale: Optional[float] = None, return_lse: bool = False,
          deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if return_lse:
        return kernel.forward(q, k, v, causal or False, scale, True)
    return kernel.forward(q, k, v, causal or False, scale), q.new_empty(0, dtype=torch.float32)


def _fake(q, k, v, causal=None, scale=None, return_lse=False, deterministic=False):
    kernel.checked(q, k, v)
    kernel.causal_variant(causal or False)
    b, h, n, d = q.shape
    return q.new_empty(b, h, n, d), q.new_empty((b, h, n) if return_lse else (0,), dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, return_lse, deterministic = inputs     # (every argument, defaults filled in)
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.return_lse, ctx.deterministic = causal, scale, return_lse, deterministic


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    if not ctx.return_lse:          # the operator called without the log-sum-exp: the forward again, with it
        o, lse = attention_op(q, k, v, ctx.causal, ctx.scale, True)
        grad_lse = None
    if grad_o is None:              # (only the log-sum-exp used)
        grad_o = torch.zeros_like(o)
    deterministic = ctx.deterministic or torch.are_deterministic_algorithms_enabled()
    dq, dk, dv = attention_backward_op(grad_o, q, k, v, o, lse, grad_lse, ctx.causal, ctx.scale, deterministic)
    return dq, dk, dv, None, None, None, None


attention_op = define("attention", _impl, _fake, backward=_backward, setup_context=_setup_context)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                 *, fallback: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention with tkpy's attention: (..., heads, seq, head_dim)
    tensors (3 dims or more; dims before the heads are flattened into the batch), is_causal top-left as torch's,
    enable_gqa for fewer key/value heads (one key/value head broadcasts without it, as in torch). Where tkpy's
    kernels do not compute the same thing (`unsupported` says why: a mask tensor, dropout, a dtype other than
    bf16/fp16, a head dim that is not a multiple of 16 up to 256, a value head dim other than the key's) it raises
    NotImplementedError naming the reason, or, with `fallback=True`, returns torch's SDPA of the same arguments.
    Differentiable as attention() is."""
    reason = unsupported(query, key, value, attn_mask, dropout_p, enable_gqa)
    if reason is not None:
        if not fallback:
            raise NotImplementedError(f"tkpy scaled_dot_product_attention: {reason}; pass fallback=True to run "
                                      "torch's scaled_dot_product_attention where tkpy's kernels do not apply")
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa)
    lead = query.shape[:-3]
    q, k, v = (x.reshape(-1, *x.shape[-3:]) if x.dim() > 4 else x if x.dim() == 4 else x.unsqueeze(0)
               for x in (query, key, value))
    out = attention(q, k, v, causal=is_causal, scale=scale)
    return out.reshape(*lead, *out.shape[-3:]) if query.dim() > 3 else out.squeeze(0)


def unsupported(query, key, value, attn_mask, dropout_p, enable_gqa) -> str | None:
    """Why tkpy's attention cannot stand in for torch's SDPA on these arguments (None: it can)."""
    if attn_mask is not None:
        return "an attn_mask tensor is not supported (is_causal is)"
    if dropout_p != 0.0:
        return f"dropout is not supported (dropout_p={dropout_p})"
    if query.dim() < 3 or key.dim() != query.dim() or value.dim() != query.dim():
        return (f"expects (..., heads, seq, head_dim) tensors of 3 dims or more, alike; got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if query.dtype not in kernel.DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"dtypes must be bf16 or fp16, all three alike; got {query.dtype}, {key.dtype}, {value.dtype}"
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        return f"a value head dim other than the key's is not supported ({value.shape[-1]} vs {key.shape[-1]})"
    if query.shape[-1] not in kernel.HEAD_DIMS:
        return f"head dim {query.shape[-1]} is not supported (multiples of 16 from 16 to 256)"
    if key.shape[:-3] != query.shape[:-3] or value.shape[:-2] != key.shape[:-2]:
        return (f"key and value must have the query's batch dims and each other's heads (no broadcasting); got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if key.shape[-3] not in (query.shape[-3], 1) and not enable_gqa:    # (one key/value head broadcasts in torch)
        return (f"query has {query.shape[-3]} heads and key {key.shape[-3]}: pass enable_gqa=True for grouped-query "
                "attention")
    return None
