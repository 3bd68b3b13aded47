"""FlashAttention-style forward attention on Hopper with tkpy's LCF template.

A task is 128 query rows of one (batch, head): two consumer warpgroups own 64 rows each, keep
their query tile in shared memory, and stream 128-row key/value tiles that a producer warpgroup
loads with TMA through a ring of stages. Per tile a consumer computes S = Q K^T with wgmma, an
online softmax in the log2 domain on its registers, and O += P V with P straight from registers.
Grouped-query attention maps query head h to key/value head h // (H / H_kv).

Not yet: causal masking and sequence lengths that are not multiples of 128 (clear errors below).
"""
from __future__ import annotations

import functools
import math

import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.templates import shared

Q_ROWS, KV_ROWS = 128, 128          # per task, per stage
LOG2E = 1.4426950408889634


@functools.cache
def _attention(d: int):
    stages = 2 if d == 128 else 3

    @tk.lcf(consumer_warpgroups=2, stages=stages, persistent=True, name=f"attention_fwd_d{d}")
    class Attention:
        Q: tk.gl[bf16, "B", "H", "N", d]
        K: tk.gl[bf16, "B", "HKV", "NK", d]
        V: tk.gl[bf16, "B", "HKV", "NK", d]
        O: tk.gl[bf16, "B", "H", "N", d]
        L: tk.gl[f32, "B", "H", "N"]
        scale_log2: float                   # softmax scale * log2(e)
        inputs = dict(k=shared(bf16, KV_ROWS, d), v=shared(bf16, KV_ROWS, d))

        def tasks(self, g):
            return g.Q.rows // Q_ROWS, g.Q.batch * g.Q.depth        # (query tiles, batch * heads)

        def iters(self, g):
            return g.K.rows // KV_ROWS

        def load(self, g, task, inp, k, arrived):
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            hkv = h // (g.Q.depth // g.K.depth)
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived)
            tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        def setup(self, st):
            st.q = tk.st(bf16, Q_ROWS // 2, d, count=2)          # each consumer's 64 query rows
            st.scores = tk.rt(f32, 16, KV_ROWS)                  # this warp's 16 rows of S
            st.probs = tk.rt(bf16, 16, KV_ROWS)
            st.out = tk.rt(f32, 16, d)
            st.row_max = tk.col_vec(st.scores)
            st.prev_max = tk.col_vec(st.scores)
            st.row_sum = tk.col_vec(st.scores)

        def start(self, st, task):
            g = st.g
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            tk.warpgroup.load(st.q[tk.warpgroup.id()], g.Q, (b, h, task.row * 2 + tk.warpgroup.id(), 0))
            tk.fence_proxy_async()                               # wgmma reads it through the async proxy
            tk.named_sync(1, 8)                                  # both consumer warpgroups
            tk.zero(st.out)
            tk.zero(st.row_sum)
            tk.neg_infty(st.row_max)

        def compute(self, st, inp, k):
            wg = tk.warpgroup.id()
            tk.warpgroup.mm_ABt(st.scores, st.q[wg], inp.k)
            tk.warpgroup.mma_async_wait()
            tk.mul(st.scores, st.scores, st.g.scale_log2)
            tk.copy(st.prev_max, st.row_max)
            tk.row_max(st.row_max, st.scores, st.row_max)        # running max over the tiles so far
            tk.sub_row(st.scores, st.scores, st.row_max)
            tk.exp2(st.scores, st.scores)
            tk.sub(st.prev_max, st.prev_max, st.row_max)         # rescale what was accumulated
            tk.exp2(st.prev_max, st.prev_max)
            tk.mul(st.row_sum, st.row_sum, st.prev_max)
            tk.row_sum(st.row_sum, st.scores, st.row_sum)
            tk.mul_row(st.out, st.out, st.prev_max)
            tk.copy(st.probs, st.scores)
            tk.warpgroup.mma_AB(st.out, st.probs, inp.v)

        def finish(self, g, st, task):
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            rows = task.row * 2 + tk.warpgroup.id()               # in 64-row units
            tk.div_row(st.out, st.out, st.row_sum)
            tk.warpgroup.store(g.O, st.out, (b, h, rows, 0))
            tk.log2(st.row_sum, st.row_sum)                      # lse = (max + log2(sum)) * ln 2
            tk.add(st.row_sum, st.row_sum, st.row_max)
            tk.mul(st.row_sum, st.row_sum, 1.0 / LOG2E)
            tk.store(g.L, st.row_sum, (b, h, rows * 4 + tk.warp_id() % 4))

    return Attention


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
              return_lse: bool = False):
    """softmax(q k^T * scale) v for (batch, heads, seq, dim) bf16 tensors; key/value heads may divide
    the query heads (GQA/MQA). Returns the output, and with return_lse the fp32 log-sum-exp per row."""
    if q.dim() != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"expects q (B, H, N, D) and k, v (B, H_kv, N_kv, D); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype != torch.bfloat16 or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"expects bf16 tensors, got {q.dtype}, {k.dtype}, {v.dtype}")
    (b, h, n, d), (hkv, nk) = q.shape, k.shape[1:3]
    if d not in (64, 128):
        raise ValueError(f"head dim {d} is not supported (64 or 128)")
    if h % hkv:
        raise ValueError(f"query heads ({h}) must be a multiple of key/value heads ({hkv})")
    if causal:
        raise NotImplementedError("causal attention is not implemented yet in tkpy's attention kernel")
    if n % Q_ROWS or nk % KV_ROWS:
        raise NotImplementedError(f"sequence lengths must be multiples of 128 for now; got {n} and {nk}")
    q, k, v = (x.contiguous() for x in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, n, dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    _attention(d)(q, k, v, o, lse, scale * LOG2E)
    return (o, lse) if return_lse else o
