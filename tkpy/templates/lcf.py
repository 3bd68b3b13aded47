"""The load-compute-finish (LCF) block template, after ThunderKittens' `lcf`.

The author writes, as methods of a class whose annotations are the kernel's
global tensors:

    tasks(g)                    -> (row_tiles, col_tiles): the output tiles
    iters(g)                    -> how many load/compute steps each task takes, or
    iters(g, task)              -> how many steps this task takes (may differ per task, may be 0)
    order(g, index, row_tiles, col_tiles)
                                (optional) -> (row, col) of the index-th task (default: grouped_order,
                                `group` rows of tiles at a time); with clusters, rows are bands of them
    load(g, task, inp, k, sem)  (producer) TMA the k-th inputs of a task into `inp`, completing on `sem`
    setup(st)                   (consumers) declare per-warp state, e.g. accumulators, on `st`
                                (`st.g` holds the kernel's parameters, as `g` elsewhere)
    start(st, task)             (optional) reset the state for a task (default: nothing); `st.task` is
                                the current task and `st.iters` its step count in start, compute, finish
    compute(st, inp, k)         (consumers) use the k-th inputs, or
    compute(st, inp, k, prev)   also the (k-1)-th inputs `prev` (for k > 0 only: guard their use with
                                tk.if_(k > 0)); they stay unreleased until this step's compute returns
    finish(g, st, task)         (consumers) write the task's result

and the template owns the rest: a ring of `stages` input buffers with their
`arrived`/`finished` semaphores and phases, one producer warpgroup (the last)
and `consumer_warpgroups` consumers (warpgroups 0.., so tk.warpgroup.id() is the
consumer's index), the setmaxnreg register split, and a persistent loop over
tasks in an L2-friendly grouped order. The ring position of a step is
task * iters + k with a constant `iters(g)`; with per-task counts producer and
consumers each keep a running count (a `tk.var`) advanced by every task's count,
so they agree on stage and phase. Everything it generates is ordinary tkpy,
visible in `.kernel.source(...)`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional

from .. import ops as tk
from ..errors import ArgumentError, TraceError
from ..frontend.context import current
from ..frontend.control import block_idx, grid_dim, if_, else_, let, range as tk_range, var, warp_id
from ..frontend.kernel import Kernel
from ..frontend.signature import _resolve
from ..ir.core import Var
from ..ir.expr import as_expr, call
from ..tiles.dtypes import DType
from ..tiles.types import GL, ST

REGISTER_FILE_PER_THREAD_GROUP = 65536 // 128   # registers per thread if one warpgroup had the whole file
PRODUCER_REGISTERS = 40


@dataclass(frozen=True)
class shared:
    """An input buffer of the template: `count` shared tiles per stage (index them as inp.name[i])."""

    dtype: DType
    rows: int
    cols: int
    count: int = 1

    @property
    def type(self) -> ST:
        return ST(self.dtype, self.rows, self.cols)


class Namespace:
    """An attribute bag that names the tiles stored on it after their attribute (for readable C++)."""

    def __setattr__(self, key, value):
        if isinstance(value, Var):
            value.name = key
        object.__setattr__(self, key, value)


class _StageTiles:
    """The tiles of one pipeline stage: `inp.a` (count 1) or `inp.a[i]`."""

    def __init__(self, arrays: dict, specs: dict, stage):
        self._arrays, self._specs, self._stage = arrays, specs, stage

    def __getattr__(self, name):
        spec, array = self._specs[name], self._arrays[name]
        if spec.count == 1:
            return array[self._stage]
        return _Indexed(array, self._stage * spec.count, spec.count)

    def tiles(self) -> list:
        """Every tile of this stage (what tk.tma.expect(sem, inp) counts)."""
        out = []
        for name, spec in self._specs.items():
            out += [self._arrays[name][self._stage * spec.count + i] for i in range(spec.count)] \
                if spec.count > 1 else [self._arrays[name][self._stage]]
        return out


class _Indexed:
    def __init__(self, array, base, count):
        self._array, self._base, self._count = array, base, count

    def __getitem__(self, i):
        return self._array[self._base + i]


@dataclass
class Task:
    """The output tile a block works on: its index, (row, col) in tiles, and the block's cluster rank
    (blocks of a cluster take consecutive rows of the same column)."""

    index: object
    row: object
    col: object
    rank: object


def grouped_order(index, row_tiles, col_tiles, group: int) -> tuple:
    """(row, col) of task `index` walking `group` rows of tiles at a time, column by column, so the
    blocks running together share A row panels and B column panels in L2."""
    per_group = group * col_tiles
    first_row = (index // per_group) * group
    rows_here = call("min", row_tiles - first_row, group)
    within = index % per_group
    return first_row + within % rows_here, within // rows_here


def consumer_registers_for(consumers: int) -> int:
    spare = (REGISTER_FILE_PER_THREAD_GROUP - PRODUCER_REGISTERS) // consumers
    return min(240, spare // 8 * 8)


class LCF:
    """A template instance: call it with the global tensors; `.kernel` is the generated tkpy kernel."""

    def __init__(self, cls, consumer_warpgroups: int, stages: int, persistent: bool, group: int,
                 name: Optional[str], cluster: int = 1, definition_locals: Optional[dict] = None):
        if not 1 <= consumer_warpgroups <= 3:
            raise ValueError(f"consumer_warpgroups must be 1..3, got {consumer_warpgroups}")
        if not 1 <= stages <= 8:
            raise ValueError(f"stages must be 1..8, got {stages}")
        self.user = cls()
        self.consumers = consumer_warpgroups
        self.stages = stages
        self.persistent = persistent
        self.group = group
        if cluster not in (1, 2, 4):
            raise ValueError(f"cluster must be 1, 2 or 4 blocks, got {cluster}")
        self.cluster = cluster
        self.inputs = dict(getattr(cls, "inputs", {}))
        for k, v in self.inputs.items():
            if not isinstance(v, shared):
                raise TypeError(f"{cls.__name__}.inputs[{k!r}] must be tk.templates.shared(dtype, rows, cols, count)")
        self.globals = self._global_annotations(cls, definition_locals or {})
        self.per_task_iters = _positional_parameters(self.user.iters) >= 2     # iters(g, task)
        self.uses_previous = _positional_parameters(self.user.compute) >= 4    # compute(st, inp, k, prev)
        self._grids: dict = {}
        self.kernel = Kernel(self._body(), warps=4 * (consumer_warpgroups + 1), name=name or cls.__name__.lower(),
                             cluster=(cluster, 1, 1) if cluster > 1 else None)

    @staticmethod
    def _global_annotations(cls, definition_locals: dict) -> dict:
        out = {}
        annotations = {}
        for klass in reversed(cls.__mro__):          # base classes first, as dataclasses order fields
            annotations.update(klass.__dict__.get("__annotations__", {}))
        for name, ann in annotations.items():
            if name == "inputs":
                continue
            ann = _resolve(ann, cls.tasks, definition_locals)
            if not (isinstance(ann, GL) or ann in (int, float)):
                raise TypeError(f"{cls.__name__}.{name}: template parameters are global tensors (tk.gl[...]), "
                                "int or float")
            out[name] = ann
        return out

    def _body(self):
        template = self

        def body(*tensors):
            template._trace(_globals_namespace(template.globals, tensors))
        params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a)
                  for n, a in self.globals.items()]
        body.__signature__ = inspect.Signature(params)
        body.__name__ = type(self.user).__name__.lower()
        return body

    def _trace(self, g) -> None:
        user, stages, consumers = self.user, self.stages, self.consumers
        arrays = {name: tk.st(spec.dtype, spec.rows, spec.cols, count=spec.count * stages)
                  for name, spec in self.inputs.items()}
        for name, array in arrays.items():
            array.name = name
        arrived = tk.semaphore(stages)
        finished = tk.semaphore(stages)
        arrived.name, finished.name = "arrived", "finished"
        blocks = self.cluster                       # blocks per cluster: they share a stage's release
        with if_(warp_id() == 0):
            for s in range(stages):
                tk.init_semaphore(arrived[s], 1)
                tk.init_semaphore(finished[s], 4 * consumers * blocks)
        tk.cluster.sync() if blocks > 1 else tk.sync()

        row_tiles, col_tiles = (let(x, n) for x, n in zip(user.tasks(g), ("row_tiles", "col_tiles")))
        groups = let(row_tiles // blocks * col_tiles, "task_groups")   # a cluster takes `blocks` rows of tiles
        per_task = self.per_task_iters
        iters = None if per_task else let(user.iters(g), "iters")
        rank = tk.cluster.rank() if blocks > 1 else as_expr(0)
        first = block_idx.x // blocks
        step = grid_dim.x // blocks if self.persistent else groups

        def task_at(group_index):
            if hasattr(user, "order"):
                band, col = user.order(g, group_index, row_tiles // blocks, col_tiles)
            else:
                band, col = grouped_order(group_index, row_tiles // blocks, col_tiles, self.group)
            return Task(group_index * blocks + rank, let(band * blocks + rank, "task_row"), let(col, "task_col"),
                        rank)

        def steps_of(task, index):
            """(steps of this task, ring position of its first step)."""
            if per_task:
                return let(user.iters(g, task), "iters"), ring
            return iters, let((index - first) // step, "local") * iters

        def stage_of(base, k):
            it = let(base + k, "it")
            return it, let(it % stages, "stage"), let(it // stages % 2, "phase")

        def release(stage):
            """This warp is done with `stage`: tell every block of the cluster (they may refill it)."""
            tk.arrive(finished[stage])
            for peer in range(1, blocks):
                tk.cluster.arrive(finished[stage], (rank + peer) % blocks)

        with if_(tk.warpgroup_id() == consumers):                      # the producer
            tk.producer_registers(PRODUCER_REGISTERS)
            with if_(warp_id() == 4 * consumers):
                ring = var(0, "ring") if per_task else None             # steps of the tasks before this one
                for index in tk_range(first, groups, step):
                    task = task_at(index)
                    n, base = steps_of(task, index)
                    for k in tk_range(n):
                        it, s, phase = stage_of(base, k)
                        with if_(it >= stages):
                            tk.wait(finished[s], 1 - phase)         # the stage's previous round was consumed
                        user.load(g, task, _StageTiles(arrays, self.inputs, s), k, arrived[s])
                    if per_task:
                        ring += n
        with else_():                                                    # the consumers
            tk.consumer_registers(consumer_registers_for(consumers))
            st = Namespace()
            st.g = g                       # the kernel's parameters, for compute() and friends
            user.setup(st)
            ring = var(0, "ring") if per_task else None
            for index in tk_range(first, groups, step):
                task = task_at(index)
                n, base = steps_of(task, index)
                st.task, st.iters = task, n
                if hasattr(user, "start"):
                    user.start(st, task)
                for k in tk_range(n):
                    it, s, phase = stage_of(base, k)
                    tk.wait(arrived[s], phase)
                    body = current().blocks[-1]
                    before = len(body)
                    inp = _StageTiles(arrays, self.inputs, s)
                    if self.uses_previous:      # released below, once this step's MMAs are done with it
                        prev = _StageTiles(arrays, self.inputs, let((it + stages - 1) % stages, "previous"))
                        user.compute(st, inp, k, prev)
                    else:
                        user.compute(st, inp, k)
                    # The commit groups step k surely makes: its MMAs outside runtime branches and loops (a
                    # lower bound, so the wait below may wait longer than needed, never too little).
                    groups = sum(1 for op in body[before:] if getattr(op, "name", None) == "wgmma")
                    in_flight = bool(current().pending_wgmma)     # (the wait below may hide it from
                    if not in_flight and not self.uses_previous:  # the tracer, but runs only for k > 0)
                        release(s)
                        continue
                    # Keep step k's MMAs in flight (and its inputs, which step k+1 sees as `prev`): with only
                    # their `groups` commit groups pending, step k-1's have read their stage, now released.
                    with if_(k > 0):
                        if in_flight:
                            tk.warpgroup.mma_async_wait(groups)
                        release((it - 1) % stages)
                if in_flight or self.uses_previous:
                    if in_flight:
                        tk.warpgroup.mma_async_wait()
                    if per_task:
                        with if_(n > 0):                    # a task of no steps has no last stage
                            release((base + n - 1) % stages)
                    else:
                        release((base + n - 1) % stages)
                if per_task:
                    ring += n
                user.finish(g, st, task)
        if blocks > 1:
            tk.cluster.sync()          # no block leaves while its peers may still signal or fill it

    def grid(self, *tensors) -> tuple:
        """Blocks to launch: one per task, or (persistent) at most one per SM. Cached per shapes, devices
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
        g = _globals_namespace(self.globals, tensors)
        rows, cols = (int(x) for x in self.user.tasks(_Concrete(g)))
        if rows * cols < 1:
            raise ArgumentError("the template has no tasks for these shapes")
        if rows % self.cluster:
            raise ArgumentError(f"clusters of {self.cluster} blocks take {self.cluster} rows of tiles at a time; "
                                f"these shapes have {rows} rows of tiles")
        if not self.persistent:
            return (rows * cols,)
        blocks = min(rows * cols, _multiprocessors(tensors[0]))
        return (blocks // self.cluster * self.cluster,)

    def __call__(self, *tensors) -> None:
        self.kernel[self.grid(*tensors)](*tensors)


H200_MULTIPROCESSORS = 132


def _multiprocessors(tensor) -> int:
    """SMs of the tensor's GPU; when interpreting on the CPU, an H200's, so the persistent loops
    (several tasks per block) are exercised as they will run."""
    from ..interpret.launch import interpret_requested
    from ..runtime import sm_count

    if interpret_requested() or not tensor.is_cuda:
        return H200_MULTIPROCESSORS
    return sm_count(tensor.get_device())


def _positional_parameters(method) -> int:
    """How many positional parameters a bound method takes (a *args counts as many)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(method).parameters.values()
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 99
    return sum(1 for p in params if p.kind in kinds)


def _globals_namespace(globals_: dict, tensors) -> Namespace:
    if len(tensors) != len(globals_):
        raise ArgumentError(f"the template takes {len(globals_)} arguments ({', '.join(globals_)}), got {len(tensors)}")
    ns = Namespace()
    for name, t in zip(globals_, tensors):
        object.__setattr__(ns, name, t)
    return ns


class _Concrete:
    """Lets tasks(g) run on real tensors too: g.A.rows / .cols / .depth / .batch read their shapes."""

    def __init__(self, g):
        self._g = g

    def __getattr__(self, name):
        t = getattr(self._g, name)
        return _Shape(t) if hasattr(t, "shape") else t


class _Shape:
    def __init__(self, t):
        shape = (1,) * (4 - t.dim()) + tuple(t.shape)
        self.batch, self.depth, self.rows, self.cols = shape


def lcf(cls=None, *, consumer_warpgroups: int = 2, stages: int = 4, persistent: bool = True, group: int = 8,
        cluster: int = 1, name: Optional[str] = None):
    """Class decorator: `@tk.lcf(consumer_warpgroups=2, stages=4)`; see the module docstring."""
    import sys

    caller = sys._getframe(1)
    definition_locals = dict(caller.f_locals) if caller.f_code.co_name != "<module>" else {}

    def wrap(c):
        for method in ("tasks", "iters", "load", "setup", "compute", "finish"):
            if not callable(getattr(c, method, None)):
                raise TypeError(f"an LCF class needs a `{method}` method; {c.__name__} has none")
        return LCF(c, consumer_warpgroups, stages, persistent, group, name, cluster, definition_locals)
    return wrap(cls) if cls is not None else wrap
