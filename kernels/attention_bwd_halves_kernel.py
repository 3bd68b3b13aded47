"""Attention backward with both consumer warpgroups on a task's keys, each computing the column half of dK, dV and dQ
that is its own (AttentionBwdConfig.column_halves; D128 and D256 families): a task per 128-key tile at D128, per
64-key tile past it; dQ by reduce-adds at every head dim, no dQ pass.

Each step (64 queries): each warpgroup computes S^T = K Q^T and dP^T = V dO^T of the task's keys for 32 of the
queries (wgmma N = 32, FlashAttention-3's split of S and dP between its warpgroups), P^T and dS^T from them in fp32,
and writes its 32 columns of each in the dtype into shared tiles (two of each, by step parity: one barrier a step).
Then each computes over all 64 queries dV += P^T dO and dK += dS^T Q for its column half (both operands from shared
memory), and dQ = dS K for its half a column piece at a time, each piece added into the fp32 workspace DQ by a TMA
reduce-add from the warpgroup's staging tile (dq_storer: through the step-output ring, by the producer's storer
warp; dq_red: from the registers by red.global.add, no staging tiles). The two warpgroups' work is the same,
where attention_bwd_kernel's first warpgroup computes the whole dQ at D128 (3 to the second's 2 products of
64 x 64 x 128 a step), and past D128 its split tasks and the dQ pass compute S and dP three times (nine products
of 64 x 64 x d per 64 keys and queries where this computes five).

K, V, Q and dO are held in column pieces (two of d / 2 at D128, four of d / 4 past it); warpgroup w's half is its
own run of them.
"""
from __future__ import annotations

import functools

import tkpy as tk
from tkpy import f32
from tkpy.templates import shared

from .attention_bwd_config import AttentionBwdConfig
from .attention_bwd_kernel import DS_READY, KV_FREE, first_warp, hide_keys, own_sync
from .attention_bwd_policy import REGISTERS, task_group
from .attention_bwd_steps import key_task_steps
from .tensor_layout import cdiv

ROWS = 64                           # queries a step; keys of a wgmma M tile
HALF = ROWS // 2                    # the queries of a step whose S^T and dP^T each warpgroup computes


def shape(family: int) -> tuple[int, int]:
    """(column pieces of K, V, Q and dO, 64-key M tiles a task) at head-dim family `family`: D128's two pieces and
    128 keys, past it four and 64 keys (the registers: dK's and dV's halves are 128 a thread either way)."""
    return (2, 2) if family == 128 else (4, 1)


