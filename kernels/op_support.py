"""What tkpy's torch operators share: the `tkpy` op namespace, its registration, and the eager fast path.

Each public kernel is a torch.library operator `torch.ops.tkpy.<name>` with a fake (meta) implementation, so that
torch.compile and torch.export see through it, and an autograd formula (or an Autograd-key kernel that refuses
gradients with a clear message where a kernel has no backward yet). The operators take CUDA tensors, and CPU
tensors under TKPY_INTERPRET=1, where tkpy's CPU interpreter runs the same kernels.

The torch-facing functions (`tkpy.kernels.matmul`, ...) call the operator, except in plain eager inference:
when nothing would intercept the call (no input needs a gradient, no torch.compile trace, no
__torch_function__ or dispatch mode, no tensor subclass or functorch transform, no profiler), they call the
implementation directly, which spares the dispatcher's several microseconds a call (benchmarks/bench_launch.py
measures both paths).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

import tkpy as tk

NAMESPACE = "tkpy"
LIBRARY = torch.library.Library(NAMESPACE, "DEF")     # every tkpy operator (one registration per process)


def config_checks(config, **choices) -> Callable[[str], None]:
    """The start of a kernel config's __post_init__: each named field must be one of its `choices` (a ValueError
    naming the field, the choices and the value); returns `fail(what)`, the ValueError naming the config's class, for
    the config's other checks."""
    def fail(what: str):
        raise ValueError(f"{type(config).__name__}: {what}")
    for field, allowed in choices.items():
        value = getattr(config, field)
        if value not in allowed:
            fail(f"{field} must be one of {allowed}, got {value!r}")
    return fail


def define(name: str, impl: Callable, fake: Callable, *, mutates_args: Sequence[str] = (),
           backward: Callable | None = None, setup_context: Callable | None = None,
           differentiable: str | None = None):
    """Define `tkpy::<name>` with the schema of `impl`'s annotated signature (its defaults included), `impl` on
    CUDA and CPU tensors (the kernels' checks accept CPU tensors under TKPY_INTERPRET=1 only: check_device), `fake`
    as its meta implementation, and either an autograd formula (`backward`, `setup_context`, as
    torch.library.register_autograd takes them) or, without one, an Autograd kernel that refuses inputs which require grad (its message names the op and gives
    `differentiable`, the reason, e.g. "attention's backward is not implemented yet"). Returns the OpOverload."""
    LIBRARY.define(name + torch.library.infer_schema(impl, mutates_args=mutates_args))
    qualname = f"{NAMESPACE}::{name}"
    LIBRARY.impl(name, impl, "CUDA")
    LIBRARY.impl(name, impl, "CPU")                     # (the interpreter's: each kernel checks TKPY_INTERPRET)
    torch.library.register_fake(qualname, fake, lib=LIBRARY)
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    if backward is not None:
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=LIBRARY)
    else:
        LIBRARY.impl(name, _refusing_grad(name, op, differentiable or f"{name} has no backward pass"), "Autograd")
    return op


def check_device(name: str, x: torch.Tensor) -> None:
    """ValueError for a tensor tkpy's kernels cannot run on: they take CUDA tensors, and any under TKPY_INTERPRET=1
    (the CPU interpreter; meta tensors are fake ones, whose checks pass)."""
    if x.device.type not in ("cuda", "meta") and not tk.interpret_requested():
        raise ValueError(f"{name} runs on CUDA tensors (got {x.device}); set TKPY_INTERPRET=1 to run it in tkpy's "
                         "CPU interpreter")


def _refusing_grad(name: str, op, reason: str) -> Callable:
    """An Autograd-key kernel for an op without a backward: an error when an input requires grad under grad mode
    (the output would otherwise carry no gradient, silently); otherwise the op below autograd."""
    def autograd_kernel(*args, **kwargs):
        refuse_grad(name, *args, *kwargs.values(), reason=reason)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)
    return autograd_kernel


