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
methods under their lines, those of the template's own code marked as its (`// [lcf] pipeline.py:LINE ...`), the
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

from ..errors import ArgumentError
from ..frontend.kernel import Kernel
from ..ir.core import Loc
from .common import (PRODUCER_REGISTERS, Concrete, Task, buffer_specs, check_shared_memory, consumer_registers_for,
                     finish_placement, global_annotations, globals_namespace, multiprocessors, positional_parameters,
                     register_split, runs_on_gpu, shared)
from .pipeline import Pipeline
from .schedule import Grouped, grouped_order
from .step_outputs import StepOutputs
from .task_inputs import TaskInputs

__all__ = ["LCF", "Task", "lcf", "shared", "grouped_order", "consumer_registers_for", "PRODUCER_REGISTERS"]
CLUSTER_ALONG = ("rows", "cols")   # what the blocks of a cluster take consecutive tiles of


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
