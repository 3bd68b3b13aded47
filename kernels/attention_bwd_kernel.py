"""Attention's backward on Hopper with tkpy's LCF template: the main kernel (_attention_bwd), dK and dV, and dQ.

A task is a tile of KEY_ROWS = 128 keys of one (batch, key/value head): two consumer warpgroups own 64 keys each and
load their K and V rows into shared memory at the task's start. The producer streams, through the template's ring,
the (Q, dO) tiles of 64 (config.q_rows: 128) query rows that see those keys, with those rows' L and D (TMA-loaded
shared vectors): every query tile of every query head of the key/value head
(GQA/MQA: dK and dV summed over them in registers), causal ones from the first tile some row of which sees a key of
the task. Per step a warpgroup computes, transposed so that its own keys are the rows (wgmma's M),

    S^T = K Q^T, dP^T = V dO^T                                   (fp32, 16 x 64 or 16 x 128 per warp)
    P^T = exp2(S^T * scale_log2 - lse_log2)                       (lse_log2 per query: the prep kernel's L)
    dS^T = P^T * (dP^T - D)                                       (D = rowsum(dO * O) per query: the prep's D)
    dV += P^T dO, dK += dS^T Q                                    (P^T and dS^T from registers as wgmma's A)

with P^T set to 0 where the causal mask hides a key and for keys past N_k (rows past N have lse_log2 = +inf: P = 0).
dK is scaled by the softmax scale at the task's end. Any scale (zero, negative): P needs no running max here.

dQ (head dims up to 128, not deterministic): each warpgroup stores its dS^T into shared memory (two buffers, one
per step parity, so that one barrier a step suffices), both warpgroups meet, and the first warpgroup computes the
step's dQ over the task's 128 keys, dQ = dS K (dS^T from shared memory as wgmma's transposed A), a column piece at
a time, while the second goes on to its next step (as ThunderKittens does); it adds each piece into the fp32 workspace
DQ with a TMA reduce-add (FlashAttention-3's way); the convert kernel (attention_bwd_prep) scales it into the input
dtype. With `dq_storer` the pieces go through the template's step-output ring to a storer warp of the producer
warpgroup, which issues the reduce-adds (D64, whose steps are of 128 query rows, `q_rows`: each warpgroup computes
dQ's 64 rows of its own half of them, as FlashAttention-3's do at D64; a dQ column piece from each warpgroup over
64-row steps measured 0.91-1.03x the first warpgroup's both, and each warpgroup's dQ over its own keys 0.90x,
RESULTS.md runs 325 and 332). Otherwise the dQ pass computes dQ (attention_bwd_dq_kernel).

K, V, Q and dO are held in two column pieces of d / 2 (the dQ pieces' B operands are whole tiles). Past D128 a task
computes dK and dV of one piece only (config.splits = 2 tasks per key tile, which both compute S and dP), so that
its accumulators fit the registers. (Both warpgroups on the same keys, a column half each, with no dQ pass, measured
0.87-0.97x this at D128 and D256, 0.71-0.93x with its dQ options, RESULTS.md runs 335-336; removed.)
"""
from __future__ import annotations

import functools

import tkpy as tk
from tkpy import f32
from tkpy.templates import shared

from .attention_bwd_config import AttentionBwdConfig
from .attention_bwd_policy import KEY_ROWS, REGISTERS
from .attention_bwd_steps import key_task_steps
from .tensor_layout import cdiv

PIECES = 2                          # column pieces of d / 2 in which the main kernel holds K, V, Q and dO
KV_FREE = 1                         # named barriers: every consumer warp done with the task's K and V
DS_READY = 2                        # ... both warpgroups' dS^T of the step in shared memory
OWN = (3, 4)                        # ... the 4 warps of consumer warpgroup 0 / 1


