"""Per-task inputs of the LCF template: tiles each consumer warpgroup loads once per task (attention's query rows).

The class declares them beside its step inputs and says how to load them:

    task_inputs = dict(q=shared(bf16, 64, 128))     # each consumer warpgroup's tiles of one task
    load_task(g, task, inp, arrived)     (the first warp of each consumer warpgroup) TMA the calling warpgroup's
                                         inputs of `task` into `inp` (tk.tma.expect(arrived, inp) first)
    take_task_inputs(st, inp)            (task_loads="preload" only) move the task's inputs out of their tiles,
                                         e.g. into registers, so the tiles can take the next task's

and reads them as `st.task_inputs.q` in start / compute / finish (the tiles of the current task; finish may also
write them, e.g. to stage an output, once every MMA reading them is done). The decorator's `task_loads` says when
they load:

    "start"      (default) at each task's start, which waits for them
    "ahead"      into two buffers: the block's first task's at its start, and each task's start issues the next
                 task's load into the other buffer, so a task rarely waits for its inputs
    "ahead_from_step"  as "ahead", but the next task's load is issued where compute calls
                 st.load_next_task_inputs() (e.g. behind a first step's MMAs), not at the start
    "preload"    one buffer: the block's first task's load, its wait and take_task_inputs at its start; then each
                 start issues the next task's load into the tiles, and before each finish (where there is a next
                 task) the template waits for it and calls take_task_inputs. No task but the first waits.

Each consumer warpgroup's tiles complete on a semaphore of its own (per buffer), so the warpgroups never wait for
each other's loads; the producer's rings are unaffected. Before a load into tiles an earlier task used, the
template syncs the warpgroup (tk.fence_proxy_async() and its own barrier): every warp is then done reading and
writing them (finish included) and has passed its wait for their last load, whose phase the next would otherwise
overtake.
"""
from __future__ import annotations

from .. import ops as tk
from ..frontend.control import if_, let, var
from .common import StageTiles, buffer_specs, declare_ring
from .warpgroups import first_warp, own_sync

TASK_LOADS = ("start", "ahead", "ahead_from_step", "preload")


class TaskInputs:
    """The template's side of a class's task_inputs: declared and loaded in the consumers' code."""

    def __init__(self, cls, user, groups: int, mode: str):
        self.specs = buffer_specs(cls, "task_inputs")
        if mode not in TASK_LOADS:
            raise ValueError(f"task_loads must be one of {TASK_LOADS}, got {mode!r}")
        if not self.specs:
            if mode != "start":
                raise ValueError(f"task_loads={mode!r} is for a class with task_inputs; {cls.__name__} has none")
            return
        if not callable(getattr(cls, "load_task", None)):
            raise TypeError(f"{cls.__name__} has task_inputs: write load_task(g, task, inp, arrived), which loads "
                            "the calling consumer warpgroup's inputs of a task")
        if (mode == "preload") != callable(getattr(cls, "take_task_inputs", None)):
            raise TypeError(f"{cls.__name__}: task_loads='preload' and a take_task_inputs(st, inp) method go "
                            f"together (task_loads={mode!r})")
        self.user, self.groups, self.mode = user, groups, mode
        self.buffers = 2 if mode in ("ahead", "ahead_from_step") else 1
        self.first = next(iter(self.specs))           # names the semaphores and the tile index in the C++

    def __bool__(self) -> bool:
        return bool(self.specs)

    def ring(self) -> tuple:
        """(what, specs, tiles, parameter) of the shared-memory check."""
        return "task_inputs", self.specs, self.groups * self.buffers, "task input tiles"

    def declare(self, st) -> None:
        """The tiles (buffer b's of warpgroup w at b * groups + w), their semaphores and the task count (the
        semaphores' phase), before the class's setup."""
        self.arrays = declare_ring(self.specs, self.groups * self.buffers)
        self.arrived = tk.semaphore(self.groups * self.buffers)
        self.arrived.name = f"{self.first}_arrived"
        st.tasks_done = var(0, "tasks_done")              # this warpgroup's tasks so far
        for buffer in range(self.buffers):
            first_warp(lambda wg: tk.init_semaphore(self.arrived[buffer * self.groups + wg], 1))
        own_sync(self.groups)

    def load(self, st, task, buffer) -> None:
        """Each consumer warpgroup's inputs of `task` into its tiles of `buffer`, by its first warp."""
        def load(wg):
            tile = buffer * self.groups + wg
            self.user.load_task(st.g, task, StageTiles(self.arrays, self.specs, tile), self.arrived[tile])
        first_warp(load)

    def view(self, tile) -> StageTiles:
        return StageTiles(self.arrays, self.specs, tile)

    def free(self) -> None:
        """Every warp of the calling warpgroup done with its tiles, before TMA writes them again."""
        tk.fence_proxy_async()
        own_sync(self.groups)

    def begin_task(self, st, task) -> None:
        """At a task's start, before the class's start: load (or have loaded) the task's inputs and wait for them;
        st.task_inputs is then their view."""
        wg = tk.warpgroup.id()
        if self.mode == "preload":
            tile = wg
            with if_(st.tasks_done == 0):
                self.load(st, task, 0)
                tk.wait(self.arrived[wg], 0)
                self.user.take_task_inputs(st, self.view(tile))
                tk.fence_proxy_async()                     # the tiles read before TMA writes them again
                own_sync(self.groups)
            with if_(st.has_next_task()):                  # the next task's lands during this one
                self.free()                                # (the last finish is done with the tiles)
                self.load(st, st.next_task(), 0)
        elif self.mode == "start":
            self.free()
            self.load(st, task, 0)
            tile = wg
            tk.wait(self.arrived[wg], st.tasks_done % 2)
        else:
            with if_(st.tasks_done == 0):
                self.load(st, task, 0)
            # The next task's into the other buffer: the previous task's finish is done with it.
            if self.mode == "ahead":
                with if_(st.has_next_task()):
                    self.free()
                    self.load(st, st.next_task(), 1 - st.tasks_done % 2)
            tile = let(st.tasks_done % 2 * self.groups + wg, f"{self.first}_tile")
            tk.wait(self.arrived[tile], st.tasks_done // 2 % 2)
        st.tasks_done += 1
        self.tile = tile
        st.task_inputs = self.view(tile)
        if self.mode == "ahead_from_step":
            st.load_next_task_inputs = lambda: self.load_next(st)

    def load_next(self, st) -> None:
        """ahead_from_step: the next task's inputs into the other buffer (this task is counted already)."""
        with if_(st.has_next_task()):
            self.free()
            self.load(st, st.next_task(), st.tasks_done % 2)

    def before_finish(self, st) -> None:
        """preload: the next task's inputs out of the tiles (every step of this task is done) before finish may
        write them."""
        if self.mode != "preload":
            return
        with if_(st.has_next_task()):
            tk.wait(self.arrived[self.tile], st.tasks_done % 2)
            self.user.take_task_inputs(st, self.view(self.tile))
            self.free()

