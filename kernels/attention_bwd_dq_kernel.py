"""Attention's backward: the dQ pass (_attention_bwd_dq), dQ by a pass over the key tiles in a fixed order.

It runs where the main kernel (attention_bwd_kernel) leaves dQ out: deterministic=True (the main kernel's
reduce-adds of dQ land in any order, so its sums vary in their last bits) and head dims past 128. A task is 128
query rows of one (batch, head), 64 per consumer warpgroup, which loads its query and dO rows into shared memory and
their lse_log2 and D into registers at the task's start; the producer streams the key/value tiles the rows see
(causal: up to their diagonal). Per step a warpgroup computes

    S = Q K^T, dP = dO V^T                                       (fp32, 16 x kv per warp)
    P = exp2(S * scale_log2 - lse_log2), dS = P * (dP - D)       (P = 0 where masked and for keys past N_k)
    dQ += dS K                                                   (dS from registers as wgmma's A)

and the task's end writes dQ * scale in the input dtype (rows past N are not stored).
"""
from __future__ import annotations

import functools

import tkpy as tk
from tkpy import call, f32
from tkpy.templates import shared

from .attention_bwd_config import AttentionBwdConfig
from .attention_bwd_kernel import first_warp, own_sync
from .attention_bwd_policy import DQ_TASK_ROWS, task_group
from .attention_bwd_steps import tensor_inputs
from .tensor_layout import cdiv


@functools.cache
def _attention_bwd_dq(config: AttentionBwdConfig):
    """The LCF dQ pass of attention's backward (a tk.lcf template) for `config`, cached."""
    c = config
    d, dtype, causal, kv = c.d, c.dtype, c.causal, c.dq_kv_rows

    @tk.lcf(consumer_warpgroups=2, stages=c.dq_stage_count, persistent=True, name=c.dq_name,
            scheduler=tk.templates.Grouped(task_group(causal), snake=c.dq_snake_order))
    class AttentionBwdDq(tensor_inputs(dtype, d)):
        DQ: tk.gl[dtype, "B", "H", "N", d]
        scale_log2: float                           # softmax scale * log2(e), any sign
        scale: float
        if causal:
            offset: int                             # query i sees keys j <= i + offset
        inputs = dict(k=shared(dtype, kv, d), v=shared(dtype, kv, d))

        def tasks(self, g):
            return cdiv(g.Q.rows, DQ_TASK_ROWS), g.Q.batch * g.Q.depth

        if causal:
            def iters(self, g, task):
                """The key tiles holding a key that some row of the task sees."""
                last_row = call("min", task.row * DQ_TASK_ROWS + DQ_TASK_ROWS - 1, g.Q.rows - 1)
                return call("max", 0, call("min", cdiv(g.K.rows, kv), cdiv(last_row + g.offset + 1, kv)))
        else:
            def iters(self, g):
                return cdiv(g.K.rows, kv)

        def load(self, g, task, inp, k, arrived):
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            hkv = h // (g.Q.depth // g.K.depth)
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived)          # rows past NK arrive as zeros
            tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        def setup(self, st):
            st.q = tk.st(dtype, 64, d, count=2)     # each warpgroup's 64 query rows, and their dO
            st.do = tk.st(dtype, 64, d, count=2)
            st.q_arrived = tk.semaphore(2)
            st.tasks_done = tk.var(0, "tasks_done")
            with tk.if_(first_warp()):
                tk.init_semaphore(st.q_arrived[tk.warpgroup.id()], 1)
            own_sync()
            st.probs = tk.rt(f32, 16, kv)           # S, then P
            st.grads = tk.rt(f32, 16, kv)           # dP, then dS
            st.ds = tk.rt(dtype, 16, kv)
            st.lse = tk.col_vec(st.probs)
            st.delta = tk.col_vec(st.probs)
            st.dq = tk.rt(f32, 16, d)

        def start(self, st, task):
            g, wg = st.g, tk.warpgroup.id()
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            unit = task.row * 2 + wg                # this warpgroup's 64 query rows
            own_sync()                              # the last task's products have read Q and dO
            with tk.if_(first_warp()):
                tk.tma.expect(st.q_arrived[wg], st.q[wg], st.do[wg])
                tk.tma.load_async(st.q[wg], g.Q, (b, h, unit, 0), st.q_arrived[wg])
                tk.tma.load_async(st.do[wg], g.DO, (b, h, unit, 0), st.q_arrived[wg])
            row = unit * 4 + tk.warp_id() % 4       # this warp's 16 rows
            tk.load(st.lse, g.L, (b, h, row))
            tk.load(st.delta, g.D, (b, h, row))
            tk.zero(st.dq)
            if causal:              # key j is hidden from row r of this warp where j > r + diagonal
                st.diagonal = tk.let(row * 16 + g.offset, "diagonal")
            tk.wait(st.q_arrived[wg], st.tasks_done % 2)
            st.tasks_done += 1

        def compute(self, st, inp, k):
            g, wg = st.g, tk.warpgroup.id()
            tk.warpgroup.mm_ABt(st.probs, st.q[wg], inp.k)
            tk.warpgroup.mm_ABt(st.grads, st.do[wg], inp.v)
            tk.warpgroup.mma_async_wait()
            tk.map(st.probs, lambda s, lse: tk.exp2(s * g.scale_log2 - lse), st.probs, st.lse)
            if causal:
                diagonal = st.diagonal - k * kv
                with tk.if_(diagonal < kv - 1):     # this tile crosses the warp's diagonal
                    tk.tril(st.probs, st.probs, diagonal, 0.0)
            with tk.if_(k * kv + kv > g.K.rows):     # the last tile: keys past NK
                tk.right_fill(st.probs, st.probs, g.K.rows - k * kv, 0.0)
            tk.map(st.grads, lambda p, dp, delta: p * (dp - delta), st.probs, st.grads, st.delta)
            tk.copy(st.ds, st.grads)
            tk.warpgroup.mma_AB(st.dq, st.ds, inp.k)
            tk.warpgroup.mma_async_wait()

        def finish(self, g, st, task):
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            tk.mul(st.dq, st.dq, g.scale)
            tk.warpgroup.store(g.DQ, st.dq, (b, h, task.row * 2 + tk.warpgroup.id(), 0), masked=True)

    return AttentionBwdDq
