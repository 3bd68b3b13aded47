"""The load-compute-finish (LCF) block template, after ThunderKittens' `lcf`.

The author writes, as methods of a class whose annotations are the kernel's
global tensors:

    tasks(g)                    -> (row_tiles, col_tiles): the output tiles
    constants(g)                (optional) -> {name: value}: values fixed for the kernel that the other methods
                                use (e.g. a task order's section width), made once at the top as named
                                constants `g.<name>` (with fast_division, divisions by them become divisors)
    iters(g)                    -> how many load/compute steps each task takes, or
    iters(g, task)              -> how many steps this task takes (may differ per task, may be 0)
    order(g, index, row_tiles, col_tiles)
                                (optional) -> (row, col) of the index-th tile (default: the scheduler's,
                                `group` rows of tiles at a time); with clusters, the rows (or, along
                                "cols", the columns) it sees are bands of `cluster` of them
    load(g, task, inp, k, sem)  (producer) TMA the k-th inputs of a task into `inp`, completing on `sem`
    setup(st)                   (consumers) declare per-warp state, e.g. accumulators, on `st`
                                (`st.g` holds the kernel's parameters, as `g` elsewhere)
    start(st, task)             (optional) reset the state for a task (default: nothing); `st.task` is
                                the current task and `st.iters` its step count in start, compute, finish;
                                `st.next_task()` the block's next task, valid where `st.has_next_task()`
                                (e.g. to load its own inputs while this task runs)
    compute(st, inp, k)         (consumers) use the k-th inputs, or
    compute(st, inp, k, prev)   also the (k-1)-th inputs `prev` (for k > 0 only: guard their use with
                                tk.if_(k > 0)); they stay unreleased until this step's compute returns
    warpgroup_steps(st)         (optional, consumers) how many of the task's first steps the calling consumer
                                warpgroup computes (e.g. causal attention: none past its rows' diagonal, none for
                                rows of padding); the template only waits for and releases the others' stages (and
                                passes on the turn, with turns). Set in start, after the class's start, as
                                `st.last_step` (the warpgroup's last step; st.iters - 1 without the method)
    done(st)                    (optional, consumers) after a consumer's last task, e.g. to close a protocol
                                the consumers keep across tasks
    finish(g, st, task)         (consumers) write the task's result, or
    finish(g, st, task, fin)    ... with the shared tiles of the class's `finish_block` (a dict of shared
                                buffers, like `inputs`), which share their storage with the last input
                                stages: the consumers all finish their step before any writes it, and
                                the stages it overlaps load the next task's steps only once every
                                consumer warp has returned from finish (so wait for TMA stores from it
                                to have read it, tk.tma.store_async_wait(read_only=True), before
                                returning). The first stages keep loading meanwhile.

and the template owns the rest: a ring of `stages` input buffers with their
`arrived`/`finished` semaphores and phases, one producer warpgroup (the last)
and `consumer_warpgroups` consumers (warpgroups 0.., so tk.warpgroup.id() is the
consumer's index), the setmaxnreg register split, and a persistent loop over
tasks in the scheduler's order (schedule.py: L2-friendly groups, or split-K). The
ring position of a step is task * iters + k with a constant `iters(g)`; with
per-task counts (or split-K) producer and consumers each keep a running count (a
`tk.var`) advanced by every task's count, so they agree on stage and phase.
Everything it generates is ordinary tkpy, visible in `.kernel.source(...)`: the statements of the class's
methods under their lines, those of the template's own code marked as its (`// [lcf] lcf.py:LINE ...`), the
constants of tasks(g) and iters(g) under those methods' `def` lines.

Late inputs (`late_inputs`, `load_late`, the `late_stages` parameter): a second ring for inputs a step uses one step
after it loads them (attention's V); see late_ring.py.

Per-task inputs (`task_inputs`, `load_task`, the `task_loads` parameter): tiles each consumer warpgroup loads once
per task, e.g. attention's query rows; see task_inputs.py.

Step outputs (`step_outputs`, `store_step`, `st.step_output()`, the `step_output_stages` and `step_output_writers`
parameters): tiles consumers fill every step, stored by a warp of the producer warpgroup; see step_outputs.py.

Parameters (decorator arguments, checked when the class is decorated): docs/templates.md, "LCF parameters".
"""
from __future__ import annotations

