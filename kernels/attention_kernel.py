"""FlashAttention-style forward attention on Hopper with tkpy's LCF template: the kernel (_attention).

Its options are attention_config.AttentionConfig's; which ones attention() runs for a shape is attention_policy's
choice (the tables named below live there), the task orders tkpy.templates' (causal_pairs_order,
head_sections_order), split-K's merge attention_combine's, and attention() itself (checks, packing, launch)
attention_forward's.

A task is 128 query rows of one (batch, head): two consumer warpgroups own 64 rows each, receive their query tile
in shared memory (at D128 each warp then keeps its 16 rows in registers, Q_REGISTERS), and stream key/value tiles
that a producer warpgroup loads with TMA through a ring of stages. Per tile a consumer computes S = Q K^T with
wgmma, an online softmax in the log2 domain on its registers, and O += P V with P straight from registers. The
softmax takes a row max on a task's first tile only: later tiles compute P on the running shift as S arrives and
leave O's scale, and a warpgroup redoes (with the max) the rare step where a row's P sums past 2^RESCALE_SLACK,
which it decides by a vote (stale_shift, STALE_SHIFT).
Grouped-query attention maps query head h to key/value head h // (H / H_kv). The two consumer warpgroups take turns
at the tensor cores (ping-pong, as FlashAttention-3): a warpgroup issues S = Q K^T only once the other's S is done,
so one's softmax runs while the other's matrix products do; and within a warpgroup, step k issues S_k and then step
k-1's O += P V, and runs its softmax while the latter runs (intra-warpgroup overlap). The turns go round across
tasks: a task of no steps takes none, and the first turn is handed over once, before the first task. PINGPONG /
OVERLAP / CONFIGS pick the defaults; benchmarks/bench_attention.py times the variants. `consumer_warpgroups=3` runs
3 consumer warpgroups on 192 query rows per task (FlashAttention-3's choice at D64, where the softmax outweighs the
short MMAs), the turns going round the ring of 3. `split_kv=True` puts K in the template's input ring and V in its
late ring (late_inputs), as FlashAttention-3's separate K and V pipelines: K_k is released once step k is done and
V_{k-1} once step k is, so each K stage is held for one step instead of two.

Any lengths: TMA zero-fills key/value rows past N_k and the scores of those keys are set to -inf on
the last key tile, whose step runs on the keys it holds rounded up to 16 (last_kv: S, the softmax and P V
narrower); query rows past N_q read zeros and their outputs are not stored. Causal
attention visits, per query tile, only the key tiles up to its diagonal (the template's per-task
step counts) and masks the diagonal tiles; a warpgroup's last step runs on the keys its rows see where they end
halfway into a tile (last_kv), and its steps past its own diagonal, which its task's later warpgroups need, it
skips (skip_masked; so does, with 3 warpgroups, one whose rows are all padding past N_q). Each persistent block
takes a long query tile and the short one that complements it in the next round (causal_pairs_order), so that the blocks
keep in step on a few heads at a time.
A causal kernel puts the padding of a partial query tile before row 0 (pad_first), where rows see the fewest keys.
At D128 each task's start loads the next task's Q into the query tile, which its rows in registers leave free
(q_preload), so that only a block's first task waits for its Q. Where a head's query tiles pair up, the kernels
(causal ones from 8 query tiles a head, 32 at D128) run in clusters of two blocks on adjacent query tiles
(attention_policy.cluster_for): one block multicasts each K tile and the other each V tile into both, so the L2 serves
them once per pair; the non-causal pairs of 3-warpgroup tasks deal a band's 64-row units round its tiles, so that a
partial last band shares its padding (unit), and from 13 query tiles a head pair up an odd number of them with a
tile of padding (causal pairs from CAUSAL_PAIR_TILES, the padding tile before row 0).
"""
from __future__ import annotations

import contextlib
import functools
import math

import tkpy as tk
from tkpy import call, f32
from tkpy.templates import causal_pairs_order, head_sections_order, own_barrier, own_sync, shared

from .attention_config import AttentionConfig
from .attention_policy import REGISTERS_3WG, q_rows, whole_clusters
from .tensor_layout import cdiv

