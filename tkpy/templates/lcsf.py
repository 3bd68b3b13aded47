"""The load-compute-store-finish (LCSF) block template: LCF whose results leave through shared memory.

Everything of the LCF template (lcf.py) holds: tasks, iters, order, load, setup, start and compute as there.
The result of a task goes through a second ring, of `output_stages` output buffers declared as

    outputs = dict(c=shared(bf16, 64, 256, count=2))     # the tiles of one output stage

in `output_pieces` pieces (a class attribute, default 1: e.g. 4 column slices of a 128 x 256 tile):

    finish(g, st, task, out)           (consumers) write the task's result into the output stage `out`
    finish(g, st, task, out, piece)    ... piece `piece` (a Python int, 0 .. output_pieces - 1) of it; work done
                                       once per task goes under `if piece == 0:`
    store(g, task, out)                (the storer warp) copy `out` to global memory: tk.tma.store_async
    store(g, task, out, piece)         (or store_add_async) of its tiles

For each piece the consumers wait until the output stage is free, call finish, fence their shared-memory
writes for the async proxy (tk.fence_proxy_async) and arrive on its `out_ready` semaphore; then they go on
to the next task's main loop at once. The storer (warp 1 of the producer warpgroup; warp 0 keeps
loading) waits for `out_ready`, calls store, commits the stores and, once TMA has read the stage, arrives
on its `out_free` semaphore (with 2+ output stages, after issuing the next piece's stores, so that those
of consecutive pieces overlap); before the block exits it waits for every store to complete. So a task's
stores overlap the next task's loads and matrix products, and the consumers' epilogue is only the
register-to-shared copy.

Shared memory: stages x the input stage + output_stages x the output stage (checked when the class is
decorated: a TraceError says how many stages would fit). Parameters as for LCF, plus
`output_stages` (1..8, default 2) and producer_warps >= 2 (the storer is a warp of its own).
"""
from __future__ import annotations

import sys
from typing import Optional

from .. import ops as tk
from ..frontend.control import if_, let, range as tk_range, warp_id
from .common import StageTiles, buffer_specs, declare_ring, element, positional_parameters
from .lcf import LCF, decorator
from .pipeline import Pipeline
from .schedule import Grouped


class LCSF(LCF):
    kind = "LCSF"
    methods = LCF.methods + ("store",)
    min_producer_warps = 2

    def __init__(self, cls, *, output_stages: int = 2, **options):
        if not (isinstance(output_stages, int) and 1 <= output_stages <= 8):
            raise ValueError(f"output_stages must be 1..8, got {output_stages!r}")
        self.output_stages = output_stages
        super().__init__(cls, **options)

    def _configure(self, cls) -> None:
        self.outputs = buffer_specs(cls, "outputs")
        if not self.outputs:
            raise TypeError(f"an LCSF class declares its output buffers: outputs = dict(name=shared(dtype, rows, "
                            f"cols, count)); {cls.__name__} has none")
        pieces = getattr(cls, "output_pieces", 1)
        if not (isinstance(pieces, int) and pieces >= 1):
            raise ValueError(f"{cls.__name__}.output_pieces must be a positive int, got {pieces!r}")
        self.pieces = pieces
        self.finish_takes_piece = positional_parameters(self.user.finish) >= 5     # finish(g, st, task, out, piece)
        self.store_takes_piece = positional_parameters(self.user.store) >= 4       # store(g, task, out, piece)
        if pieces > 1 and not (self.finish_takes_piece and self.store_takes_piece):
            raise TypeError(f"{cls.__name__} has output_pieces = {pieces}: write finish(g, st, task, out, piece) "
                            "and store(g, task, out, piece)")

    def _rings(self) -> list:
        return super()._rings() + [("outputs", self.outputs, self.output_stages, "output_stages")]

    def _semaphores(self) -> int:
        return super()._semaphores() + 2 * self.output_stages


