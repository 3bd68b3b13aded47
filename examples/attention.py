"""Attention forward, softmax(Q K^T * scale) V, FlashAttention-3 style, on tkpy's LCF template and its parts.

What it teaches: a fast Hopper attention as the template's methods. A task is 64 query rows per consumer warpgroup
of one (batch, head), each warpgroup's rows a per-task input (`task_inputs`); the producer streams K tiles through
the template's ring of stages and V tiles through its late ring (`late_inputs`: step k reads V_{k-1}). A step
issues S_k = Q K_k^T and O += P_{k-1} V_{k-1} on the warpgroup's turn at the tensor cores (`turns=True`,
`with st.turn()`: while one warpgroup's MMAs run, another's softmax does), then runs S_k's softmax while its P V
still runs (the overlap within a warpgroup). The softmax (tk.OnlineSoftmax) takes P on the running max of the
earlier steps (step_stale), redone with the new max only where some row's P grew past 2^8, which is rare. Causal:
each task visits the key tiles up to its diagonal (`iters(g, task)`), a warpgroup skips those past its own rows
(`warpgroup_steps`), the padding of a partial tile goes before row 0, where rows see the fewest keys, and the
tasks go in long/short pairs (causal_pairs_order) so that the persistent blocks keep in step. Blocks run in
clusters of two on adjacent query tiles of a head: one loads each K tile and the other each V tile, multicast into
both. O leaves through the Q tile's shared memory with a TMA store (store_through).
kernels/attention_*.py is the production kernel (head dims to 256, GQA, any lengths, split-K, the log-sum-exp).

    python examples/attention.py                    # Hopper GPU: checked against float64, timed beside SDPA
    TKPY_INTERPRET=1 python examples/attention.py   # tkpy's CPU interpreter, small shapes (also without a GPU)
"""
import contextlib
import functools
import math

import torch

import tkpy as tk
from harness import check, device, report_speed
from tkpy import bf16, f32
from tkpy.templates import QueryTiles, causal_pairs_order, head_sections_order, own_barrier, shared, store_through

# head dim -> consumer warpgroups (64 query rows each; 3 at D64, where the softmax outweighs the short MMAs, with the
# registers split 32 / 160 a thread between the producer and them), key/value rows per tile, K stages, V stages
TILES = {64: (3, 128, 4, 4, dict(producer_registers=32, consumer_registers=160)), 128: (2, 128, 2, 3, {})}
LOG2E, FLT_MAX, BOTH = 1.4426950408889634, 3.4028234663852886e38, 0b11   # BOTH: the cluster's two blocks