def own_sync() -> None:
    """A barrier among the calling consumer warpgroup's 4 warps (a branch per warpgroup: immediate barrier ids)."""
    for wg in range(2):
        with tk.if_(tk.warpgroup.id() == wg):
            tk.warpgroup.sync(OWN[wg])


def first_warp():
    """The condition of a consumer warpgroup's first warp (which issues its TMA copies)."""
    return tk.warp_id() % 4 == 0


def hide_keys(probs, key_row, first_query, g, causal: bool) -> None:
    """P^T = 0 where a key is hidden from a query: causal (causal_mask, diagonal key_row - first_query - g.offset)
    and keys past N_k (key_row: the warp's first key; first_query: the tile's)."""
    if causal:
        causal_mask(probs, key_row - first_query - g.offset)
    with tk.if_(key_row + 16 > g.K.rows):           # keys past NK
        tk.lower_fill(probs, probs, g.K.rows - key_row, 0.0)


def causal_mask(probs, diagonal) -> None:
    """Causal: P^T[r, c] = 0 where key row r is hidden from query column c, c < r + diagonal (diagonal: the warp's
    first key minus the tile's first query minus the offset), on the tiles the diagonal crosses."""
    with tk.if_(diagonal > 1 - probs.type.rows):
        tk.triu(probs, probs, diagonal, 0.0)


