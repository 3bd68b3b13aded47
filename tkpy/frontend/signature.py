"""Kernel parameters: what the annotations declare, and checking call arguments against them.

`x: tk.gl[bf16, "M", 64]` is a global tensor; `n: int` and `s: float` are
runtime scalars; `k: tk.constexpr` is a trace-time Python value (a new
specialization per distinct value). `x: tk.pgl[tk.gl[bf16, "M", 64], 4]` is a parallel global tensor (one tensor per
GPU of a group of 4, tkpy.frontend.pgl): it stands for 4 gl parameters and its rank, a constexpr (`member` specs).
"""
from __future__ import annotations

import inspect
import linecache
import math
import operator
from dataclasses import dataclass
from typing import Optional

from ..errors import ArgumentError, TraceError
from ..ir.core import Loc
from ..tiles.dtypes import DType, f32, i32, named_like
from ..tiles.types import GL, PGL

ALIGNMENT = 16  # bytes: base pointers and row strides, for vectorised and async copies


class _GlFactory:
    """`tk.gl[dtype, dim, ...]`: the annotation of a global tensor parameter (1 to 5 dims)."""

    def __getitem__(self, item) -> GL:
        if not isinstance(item, tuple) or not item or not isinstance(item[0], DType):
            first = item[0] if isinstance(item, tuple) and item else item
            ours = named_like(first)
            if ours:         # torch.float32 and the like: tkpy's dtype of the same name
                raise TypeError(f"tk.gl takes tkpy's dtypes (tk.bf16, tk.fp16, tk.f32, tk.fp8e4m3, ...), not {first}: "
                                f"write tk.gl[tk.{ours.name}, ...]")
            raise TypeError("write tk.gl[dtype, dim, ...], e.g. tk.gl[bf16, 'M', 64]")
        return GL(item[0], tuple(item[1:]))

    def __call__(self, dtype: DType, *dims) -> GL:
        return GL(dtype, tuple(dims))


gl = _GlFactory()


class _PglFactory:
    """`tk.pgl[tk.gl[dtype, dims...], world]`: the annotation of a parallel global tensor parameter, one gl per GPU
    of a group of `world` (ThunderKittens' `pgl<gl<...>, NUM_DEVICES>`)."""

    def __getitem__(self, item) -> PGL:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("write tk.pgl[tk.gl[dtype, dims...], world], e.g. tk.pgl[tk.gl[bf16, 'M', 'K'], 4]")
        return PGL(*item)


pgl = _PglFactory()


