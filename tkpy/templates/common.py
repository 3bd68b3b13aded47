"""What the block templates (lcf.py, lcsf.py) share: the buffer specs and their per-stage views, the task
record, the author's class (its tensors, its methods' arities), the host-side view of the tensors that
tasks(g) reads to size the grid, and the checks of the template parameters (register split, shared memory)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..errors import ArgumentError, TraceError
from ..frontend.control import Mutable
from ..frontend.signature import resolve_annotation
from ..ir import Loc, Var, cdiv
from ..ir.passes import ALIGNMENT_SLACK, shared_limit
from ..ir.protocol import REGISTER_FILE
from ..tiles.dtypes import DType
from ..tiles.types import GL, PGL, ST, SV

PRODUCER_REGISTERS = 40
SEMAPHORE_BYTES = 8
H200_MULTIPROCESSORS = 132


@dataclass(frozen=True)
class shared:
    """A buffer of a template: `count` shared tiles per stage (index them as inp.name[i]); without `cols`, shared
    vectors of `rows` elements (sv: e.g. a step's per-row statistics, loaded by TMA beside its tiles)."""

    dtype: DType
    rows: int
    cols: int | None = None
    count: int = 1

    @property
    def type(self) -> ST | SV:
        return SV(self.dtype, self.rows) if self.cols is None else ST(self.dtype, self.rows, self.cols)

    def declare(self, count: int) -> Var:
        """An array of `count` of this buffer's tiles (or vectors)."""
        from .. import ops as tk

        if self.cols is None:
            return tk.sv(self.dtype, self.rows, count=count)
        return tk.st(self.dtype, self.rows, self.cols, count=count)

    def __str__(self) -> str:
        each = f"{self.rows} {self.dtype.name}" if self.cols is None else f"{self.rows}x{self.cols} {self.dtype.name}"
        return each if self.count == 1 else f"{self.count} x {each}"


class Namespace:
    """An attribute bag that names the tiles stored on it after their attribute (for readable C++). An attribute
    holding a mutable scalar (tk.var) cannot be rebound to another value: `st.n = 0` would only rebind the Python
    name while the kernel's variable kept its value (tk.assign(st.n, 0) changes it)."""

    def __setattr__(self, key, value):
        held = self.__dict__.get(key)
        if isinstance(held, Mutable) and value is not held and not isinstance(value, Mutable):
            caller = inspect.currentframe().f_back                 # the line with the assignment
            raise TraceError(f"st.{key} is a tk.var: `st.{key} = ...` would rebind the Python attribute, not change "
                             f"the variable in the kernel; write tk.assign(st.{key}, ...)",
                             Loc(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name))
        if isinstance(value, Var):
            value.name = key
        object.__setattr__(self, key, value)


def element(array: Var, index):
    """Tile `index` of an array of shared tiles or semaphores; an array of one is that tile itself."""
    return array if array.count == 1 else array[index]


class StageTiles:
    """The tiles of one stage of a ring of buffers: `inp.a` (count 1) or `inp.a[i]`."""

    def __init__(self, arrays: dict, specs: dict, stage):
        self._arrays, self._specs, self._stage = arrays, specs, stage

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._specs:
            raise AttributeError(f"the stage has no buffer {name!r}; it has {', '.join(self._specs)}")
        spec, array = self._specs[name], self._arrays[name]
        if spec.count == 1:
            return element(array, self._stage)
        return _Indexed(array, self._stage * spec.count, spec.count)

    def tiles(self) -> list:
        """Every tile of this stage (what tk.tma.expect(sem, inp) counts)."""
        out = []
        for name, spec in self._specs.items():
            array = self._arrays[name]
            out += [array[self._stage * spec.count + i] for i in range(spec.count)] if spec.count > 1 \
                else [element(array, self._stage)]
        return out


class _Indexed:
    def __init__(self, array, base, count):
        self._array, self._base, self._count = array, base, count

    def __getitem__(self, i):
        return self._array[self._base + i]


def declare_aliased(specs: dict, base: Var, offsets: dict) -> dict:
    """Shared tiles of `specs` placed over the storage of `base` (byte offsets from its start)."""
    arrays = {}
    for name, spec in specs.items():
        arrays[name] = spec.declare(spec.count)
        arrays[name].name = name
        arrays[name].alias = (base, offsets[name])
    return arrays


def finish_placement(inputs: dict, stages: int, finish: dict, loc: Loc) -> tuple:
    """Where a finish block goes over the input stages: at their end, so that the next task's first
    stages can load while the finish runs. (byte offset of each finish buffer from the first input
    array, the first stage it overlaps: the stages from it on hold back their next loads until the
    finish is done)."""
    ends, offset = {s: [] for s in range(stages)}, 0        # each stage's tiles, as plan_shared lays them out
    for spec in inputs.values():
        t = spec.type
        offset = cdiv(offset, t.alignment) * t.alignment
        for s in range(stages):
            ends[s] += [(offset + (s * spec.count + i) * t.nbytes, offset + (s * spec.count + i + 1) * t.nbytes)
                        for i in range(spec.count)]
        offset += t.nbytes * spec.count * stages
    alignment = max(spec.type.alignment for spec in finish.values())
    start = (offset - ring_bytes(finish, 1)) // alignment * alignment
    if start < 0:
        raise TraceError(f"the finish block ({_kb(ring_bytes(finish, 1))}) is larger than the {_kb(offset)} of input "
                         "stages it shares its storage with", loc)
    offsets, at = {}, start
    for name, spec in finish.items():
        at = cdiv(at, spec.type.alignment) * spec.type.alignment
        offsets[name] = at
        at += spec.type.nbytes * spec.count
    first = min(s for s in range(stages) if any(a < offset and b > start for a, b in ends[s]))
    return offsets, first


def declare_ring(specs: dict, stages: int, prefix: str = "") -> dict:
    """The shared tiles of `stages` stages of the buffers `specs`, one array per buffer (stage s's i-th
    tile of buffer b at b[s * count + i])."""
    arrays = {}
    for name, spec in specs.items():
        arrays[name] = spec.declare(spec.count * stages)
        arrays[name].name = prefix + name
    return arrays


@dataclass
class Task:
    """The work item a block is on: its index, the output tile's (row, col) in tiles, and the block's
    cluster rank (blocks of a cluster take consecutive rows of the same column, or with cluster_along="cols"
    consecutive columns of the same row). With split-K
    (schedule.SplitK) a task covers the steps k0 .. k0 + st.iters - 1 of its tile: `split` of `splits`;
    otherwise split = 0, splits = 1, k0 = 0."""

    index: object
    row: object
    col: object
    rank: object
    split: object = 0
    splits: object = 1
    k0: object = 0


def buffer_specs(cls, attribute: str) -> dict:
    specs = dict(getattr(cls, attribute, {}))
    for k, v in specs.items():
        if not isinstance(v, shared):
            raise TypeError(f"{cls.__name__}.{attribute}[{k!r}] must be tk.templates.shared(dtype, rows, cols, count)")
    return specs


def global_annotations(cls, definition_locals: dict) -> dict:
    """The kernel's parameters: the class's annotations (base classes first, as dataclasses order fields)."""
    annotations = {}
    for klass in reversed(cls.__mro__):
        annotations.update(klass.__dict__.get("__annotations__", {}))
    out = {}
    for name, ann in annotations.items():
        if name in ("inputs", "outputs"):
            continue
        ann = resolve_annotation(ann, cls.tasks, definition_locals)
        if not (isinstance(ann, (GL, PGL)) or ann in (int, float)):
            raise TypeError(f"{cls.__name__}.{name}: template parameters are global tensors (tk.gl[...]), parallel "
                            "ones (tk.pgl[tk.gl[...], world]), int or float")
        out[name] = ann
    return out


def positional_parameters(method) -> int:
    """How many positional parameters a bound method takes (a *args counts as many)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(method).parameters.values()
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 99
    return sum(1 for p in params if p.kind in kinds)


def globals_namespace(globals_: dict, tensors) -> Namespace:
    if len(tensors) != len(globals_):
        raise ArgumentError(f"the template takes {len(globals_)} arguments ({', '.join(globals_)}), got {len(tensors)}")
    ns = Namespace()
    for name, t in zip(globals_, tensors):
        object.__setattr__(ns, name, t)
    return ns


class Concrete:
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


def runs_on_gpu(tensor) -> bool:
    """Whether a launch with `tensor` runs on its GPU (not in the interpreter), so the device can be queried."""
    from ..interpret.launch import interpret_requested

    return tensor.is_cuda and not interpret_requested()


def multiprocessors(tensor) -> int:
    """SMs of the tensor's GPU; when interpreting on the CPU, an H200's, so the persistent loops
    (several tasks per block) are exercised as they will run."""
    from ..runtime import sm_count

    return sm_count(tensor.get_device()) if runs_on_gpu(tensor) else H200_MULTIPROCESSORS


# -- parameter checks --------------------------------------------------------------------------------------

def register_split(consumers: int, producer_warps: int, producer: int | None, consumer: int | None,
                   blocks_per_sm: int = 1) -> tuple:
    """(producer, consumer) registers per thread for setmaxnreg, or (None, None) without a register split (a
    producer of fewer than 4 warps is no whole warpgroup; every warp then keeps the launch's equal share).
    Defaults: the producer keeps PRODUCER_REGISTERS, the consumers share the rest of the block's share of the file
    (1 / blocks_per_sm), at most 240 each; with one consumer warpgroup alone on its SM none (its 256 threads launch
    with the whole file between them: 256 registers each, more than a consumer can be raised to)."""
    if consumers == 1 and blocks_per_sm == 1 and producer is None and consumer is None:
        return None, None
    if producer_warps < 4:
        if producer is not None or consumer is not None:
            raise ValueError(f"a register split (setmaxnreg) needs a whole producer warpgroup; producer_warps="
                             f"{producer_warps} launches a partial one, whose warps keep the launch's equal share")
        return None, None
    file = REGISTER_FILE // blocks_per_sm
    producer = PRODUCER_REGISTERS if producer is None else producer
    if consumer is None:
        spare = (file // 128 - producer) // consumers
        consumer = min(240, spare // 8 * 8)
    for what, n in (("producer_registers", producer), ("consumer_registers", consumer)):
        if not (isinstance(n, int) and 24 <= n <= 256 and n % 8 == 0):
            raise ValueError(f"{what} must be a multiple of 8 from 24 to 256 (setmaxnreg), got {n!r}")
    need = 128 * (producer + consumers * consumer)
    if need > file:
        share = "an SM has" if blocks_per_sm == 1 else f"each of {blocks_per_sm} blocks an SM has"
        raise ValueError(f"a producer warpgroup at {producer} and {consumers} consumer warpgroups at {consumer} "
                         f"registers per thread need {need} registers; {share} {file}")
    return producer, consumer


def consumer_registers_for(consumers: int) -> int:
    """The consumers' default share next to a producer warpgroup at PRODUCER_REGISTERS."""
    return register_split(consumers, 4, None, None)[1]


def ring_bytes(specs: dict, stages: int, offset: int = 0) -> int:
    """Where a ring of `stages` stages of `specs`, declared at byte `offset`, ends (as plan_shared places it)."""
    for spec in specs.values():
        t = spec.type
        offset = cdiv(offset, t.alignment) * t.alignment + t.nbytes * spec.count * stages
    return offset


def check_shared_memory(kind: str, rings: list, semaphores: int, loc: Loc, vary: tuple = (0,),
                        blocks_per_sm: int = 1) -> None:
    """The rings [(what, specs, stages, stage parameter)], declared in order, and the semaphores must fit in a
    block's shared memory (its share of an SM's with `blocks_per_sm` blocks); if not, say how many stages of the
    rings `vary` (indices; the first by default) would, each with the others' as given."""
    counts = [stages for _, _, stages, _ in rings]
    limit = shared_limit(blocks_per_sm)

    def total(counts: list) -> int:
        offset = 0
        for (_, specs, _, _), stages in zip(rings, counts):
            offset = ring_bytes(specs, stages, offset)
        return cdiv(offset, SEMAPHORE_BYTES) * SEMAPHORE_BYTES + SEMAPHORE_BYTES * semaphores + ALIGNMENT_SLACK

    need = total(counts)
    if need <= limit:
        return
    parts = []
    for what, specs, stages, parameter in rings:
        per_stage = ring_bytes(specs, 1)
        buffers = ", ".join(f"{n}: {s}" for n, s in specs.items())
        parts.append(f"{parameter}={stages} x {_kb(per_stage)} of {what} ({buffers})")
    hints = []
    for i in vary:
        fits = max((n for n in range(1, counts[i]) if total(counts[:i] + [n] + counts[i + 1:]) <= limit), default=0)
        parameter = rings[i][3]
        hint = f"at most {fits} {parameter} fit" if fits > 1 else \
            f"{'only one' if fits else 'not even one'} {parameter.rstrip('s')} fits"
        others = [f"{rings[j][3]}={counts[j]}" for j in vary if j != i]
        hints.append(hint + (f" (with {', '.join(others)})" if others else ""))
    raise TraceError(f"{kind}: the stages do not fit in shared memory: {' + '.join(parts)} + semaphores and "
                     f"{ALIGNMENT_SLACK} bytes of alignment = {_kb(need)}, over the {_kb(limit)} a block "
                     f"can have{'' if blocks_per_sm == 1 else f' with {blocks_per_sm} blocks an SM'}; "
                     f"{', or '.join(hints)}", loc)


def _kb(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n / 1024:.1f} KB"