@functools.cache
def _attention_bwd(config: AttentionBwdConfig):
    """The LCF main kernel of attention's backward (a tk.lcf template) for `config`, cached."""
    c = config
    d, dtype, causal, splits = c.d, c.dtype, c.causal, c.splits
    dp = d // PIECES
    atomic = not c.dq_pass
    storer = c.storer_stages if atomic else 0       # dQ's reduce-adds by the producer's storer warp
    outputs = PIECES // splits                      # column pieces of dK and dV a task accumulates
    rows = c.step_rows                              # query rows a step
    halves = rows // 64                             # 2: each warpgroup computes dQ's 64 rows of its half of them

    def band(vector, m):
        """The step's 64-query band m of its L or D rows (the whole vector at 64 rows a step)."""
        return vector if halves == 1 else vector.subvec(64, m)

    def band_rows(tile, m):
        """Rows of the step's 64-query band m of a Q or dO tile."""
        return tile if halves == 1 else tile.subtile(64, tile.type.cols, (m, 0))

    def band_cols(tile, m):
        """Columns of the step's 64-query band m of a dS^T tile."""
        return tile if halves == 1 else tile.subtile(64, 64, (0, m))

    producer_registers, consumer_registers = REGISTERS
    # the consumer warpgroups that fill each step's dQ stage: each its half's block, or the first the one block
    storer_options = dict(step_output_stages=storer, step_output_writers=halves) if storer else {}

    @tk.lcf(consumer_warpgroups=2, stages=c.stage_count, persistent=True, name=c.name,
            scheduler=tk.templates.Grouped(c.task_rows, snake=c.snake_order),
            producer_registers=producer_registers, consumer_registers=consumer_registers, **storer_options)
    class AttentionBwd(key_task_steps(dtype, d, causal, rows, PIECES)):
        if atomic:
            DQ: tk.gl[f32, "B", "H", "NQ", d]       # dQ / scale accumulated (zeroed by the prep kernel)
        scale_log2: float                           # softmax scale * log2(e), any sign
        scale: float
        if causal:
            offset: int                             # query i sees keys j <= i + offset
        if storer:                                  # piece p of the step's dQ rows m at m * PIECES + p
            step_outputs = dict(dq=shared(f32, 64, dp, count=PIECES * halves))

            def store_step(self, g, task, out, k):
                """The storer warp: the step's dQ pieces added into DQ (TMA reduce-adds)."""
                b, h, tile = self.step_at(g, task, k)
                for m in range(halves):
                    for p in range(PIECES):
                        tk.tma.store_add_async(g.DQ, out.dq[m * PIECES + p], (b, h, tile * halves + m, p))

        def tasks(self, g):
            """(key tiles * splits, batch * key/value heads)."""
            return cdiv(g.K.rows, KEY_ROWS) * splits, g.K.batch * g.K.depth

        @staticmethod
        def key_tile(task):
            return task.row // splits if splits > 1 else task.row

        def first_key(self, task):
            return self.key_tile(task) * KEY_ROWS

        def setup(self, st):
            # the task's K and V: warpgroup w's 64 rows, piece p, at w * PIECES + p
            st.k = tk.st(dtype, 64, dp, count=2 * PIECES)
            st.v = tk.st(dtype, 64, dp, count=2 * PIECES)
            st.kv_arrived = tk.semaphore(2)
            st.tasks_done = tk.var(0, "tasks_done")
            with tk.if_(first_warp()):
                tk.init_semaphore(st.kv_arrived[tk.warpgroup.id()], 1)
            tk.named_sync(KV_FREE, 8)               # (each warpgroup waits on the other's semaphore too)
            st.dk = [tk.rt(f32, 16, dp, name="dk") for _ in range(outputs)]
            st.dv = [tk.rt(f32, 16, dp, name="dv") for _ in range(outputs)]
            if atomic:
                st.ds_tiles = tk.st(dtype, 64, rows, count=4)      # dS^T: [step parity * 2 + warpgroup]
                if not storer:
                    st.dq_tiles = tk.st(f32, rows, dp, count=PIECES)       # piece p of the step's dQ
                st.steps_done = tk.var(0, "steps_done")
                # dQ's piece in P^T's registers (P^T is in p_low by then) where it fills them (compute); in a window
                # of them ptxas serialized the wgmmas (C7511, D64 causal): a tile of its own there
                if dp != rows:
                    st.dq = tk.rt(f32, 16, dp, name="dq")

        def start(self, st, task):
            g, wg = st.g, tk.warpgroup.id()
            b, hkv = task.col // g.K.depth, task.col % g.K.depth
            tk.named_sync(KV_FREE, 8)               # the last task's reads of K and V (both halves: dQ) are done
            with tk.if_(first_warp()):
                tiles = [st.k[wg * PIECES + p] for p in range(PIECES)] + [st.v[wg * PIECES + p] for p in range(PIECES)]
                tk.tma.expect(st.kv_arrived[wg], *tiles)
                for p in range(PIECES):             # rows past NK arrive as zeros
                    unit = self.key_tile(task) * 2 + wg
                    tk.tma.load_async(st.k[wg * PIECES + p], g.K, (b, hkv, unit, p), st.kv_arrived[wg])
                    tk.tma.load_async(st.v[wg * PIECES + p], g.V, (b, hkv, unit, p), st.kv_arrived[wg])
            for acc in st.dk + st.dv:
                tk.zero(acc)
            st.key_row = tk.let(self.key_tile(task) * KEY_ROWS + wg * 64 + tk.warp_id() % 4 * 16, "key_row")
            if atomic:                              # dQ's products read both warpgroups' K
                for other in range(2):
                    tk.wait(st.kv_arrived[other], st.tasks_done % 2)
            else:
                tk.wait(st.kv_arrived[wg], st.tasks_done % 2)
            st.tasks_done += 1

        def pieces_out(self, st):
            """The column pieces of dK and dV this task accumulates: all, or with splits its split's."""
            return list(range(PIECES)) if splits == 1 else [st.task.row % splits]

        def compute(self, st, inp, k):
            g, wg = st.g, tk.warpgroup.id()
            b, h, tile = self.step_at(g, st.task, k)
            # a step's own tiles (declared in the step, so that they are dead once converted for dV and dK)
            st.probs = tk.rt(f32, 16, rows, name="probs")   # S^T, then P^T, then (atomic, dp = 64) dQ's piece
            st.grads = tk.rt(f32, 16, rows, name="grads")   # dP^T, then dS^T
            if atomic and dp == rows:
                st.dq = st.probs
            for p in range(PIECES):                 # S^T = K Q^T and dP^T = V dO^T, over the pieces
                mm = tk.warpgroup.mm_ABt if p == 0 else tk.warpgroup.mma_ABt
                mm(st.probs, st.k[wg * PIECES + p], inp.q[p])
            for p in range(PIECES):
                mm = tk.warpgroup.mm_ABt if p == 0 else tk.warpgroup.mma_ABt
                mm(st.grads, st.v[wg * PIECES + p], inp.do[p])
            tk.mark("S dP issued")                  # (timeline marks: no code unless TKPY_TIMELINE=1)
            # the step's 64-query bands of S^T and dP^T (at 128 rows a step, each band with its own lse and D
            # vectors: the whole row's two would pass the registers beside S^T, dP^T, dK and dV)
            bands = [(st.probs, st.grads)] if halves == 1 else \
                [(st.probs.subtile(16, 64, (0, m)), st.grads.subtile(16, 64, (0, m))) for m in range(halves)]
            if halves == 1:
                lse = tk.row_vec(st.probs, name="lse")  # (read while the products run)
                tk.load(lse, inp.lse)
            outputs = self.pieces_out(st)
            # early_p: S^T's alone waited for (dP^T's in flight), P^T and dV's products before dP^T's wait
            # (FlashAttention-3's order; config.p_first, 64 rows a step: one band)
            tk.warpgroup.mma_async_wait(PIECES if c.p_first else 0)
            tk.mark("S arrived" if c.p_first else "S dP arrived")
            for m, (probs, _) in enumerate(bands):
                if halves > 1:
                    lse = tk.row_vec(probs, name="lse")
                    tk.load(lse, band(inp.lse, m))
                tk.map(probs, lambda s, l: tk.exp2(s * g.scale_log2 - l), probs, lse)
            hide_keys(st.probs, st.key_row, tile * rows, g, causal)
            lows = []                               # each band's dS^T in the dtype, for dQ
            for m, (probs, grads) in enumerate(bands):
                delta = tk.row_vec(probs, name="delta")
                tk.load(delta, band(inp.delta, m))
                if c.p_first:
                    p_low = tk.rt(dtype, 16, 64, name="p_low")
                    tk.copy(p_low, probs)
                    for i, p in enumerate(outputs):
                        tk.warpgroup.mma_AB(st.dv[i], p_low, inp.do[p])
                    tk.warpgroup.mma_async_wait(len(outputs))   # dP^T's (dV's in flight)
                    tk.mark("dP arrived")
                tk.map(grads, lambda p, dp, dd: p * (dp - dd), probs, grads, delta)
                if not c.p_first:
                    p_low = tk.rt(dtype, 16, 64, name="p_low")
                    tk.copy(p_low, probs)           # (the band's fp32 P^T dead from here: 128 rows need it)
                ds_low = tk.rt(dtype, 16, 64, name="ds_low")
                tk.copy(ds_low, grads)
                tk.mark("dS computed")
                for i, p in enumerate(outputs):     # over the band's queries
                    if not c.p_first:
                        tk.warpgroup.mma_AB(st.dv[i], p_low, band_rows(inp.do[p], m))
                    tk.warpgroup.mma_AB(st.dk[i], ds_low, band_rows(inp.q[p], m))
                lows.append(ds_low)
            tk.mark("dV dK issued")
            if atomic:
                self.dq_step(st, lows, b, h, tile)
            tk.warpgroup.mma_async_wait()           # (dQ's products waited for in dq_step)
            tk.mark("dV dK done")

        def dq_step(self, st, ds_lows, b, h, tile):
            """The step's dQ = dS K over both warpgroups' keys, added into DQ by the first warpgroup while the second
            goes on to its next step (at 128 query rows a step each warpgroup its half's rows; with a column piece
            each, both warpgroups waited on the dQ in every step: 1-5%
            slower at D64 and D128, 11% with D64's four stages; RESULTS.md run 266; dQ added from the registers by
            tk.store_add's red.global.add, a column piece each or each warpgroup's own keys: 0.74-0.80x and 0.54-0.66x
            cuDNN where this runs 0.80-0.91x, run 290)."""
            wg, parity = tk.warpgroup.id(), st.steps_done % 2
            for m, ds_low in enumerate(ds_lows):   # (each 64-query band's columns)
                tk.warpgroup.store(band_cols(st.ds_tiles[parity * 2 + wg], m), ds_low)
            tk.fence_proxy_async()                  # (wgmma reads it through the async proxy)
            tk.mark("dS stored")
            tk.named_sync(DS_READY, 8)              # both halves there; the other parity's reads (two steps ago) done
            tk.mark("dS of both there")
            if halves == 2:                         # each warpgroup dQ's rows of its half of the queries
                self.dq_pieces_to_storer(st, parity, wg, m=wg)
            else:
                with tk.if_(wg == 0):
                    if storer:
                        self.dq_pieces_to_storer(st, parity, 0)
                    else:
                        self.dq_pieces(st, parity, b, h, tile)
            st.steps_done += 1

        def dq_products(self, st, parity, p, m=0):
            """dQ's column piece p of the step (of its 64-row half m of the queries) into st.dq's registers: dS K
            over both warpgroups' keys."""
            for half in range(2):
                mm = tk.warpgroup.mm_AtB if half == 0 else tk.warpgroup.mma_AtB
                mm(st.dq, band_cols(st.ds_tiles[parity * 2 + half], m), st.k[half * PIECES + p])
            tk.warpgroup.mma_async_wait()
            tk.mark("dQ piece arrived")

        def dq_pieces_to_storer(self, st, parity, part, m=0):
            """dQ's column pieces of the step (of its query half m), one after another, into block `part` of a stage
            of the storer's ring (the first piece's products before the wait for a free stage)."""
            self.dq_products(st, parity, 0, m)
            with st.step_output() as out:
                for p in range(PIECES):
                    if p:
                        self.dq_products(st, parity, p, m)
                    tk.warpgroup.store(out.dq[part * PIECES + p], st.dq)
                    tk.mark("dQ piece staged")

        def dq_pieces(self, st, parity, b, h, tile):
            """dQ's column pieces of the step, one after another in st.dq's registers (both at once: ptxas serialized
            the wgmmas for want of registers, C7512), each through staging tile p into DQ."""
            g, dq = st.g, st.dq
            for p in range(PIECES):
                self.dq_products(st, parity, p)
                if p == 0:
                    with tk.if_(first_warp()):      # the staging tiles: the last step's reduce-adds have read them
                        tk.tma.store_async_wait(read_only=True)
                    own_sync()
                tk.warpgroup.store(st.dq_tiles[p], dq)
                tk.mark("dQ piece staged")
            tk.fence_proxy_async()
            own_sync()
            with tk.if_(first_warp()):
                for p in range(PIECES):
                    tk.tma.store_add_async(g.DQ, st.dq_tiles[p], (b, h, tile, p))
                tk.tma.store_commit_group()
            tk.mark("dQ reduce-add issued")

        def finish(self, g, st, task):
            b, hkv = task.col // g.K.depth, task.col % g.K.depth
            unit = self.key_tile(task) * 2 + tk.warpgroup.id()     # this warpgroup's 64 keys (rows past NK: clipped)
            for i, p in enumerate(self.pieces_out(st)):
                tk.mul(st.dk[i], st.dk[i], g.scale)
                tk.warpgroup.store(g.DK, st.dk[i], (b, hkv, unit, p), masked=True)
                tk.warpgroup.store(g.DV, st.dv[i], (b, hkv, unit, p), masked=True)

        if atomic and not storer:
            def done(self, st):
                """The last reduce-adds complete before the block exits."""
                with tk.if_(first_warp()):
                    tk.tma.store_async_wait()

    return AttentionBwd