class OutputPipeline(Pipeline):
    """An LCF trace plus the output ring: consumers fill output stages, the storer warp TMA-stores them."""

    def declare_buffers(self) -> None:
        self.out_arrays = declare_ring(self.t.outputs, self.t.output_stages)

    def declare_semaphores(self) -> None:
        n = self.t.output_stages
        self.out_ready, self.out_free = tk.semaphore(n), tk.semaphore(n)
        self.out_ready.name, self.out_free.name = "out_ready", "out_free"

    def init_semaphores(self) -> None:
        for s in range(self.t.output_stages):
            tk.init_semaphore(element(self.out_ready, s), 4 * self.t.consumers)   # every consumer warp's writes
            tk.init_semaphore(element(self.out_free, s), 1)                       # the storer

    def output_stage(self, index, piece) -> tuple:
        """(output stage tiles, its semaphore index, phase, ring position) of a piece of task `index`."""
        n = self.t.output_stages
        o = let(self.local(index) * self.t.pieces + piece, "out_it")
        slot = let(o % n, "out_stage")
        return StageTiles(self.out_arrays, self.t.outputs, slot), slot, let(o // n % 2, "out_phase"), o

    def finish(self, st, task, index) -> None:
        t, user = self.t, self.user
        for piece in range(t.pieces):
            out, slot, phase, o = self.output_stage(index, piece)
            with if_(o >= t.output_stages):
                tk.wait(element(self.out_free, slot), 1 - phase)     # the storer is done reading its last round
            if t.finish_takes_piece:
                user.finish(self.g, st, task, out, piece)
            else:
                user.finish(self.g, st, task, out)
            tk.fence_proxy_async()                 # this warp's shared writes, visible to the TMA store
            tk.arrive(element(self.out_ready, slot))

    def other_producer_warps(self) -> None:
        """The storer: stores each piece as soon as it is ready. With 2+ output stages it keeps the newest
        piece's stores in flight and frees the stage of the piece before (whose stores TMA has read by
        then), so consecutive pieces' stores overlap; with one stage it frees it once read."""
        t, user, n = self.t, self.user, self.t.output_stages
        lag = min(1, n - 1)
        with if_(warp_id() == 4 * t.consumers + 1):
            for index in tk_range(self.first, self.groups, self.step):
                task = self.task_at(index)
                for piece in range(t.pieces):
                    out, slot, phase, o = self.output_stage(index, piece)
                    tk.wait(element(self.out_ready, slot), phase)
                    if t.store_takes_piece:
                        user.store(self.g, task, out, piece)
                    else:
                        user.store(self.g, task, out)
                    tk.tma.store_commit_group()
                    tk.tma.store_async_wait(lag, read_only=True)    # all but the newest `lag` pieces are read
                    if not lag:
                        tk.arrive(element(self.out_free, slot))
                    elif piece > 0:
                        tk.arrive(element(self.out_free, (o - 1) % n))
                    else:
                        with if_(o > 0):
                            tk.arrive(element(self.out_free, (o - 1) % n))
            tk.tma.store_async_wait(0)             # every store has landed before the block exits


LCSF.pipeline = OutputPipeline


def lcsf(cls=None, *, consumer_warpgroups: int = 2, stages: int = 4, output_stages: int = 2,
         late_stages: Optional[int] = None, persistent: bool = True, group: int = 8, cluster: int = 1,
         cluster_along: str = "rows", producer_warps: int = 4,
         producer_registers: Optional[int] = None, consumer_registers: Optional[int] = None,
         scheduler: Optional[Grouped] = None, name: Optional[str] = None, fast_division: bool = False):
    """Class decorator: `@tk.lcsf(consumer_warpgroups=2, stages=4, output_stages=2)`; see the module docstring
    (fast_division: as LCF's)."""
    options = dict(consumer_warpgroups=consumer_warpgroups, stages=stages, output_stages=output_stages,
                   late_stages=late_stages,
                   persistent=persistent, group=group, cluster=cluster, cluster_along=cluster_along,
                   producer_warps=producer_warps,
                   producer_registers=producer_registers, consumer_registers=consumer_registers,
                   scheduler=scheduler, name=name, fast_division=fast_division)
    return decorator(LCSF, sys._getframe(1), cls, options)