import inspect
import sys
from typing import Optional

from .. import ops as tk
from ..errors import ArgumentError
from ..frontend.context import as_users, current
from ..frontend.control import assign, block_idx, grid_dim, if_, else_, let, range as tk_range, var, warp_id
from ..frontend.kernel import Kernel
from ..ir.core import Loc
from ..ir.expr import Const, Sym, as_expr, call
from .common import (PRODUCER_REGISTERS, Concrete, Namespace, StageTiles, Task, buffer_specs, check_shared_memory,
                     consumer_registers_for, declare_aliased, declare_ring, element, finish_placement,
                     global_annotations, globals_namespace, multiprocessors, positional_parameters, register_split,
                     runs_on_gpu, shared)
from .late_ring import LateRing
from .schedule import Grouped, SplitK, grouped_order
from .step_outputs import StepOutputs
from .task_inputs import TaskInputs
from .warpgroups import Turns

__all__ = ["LCF", "Task", "lcf", "shared", "grouped_order", "consumer_registers_for", "PRODUCER_REGISTERS"]
CLUSTER_ALONG = ("rows", "cols")   # what the blocks of a cluster take consecutive tiles of
FINISH_BARRIER = 15      # the named barrier on which the consumers meet before a finish block is written


class LCF:
    """A template instance: call it with the global tensors; `.kernel` is the generated tkpy kernel."""

    kind = "LCF"
    methods = ("tasks", "iters", "load", "setup", "compute", "finish")
    min_producer_warps = 1

    def __init__(self, cls, *, consumer_warpgroups: int = 2, stages: int = 4, late_stages: Optional[int] = None,
                 persistent: bool = True, group: int = 8, cluster: int = 1, cluster_along: str = "rows",
                 producer_warps: int = 4,
                 producer_registers: Optional[int] = None, consumer_registers: Optional[int] = None,
                 scheduler: Optional[Grouped] = None, name: Optional[str] = None, blocks_per_sm: int = 1,
                 fast_division: bool = False, turns: bool = False, task_loads: str = "start",
                 step_output_stages: int = 2, step_output_writers: Optional[int] = None,
                 definition_locals: Optional[dict] = None, loc: Optional[Loc] = None):
        for method in self.methods:
            if not callable(getattr(cls, method, None)):
                raise TypeError(f"an {self.kind} class needs a `{method}` method; {cls.__name__} has none")
        if not 1 <= consumer_warpgroups <= 3:
            raise ValueError(f"consumer_warpgroups must be 1..3, got {consumer_warpgroups}")
        if not 1 <= stages <= 8:
            raise ValueError(f"stages must be 1..8, got {stages}")
        if cluster not in (1, 2, 4):
            raise ValueError(f"cluster must be 1, 2 or 4 blocks, got {cluster}")
        if blocks_per_sm not in (1, 2) or (blocks_per_sm > 1 and cluster > 1):
            raise ValueError(f"blocks_per_sm must be 1 or 2 (2 without clusters), got {blocks_per_sm!r} with "
                             f"cluster={cluster}")
        if cluster_along not in CLUSTER_ALONG:
            raise ValueError(f"cluster_along must be one of {CLUSTER_ALONG}, got {cluster_along!r}")
        if producer_warps not in range(self.min_producer_warps, 5):
            raise ValueError(f"producer_warps must be {self.min_producer_warps}..4 for an {self.kind} template, "
                             f"got {producer_warps!r}")
        if scheduler is not None and not isinstance(scheduler, Grouped):
            raise TypeError(f"scheduler must be a tkpy.templates.schedule scheduler (Grouped, SplitK), got {scheduler!r}")
        if turns and consumer_warpgroups < 2:
            raise ValueError("turns go round 2 or 3 consumer warpgroups; with one there is nothing to take turns with")
        self.user = cls()
        self.consumers = consumer_warpgroups
        self.turns = turns
        self.task_inputs = TaskInputs(cls, self.user, consumer_warpgroups, task_loads)
        self.step_outputs = StepOutputs(cls, consumer_warpgroups, step_output_stages, step_output_writers)
        if self.step_outputs and (self.kind != "LCF" or producer_warps < 2):
            raise ValueError(f"{cls.__name__}: step_outputs take warp 1 of the producer warpgroup for their storer: "
                             f"an LCF template of 2+ producer_warps (this is {self.kind}, {producer_warps})")
        self.skips = callable(getattr(cls, "warpgroup_steps", None))
        self.stages = stages
        self.persistent = persistent
        self.cluster = cluster
        self.cluster_along = cluster_along
        self.producer_warps = producer_warps
        self.blocks_per_sm = blocks_per_sm
        self.registers = register_split(consumer_warpgroups, producer_warps, producer_registers, consumer_registers,
                                        blocks_per_sm)
        self.scheduler = scheduler if scheduler is not None else Grouped(group)
        self.group = self.scheduler.group
        self.inputs = buffer_specs(cls, "inputs")
        self.globals = global_annotations(cls, definition_locals or {})
        self.per_task_iters = positional_parameters(self.user.iters) >= 2     # iters(g, task)
        if self.per_task_iters and cluster > 1 and self.scheduler.splits_k:
            raise NotImplementedError("lcf: per-task step counts (iters(g, task)) with split-K in clusters: a "
                                      "cluster's steps are the most of its tasks' whole counts, not of their shares")
        self.uses_previous = positional_parameters(self.user.compute) >= 4    # compute(st, inp, k, prev)
        self.late_inputs = buffer_specs(cls, "late_inputs")
        self.late_stages = self._check_late(cls, stages, late_stages)
        if self.uses_previous and stages < 2 and not self.late_inputs:
            raise ValueError("compute(st, inp, k, prev) keeps the previous step's stage while the next one loads: "
                             "it needs stages >= 2")
        loc = self.loc = loc or Loc("<template>", 0)
        self.finish_block = buffer_specs(cls, "finish_block")
        if self.finish_block:
            if self.kind != "LCF":
                raise TypeError(f"{cls.__name__}: an {self.kind} class writes its results into its output stages; "
                                "a finish block is for LCF")
            if positional_parameters(self.user.finish) < 4:
                raise TypeError(f"{cls.__name__} has a finish_block: write finish(g, st, task, fin)")
            self.finish_offsets, self.first_aliased_stage = finish_placement(self.inputs, stages, self.finish_block,
                                                                             loc)
        self._configure(cls)
        check_shared_memory(f"{cls.__name__} ({self.kind})", self._rings(), self._semaphores(), loc,
                            vary=(0, 1) if self.late_inputs else (0,), blocks_per_sm=blocks_per_sm)
        self._grids: dict = {}
        self.kernel = Kernel(self._body(), warps=4 * consumer_warpgroups + producer_warps,
                             name=name or cls.__name__.lower(), cluster=(cluster, 1, 1) if cluster > 1 else None,
                             blocks_per_sm=blocks_per_sm if blocks_per_sm > 1 else None,
                             fast_division=fast_division)

    def _check_late(self, cls, stages: int, late_stages: Optional[int]) -> int:
        """The late ring's stage count (0 without late_inputs), after checking the class's late declarations."""
        has_load_late = callable(getattr(cls, "load_late", None))
        if not self.late_inputs:
            if late_stages is not None:
                raise ValueError(f"late_stages is for a class with late_inputs; {cls.__name__} has none")
            if has_load_late:
                raise TypeError(f"{cls.__name__} has a load_late method but no late_inputs = dict(name=shared(...))")
            return 0
        late_stages = stages if late_stages is None else late_stages
        if not (isinstance(late_stages, int) and 2 <= late_stages <= 8):
            raise ValueError(f"late_stages must be 2..8 (step k reads the late stages of steps k-1 and k), "
                             f"got {late_stages!r}")
        if not has_load_late:
            raise TypeError(f"{cls.__name__} has late_inputs: write load_late(g, task, inp, k, sem), which loads "
                            "step k's late inputs")
        if not self.uses_previous:
            raise TypeError(f"{cls.__name__} has late_inputs, which step k + 1 reads as `prev`: write "
                            "compute(st, inp, k, prev)")
        if "late" in self.inputs:
            raise TypeError(f"{cls.__name__}: inp.late is the step's late stage; name the input buffer otherwise")
        clash = set(self.inputs) & set(self.late_inputs)
        if clash:
            raise TypeError(f"{cls.__name__}: inputs and late_inputs both declare {', '.join(sorted(clash))}")
        return late_stages

    # -- what subclasses add ------------------------------------------------------------------------------
    def _configure(self, cls) -> None:
        """Read the class's further declarations (LCSF: its output buffers)."""

    def _rings(self) -> list:
        """The rings of shared buffers, in declaration order: (what, specs, stages, parameter name)."""
        late = [("late_inputs", self.late_inputs, self.late_stages, "late_stages")] if self.late_inputs else []
        task = [self.task_inputs.ring()] if self.task_inputs else []
        step = [self.step_outputs.ring()] if self.step_outputs else []
        return [("inputs", self.inputs, self.stages, "stages")] + late + task + step

    def _semaphores(self) -> int:
        return 2 * self.stages + 2 * self.late_stages + bool(self.finish_block) + self.step_outputs.semaphores()

    pipeline = None            # the Pipeline class that traces this template (set below)
    made_by = None             # (class, options, definition locals, loc) of the decorator that made it (decorator())

    def __tkpy_digest__(self):
        """What the digest of the kernel it makes (frontend/digest.py) takes of it: what made it."""
        return type(self).__name__, self.made_by

    @property
    def options(self) -> dict:
        """The options of the decorator (@tk.lcf / @tk.lcsf) this template was made with."""
        return dict(self.made_by[1])

    def variant(self, **changes) -> "LCF":
        """The same class as a template with some of its decorator's options changed (`stages=3`, `cluster=2`,
        ...): what tk.autotune makes per configuration. A TraceError where its stages do not fit in shared
        memory."""
        cls, options, definition_locals, loc = self.made_by
        unknown = sorted(changes.keys() - options.keys())
        if unknown:
            raise TypeError(f"@tk.{self.kind.lower()} has no option {', '.join(unknown)} (it has {', '.join(options)})")
        return type(self)(cls, definition_locals=definition_locals, loc=loc, **{**options, **changes})

    # -- the kernel -----------------------------------------------------------------------------------------
    def _body(self):
        template = self

        def body(*tensors):
            template.pipeline(template, globals_namespace(template.globals, tensors)).trace()
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a)
                  for n, a in self.globals.items()]
        body.__signature__ = inspect.Signature(params)
        body.__name__ = type(self.user).__name__.lower()
        return body

    def grid(self, *tensors) -> tuple:
        """Blocks to launch: one per task, or (persistent) at most blocks_per_sm per SM. Cached per shapes, devices
        and scalar values (tasks(g) may read scalars)."""
        from ..interpret.launch import interpret_requested

        key = (interpret_requested(),) + tuple((a.shape, a.device) if hasattr(a, "shape") else a for a in tensors)
        grid = self._grids.get(key)
        if grid is None:
            if len(self._grids) > 256:     # e.g. a float scalar that changes every call
                self._grids.clear()
            grid = self._grids[key] = self._grid(tensors)
        return grid

    def _grid(self, tensors) -> tuple:
        g = Concrete(globals_namespace(self.globals, tensors))
        rows, cols = (int(x) for x in self.user.tasks(g))
        if rows * cols < 1:
            raise ArgumentError("the template has no tasks for these shapes")
        along, what = (rows, "rows") if self.cluster_along == "rows" else (cols, "columns")
        if along % self.cluster:
            raise ArgumentError(f"clusters of {self.cluster} blocks take {self.cluster} {what} of tiles at a time; "
                                f"these shapes have {along} {what} of tiles")
        splits = int(self.scheduler.splits(g))
        if splits < 1:
            raise ArgumentError(f"the scheduler splits each tile into {splits} tasks; it needs at least 1")
        tasks = rows * cols * splits
        if not self.persistent:
            return (tasks,)
        blocks = min(tasks, multiprocessors(tensors[0]) * self.blocks_at_once(tensors))
        if self.cluster > 1:
            blocks = min(blocks, self.clusters_at_once(tensors) * self.cluster)
        return (blocks // self.cluster * self.cluster,)

    def blocks_at_once(self, tensors) -> int:
        """Blocks an SM runs at once: blocks_per_sm, or fewer where the occupancy query says so (the interpreter:
        blocks_per_sm)."""
        if self.blocks_per_sm == 1 or not runs_on_gpu(tensors[0]):
            return self.blocks_per_sm
        return max(1, min(self.blocks_per_sm, self.kernel.max_active_blocks(*tensors)))

    def clusters_at_once(self, tensors) -> int:
        """How many of the kernel's clusters the GPU runs at once (a cluster's blocks share a GPC: on the H200 all
        66 pairs of its 132 SMs, but not 33 clusters of 4, RESULTS.md run 117), so that a persistent grid has no
        second wave; the interpreter runs them all."""
        if not runs_on_gpu(tensors[0]):
            return multiprocessors(tensors[0]) // self.cluster
        fits = self.kernel.max_active_clusters(*tensors)
        if fits < 1:
            raise ArgumentError(f"no cluster of {self.cluster} blocks of {self.kernel.name} fits on the GPU at once "
                                "(shared memory or registers per block)")
        return fits

    def __call__(self, *tensors) -> None:
        self.kernel[self.grid(*tensors)](*tensors)


class Pipeline(LateRing):
    """One trace of an LCF kernel: the stage ring, its semaphores, the producer and consumer loops."""

    def __init__(self, template: LCF, g):
        self.t, self.g, self.user = template, g, template.user
        self.per_task = template.per_task_iters or template.scheduler.splits_k

    def trace(self) -> None:
        t, user, g = self.t, self.user, self.g
        ctx = current()               # the statements the template's own code makes are marked as its, and the
        ctx.template, ctx.template_loc = t.kind.lower(), t.loc        # kernel's origin is the user's class
        stages, consumers, blocks = t.stages, t.consumers, t.cluster
        self.arrays = declare_ring(t.inputs, stages)
        if t.late_inputs:
            self.late_arrays = declare_ring(t.late_inputs, t.late_stages)
        if t.finish_block:
            self.fin = StageTiles(declare_aliased(t.finish_block, next(iter(self.arrays.values())),
                                                  t.finish_offsets), t.finish_block, 0)
        self.declare_buffers()
        self.step_ring = t.step_outputs.declare() if t.step_outputs else None
        self.arrived, self.finished = tk.semaphore(stages), tk.semaphore(stages)
        self.arrived.name, self.finished.name = "arrived", "finished"
        if t.late_inputs:
            self.late_arrived, self.late_finished = tk.semaphore(t.late_stages), tk.semaphore(t.late_stages)
            self.late_arrived.name, self.late_finished.name = "late_arrived", "late_finished"
        if t.finish_block:
            self.finish_done = tk.semaphore()
            self.finish_done.name = "finish_done"
        self.declare_semaphores()
        with if_(warp_id() == 0):
            for s in range(stages):
                tk.init_semaphore(element(self.arrived, s), 1)
                tk.init_semaphore(element(self.finished, s), 4 * consumers * blocks)   # blocks share a release
            for s in range(t.late_stages):
                tk.init_semaphore(element(self.late_arrived, s), 1)
                tk.init_semaphore(element(self.late_finished, s), 4 * consumers * blocks)
            if t.finish_block:
                tk.init_semaphore(self.finish_done, 4 * consumers)
            if self.step_ring:
                self.step_ring.init()
            self.init_semaphores()
        tk.cluster.sync() if blocks > 1 else tk.sync()

        with as_users(user.tasks):
            self.row_tiles, self.col_tiles = (let(x, n) for x, n in zip(user.tasks(g), ("row_tiles", "col_tiles")))
        if hasattr(user, "constants"):
            with as_users(user.constants):
                for name, value in user.constants(g).items():
                    if hasattr(g, name):
                        raise TypeError(f"constants(g): `{name}` is already a parameter of the kernel")
                    setattr(g, name, let(value, name))
        if t.cluster_along == "rows":                    # a cluster takes `blocks` rows of tiles
            self.bands = self.row_tiles // blocks, self.col_tiles
        else:                                            # ... or `blocks` columns
            self.bands = self.row_tiles, self.col_tiles // blocks
        bands = self.bands[0] * self.bands[1]
        if t.scheduler.splits_k:
            self.tiles = let(bands, "tile_groups")
            splits = as_expr(t.scheduler.splits(g))
            self.splits = splits if isinstance(splits, (Const, Sym)) else let(splits, "splits")
            self.groups = let(self.tiles * self.splits, "task_groups")
        else:
            self.groups = let(bands, "task_groups")
        with as_users(user.iters):
            self.iters = None if t.per_task_iters else let(user.iters(g), "iters")
        if not hasattr(user, "order"):
            self.order = t.scheduler.bind(*self.bands)
        self.rank = tk.cluster.rank() if blocks > 1 else as_expr(0)
        self.first = block_idx.x // blocks
        self.step = grid_dim.x // blocks if t.persistent else self.groups

        producer_registers, consumer_registers = t.registers
        with if_(tk.warpgroup_id() == consumers):                      # the producer
            if producer_registers is not None:
                tk.producer_registers(producer_registers)
            with if_(warp_id() == 4 * consumers):
                self.producer()
            if self.step_ring:
                self.step_ring.storer(self, 4 * consumers + 1)
            self.other_producer_warps()
        with else_():                                                    # the consumers
            if consumer_registers is not None:
                tk.consumer_registers(consumer_registers)
            self.consumers()
        if blocks > 1:
            tk.cluster.sync()          # no block leaves while its peers may still signal or fill it

    # -- what LCSF adds -----------------------------------------------------------------------------------
    def declare_buffers(self) -> None:
        """Shared buffers declared after the input ring."""

    def declare_semaphores(self) -> None:
        """Semaphores declared after `arrived` and `finished`."""

    def init_semaphores(self) -> None:
        """Their initialisation, by warp 0."""

    def other_producer_warps(self) -> None:
        """Work for the producer warpgroup's other warps (LCSF: the storer)."""

    def compute(self, st, k, inp, *prev) -> None:
        """The class's compute of step k, on the warpgroup's steps up to its last (warpgroup_steps); past it the
        warpgroup only passes on its turn."""
        if not self.t.skips:
            return self.user.compute(st, inp, k, *prev)
        with if_(k <= st.last_step):
            self.user.compute(st, inp, k, *prev)
        with else_():
            if self.t.turns:
                st.turns.skip()

    def finish(self, st, task, index) -> None:
        if self.t.task_inputs:
            self.t.task_inputs.before_finish(st)
        if not self.t.finish_block:
            self.user.finish(self.g, st, task)
            return
        tk.named_sync(FINISH_BARRIER, 4 * self.t.consumers)      # every consumer is done with the stages
        self.user.finish(self.g, st, task, self.fin)
        tk.arrive(self.finish_done)

    # -- tasks and the ring ---------------------------------------------------------------------------------
    def task_at(self, index) -> Task:
        """This block's task of `index`."""
        t, g, blocks, rank = self.t, self.g, self.t.cluster, self.rank
        split, splits = 0, 1
        if t.scheduler.splits_k:
            split, splits, index = let(index // self.tiles, "split"), self.splits, let(index % self.tiles, "tile")
        if hasattr(self.user, "order"):
            row, col = self.user.order(g, index, *self.bands)        # of bands of `blocks` rows (or columns)
        else:
            row, col = self.order(index)
        within = rank
        if blocks > 1 and t.per_task_iters:              # the blocks' tasks may differ in steps: rotate
            within = (rank + self.local(index)) % blocks
        if t.cluster_along == "rows":
            row = row * blocks + within
        else:
            col = col * blocks + within
        with as_users(getattr(self.user, "order", None)):
            row, col = let(row, "task_row"), let(col, "task_col")
        return Task(index * blocks + rank, row, col, rank, split, splits)

    def local(self, index):
        """How many tasks this block ran before task `index`."""
        return (index - self.first) // self.step

    def steps_of(self, task, index, ring) -> tuple:
        """(steps of this task, ring position of its first step); sets task.k0 under split-K."""
        if not self.per_task:
            return self.iters, let(self.local(index), "local") * self.iters
        total = self.user.iters(self.g, task) if self.t.per_task_iters else self.iters
        if self.t.scheduler.splits_k:
            first, end = SplitK.share(total, task.split, task.splits)
            task.k0 = let(first, "k0")
            total = end - task.k0
        with as_users(self.user.iters if self.t.per_task_iters else None):
            return let(total, "iters"), ring

    def cluster_steps(self, task, n):
        """The most steps of the tasks of `task`'s cluster (this block's `n` among them): the steps the producers
        load and each block's stages go through. `n` itself without per-task step counts."""
        t, blocks = self.t, self.t.cluster
        if blocks == 1 or not t.per_task_iters:
            return n
        most = n
        for peer in range(1, blocks):               # the band's other rows (or columns)
            row, col = task.row, task.col
            if t.cluster_along == "rows":
                row = row - row % blocks + (row + peer) % blocks
            else:
                col = col - col % blocks + (col + peer) % blocks
            other = Task(task.index, row, col, (task.rank + peer) % blocks, task.split, task.splits)
            most = call("max", most, self.user.iters(self.g, other))
        return let(most, "cluster_iters")

    def skip_steps(self, n, most, base) -> None:
        """The cluster's steps n .. most-1, past this block's task: their stages (filled by the peers' loads,
        with multicast, or by this block's own) are waited for and released in both rings, no compute."""
        if most is n:
            return
        for k in tk_range(n, most):
            it, s, phase = self.stage_of(base, k)
            tk.wait(element(self.arrived, s), phase)
            self.release(s)
            if self.t.late_inputs:
                self.release_late(it)

    def stage_of(self, base, k) -> tuple:
        it = let(base + k, "it")
        return it, let(it % self.t.stages, "stage"), let(it // self.t.stages % 2, "phase")

    def release(self, stage, semaphores=None) -> None:
        """This warp is done with `stage` (of the input ring, or of the ring whose `finished` semaphores are
        `semaphores`): tell every block of the cluster (they may refill it). The peers are told with a CTA-scope
        release, as the local arrive is: the warp only read the stage, so no cluster-scope release (a GPU-wide
        memory barrier per arrival) is needed."""
        finished = element(self.finished if semaphores is None else semaphores, stage)
        tk.arrive(finished)
        for peer in range(1, self.t.cluster):
            tk.cluster.arrive(finished, (self.rank + peer) % self.t.cluster, scope="cta")

    def stage(self, s) -> StageTiles:
        return StageTiles(self.arrays, self.t.inputs, s)

    # -- the roles ----------------------------------------------------------------------------------------------
    def producer(self) -> None:
        ring = var(0, "ring") if self.per_task else None             # steps of the tasks before this one
        # The finishes of this block's tasks the producer has waited for. A stage the finish block overlaps
        # may hold any earlier task's finish; the producer can run several tasks ahead (tasks of few steps),
        # and a wait by parity only tells the latest phase from the one before, so it waits for every earlier
        # finish in order.
        finishes = var(0, "finishes_waited") if self.t.finish_block else None
        for index in tk_range(self.first, self.groups, self.step):
            task = self.task_at(index)
            n, base = self.steps_of(task, index, ring)
            n = self.cluster_steps(task, n)
            for k in tk_range(n):
                it, s, phase = self.stage_of(base, k)
                with if_(it >= self.t.stages):
                    tk.wait(element(self.finished, s), 1 - phase)   # the stage's previous round was consumed
                if self.t.finish_block:
                    with if_(s >= self.t.first_aliased_stage):
                        local = self.local(index)
                        for done in tk_range(finishes, local):
                            tk.wait(self.finish_done, done % 2)
                        assign(finishes, local)
                self.user.load(self.g, task, self.stage(s), k, element(self.arrived, s))
                if self.t.late_inputs:
                    self.load_late(task, it, k)
            if self.per_task:
                ring += n                                # (the cluster's steps)

    def consumers(self) -> None:
        t, user, stages = self.t, self.user, self.t.stages
        st = Namespace()
        st.g = self.g                  # the kernel's parameters, for compute() and friends
        if t.task_inputs:
            t.task_inputs.declare(st)
        if self.step_ring:
            self.step_ring.attach(st)
        user.setup(st)
        if t.turns:
            st.turns = Turns(t.consumers)
            st.turn = st.turns.turn
            st.turns.begin()
        ring = var(0, "ring") if self.per_task else None
        for index in tk_range(self.first, self.groups, self.step):
            task = self.task_at(index)
            n, base = self.steps_of(task, index, ring)
            most = self.cluster_steps(task, n)
            st.task, st.iters = task, n
            st.next_task = lambda following=index + self.step: self.task_at(following)
            st.has_next_task = lambda following=index + self.step: following < self.groups
            tk.mark("task start")        # (timeline marks: tkpy/runtime/timeline.py; no code otherwise)
            if t.task_inputs:
                t.task_inputs.begin_task(st, task)
            if hasattr(user, "start"):
                user.start(st, task)
            with as_users(user.warpgroup_steps if t.skips else None):
                st.last_step = let(user.warpgroup_steps(st) - 1, "last_step") if t.skips else n - 1
            if t.late_inputs:
                self.late_steps(st, n, base)
                self.skip_steps(n, most, base)
                if self.per_task:
                    ring += most
                tk.mark("task finish")
                self.finish(st, task, index)
                continue
            for k in tk_range(n):
                it, s, phase = self.stage_of(base, k)
                tk.mark("step: wait for the stage")
                tk.wait(element(self.arrived, s), phase)
                tk.mark("step: stage arrived")
                body = current().blocks[-1]
                before = len(body)
                if t.uses_previous:        # released below, once this step's MMAs are done with it
                    self.compute(st, k, self.stage(s), self.stage(let((it + stages - 1) % stages, "previous")))
                else:
                    self.compute(st, k, self.stage(s))
                tk.mark("step: computed")
                # The commit groups step k surely makes: its MMAs outside runtime branches and loops (a
                # lower bound, so the wait below may wait longer than needed, never too little).
                groups = sum(1 for op in body[before:] if getattr(op, "name", None) == "wgmma")
                in_flight = bool(current().pending_wgmma)     # (the wait below may hide it from
                holds = (in_flight or t.uses_previous) and stages > 1   # the tracer, but runs only for k > 0)
                if not holds:
                    if in_flight:              # one stage: its MMAs must be done before it is refilled
                        tk.warpgroup.mma_async_wait()
                    self.release(s)
                    continue
                # Keep step k's MMAs in flight (and its inputs, which step k+1 sees as `prev`): with only
                # their `groups` commit groups pending, step k-1's have read their stage, now released.
                with if_(k > 0):
                    if in_flight:
                        tk.warpgroup.mma_async_wait(groups)
                    self.release((it - 1) % stages)
            if holds:
                if in_flight:
                    tk.warpgroup.mma_async_wait()
                if self.per_task:
                    with if_(n > 0):                    # a task of no steps has no last stage
                        self.release((base + n - 1) % stages)
                else:
                    self.release((base + n - 1) % stages)
            self.skip_steps(n, most, base)
            if self.per_task:
                ring += most
            tk.mark("task finish")
            self.finish(st, task, index)
        if t.turns:
            st.turns.end()
        if hasattr(user, "done"):
            user.done(st)

LCF.pipeline = Pipeline


def decorator(template_class, caller, cls, options: dict):
    """The class decorator of a template: `@tk.lcf(...)` / `@tk.lcsf(...)` on a class, or bare."""
    definition_locals = dict(caller.f_locals) if caller.f_code.co_name != "<module>" else {}
    loc = Loc(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)

    def wrap(c):
        template = template_class(c, definition_locals=definition_locals, loc=loc, **options)
        template.made_by = (c, options, definition_locals, loc)
        return template
    return wrap(cls) if cls is not None else wrap


def lcf(cls=None, *, consumer_warpgroups: int = 2, stages: int = 4, late_stages: Optional[int] = None,
        persistent: bool = True, group: int = 8, cluster: int = 1, cluster_along: str = "rows", producer_warps: int = 4,
        producer_registers: Optional[int] = None, consumer_registers: Optional[int] = None,
        scheduler: Optional[Grouped] = None, name: Optional[str] = None, blocks_per_sm: int = 1,
        fast_division: bool = False, turns: bool = False, task_loads: str = "start", step_output_stages: int = 2,
        step_output_writers: Optional[int] = None):
    """Class decorator: `@tk.lcf(consumer_warpgroups=2, stages=4)`; see the module docstring and docs/templates.md."""
    options = dict(consumer_warpgroups=consumer_warpgroups, stages=stages, late_stages=late_stages,
                   persistent=persistent, group=group,
                   cluster=cluster, cluster_along=cluster_along, producer_warps=producer_warps,
                   producer_registers=producer_registers, consumer_registers=consumer_registers,
                   scheduler=scheduler, name=name, blocks_per_sm=blocks_per_sm, fast_division=fast_division,
                   turns=turns, task_loads=task_loads, step_output_stages=step_output_stages,
                   step_output_writers=step_output_writers)
    return decorator(LCF, sys._getframe(1), cls, options)