@functools.cache
def _attention_bwd_halves(config: AttentionBwdConfig):
    """The LCF kernel of attention's backward by column halves (a tk.lcf template) for `config`, cached."""
    c = config
    d, dtype, causal = c.d, c.dtype, c.causal
    pieces, units = shape(c.family)
    piece, own = d // pieces, pieces // 2           # columns a piece; pieces of each warpgroup's half
    keys = units * ROWS                             # keys a task
    storer = c.storer_stages                        # dQ's reduce-adds by the producer's storer warp
    producer_registers, consumer_registers = REGISTERS
    storer_options = dict(step_output_stages=storer, step_output_writers=2) if storer else {}

    @tk.lcf(consumer_warpgroups=2, stages=c.stage_count, persistent=True, name=c.name, group=task_group(causal),
            producer_registers=producer_registers, consumer_registers=consumer_registers, **storer_options)
    class AttentionBwdHalves(key_task_steps(dtype, d, causal, ROWS, pieces)):
        DQ: tk.gl[f32, "B", "H", "NQ", d]           # dQ / scale accumulated (zeroed by the prep kernel)
        scale_log2: float                           # softmax scale * log2(e), any sign
        scale: float
        if causal:
            offset: int                             # query i sees keys j <= i + offset

        if storer:                                  # the step's dQ piece p (warpgroup w's: own * w + i)
            step_outputs = dict(dq=shared(f32, ROWS, piece, count=pieces))

            def store_step(self, g, task, out, k):
                """The storer warp: the step's dQ pieces added into DQ (TMA reduce-adds)."""
                b, h, tile = self.step_at(g, task, k)
                for p in range(pieces):
                    tk.tma.store_add_async(g.DQ, out.dq[p], (b, h, tile, p))

        def tasks(self, g):
            """(key tiles, batch * key/value heads)."""
            return cdiv(g.K.rows, keys), g.K.batch * g.K.depth

        @staticmethod
        def first_key(task):
            return task.row * keys

        def setup(self, st):
            st.k = tk.st(dtype, keys, piece, count=pieces, name="k")
            st.v = tk.st(dtype, keys, piece, count=pieces, name="v")
            st.kv_arrived = tk.semaphore(1)
            st.tasks_done = tk.var(0, "tasks_done")
            with tk.if_((tk.warpgroup.id() == 0) & first_warp()):
                tk.init_semaphore(st.kv_arrived[0], 1)
            tk.named_sync(KV_FREE, 8)               # (the second warpgroup waits on the first's semaphore)
            # this warpgroup's half of dK and dV: [key tile m][its piece i]
            st.dk = [[tk.rt(f32, 16, piece, name="dk") for _ in range(own)] for _ in range(units)]
            st.dv = [[tk.rt(f32, 16, piece, name="dv") for _ in range(own)] for _ in range(units)]
            # P^T and dS^T (keys x queries) by step parity, 64-byte swizzled: each warpgroup's 32 query columns
            # a whole swizzle panel
            st.p_tiles = tk.st(dtype, keys, ROWS, count=2, swizzle=64, name="p_tiles")
            st.ds_tiles = tk.st(dtype, keys, ROWS, count=2, swizzle=64, name="ds_tiles")
            if not (c.dq_red or storer):
                st.dq_tiles = tk.st(f32, ROWS, piece, count=2, name="dq_tiles")   # each warpgroup's dQ piece
            st.dq = tk.rt(f32, 16, piece, name="dq")
            st.steps_done = tk.var(0, "steps_done")

        def start(self, st, task):
            g = st.g
            b, hkv = task.col // g.K.depth, task.col % g.K.depth
            tk.named_sync(KV_FREE, 8)               # the last task's reads of K and V are done
            with tk.if_((tk.warpgroup.id() == 0) & first_warp()):
                tk.tma.expect(st.kv_arrived[0], st.k, st.v)
                for p in range(pieces):             # rows past NK arrive as zeros
                    tk.tma.load_async(st.k[p], g.K, (b, hkv, task.row, p), st.kv_arrived[0])
                    tk.tma.load_async(st.v[p], g.V, (b, hkv, task.row, p), st.kv_arrived[0])
            for acc in st.dk + st.dv:
                for tile in acc:
                    tk.zero(tile)
            st.key_row = tk.let(task.row * keys + tk.warp_id() % 4 * 16, "key_row")    # (of key tile 0)
            tk.wait(st.kv_arrived[0], st.tasks_done % 2)
            st.tasks_done += 1

        def compute(self, st, inp, k):
            g, wg = st.g, tk.warpgroup.id()
            b, h, tile = self.step_at(g, st.task, k)
            parity = st.steps_done % 2
            # S^T, then P^T, and dP^T, then dS^T, of key tile m for this warpgroup's 32 queries
            probs = [tk.rt(f32, 16, HALF, name="probs") for _ in range(units)]
            grads = [tk.rt(f32, 16, HALF, name="grads") for _ in range(units)]
            for products, kv, qdo in ((probs, st.k, inp.q), (grads, st.v, inp.do)):
                for m in range(units):
                    for p in range(pieces):
                        mm = tk.warpgroup.mm_ABt if p == 0 else tk.warpgroup.mma_ABt
                        mm(products[m], kv[p].subtile(ROWS, piece, (m, 0)), qdo[p].subtile(HALF, piece, (wg, 0)))
            lse = tk.row_vec(probs[0], name="lse")  # (read while the products run)
            tk.load(lse, inp.lse.subvec(HALF, wg))
            delta = tk.row_vec(probs[0], name="delta")
            tk.load(delta, inp.delta.subvec(HALF, wg))
            tk.warpgroup.mma_async_wait(units * pieces)     # S^T's: P^T computed while dP^T's products run
            p_tile, ds_tile = st.p_tiles[parity], st.ds_tiles[parity]
            for m in range(units):
                key_row = st.key_row + m * ROWS
                tk.map(probs[m], lambda s, l: tk.exp2(s * g.scale_log2 - l), probs[m], lse)
                hide_keys(probs[m], key_row, tile * ROWS + wg * HALF, g, causal)
                p_low = tk.rt(dtype, 16, HALF, name="p_low")
                tk.copy(p_low, probs[m])
                tk.warpgroup.store(p_tile.subtile(ROWS, HALF, (m, wg)), p_low)
            tk.warpgroup.mma_async_wait()
            for m in range(units):
                tk.map(grads[m], lambda p, dp, dd: p * (dp - dd), probs[m], grads[m], delta)
                ds_low = tk.rt(dtype, 16, HALF, name="ds_low")
                tk.copy(ds_low, grads[m])
                tk.warpgroup.store(ds_tile.subtile(ROWS, HALF, (m, wg)), ds_low)
            tk.fence_proxy_async()                  # (wgmma reads them through the async proxy)
            tk.named_sync(DS_READY, 8)              # both halves there; the other parity's reads (two steps ago) done
            # dQ's first piece issued first, so that its staging and reduce-add overlap dV's and dK's products
            tk.warpgroup.mm_AtB(st.dq, ds_tile, st.k[own * wg])
            for m in range(units):                  # over all 64 queries, this warpgroup's column half
                for i in range(own):
                    p = own * wg + i
                    tk.warpgroup.mma_AB(st.dv[m][i], p_tile.subtile(ROWS, ROWS, (m, 0)), inp.do[p])
                    tk.warpgroup.mma_AB(st.dk[m][i], ds_tile.subtile(ROWS, ROWS, (m, 0)), inp.q[p])
            tk.warpgroup.mma_async_wait(2 * units * own)    # (dQ's first piece; dV's and dK's still in flight)
            if storer:
                with st.step_output() as out:       # (a free stage waited for once the first piece is there)
                    for i in range(own):
                        if i:
                            tk.warpgroup.mm_AtB(st.dq, ds_tile, st.k[own * wg + i])
                            tk.warpgroup.mma_async_wait()
                        tk.warpgroup.store(out.dq[own * wg + i], st.dq)
            else:
                self.dq_piece_out(st, 0, b, h, tile)
                for i in range(1, own):
                    tk.warpgroup.mm_AtB(st.dq, ds_tile, st.k[own * wg + i])
                    tk.warpgroup.mma_async_wait()
                    self.dq_piece_out(st, i, b, h, tile)
            tk.warpgroup.mma_async_wait()
            st.steps_done += 1

        def dq_piece_out(self, st, i, b, h, tile):
            """This warpgroup's dQ piece i (of dQ = dS K over the task's keys, in st.dq) into DQ: through its staging
            tile by a TMA reduce-add (the last piece's reads of the tile waited for first), or (dq_red) from the
            registers by red.global.add."""
            g, wg = st.g, tk.warpgroup.id()
            if c.dq_red:
                tk.warpgroup.store_add(g.DQ, st.dq, (b, h, tile, own * wg + i))
                return
            with tk.if_(first_warp()):              # the staging tile: the last reduce-add has read it
                tk.tma.store_async_wait(read_only=True)
            own_sync()
            staging = st.dq_tiles[wg]
            tk.warpgroup.store(staging, st.dq)
            tk.fence_proxy_async()
            own_sync()
            with tk.if_(first_warp()):
                tk.tma.store_add_async(g.DQ, staging, (b, h, tile, own * wg + i))
                tk.tma.store_commit_group()

        def finish(self, g, st, task):
            b, hkv = task.col // g.K.depth, task.col % g.K.depth
            for m in range(units):
                for i in range(own):
                    p = own * tk.warpgroup.id() + i
                    tk.mul(st.dk[m][i], st.dk[m][i], g.scale)
                    tk.warpgroup.store(g.DK, st.dk[m][i], (b, hkv, task.row * units + m, p), masked=True)
                    tk.warpgroup.store(g.DV, st.dv[m][i], (b, hkv, task.row * units + m, p), masked=True)

        if not (c.dq_red or storer):
            def done(self, st):
                """The last reduce-adds complete before the block exits."""
                with tk.if_(first_warp()):
                    tk.tma.store_async_wait()

    return AttentionBwdHalves
