"""What the backward's LCF kernels share (attention_bwd_kernel, attention_bwd_dq_kernel), as base classes of their
template classes: the tensors they read, and a key tile task's walk over the query tiles of each query head of its
key/value head."""
from __future__ import annotations

import tkpy as tk
from tkpy import call, f32
from tkpy.templates import shared

from .tensor_layout import cdiv


def tensor_inputs(dtype, d: int):
    """A base class declaring the tensors every backward kernel reads, first among its arguments (the template takes
    the annotations of its bases first)."""
    class TensorInputs:
        Q: tk.gl[dtype, "B", "H", "N", d]
        K: tk.gl[dtype, "B", "HKV", "NK", d]
        V: tk.gl[dtype, "B", "HKV", "NK", d]
        DO: tk.gl[dtype, "B", "H", "N", d]
        L: tk.gl[f32, "B", "H", "NQ"]               # lse * log2(e) per query row, +inf past N (the prep kernel's)
        D: tk.gl[f32, "B", "H", "NQ"]               # rowsum(dO * O) per query row, 0 past N

    return TensorInputs


def key_task_steps(dtype, d: int, causal: bool, rows: int, pieces: int):
    """A base class (with tensor_inputs', then the dK and dV they write) for kernels whose task is a tile of keys
    (the class's first_key(task): its first key) and whose step k is a tile of `rows` queries, of every query head
    of the task's key/value head in turn (causal: from the first tile a row of which sees a key of the task), its Q
    and dO tiles in `pieces` column pieces (the inputs q and do) with the tile's rows of L and D (lse, delta)."""
    class KeyTaskSteps(tensor_inputs(dtype, d)):
        DK: tk.gl[dtype, "B", "HKV", "NK", d]
        DV: tk.gl[dtype, "B", "HKV", "NK", d]
        inputs = dict(q=shared(dtype, rows, d // pieces, count=pieces),
                      do=shared(dtype, rows, d // pieces, count=pieces),
                      lse=shared(f32, rows), delta=shared(f32, rows))     # the step's rows of L and D

        @staticmethod
        def q_tiles(g):
            return cdiv(g.Q.rows, rows)

        def first_tile(self, g, task):
            """The first query tile a row of which sees a key of the task (causal; 0 otherwise)."""
            if not causal:
                return 0
            return call("max", 0, (self.first_key(task) - g.offset) // rows)

        def per_head(self, g, task):
            """The task's query tiles of each query head."""
            return call("max", 0, self.q_tiles(g) - self.first_tile(g, task)) if causal else self.q_tiles(g)

        if causal:
            def iters(self, g, task):
                return g.Q.depth // g.K.depth * self.per_head(g, task)
        else:
            def iters(self, g):
                return g.Q.depth // g.K.depth * self.q_tiles(g)

        def step_at(self, g, task, k):
            """(batch, query head, query tile) of the task's step k: the key/value head's query heads in turn."""
            per_head = self.per_head(g, task)
            b, hkv = task.col // g.K.depth, task.col % g.K.depth
            return b, hkv * (g.Q.depth // g.K.depth) + k // per_head, self.first_tile(g, task) + k % per_head

        def load(self, g, task, inp, k, arrived):
            b, h, tile = self.step_at(g, task, k)
            tk.tma.expect(arrived, inp)
            for p in range(pieces):                 # rows past N arrive as zeros
                tk.tma.load_async(inp.q[p], g.Q, (b, h, tile, p), arrived)
                tk.tma.load_async(inp.do[p], g.DO, (b, h, tile, p), arrived)
            tk.tma.load_async(inp.lse, g.L, (b, h, tile), arrived)
            tk.tma.load_async(inp.delta, g.D, (b, h, tile), arrived)

    return KeyTaskSteps