@functools.cache
def attention_kernel(d: int, causal: bool):
    groups, kv, stages, late_stages, registers = TILES[d]

    @tk.lcf(consumer_warpgroups=groups, stages=stages, late_stages=late_stages, cluster=2, turns=True,
            fast_division=True, name=f"example_attention_d{d}" + ("_causal" if causal else ""), **registers)
    class Attention(QueryTiles.of(groups, kv, causal, cluster=2)):   # (tasks, iters, unit, warpgroup_steps)
        Q: tk.gl[bf16, "BH", "N", d]               # (batch, head) pairs, rows, head dim
        K: tk.gl[bf16, "BH", "N", d]
        V: tk.gl[bf16, "BH", "N", d]
        O: tk.gl[bf16, "BH", "N", d]
        scale_log2: float                          # softmax scale * log2(e)
        inputs = dict(k=shared(bf16, kv, d))       # step k's K tile, released after step k
        late_inputs = dict(v=shared(bf16, kv, d))  # ... and its V tile, read at step k + 1
        task_inputs = dict(q=shared(bf16, 64, d))  # each consumer warpgroup's query rows, then its O


        def order(self, g, index, row_tiles, col_tiles):   # non-causal: 8 heads at a time share the L2
            return causal_pairs_order(index, row_tiles, col_tiles, tk.grid_dim.x // 2) if causal else \
                head_sections_order(index, row_tiles, col_tiles, 8)

        def load(self, g, task, inp, k, arrived, rank=0, name="k"):   # block 0 of the pair loads K, block 1 V,
            tk.tma.expect(arrived, inp)                                # into both (rows past N arrive as zeros)
            with tk.if_(task.rank == rank):
                tk.tma.load_async(getattr(inp, name), getattr(g, name.upper()), (task.col, k, 0), arrived,
                                  multicast=BOTH)

        def load_late(self, g, task, inp, k, arrived):
            self.load(g, task, inp, k, arrived, rank=1, name="v")

        def load_task(self, g, task, inp, arrived):    # (padding before row 0 loads rows 0-63, unused)
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.q, g.Q, (task.col, tk.call("max", 0, self.unit(g, task)), 0), arrived)

        def setup(self, st):                       # each warp's 16 rows of O and of P, and their softmax
            st.out, st.probs = tk.rt(f32, 16, d), tk.rt(bf16, 16, kv)
            st.softmax = tk.OnlineSoftmax(st.out, floor=-FLT_MAX if causal else None, rescale=(st.out,),
                                          vote_barrier=own_barrier())

        def start(self, st, task):                 # (causal: the floor for rows whose first keys are all masked)
            tk.zero(st.out)
            st.softmax.reset()
            st.first_row = tk.let(self.unit(st.g, task) * 64 + tk.warp_id() % 4 * 16, "first_row")   # this warp's

        def scores(self, st, inp, k, scores, turn=contextlib.nullcontext):   # S_k = Q K_k^T, every MMA done,
            with turn():                                                       # masked
                tk.warpgroup.mm_ABt(scores, st.task_inputs.q, inp.k)
            tk.warpgroup.mma_async_wait()
            self.mask(st, k, scores)

        def mask(self, st, k, scores):             # keys past N; causal: keys past each row's diagonal
            tk.mask_scores(scores, k * kv, st.g.K.rows, first_row=st.first_row if causal else None)

        def compute(self, st, inp, k, prev):
            scores, scale_log2 = tk.rt(f32, 16, kv), st.g.scale_log2
            with tk.if_(k > 0):
                with st.turn():
                    tk.warpgroup.mm_ABt(scores, st.task_inputs.q, inp.k)
                    tk.warpgroup.mma_AB(st.out, st.probs, prev.v)
                tk.warpgroup.mma_async_wait(1)     # S_k is here; P_{k-1} V_{k-1} still runs
                self.mask(st, k, scores)
                st.softmax.step_stale(scores, scale_log2, redo=lambda: self.scores(st, inp, k, scores))
                tk.warpgroup.mma_async_wait()      # O and P are free again
            with tk.else_():                       # the first step: nothing to overlap, O still zero
                self.scores(st, inp, k, scores, st.turn)
                st.softmax.step(scores, scale_log2)
            tk.copy(st.probs, scores)
            with tk.if_(k == st.last_step):       # the last step's own P V (the template then releases K_k)
                tk.warpgroup.mma_AB(st.out, st.probs, inp.late.v)
                tk.warpgroup.mma_async_wait()

        def finish(self, g, st, task):             # O / row sums, through the Q tile (no rows before row 0)
            st.softmax.normalize(st.out)
            store_through(g.O, st.out, st.task_inputs.q, (task.col, self.unit(g, task), 0), groups,
                          when=self.unit(g, task) >= 0)

    return Attention


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v of contiguous bf16 (B, H, N, D) tensors, D 64 or 128; causal: top-left."""
    if not (q.shape == k.shape == v.shape and q.dim() == 4 and q.shape[3] in TILES and
            all(x.dtype == torch.bfloat16 and x.is_contiguous() for x in (q, k, v))):
        raise ValueError("attention takes contiguous bf16 q, k, v of one (B, H, N, D) shape, D 64 or 128")
    (b, h, n, d), o = q.shape, torch.empty_like(q)
    attention_kernel(d, causal)(*(x.view(b * h, n, d) for x in (q, k, v, o)), LOG2E / math.sqrt(d))
    return o


def main() -> None:
    where = device()                             # "cuda", or "cpu": tkpy's CPU interpreter runs every launch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for d, causal in ((d, causal) for d in TILES for causal in (False, True)):
        shape = (1, 2, 1000, d) if where == "cuda" else (1, 1, 456, d)     # partial tiles of rows and keys
        q, k, v = (torch.randn(shape, device=where).to(torch.bfloat16) for _ in range(3))
        check(f"attention {shape} causal={causal} ({where})", attention(q, k, v, causal),
              sdpa(q.double(), k.double(), v.double(), is_causal=causal), atol=3e-3, rtol=1e-2)
        if where == "cuda":
            q, k, v = (torch.randn(16, 16, 4096, d, device=where, dtype=torch.bfloat16) for _ in range(3))
            report_speed(f"B16 H16 N4096 D{d} causal={causal}", 4 * 16 * 16 * 4096 ** 2 * d / (1 + causal),
                         {"tkpy example": lambda: attention(q, k, v, causal),
                          "torch SDPA": lambda: sdpa(q, k, v, is_causal=causal)})


if __name__ == "__main__":
    main()