def needs_grad(*tensors) -> bool:
    """Whether autograd would record a call on these arguments (grad mode on and a tensor requires grad)."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


def refuse_grad(name: str, *tensors, reason: str | None = None) -> None:
    """NotImplementedError where autograd would need a backward that `name` does not have."""
    if needs_grad(*tensors):
        raise NotImplementedError(f"{name}: no backward pass ({reason or 'forward only'}); call it under "
                                  "torch.no_grad() or torch.inference_mode(), or on tensors that do not require "
                                  "grad")


_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_torch_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_transform = torch._C._functorch.peek_interpreter_stack
_profiler = torch.autograd.profiler
_Tensor = torch.Tensor


def direct_call_ok(tensors: Sequence) -> bool:
    """True when calling an op's implementation directly is indistinguishable from dispatching it: plain
    torch.Tensor inputs (no subclass: fake, functional, DTensor), none needing a gradient, outside torch.compile's
    trace, with no __torch_function__ / dispatch mode, functorch transform or profiler active. (On the launch
    path: the torch functions are bound once.)"""
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not _Tensor or grad and t.requires_grad):
            return False
    return not (_is_compiling() or _torch_function_mode() or _dispatch_modes() or _functorch_transform() is not None
                or _profiler._is_profiler_enabled)


def refuse_overlap(name: str, out: torch.Tensor, **inputs) -> None:
    """ValueError where `out` shares memory with an input: the kernel would read what it is overwriting."""
    for arg, x in inputs.items():
        if x is not None and may_overlap(out, x):
            raise ValueError(f"{name}: out shares memory with {arg} (the kernel would read what it overwrites); "
                             f"pass an out tensor of its own, or none")


def may_overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two tensors may share an element: their byte ranges in one storage intersect, except for two
    row-major views of one row stride whose column ranges are disjoint (e.g. buf[:, :n] and buf[:, n:])."""
    if x.numel() == 0 or y.numel() == 0 or x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False

    def extent(t):
        first = t.storage_offset() * t.element_size()
        return first, first + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    (x0, x1), (y0, y1) = extent(x), extent(y)
    if x1 <= y0 or y1 <= x0:
        return False
    if x.dim() == y.dim() == 2 and x.stride() == y.stride() and x.stride(1) == 1 and x.element_size() == \
            y.element_size():
        row = x.stride(0) * x.element_size()
        (xc, yc), (xw, yw) = (x0 % row, y0 % row), (x.shape[1] * x.element_size(), y.shape[1] * y.element_size())
        if xw <= row and yw <= row and not any(a < b + bw and b < a + aw for a, aw, b, bw in
                                               ((xc, xw, yc, yw), (xc, xw, yc - row, yw), (xc, xw, yc + row, yw))):
            return False
    return True


@dataclass(frozen=True)
class Row:
    """A row of a kernel's policy table: its value (a tuple of config fields) and why (a RESULTS.md run once timed on
    the GPU, or the fit that set it)."""

    value: tuple
    evidence: str


_RESIDENT: dict = {}         # (config, device) -> the blocks the GPU runs at once


def resident_blocks(kernel, config, args, interpreter_sms: int) -> int:
    """Blocks of `kernel` (of `config`, which has blocks_per_sm, and a cluster size if it has `cluster`) the GPU runs
    at once on args[0]'s device (SMs x the occupancy query, at least blocks_per_sm an SM; for clusters, the active
    clusters (cuOccupancyMaxActiveClusters: a cluster's blocks share a GPC) x their blocks; asked once a config and
    device), or `interpreter_sms` SMs' worth on the CPU: the bound of a persistent grid. On the CPU the arguments are
    still checked as the GPU's query binds them (stand-ins of the wrong shape fail in the interpreter too)."""
    x = args[0]
    if not x.is_cuda:
        kernel.check(*args)
        return interpreter_sms * config.blocks_per_sm
    key = (config, x.get_device())
    if key not in _RESIDENT:
        cluster = getattr(config, "cluster", 1)
        if cluster > 1:
            _RESIDENT[key] = max(1, kernel.max_active_clusters(*args)) * cluster
        else:
            from tkpy.templates import multiprocessors
            _RESIDENT[key] = multiprocessors(x) * max(config.blocks_per_sm, kernel.max_active_blocks(*args))
    return _RESIDENT[key]
