"""Step outputs of the LCF template: tiles some consumer warpgroups fill every step, which a storer warp of the
producer warpgroup copies out (TMA stores or reduce-adds) while the consumers go on: attention's backward's dQ, a
step's partial sums.

The class declares them and says how to store one step's:

    step_outputs = dict(dq=shared(f32, 64, 64, count=2))     # the tiles of one output stage
    store_step(g, task, out, k)      (the storer warp) copy step k's outputs `out` to global memory:
                                     tk.tma.store_async / store_add_async of its tiles (no commit: the template's)

and in compute fills a stage once every step of every task, in each of the warpgroups 0 .. `step_output_writers` - 1
(the decorator's option, default all):

    with st.step_output() as out:    waits until the storer has read the stage's last round, then (on leaving)
        ...write out.dq[0], ...      fences the warps' shared writes for the async proxy and tells the storer

A ring of `step_output_stages` stages (decorator option, 1..4, default 2) with two semaphores a stage: `ready` (the
writer warps' arrivals) and `free` (the storer's, once TMA has read it). With 2+ stages the storer keeps the newest
stage's copies in flight and frees the one before, so consecutive steps' copies overlap. Both sides count the steps
they pass (the consumers theirs, the storer every task's iters(g, task) in the block's task order), so they agree on
stage and phase. The storer is warp 1 of the producer warpgroup (warp 0 loads); it waits for every copy to complete
before the block exits.
"""
from __future__ import annotations

from contextlib import contextmanager

from .. import ops as tk
from ..frontend.control import if_, let, range as tk_range, var, warp_id
from .common import StageTiles, buffer_specs, declare_ring, element


class StepOutputs:
    """The template's side of a class's step_outputs (empty and false where it has none)."""

    def __init__(self, cls, groups: int, stages: int, writers):
        self.specs = buffer_specs(cls, "step_outputs")
        if not self.specs:
            if writers is not None or stages != 2:
                raise ValueError(f"step_output_stages and step_output_writers are for a class with step_outputs; "
                                 f"{cls.__name__} has none")
            return
        if not callable(getattr(cls, "store_step", None)):
            raise TypeError(f"{cls.__name__} has step_outputs: write store_step(g, task, out, k), which copies step "
                            "k's outputs to global memory")
        if callable(getattr(cls, "warpgroup_steps", None)):
            raise TypeError(f"{cls.__name__}: step_outputs are filled every step; a warpgroup_steps method skips some")
        if not (isinstance(stages, int) and 1 <= stages <= 4):
            raise ValueError(f"step_output_stages must be 1..4, got {stages!r}")
        writers = groups if writers is None else writers
        if not (isinstance(writers, int) and 1 <= writers <= groups):
            raise ValueError(f"step_output_writers must be 1..{groups} (consumer warpgroups 0 .. n - 1 fill each "
                             f"step's outputs), got {writers!r}")
        self.stages, self.writers = stages, writers

    def __bool__(self) -> bool:
        return bool(self.specs)

    def ring(self) -> tuple:
        return ("step_outputs", self.specs, self.stages, "step_output_stages")

    def semaphores(self) -> int:
        return 2 * self.stages if self.specs else 0

    def declare(self) -> "StepOutputRing":
        """The ring and its semaphores of one trace (before the template's warp 0 initialises them)."""
        return StepOutputRing(self)


class StepOutputRing:
    """One trace's step-output ring: its tiles and semaphores, the consumers' st.step_output and the storer."""

    def __init__(self, outputs: StepOutputs):
        self.specs, self.stages, self.writers = outputs.specs, outputs.stages, outputs.writers
        self.arrays = declare_ring(self.specs, self.stages, prefix="step_")
        self.ready, self.free = tk.semaphore(self.stages), tk.semaphore(self.stages)
        self.ready.name, self.free.name = "step_out_ready", "step_out_free"

    def init(self) -> None:
        for s in range(self.stages):
            tk.init_semaphore(element(self.ready, s), 4 * self.writers)     # every writer warp's writes
            tk.init_semaphore(element(self.free, s), 1)                     # the storer

    def _stage(self, count) -> tuple:
        slot = let(count % self.stages, "step_out_stage")
        return StageTiles(self.arrays, self.specs, slot), slot, let(count // self.stages % 2, "step_out_phase")

    def attach(self, st) -> None:
        """st.step_output(), the consumers' context manager (a count of the steps written a warp)."""
        count = var(0, "steps_written")

        @contextmanager
        def step_output():
            nonlocal count
            out, slot, phase = self._stage(count)
            with if_(count >= self.stages):
                tk.wait(element(self.free, slot), 1 - phase)     # the storer is done reading its last round
            yield out
            tk.fence_proxy_async()                               # this warp's shared writes, visible to TMA
            tk.arrive(element(self.ready, slot))
            count += 1
        st.step_output = step_output

    def storer(self, pipeline, warp: int) -> None:
        """Warp `warp` of the block: each step's outputs stored as soon as they are ready, over the block's tasks in
        the consumers' order; with 2+ stages the newest stage's copies stay in flight and the one before is freed."""
        user, g, lag = pipeline.user, pipeline.g, min(1, self.stages - 1)
        with if_(warp_id() == warp):
            count = var(0, "steps_stored")
            for index in tk_range(pipeline.first, pipeline.groups, pipeline.step):
                task = pipeline.task_at(index)
                n, _ = pipeline.steps_of(task, index, None)     # (this block's steps: the writers' too)
                for k in tk_range(n):
                    out, slot, phase = self._stage(count)
                    tk.wait(element(self.ready, slot), phase)
                    user.store_step(g, task, out, k)
                    tk.tma.store_commit_group()
                    tk.tma.store_async_wait(lag, read_only=True)   # all but the newest `lag` steps' are read
                    if not lag:
                        tk.arrive(element(self.free, slot))
                    else:
                        with if_(count > 0):
                            tk.arrive(element(self.free, (count - 1) % self.stages))
                    count += 1
            tk.tma.store_async_wait(0)             # every copy has landed before the block exits