LOG2E = 1.4426950408889634
FLT_MAX = 3.4028234663852886e38
HEAD_GROUP = 8                      # heads per section of the task order at most (K/V of a section share L2)
SECTION_BYTES = 16 << 20            # ... and as many as keep the section's K and V within this many bytes
RESCALE_SLACK = 8.0                 # stale_shift: log2 of how far a kept step's P may exceed 1
TASK_LOADS = {(False, False, False): "start", (True, False, False): "ahead", (True, True, False): "ahead_from_step",
              (False, False, True): "preload"}    # (q_ahead, next_q_in_step, q_preload) -> the template's task_loads


@functools.cache
def _attention(config: AttentionConfig):
    """The LCF attention kernel (a tk.lcf template) of `config` (its options, checked and resolved), cached."""
    c = config
    d, dtype, causal, groups, packed = c.d, c.dtype, c.causal, c.consumer_warpgroups, c.packed
    pingpong, overlap, kv, stages, split_kv, split_k = c.turns, c.overlapped, c.kv_rows, c.stage_count, c.split_kv, \
        c.split_k
    cluster, lse, last_kv, q_ahead, q_registers = c.cluster, c.lse, c.last_kv, c.q_ahead, c.q_in_registers
    q_preload, pad_first, skips, stale_shift = c.preloads_q, c.pads_first, c.skips, c.stale
    next_q_in_step, fast_division = c.q_load_in_step, c.fast_division
    rows = q_rows(groups)                                   # query rows per task
    interleaved = cluster > 1 and not causal and skips      # (see unit)
    everyone = (1 << cluster) - 1                           # the multicast mask of the cluster's blocks
    producer_registers, consumer_registers = REGISTERS_3WG if groups == 3 else (None, None)
    whole_bands = cluster > 1 and whole_clusters(causal, groups, packed, skips, pad_first)   # (tasks)
    rings = dict(late_stages=config.late_stage_count) if split_kv else {}

    scheduler = dict(scheduler=tk.templates.SplitK(lambda g: g.splits)) if split_k else {}

    @tk.lcf(consumer_warpgroups=groups, stages=stages, persistent=True, name=config.name, cluster=cluster,
            producer_registers=producer_registers, consumer_registers=consumer_registers,
            fast_division=fast_division, turns=pingpong, task_loads=TASK_LOADS[q_ahead, next_q_in_step, q_preload],
            **rings, **scheduler)
    class Attention:
        Q: tk.gl[dtype, "B", "H", "N", d]
        K: tk.gl[dtype, "B", "HKV", "NK", d]
        V: tk.gl[dtype, "B", "HKV", "NK", d]
        if split_k:                         # split s of batch b at s * B + b (combine_kernel merges them)
            O: tk.gl[f32, "SB", "H", "N", d]
            L: tk.gl[f32, "SB", "H", "NL"]
        else:
            O: tk.gl[dtype, "B", "H", "N", d]
            if lse:                         # NL: N rounded up to rows, or more (the stores need no bounds check)
                L: tk.gl[f32, "B", "H", "NL"]
        scale_log2: float                   # softmax scale * log2(e), positive
        if causal:
            offset: int                     # query i sees keys j <= i + offset
        if packed:
            rows_per_head: int              # row r of a sequence is query r % rows_per_head of its head
        if split_k:
            splits: int                     # tasks sharing each query tile's keys
        if split_kv:                        # K_k released after step k, V_k (read at step k + 1) after step k + 1
            inputs = dict(k=shared(dtype, kv, d))
            late_inputs = dict(v=shared(dtype, kv, d))
        else:
            inputs = dict(k=shared(dtype, kv, d), v=shared(dtype, kv, d))
        task_inputs = dict(q=shared(dtype, 64, d))      # each consumer warpgroup's 64 query rows, then its output

        def tasks(self, g):
            """(query tiles, batch * heads). Clusters whose padding rows cost little take a head's tiles rounded up
            to whole clusters: the interleaved ones (see unit), and causal ones with pad_first, whose extra tile of
            padding goes before row 0 (beside the tile that sees the fewest keys)."""
            return self.row_tiles(g), g.Q.batch * g.Q.depth

        def row_tiles(self, g):
            tiles = cdiv(g.Q.rows, rows)
            return cdiv(tiles, cluster) * cluster if whole_bands else tiles

        def first_unit(self, g, task):
            """The task's first 64 query rows, in 64-row units (warpgroup w takes unit first + w, but see unit).
            With pad_first the units before the first real one (0) are padding: the first task's first warpgroups
            (with clusters, tasks) have no rows."""
            if not pad_first:
                return task.row * groups
            return task.row * groups - (self.row_tiles(g) * groups - cdiv(g.Q.rows, 64))     # (the padding units)

        def unit(self, g, task, wg):
            """Warpgroup wg's 64 query rows of the task, in 64-row units. Non-causal clusters whose warpgroups of
            padding rows skip their steps (3 warpgroups) deal a band of the cluster's tiles' units round its tiles
            (tile r's warpgroup w takes unit band * cluster * groups + cluster * w + r % cluster): the padding of
            a head's partial last band is then shared among the band's tiles, which run in lockstep, instead of
            one tile of mostly padding beside whole ones (at 1024 rows, 16 units: 2 + 2 real warpgroups rather
            than 3 + 1), and an odd number of query tiles a head pairs up with a last tile of padding (tasks; at
            2048 rows, 11 tiles: the last band's 2 real units 1 + 1). Units past the last real one are padding
            (zeros in, nothing stored)."""
            if not interleaved:
                return self.first_unit(g, task) + wg
            return task.row // cluster * (cluster * groups) + cluster * wg + task.row % cluster

        if causal:
            def iters(self, g, task):
                """The key tiles holding a key that some (real) query row of the tile sees."""
                last_row = call("min", self.first_unit(g, task) * 64 + rows - 1, g.Q.rows - 1)
                if packed:      # the last row's position, or the last position if the tile starts another head
                    n, first_row = g.rows_per_head, self.first_unit(g, task) * 64
                    last_row = call("min", n - 1, last_row % n + (last_row // n - first_row // n) * n)
                seen = last_row + g.offset + 1                           # keys 0 .. seen-1
                return call("max", 0, call("min", cdiv(g.K.rows, kv), cdiv(seen, kv)))
        else:
            def iters(self, g):
                return cdiv(g.K.rows, kv)

        def order(self, g, index, row_tiles, col_tiles):
            """Causal: causal_pairs_order's pairs (every block in step with the others, on a few heads at a time).
            Otherwise sections of up to HEAD_GROUP heads whose K and V fit in SECTION_BYTES (a third of the
            L2: 8 heads at 4096 keys of D128, 2 at 16384); in each, the last query tiles first, heads inner:
            the blocks running together share the K/V of a few heads."""
            if causal:
                schedulers = tk.grid_dim.x // cluster if cluster > 1 else tk.grid_dim.x     # (clusters)
                return causal_pairs_order(index, row_tiles, col_tiles, schedulers)
            return head_sections_order(index, row_tiles, col_tiles, g.section_heads)

        def constants(self, g):
            """Non-causal: the heads of a section of the task order (order)."""
            if causal:
                return {}
            return dict(section_heads=call("max", 1, call("min", HEAD_GROUP,
                                                          SECTION_BYTES // (g.K.rows * (2 * d * dtype.nbytes)))))

        def load(self, g, task, inp, k, arrived):
            k = task.k0 + k if split_k else k                            # (split-K: from the share's first)
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            hkv = h // (g.Q.depth // g.K.depth)
            tk.tma.expect(arrived, inp)                                  # the whole stage, a peer's half included
            if cluster > 1:     # the cluster's query tiles are of one head: block 0 loads K, block 1 V, to all
                with tk.if_(task.rank == 0):
                    tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived, multicast=everyone)
                if not split_kv:                                         # (split: V in load_late)
                    with tk.else_():
                        tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived, multicast=everyone)
                return
            tk.tma.load_async(inp.k, g.K, (b, hkv, k, 0), arrived)      # rows past NK arrive as zeros
            if not split_kv:
                tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        if split_kv:
            def load_late(self, g, task, inp, k, arrived):
                """V_k, into the ring of late stages (after K_k, once its stage is free)."""
                k = task.k0 + k if split_k else k
                b, h = task.col // g.Q.depth, task.col % g.Q.depth
                hkv = h // (g.Q.depth // g.K.depth)
                tk.tma.expect(arrived, inp)
                if cluster > 1:                                          # block 1 loads V, to all
                    with tk.if_(task.rank == 1):
                        tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived, multicast=everyone)
                else:
                    tk.tma.load_async(inp.v, g.V, (b, hkv, k, 0), arrived)

        def setup(self, st):
            if q_registers:
                st.q_regs = tk.rt(dtype, 16, d)
            st.probs = tk.rt(dtype, 16, kv)                      # P, kept for the next step's P V
            st.out = tk.rt(f32, 16, d)
            st.row_max = tk.col_vec(st.out)                      # running max of the raw scores
            st.shift = tk.col_vec(st.out)                        # row_max * scale_log2 (causal: at least -FLT_MAX)
            st.factor = tk.col_vec(st.out)                       # the previous shift, then exp2(its change)
            st.row_sum = tk.col_vec(st.out)
            if stale_shift:
                st.step_sum = tk.col_vec(st.out)                 # a step's share of the row sums
            elif overlap:                                        # where each warp stores its row sums, unread:
                st.anchor = tk.sv(f32, 16, count=4 * groups)     # see compute

        def load_task(self, g, task, inp, arrived):
            """The calling consumer warpgroup's 64 query rows of `task` (zeros past N; a warpgroup of padding rows
            before row 0 loads rows 0-63, whose results it does not store)."""
            b, h = task.col // g.Q.depth, task.col % g.Q.depth
            unit = self.unit(g, task, tk.warpgroup.id())
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.q, g.Q, (b, h, call("max", 0, unit) if pad_first else unit, 0), arrived)

        if q_preload:   # a task's rows come into registers at the last task's finish (the block's first: its start)
            def take_task_inputs(self, st, inp):
                self.q_to_registers(st, inp.q)

        def start(self, st, task):
            g = st.g
            if q_registers and not q_preload:
                self.q_to_registers(st, st.task_inputs.q)
            tk.zero(st.out)
            tk.zero(st.row_sum)
            tk.neg_infty(st.row_max)
            tk.neg_infty(st.shift)
            if causal:   # key k * kv + c is masked for this warp's row r when c > r + diagonal - k * kv
                first_row = self.warpgroup_row(g, task) + tk.warp_id() % 4 * 16
                if packed:                                       # (r's position: (first_row + r) % rows_per_head)
                    st.first_row = tk.let(first_row, "first_row")
                else:
                    st.diagonal = tk.let(first_row + g.offset, "diagonal")
                    if last_kv:     # the keys below this are those some row of this warpgroup sees
                        st.seen = tk.let(self.seen(g, task), "seen")

        if skips:
            def warpgroup_steps(self, st):
                return self.steps_seen(st)

        def warpgroup_row(self, g, task):
            """This warpgroup's first query row of the task (negative for padding before row 0, see first_unit)."""
            return self.unit(g, task, tk.warpgroup.id()) * 64

        def seen(self, g, task):
            """Causal: the keys below this are those some row of this warpgroup sees."""
            return self.warpgroup_row(g, task) + 64 + g.offset

        def steps_seen(self, st):
            """The task's steps on a key tile that some row of this warpgroup sees: none where its rows are all
            padding past N; causal, up to its diagonal (with 3 warpgroups on 128-row key tiles the first one's ends
            a tile before its task's)."""
            g, task = st.g, st.task
            real = call("max", 0, call("min", 1, g.Q.rows - self.warpgroup_row(g, task)))   # 1, or 0 for padding rows
            if not causal:
                return st.iters * real
            first_key_tile = task.k0 if split_k else 0
            return call("min", st.iters, cdiv(call("max", self.seen(g, task), 0), kv) - first_key_tile) * real

        def mask(self, st, k, scores):
            """S's scores of keys its rows do not see set to -inf: causal, past each row's diagonal; on the last
            tile, keys past NK. S's columns: the key tile's rows in use (kv, or last_kv)."""
            g = st.g
            width = scores.type.cols
            k = st.task.k0 + k if split_k else k                 # the key tile
            if causal and packed:                                # a row at position p masks c > p + diagonal
                diagonal = g.offset - k * kv
                with tk.if_(diagonal < width - 1):              # (so the tile masks nothing for p >= 0 past this)
                    tk.tril_periodic(scores, scores, st.first_row, g.rows_per_head, diagonal, -math.inf)
            # keys past NK (the last tile) and, causal, past the warp's rows' diagonals (st.diagonal: its first row's)
            tk.mask_scores(scores, k * kv, g.K.rows, first_row=st.diagonal if causal and not packed else None)

        def softmax(self, st, k, scores):
            """S -> P = exp2(S * scale_log2 - shift) in place, masked, shift = running max * scale_log2 (the max
            of the raw scores: the scale is positive); st.factor becomes the factor that rescales what was
            accumulated (exp2 of the shift's change); the row sums are updated. Per score: FMNMX (max), one
            FFMA and MUFU.EX2 (P), FADD (sum)."""
            self.mask(st, k, scores)
            tk.online_softmax(scores, st.row_max, st.shift, st.factor, st.row_sum, st.g.scale_log2,
                              floor=-FLT_MAX if causal else None)    # (causal: rows that saw only masked keys)

        def softmax_on_stale_shift(self, st, k, scores, redo_s):
            """S -> P in place, masked, on the running shift (tk.online_softmax_stale: no row max, so the
            exponentials start as S arrives, and O keeps its scale); where the warpgroup's vote says a row's P grew
            past 2^RESCALE_SLACK, S again (redo_s: S = Q K^T, every MMA of the warpgroup then done), masked, and
            the softmax with the max, O rescaled."""
            def redo():
                redo_s()
                self.mask(st, k, scores)
            self.mask(st, k, scores)
            tk.online_softmax_stale(scores, st.row_max, st.shift, st.factor, st.row_sum, st.step_sum,
                                    st.g.scale_log2, redo=redo, rescale=(st.out,), vote_barrier=own_barrier(),
                                    slack=RESCALE_SLACK, floor=-FLT_MAX if causal else None)

        def tiles(self, st, width):
            """This warp's 16 rows of S for a step on `width` key rows (P's exponentials in place), a tile of the
            step's own (dead between steps), and of the P it becomes: st.probs, kept for the next step's P V, or
            on a narrow step (width last_kv; the step's own P V ends the task) its first columns. (As
            a window of a whole-tile S, NVRTC 13.0's ptxas serialized the wgmmas, C7511; a tile of its own for
            that P left D128 with Q in registers too few registers for them, C7512.)"""
            if width == kv:
                return tk.rt(f32, 16, kv, name="scores"), st.probs
            return tk.rt(f32, 16, width, name="scores_last"), st.probs.subtile(16, width)

        def narrow_step(self, st, k):
            """Whether step k takes last_kv rows: on the partial last key tile (any task that reaches it ends
            there), and causal, on the warpgroup's last step where its rows see none of the keys past those."""
            key_tile = st.task.k0 + k if split_k else k
            left_out = key_tile * kv + last_kv                  # the first key the narrow step leaves out
            if causal and not packed:
                return (k == st.last_step) & ((left_out >= st.g.K.rows) | (st.seen <= left_out))
            return left_out >= st.g.K.rows

        @staticmethod
        def rows_of(tile, width):
            """A key/value tile's first `width` rows (the whole tile at kv)."""
            return tile if width == kv else tile.subtile(width, d)

        def q_to_registers(self, st, q):
            tk.load(st.q_regs, q.subtile(16, d, (tk.warp_id() % 4, 0)))    # this warp's 16 rows

        def q_operand(self, st):
            """A of S = Q K^T: this warp's query rows in registers, or the warpgroup's query tile."""
            return st.q_regs if q_registers else st.task_inputs.q

        def redo_s(self, st, scores, k_rows):
            """S = Q K^T again (stale_shift's redone step), and every MMA of the warpgroup done."""
            tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
            tk.warpgroup.mma_async_wait()

        def rescale(self, st, scores, probs):
            tk.mul_row(st.out, st.out, st.factor)                # O to the new running max
            tk.copy(probs, scores)                               # P for O += P V

        def by_width(self, st, k, step):
            """step(kv), or with last_kv, step(last_kv) where narrow_step says and step(kv) elsewhere."""
            if not last_kv:
                return step(kv)
            with tk.if_(self.narrow_step(st, k)):
                step(last_kv)
            with tk.else_():
                step(kv)

        if overlap:
            def compute(self, st, inp, k, prev):
                self.by_width(st, k, lambda width: self.step(st, inp, k, prev, width))
        else:
            def compute(self, st, inp, k):
                self.by_width(st, k, lambda width: self.step(st, inp, k, width))

        if overlap:
            def step(self, st, inp, k, prev, width=kv):
                """Step k issues S_k = Q K_k^T and then O += P_{k-1} V_{k-1} (P kept from step k-1, V_{k-1}
                from the previous stage), then waits for S_k alone and runs its softmax (the issue itself lasts
                about as long as the products: see OVERLAP); the last step adds its own P V. One branch per
                case: the assembler keeps the MMAs asynchronous only if every path waits before it reads an
                accumulator. `width`: K_k's rows in use (kv, or last_kv on a narrow step, a task's last)."""
                (scores, probs), k_rows = self.tiles(st, width), self.rows_of(inp.k, width)
                if pingpong:
                    st.turns.take()
                with tk.if_(k > 0):
                    tk.mark("turn taken")                       # (timeline marks: no code unless TKPY_TIMELINE=1)
                    tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                    tk.mark("S issued")
                    tk.warpgroup.mma_AB(st.out, st.probs, prev.v)
                    tk.mark("P V issued")
                    if pingpong:
                        st.turns.hand_on()
                    tk.warpgroup.mma_async_wait(1)          # S_k; O += P_{k-1} V_{k-1} still running
                    tk.mark("S arrived")
                    if stale_shift:     # (the vote's barrier keeps the P V wait below the exponentials)
                        self.softmax_on_stale_shift(st, k, scores, lambda: self.redo_s(st, scores, k_rows))
                    else:
                        self.softmax(st, k, scores)
                        # The assembler would otherwise move the wait above the softmax's exp2s: it keeps shared
                        # stores before the wait, and the row sums depend on every exp2.
                        tk.store(st.anchor[tk.warp_id()], st.row_sum)
                        tk.mark("softmax: row sums")
                    tk.warpgroup.mma_async_wait()           # O and P are free again
                    tk.mark("P V done")
                    if not stale_shift:                         # (stale_shift: rescaled where the step was redone)
                        tk.mul_row(st.out, st.out, st.factor)
                with tk.else_():
                    tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                    if pingpong:
                        st.turns.hand_on()
                    if next_q_in_step:                          # the next task's Q, behind this S
                        st.load_next_task_inputs()
                    tk.warpgroup.mma_async_wait()
                    tk.mark("S arrived (no P V running)")
                    self.softmax(st, k, scores)          # (no rescale: O is still zero)
                # P converted once for both paths: with a conversion in each, ptxas copied P's 32 registers into
                # the ones the next P V reads at every step. (O's rescale stays in the k > 0 path, after its wait:
                # the assembler keeps the MMAs asynchronous only if every path waits before it writes an
                # accumulator; the first step has nothing to rescale.) Packing P into a
                # second tile beside the exponentials instead (no wait for P_{k-1} V) ran 8% slower at D64 and
                # does not fit D128's registers.
                tk.copy(probs, scores)
                tk.mark("O rescaled, P converted")
                with tk.if_(k == st.last_step) if width == kv else contextlib.nullcontext():
                    tk.warpgroup.mma_AB(st.out, probs, self.rows_of(inp.late.v if split_kv else inp.v, width))
                    if split_kv:                # V_k from its late stage; with nothing left in flight, the
                        tk.warpgroup.mma_async_wait()                               # template releases K_k at once
        else:
            def step(self, st, inp, k, width=kv):
                if pingpong:
                    st.turns.take()
                scores, probs = self.tiles(st, width)
                k_rows = self.rows_of(inp.k, width)
                tk.warpgroup.mm_ABt(scores, self.q_operand(st), k_rows)
                tk.warpgroup.mma_async_wait()                    # S, and the previous step's O += P V
                if pingpong:                                    # the other's S runs during this softmax
                    st.turns.hand_on()
                if stale_shift:                                  # (the first step sets the shift)
                    with tk.if_(k > 0):
                        self.softmax_on_stale_shift(st, k, scores, lambda: self.redo_s(st, scores, k_rows))
                    with tk.else_():
                        self.softmax(st, k, scores)              # (no rescale: O is still zero)
                    tk.copy(probs, scores)
                else:
                    self.softmax(st, k, scores)
                    self.rescale(st, scores, probs)
                tk.warpgroup.mma_AB(st.out, probs, self.rows_of(inp.v, width))

        def finish(self, g, st, task):
            b, h = tk.let(task.col // g.Q.depth, "b"), tk.let(task.col % g.Q.depth, "h")   # (once: O's and L's stores)
            unit = tk.let(self.unit(g, task, tk.warpgroup.id()), "unit")   # this warpgroup's rows (64-row units)
            # O / l as O * (1 / l): one division per row instead of an IEEE division (~8 instructions) per element
            # (measured faster); rows that see no key (causal, split-K): 0 * (1 / tiny) = 0.
            if causal or split_k:
                tk.map(st.factor, lambda total: 1.0 / tk.max(total, 1e-30), st.row_sum)
            else:
                tk.map(st.factor, lambda total: 1.0 / total, st.row_sum)
            tk.mul_row(st.out, st.out, st.factor)
            tk.mark("finish: O normalized")
            if split_k:         # O (fp32) straight from the registers into split s's rows of the workspace
                b = task.split * g.Q.batch + b
                with tk.if_(unit >= 0) if pad_first else contextlib.nullcontext():
                    tk.warpgroup.store(g.O, st.out, (b, h, unit, 0), masked=True)
                tk.fence_proxy_async()          # every warp's reads of the query tile before TMA writes it again
                own_sync(groups)
                self.store_lse(g, st, b, h, unit)
                return
            tk.warpgroup.store(st.task_inputs.q, st.out)         # O through the query tile's shared memory:
            tk.fence_proxy_async()                               # every MMA reading Q is done; TMA reads it
            tk.mark("finish: O in shared")
            own_sync(groups)                                     # through the async proxy
            tk.mark("finish: O complete in shared")
            stores = tk.warp_id() % 4 == 0                       # rows past N are clipped (padding before row 0:
            if pad_first:                                        # nothing to store)
                stores = stores & (unit >= 0)
            with tk.if_(stores):
                tk.tma.store_async(g.O, st.task_inputs.q, (b, h, unit, 0))
                tk.tma.store_commit_group()
                tk.tma.store_async_wait(read_only=True)         # a later task's Q may land there
            tk.mark("finish: O store read")
            if q_preload:       # no warp writes the tile again (the next O) before the store has read it: without the
                own_sync(groups)    # wait for a Q at the next start, a task of no steps got there first
                tk.mark("finish: tile free")
            if lse:
                self.store_lse(g, st, b, h, unit)

        def store_lse(self, g, st, b, h, unit):
            """lse = ln(sum_j e^(s_j * scale)) = (max * scale_log2 + log2(sum_j 2^(s_j * scale_log2 - shift))) * ln 2
            per row into L, with shift = max * scale_log2 as P used it; -inf for rows that see no key (log2(0) +
            -FLT_MAX, or -inf where no step ran)."""
            tk.map(st.row_sum, lambda total, m: (tk.log2(total) + m) * (1.0 / LOG2E), st.row_sum, st.shift)
            real = (unit >= 0) if pad_first else (unit * 64 < g.Q.rows) if interleaved else None
            with tk.if_(real) if real is not None else contextlib.nullcontext():   # (L has lse_rows(N) rows)
                tk.store(g.L, st.row_sum, (b, h, unit * 4 + tk.warp_id() % 4))

    return Attention