class constexpr:
    """Annotation of a trace-time constant parameter: its Python value is baked into the kernel."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str            # 'gl' | 'int' | 'float' | 'constexpr'
    gl: Optional[GL] = None
    member: Optional[tuple] = None   # of a pgl parameter: (its name, the rank this gl is, or None: its local rank)


def pgl_specs(name: str, ann: PGL) -> list[ParamSpec]:
    """The specs a pgl parameter stands for: a gl per rank (`x_0`, `x_1`, ...) and its local rank (`x_rank`, a
    constexpr: each rank's kernel is its own specialization, so that peers are picked at trace time)."""
    return [ParamSpec(f"{name}_{r}", "gl", ann.gl, (name, r)) for r in range(ann.world)] + \
        [ParamSpec(f"{name}_rank", "constexpr", None, (name, None))]


def resolve_annotation(ann, fn, definition_locals: dict):
    """Evaluate a string annotation (from `from __future__ import annotations`) where fn was defined:
    its globals, its closure, and the locals of the function that defined it (a kernel factory's arguments
    are visible there even when only an annotation uses them)."""
    if not isinstance(ann, str):
        return ann
    scope = dict(definition_locals)
    scope.update(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    try:
        return eval(ann, fn.__globals__, scope)
    except Exception as e:
        raise TraceError(f"kernel {fn.__name__}: cannot evaluate annotation {ann!r}: {e}", definition_loc(fn)) from None


def definition_loc(fn) -> Loc:
    """Where `fn`'s `def` is: the first line from its first decorator on that starts with `def`."""
    code = fn.__code__
    for line in range(code.co_firstlineno, code.co_firstlineno + 20):
        if linecache.getline(code.co_filename, line).lstrip().startswith(("def ", "async def ")):
            return Loc(code.co_filename, line, fn.__name__)
    return Loc(code.co_filename, code.co_firstlineno, fn.__name__)


def parse_signature(fn, definition_locals: dict | None = None) -> list[ParamSpec]:
    """The parameters of kernel function `fn`; one it cannot take raises TraceError naming the def's line."""
    loc = definition_loc(fn)
    specs = []
    for p in inspect.signature(fn).parameters.values():
        ann = resolve_annotation(p.annotation, fn, definition_locals or {})
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TraceError(f"kernel {fn.__name__}: parameter `{p.name}` must be a plain positional parameter", loc)
        if isinstance(ann, GL):
            specs.append(ParamSpec(p.name, "gl", ann))
        elif isinstance(ann, PGL):
            specs += pgl_specs(p.name, ann)
        elif ann is int:
            specs.append(ParamSpec(p.name, "int"))
        elif ann is float:
            specs.append(ParamSpec(p.name, "float"))
        elif ann is constexpr:
            specs.append(ParamSpec(p.name, "constexpr"))
        else:
            raise TraceError(f"kernel {fn.__name__}: parameter `{p.name}` needs an annotation: "
                             "tk.gl[dtype, dims...], tk.pgl[tk.gl[...], world], int, float or tk.constexpr", loc)
    names = {s.name for s in specs}
    if len(names) < len(specs):
        clash = next(s.name for s in specs if s.member is not None and sum(t.name == s.name for t in specs) > 1)
        raise TraceError(f"kernel {fn.__name__}: parameter `{clash}` clashes with a name the pgl parameter "
                         f"`{clash.rsplit('_', 1)[0]}` takes for its gls and rank; rename it", loc)
    for s in specs:
        if s.kind == "gl":
            for d in s.gl.dynamic_dims:
                if d in names:
                    raise TraceError(f"kernel {fn.__name__}: dynamic dim name {d!r} of `{s.name}` "
                                     "clashes with a parameter name", loc)
    return specs


def dynamic_dim_names(specs: list[ParamSpec]) -> list[str]:
    """Distinct dynamic dim names in order of first appearance: one runtime int each."""
    seen: list[str] = []
    for s in specs:
        if s.kind == "gl":
            for d in s.gl.dynamic_dims:
                if d not in seen:
                    seen.append(d)
    return seen


def broadcast_dim(t) -> int | None:
    """The first dim along which tensor `t` repeats its elements (stride 0 over more than one: e.g. from .expand()),
    or None. (On attention()'s and matmul()'s launch paths: most tensors leave at the first test.)"""
    strides = t.stride()
    if 0 not in strides:
        return None
    return next((axis for axis, (size, stride) in enumerate(zip(t.shape, strides)) if stride == 0 and size > 1), None)


def tma_layout(t) -> bool:
    """Whether a kernel takes tensor `t` with its strides as they are (TMA reads it in place): unit last-dim stride,
    every other stride a multiple of ALIGNMENT bytes, no dim repeated by a stride of 0 (as from .expand()). Its
    pointer must be ALIGNMENT-byte aligned too (tma_ready). A torch-facing function passes such a tensor as it is
    and another as a padded or contiguous copy; check_tensor explains what one that is not fails."""
    esize = t.element_size()
    return t.stride(-1) == 1 and all(s * esize % ALIGNMENT == 0 for s in t.stride()[:-1]) and broadcast_dim(t) is None


def tma_ready(t) -> bool:
    """tma_layout(t) and an ALIGNMENT-byte aligned pointer: `t` can be passed to a kernel as it is."""
    return tma_layout(t) and t.data_ptr() % ALIGNMENT == 0


def check_tensor(spec: ParamSpec, t, *, need_cuda: bool) -> None:
    """Raise ArgumentError if tensor `t` cannot be passed as `spec` (a gl parameter): the wrong type, dtype or shape,
    or a layout that tma_ready refuses (each reason explained; an empty tensor's last stride is not checked)."""
    import torch

    g = spec.gl
    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"`{spec.name}` must be a torch.Tensor for {g}, got {type(t).__name__}")
    if need_cuda and not t.is_cuda:
        raise ArgumentError(f"`{spec.name}` is on {t.device}; tkpy kernels run on CUDA tensors "
                            f"(move it with .cuda())")
    if t.dtype != g.dtype.torch:
        raise ArgumentError(f"`{spec.name}` has dtype {t.dtype}, the kernel declares {g} ({g.dtype.torch})")
    if t.dim() != g.rank:
        raise ArgumentError(f"`{spec.name}` has {t.dim()} dims {tuple(t.shape)}, the kernel declares {g}")
    for axis, (want, got) in enumerate(zip(g.shown, t.shape)):
        if isinstance(want, int) and want != got:
            raise ArgumentError(f"`{spec.name}` has shape {tuple(t.shape)}; dim {axis} must be {want} ({g})")
    if t.numel() and t.stride(-1) != 1:
        raise ArgumentError(f"`{spec.name}` must be contiguous in its last dim (strides {t.stride()}); "
                            "call .contiguous()")
    axis = broadcast_dim(t)
    if axis is not None:     # (a TMA map cannot repeat a dim; a store would race)
        raise ArgumentError(f"`{spec.name}` repeats its elements along dim {axis} (stride 0 over {t.shape[axis]}, "
                            "e.g. from .expand()); kernels take tensors of distinct elements: call .contiguous()")
    esize = t.element_size()
    if t.data_ptr() % ALIGNMENT:
        raise ArgumentError(f"`{spec.name}`'s data pointer {t.data_ptr():#x} is not {ALIGNMENT}-byte aligned "
                            "(a sliced view?); pass an aligned tensor or .clone() it")
    for axis, stride in enumerate(t.stride()[:-1]):
        if (stride * esize) % ALIGNMENT:
            raise ArgumentError(f"`{spec.name}`'s stride {stride} along dim {axis} is {stride * esize} bytes, "
                                f"not a multiple of {ALIGNMENT}; pad the last dim or .contiguous() a padded copy")


FLT_MAX = 3.4028234663852886e38          # the largest finite 32-bit float


def check_scalar(spec: ParamSpec, v) -> None:
    if spec.kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise ArgumentError(f"`{spec.name}` must be an int, got {type(v).__name__}")
        if not -2**31 <= v < 2**31:
            raise ArgumentError(f"`{spec.name}` = {v} does not fit a 32-bit int")
    elif spec.kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ArgumentError(f"`{spec.name}` must be a float, got {type(v).__name__}")
        if math.inf != abs(v) > FLT_MAX:                # (finite: infinities pack as themselves)
            raise ArgumentError(f"`{spec.name}` = {v!r} does not fit a 32-bit float (finite values up to {FLT_MAX:.4g})")


def bind_dims(specs: list[ParamSpec], args) -> dict[str, int]:
    """Values of the dynamic dims, checking that dims sharing a name agree."""
    dims: dict[str, int] = {}
    for spec, t in zip(specs, args):
        if spec.kind != "gl":
            continue
        for want, got in zip(spec.gl.shown, t.shape):
            if isinstance(want, str):
                if want in dims and dims[want] != got:
                    raise ArgumentError(f"dim {want!r} is {dims[want]} elsewhere but {got} in `{spec.name}` "
                                        f"(shape {tuple(t.shape)})")
                dims[want] = int(got)
    for name, v in dims.items():
        if v >= 2**31:
            raise ArgumentError(f"dim {name!r} = {v} does not fit a 32-bit int")
    return dims


SCALAR_DTYPES = {"int": i32, "float": f32}


def launch_grid(grid, cluster, kernel_name: str) -> tuple[int, int, int]:
    """The grid of a launch (`kernel[grid]`, `kernel.interpret[grid]`) as 3 ints, checked against CUDA's limits and
    the kernel's cluster (`cluster`: 3 ints or None)."""
    if isinstance(grid, int):
        grid = (grid,)
    try:
        g = tuple(operator.index(x) for x in grid)      # (ints only: 1.5 or "2" is an error, not truncated)
    except TypeError:
        raise ArgumentError(f"grid must be an int or a tuple of 1 to 3 ints, got {grid!r}") from None
    if not 1 <= len(g) <= 3 or any(x < 1 for x in g):
        raise ArgumentError(f"grid must be 1 to 3 positive ints, got {grid!r}")
    if g[0] >= 2**31 or any(x >= 65536 for x in g[1:]):
        raise ArgumentError(f"grid {g} exceeds CUDA's limits (x < 2^31, y and z < 65536)")
    g = g + (1,) * (3 - len(g))
    if cluster and any(x % c for x, c in zip(g, cluster)):
        raise ArgumentError(f"grid {g} is not a multiple of the cluster {cluster} of {kernel_name}")
    return g
