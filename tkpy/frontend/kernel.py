"""`@tk.kernel`: the launcher, its specialization cache and its inspectable stages.

    trace(args) -> Traced (IR)  -> lower() -> Lowered (C++)  -> compile() -> Compiled (cubin)

`kernel[grid](*args)` runs all three once per specialization (cached) and then
only checks the arguments, packs them and launches. A specialization an earlier process compiled comes from its
record instead (frontend/spec_records.py: the module and its launch facts, no trace), its IR and C++ made again only
where asked for.

Threads may call a kernel (launch, inspect, trace) at once: each cache is filled once under a lock
(`Kernel._once`), and launches pack into per-thread parameter buffers (fastpath.ThreadBuffers).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Optional

from ..codegen import KernelCode, kernel_code, param_slots
from ..errors import ArgumentError, with_location
from ..interpret import Interpreted, interpret_requested
from ..ir import print_ir, run_all
from ..ir.core import KernelIR
from ..runtime import background, native
from ..runtime import debug as debug_mode
from ..runtime.tensor_map import TensorMapEncoder
from .signature import bind_dims, check_scalar, check_tensor, dynamic_dim_names, launch_grid, parse_signature
from . import fastpath, pgl, spec_records
from .context import user_loc
from .digest import value_digest
from .once import Once
from .tracer import trace_kernel

MAX_WARPS = 32
MAX_WARPS_AN_SM = 64                # Hopper's resident warps an SM (2048 threads): the most blocks_per_sm can ask


class Kernel:
    """A traced-on-demand tile kernel. Call as `k[grid](*args)`; inspect with `.source(*args)` etc."""

    def __init__(self, fn, warps: int, name: Optional[str] = None, cluster=None, blocks_per_sm: Optional[int] = None,
                 fast_division: bool = False, debug: Optional[bool] = None, specs=None, dependent_launch: bool = True):
        if not isinstance(warps, int) or not 1 <= warps <= MAX_WARPS:
            raise ValueError(f"warps must be an int in 1..{MAX_WARPS}, got {warps!r}")
        if blocks_per_sm is not None and (not isinstance(blocks_per_sm, int) or isinstance(blocks_per_sm, bool)
                                          or not 1 <= blocks_per_sm * warps <= MAX_WARPS_AN_SM):
            raise ValueError(f"blocks_per_sm must be an int from 1 to {MAX_WARPS_AN_SM // warps} for {warps} warps a "
                             f"block (an SM holds {MAX_WARPS_AN_SM} warps), or None (not stated); got "
                             f"{blocks_per_sm!r}")
        self.blocks_per_sm = blocks_per_sm          # None: __launch_bounds__ states no minimum (ptxas chooses)
        self.fast_division = fast_division
        if not isinstance(dependent_launch, bool):
            raise ValueError(f"dependent_launch must be True or False, got {dependent_launch!r}")
        self.dependent_launch = dependent_launch    # False: never launched with PDL (True: as TKPY_DEPENDENT_LAUNCH)
        if debug not in (None, True, False):
            raise ValueError(f"debug must be True, False or None (as TKPY_DEBUG says), got {debug!r}")
        self.debug = debug                          # debug mode (runtime/debug.py): True, False, None = TKPY_DEBUG
        self.fn = fn
        self.warps = warps
        self.cluster = _cluster3(cluster)
        self.name = name or fn.__name__
        self.specs = specs if specs is not None else parse_signature(fn, _definition_locals())
        self.dim_names = dynamic_dim_names(self.specs)
        self._gl_positions = [i for i, s in enumerate(self.specs) if s.kind == "gl"]
        self._own_positions = [i for i in self._gl_positions if self.specs[i].member is None]    # not a pgl's
        self._pgl = any(s.member is not None for s in self.specs)
        self._compiled: dict[tuple, "Compiled"] = {}
        self._fast: dict[tuple, Any] = {}          # fast-path key -> _Ready.entry (or its native_entry);
                                                    # only grows (the native launcher remembers its last hit)
        self._readies: dict[tuple, _Ready] = {}     # fast-path key -> its _Ready (for the switch to native)
        self._bound: dict = {}                      # grid -> launcher bound to it
        self._fast_launch = None                    # the native launcher (tkpy.runtime.native) or the Python one
        self._native = None                         # the native launcher, when in use
        self._launcher_source: str | None = None
        self._interpreted = None                    # the CPU interpreter's launcher, made on first use
        # Held while filling the caches above (the fast path's set-up); never around a trace or compile, which
        # hold the key's own lock (`_once`) so that other specializations compile meanwhile.
        self._lock = threading.RLock()
        self._made_once = Once()
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<tkpy kernel {self.name} ({self.warps} warps)>"

    @property
    def options(self) -> dict:
        """The options of @tk.kernel this kernel was made with."""
        return dict(warps=self.warps, name=self.name, cluster=self.cluster, blocks_per_sm=self.blocks_per_sm,
                    fast_division=self.fast_division, debug=self.debug, dependent_launch=self.dependent_launch)

    def variant(self, **changes) -> "Kernel":
        """The same function as a kernel with some of @tk.kernel's options changed (`warps=8`, `cluster=2`, ...),
        with caches of its own: what tk.autotune makes per configuration."""
        unknown = sorted(changes.keys() - self.options.keys())
        if unknown:
            raise TypeError(f"{self.name}.variant(): @tk.kernel has no option {', '.join(unknown)} (it has "
                            f"{', '.join(self.options)})")
        return Kernel(self.fn, specs=self.specs, **{**self.options, **changes})

    def __tkpy_digest__(self):
        """What the kernel's digest (frontend/digest.py) is made of: its options, specs and function."""
        return self.options, self.specs, self.fn

    @functools.cached_property
    def digest(self) -> Optional[str]:
        """A digest of what this kernel's traces depend on besides the call and tkpy's files (frontend/digest.py),
        the key of its specialization records; None where a value it reaches cannot be vouched for."""
        return value_digest(self)

    def __call__(self, *args, **kwargs):
        """`k(x, y)` without a grid: say how a kernel is launched."""
        names = ", ".join(s.name for s in self.specs)
        raise ArgumentError(f"{self.name}(...) needs a grid: a kernel is launched as {self.name}[grid]({names}), grid "
                            f"the number of blocks to run (an int, or 1 to 3 ints: {self.name}[(blocks,)](...)); "
                            f"{self.name}.interpret[grid](...) or TKPY_INTERPRET=1 runs it on the CPU interpreter",
                            user_loc())

    # -- stages --------------------------------------------------------------
    def _bind(self, args, *, need_cuda: bool) -> tuple[tuple, dict]:
        """The specialization key and constexpr values for `args`; an argument the kernel cannot take raises
        ArgumentError naming the caller's line."""
        try:
            return self._checked_key(args, need_cuda)
        except ArgumentError as e:
            raise _at_callers_line(e) from None

    def _checked_key(self, args, need_cuda: bool) -> tuple[tuple, dict]:
        if len(args) != len(self.specs):
            raise ArgumentError(f"{self.name}() takes {len(self.specs)} arguments "
                                f"({', '.join(s.name for s in self.specs)}), got {len(args)}")
        contiguous, constexprs = [], {}
        for spec, a in zip(self.specs, args):
            if spec.kind == "gl":
                check_tensor(spec, a, need_cuda=need_cuda)
                contiguous.append(bool(a.is_contiguous()))
            elif spec.kind == "constexpr":
                try:
                    hash(a)
                except TypeError:
                    raise ArgumentError(f"constexpr `{spec.name}` must be hashable, got {type(a).__name__}") from None
                constexprs[spec.name] = a
            else:
                check_scalar(spec, a)
        if need_cuda:
            self._check_one_device(args)
        bind_dims(self.specs, args)
        key = (tuple(contiguous), tuple(sorted(constexprs.items(), key=lambda kv: kv[0])),
               debug_mode.settings(self.debug))   # debug and normal builds never share a specialization
        return key, constexprs

    def flat_args(self, args) -> tuple:
        """A call's arguments as the kernel's specs take them: each tk.PGL in place of a tk.pgl parameter expanded
        into its tensors and its rank (frontend/pgl.py); other calls' as they are."""
        if not self._pgl:
            return args
        try:
            return pgl.flatten(self.specs, args)
        except ArgumentError as e:
            raise _at_callers_line(e) from None

    def _launch_positions(self, args) -> list:
        """The tensor arguments whose device the launch runs on: the kernel's gls and each pgl's local tensor (the
        other ranks' tensors of a pgl may live on other GPUs, which the local one reaches as peer memory)."""
        return sorted(self._own_positions + pgl.local_members(self.specs, args)) if self._pgl else self._gl_positions

    def _check_one_device(self, args) -> None:
        """ArgumentError unless the tensor arguments share one device (a launch runs on one GPU)."""
        positions = self._launch_positions(args)
        first = positions[0] if positions else None
        others = [i for i in positions if args[i].device != args[first].device]
        if others:
            where = ", ".join(f"{self.specs[i].name} on {args[i].device}" for i in positions)
            raise ArgumentError(f"{self.name}: a launch runs on one GPU, but its tensors are on different devices "
                                f"({where}); move them to one, e.g. {self.specs[others[0]].name}.to("
                                f"{self.specs[first].name}.device)")

    def check(self, *args) -> None:
        """Raise the ArgumentError a launch with these arguments would raise (dtypes, shapes, strides, alignment,
        devices), without tracing, compiling or a GPU: e.g. the stand-ins an occupancy query passes before the real
        tensors exist."""
        self._bind(self.flat_args(args), need_cuda=False)

    def trace(self, *args) -> "Traced":
        """Trace for these arguments (torch tensors, CPU ones allowed; values only shape the specialization)."""
        return self._trace(self.flat_args(args))

    def _trace(self, args) -> "Traced":
        return self._traced(*self._bind(args, need_cuda=False))

    def _traced(self, key: tuple, constexprs: dict) -> "Traced":
        """The trace of specialization `key` (_bind's), with its IR passes run."""
        ir = trace_kernel(self.fn, self.name, self.warps, self.specs, key[0], constexprs, self.cluster,
                          self.blocks_per_sm, self.fast_division, self.dependent_launch)
        ir.debug = key[2]
        run_all(ir)
        return Traced(self, ir, key)

    def compile(self, *args) -> "Compiled":
        """The compile stage for these arguments (torch tensors, CPU ones allowed: no GPU needed): traced, lowered
        and compiled by NVRTC into the disk cache once per specialization, as a first launch would do; a launch of
        the same specialization then only loads it. What `python -m tkpy.warmup` and tk.autotune run ahead."""
        return self._compiled_for(self.flat_args(args), need_cuda=False)

    def _compiled_for(self, args, *, need_cuda: bool) -> "Compiled":
        """The compiled specialization for `args` as the specs take them (flat_args')."""
        key, constexprs = self._bind(args, need_cuda=need_cuda)
        return self._once(self._compiled, key, lambda: self._made(key, constexprs))

    def _made(self, key: tuple, constexprs: dict) -> "Compiled":
        """Specialization `key` compiled: from its record where an earlier process compiled it (no trace), else traced,
        lowered, compiled (or found in the disk cache) and recorded."""
        def relower() -> Lowered:
            return self._traced(key, constexprs).lower()

        rkey = spec_records.record_key(self, key)
        recorded = None
        found = spec_records.find(rkey, key[0], lambda: recorded.lowered.source)    # (the module's source, if asked)
        if found is not None:
            from ..runtime import warn_on_spills
            warn_on_spills(found.module.resources, found.module.kernel_name)
            recorded = Compiled(found.module, found.facts,
                                relower=lambda: self._relowered(rkey, relower, found.identity))
            return recorded
        compiled = relower().compile()
        spec_records.keep(rkey, compiled)
        return compiled

    def _relowered(self, rkey: str, relower, identity: str) -> Lowered:
        """A recorded specialization's Lowered, made when its IR or source is asked for; a record whose code is not
        what the kernel lowers to now is dropped with a warning (its key missed something the trace reads)."""
        lowered = relower()
        if lowered.code.identity != identity:
            spec_records.drop(rkey)
            spec_records.stale_warning(self.name)
        return lowered

    def _once(self, cache: dict, key, make):
        """`cache[key]`, made by `make()` once however many threads ask at once (one trace and one compile
        per specialization; Once: a make() that asks for its own key again, a kernel launched from inside its own
        trace, gets the nested-trace error, not a deadlock)."""
        return self._made_once.get(cache, key, make)

    def max_active_clusters(self, *args) -> int:
        """How many of this kernel's clusters, specialized for `args` (CUDA tensors), the GPU runs at once."""
        loaded, compiled = self._loaded_for(self.flat_args(args))
        facts = compiled.facts
        return loaded.max_active_clusters((facts.threads, 1, 1), facts.dynamic_smem, facts.cluster)

    def max_active_blocks(self, *args) -> int:
        """How many blocks of this kernel, specialized for `args` (CUDA tensors), an SM runs at once."""
        loaded, compiled = self._loaded_for(self.flat_args(args))
        return loaded.max_active_blocks(compiled.facts.threads, compiled.facts.dynamic_smem)

    def _loaded_for(self, args) -> tuple:
        """(the kernel loaded on the device of `args`, its compiled specialization), for the occupancy queries."""
        from ..runtime import load_kernel
        compiled = self._compiled_for(args, need_cuda=True)
        return load_kernel(compiled.module, self._device(args), compiled.facts.dynamic_smem), compiled

    def _device(self, args) -> int:
        """The device a launch on these (flattened) arguments runs on: its tensors' (torch's current one without)."""
        positions = self._launch_positions(args)
        return args[positions[0]].get_device() if positions else _current_device()

    def ir(self, *args) -> str:
        """The traced IR as text."""
        return self._trace(self.flat_args(args)).text

    def source(self, *args, prelude: str = "used") -> str:
        """The generated CUDA C++, as NVRTC compiles it: the prelude helpers the kernel uses, then the kernel.
        prelude="full": the whole prelude instead of the helpers it uses."""
        lowered = self._compiled_for(self.flat_args(args), need_cuda=False).lowered
        return lowered.source if prelude == "used" else lowered.code.source(prelude)

    def ptx(self, *args) -> str:
        """The PTX NVRTC made with the cubin (for reading: the driver loads the cubin)."""
        return self._compiled_for(self.flat_args(args), need_cuda=False).module.ptx

    def sass(self, *args) -> str:
        """The cubin's SASS (nvdisasm; no GPU needed), disassembled once and cached as the cubin is."""
        return self._compiled_for(self.flat_args(args), need_cuda=False).sass()

    def resources(self, *args):
        """Registers, spills, stack and shared memory, from ptxas' report."""
        return self._compiled_for(self.flat_args(args), need_cuda=False).resources

    # -- launching ------------------------------------------------------------
    def __getitem__(self, grid):
        """`kernel[grid]`: a callable that launches on torch's current stream with the kernel's arguments."""
        if _compiling_only is not None:
            return self._compile_instead
        try:
            return self._bound[grid]
        except (KeyError, TypeError):
            try:
                g = launch_grid(grid, self.cluster, self.name)
            except ArgumentError as e:
                raise _at_callers_line(e) from None
            bound = functools.partial(self._pgl_launch if self._pgl else self._fast_launch or self._launch, g)
            try:
                if len(self._bound) > 4096:
                    self._bound.clear()
                self._bound[grid] = bound
            except TypeError:   # an unhashable grid (a list): fine, just not cached
                pass
            return bound

    def launch(self, grid, *args) -> None:
        self[grid](*args)

    def _pgl_launch(self, grid, *args) -> None:
        """A launch of a kernel with pgl parameters: its arguments flattened, then the launch as any."""
        self._launch(grid, *self.flat_args(args))

    def _compile_instead(self, *args) -> None:
        """A launch under compile_only(): the specialization compiled, nothing run."""
        compiled = self._compiled_for(self.flat_args(args), need_cuda=False)
        made = _compiling_only
        if made is not None:
            made.append(compiled)

    @property
    def interpret(self):
        """`kernel.interpret[grid](*args)`: run on the CPU interpreter (tkpy.interpret) instead of the GPU."""
        if self._interpreted is None:
            with self._lock:        # one per kernel: threads share its cache of traced programs
                if self._interpreted is None:
                    self._interpreted = Interpreted(self)
        return self._interpreted

    def _launch(self, grid, *args) -> None:
        if self._fast_launch is None:
            self._slow_launch(grid, args)
        else:
            self._fast_launch(grid, *args)

    def _slow_launch(self, grid, args: tuple) -> None:
        """First call of a specialization, or anything unusual: check everything, compile, load, then launch; then the
        compile jobs that waited for this thread's launch go (runtime.background.start_after_launch)."""
        try:
            self._checked_launch(grid, args)
        finally:
            background.launched()

    def _checked_launch(self, grid, args: tuple) -> None:
        from ..runtime import NoGPUError, require_gpu

        if interpret_requested():     # TKPY_INTERPRET=1: no fast path is built, so every launch comes here
            self.interpret.run_flat(grid, args)
            return
        try:
            require_gpu()
        except NoGPUError as e:
            raise NoGPUError(with_location(
                f"{e}. Setting TKPY_INTERPRET=1 runs the same call on the CPU instead: tkpy's interpreter takes this "
                f"kernel and CPU tensors as they are (or call {self.name}.interpret[grid](...))", user_loc())) from None
        compiled = self._compiled_for(args, need_cuda=True)
        device = self._device(args)
        ready = compiled.ready(device)
        facts = compiled.facts
        if facts.debug:     # debug mode: every launch checked and synchronized
            debug_mode.launch(ready, grid, args, facts.slots, self, compiled)
            return
        if not facts.packed:   # a strided tensor: its strides are per call
            ready.launch_once(grid, args, facts.slots, self)
            return
        key = fastpath.cache_key(self.specs, args)
        if _this_thread.handed == (self, key):
            raise AssertionError(f"tkpy internal error: the fast launcher of {self.name} rejected cached key {key}")
        first = False
        with self._lock:    # the fast launchers are made once, and a key is added once (another thread may have)
            if key not in self._fast:
                self._readies[key] = ready
                self._fast[key] = ready.entry if self._native is None else ready.native_entry(self.specs)
            if self._launcher_source is None:
                self._launcher_source, self._fast_launch = fastpath.build(self, facts.slots)
                self._bound.clear()   # later kernel[grid] binds straight to the fast launcher
                first = True
        _this_thread.handed = (self, key)     # if the fast launcher sends this call back here, it rejected the key
        try:
            self._fast_launch(grid, *args)
        finally:
            _this_thread.handed = None
            if first:   # once launched: a background load started before would take the GIL from this first call
                native.on_load(self._use_native)    # now if it is loaded, else once the background has it

    def _use_native(self) -> None:
        """Cache hits through the native launcher from now on (native.on_load calls this once the extension is
        loaded, on the thread that loaded it): a cache of native entries for the keys launched so far, swapped in
        with the launcher. A Python launcher bound before (a kernel[grid] a caller kept) keeps its own cache and
        still launches; a key new to it goes by the slow path to the native one."""
        with self._lock:
            if self._native is not None:
                return
            fast = {key: ready.native_entry(self.specs) for key, ready in self._readies.items()}
            launcher = native.launcher(self, fast)
            if launcher is None:        # no driver entry point: the Python launcher stays
                return
            self._fast, self._native, self._fast_launch = fast, launcher, launcher
            self._bound.clear()         # kernel[grid] binds to the native launcher from now on

    @property
    def launcher_source(self) -> str | None:
        """The generated Python of the per-call path (after the first launch); when
        `uses_native_launch`, the C launcher does the same steps instead."""
        return self._launcher_source

    @property
    def uses_native_launch(self) -> bool:
        """Whether cache hits go through the native launcher (tkpy.runtime.native): from the first launch where it is
        built, else from when the background thread the first launch starts has built or loaded it."""
        return self._native is not None


_compiling_only: Optional[list] = None      # under compile_only(): what the launches compiled


@contextlib.contextmanager
def compile_only():
    """Within the block every launch (`kernel[grid](*args)`, a template's call) compiles its kernel for the arguments
    into the disk cache, as a first launch would, and returns without running anything; the block's value lists the
    Compiled specializations. The arguments may be meta tensors (shapes, strides and dtypes are all a compile
    reads), so the kernels' torch-facing launch paths run through without a GPU: what `python -m tkpy.warmup` does.
    Process-wide (threads compile in parallel under it); blocks do not nest."""
    global _compiling_only
    with _mode_lock:
        if _compiling_only is not None:
            raise RuntimeError("compile_only() blocks do not nest")
        _compiling_only = made = []
    try:
        yield made
    finally:
        _compiling_only = None


def compiling_only() -> bool:
    """Whether a compile_only() block is running (launches compile instead)."""
    return _compiling_only is not None


_mode_lock = threading.Lock()


class _ThreadState(threading.local):
    """The (kernel, key) this thread's slow path just added (or found added by another thread) and handed to the
    fast launcher: seeing it again means the fast launcher rejected a key its cache holds (a tkpy bug)."""
    handed = None


_this_thread = _ThreadState()


def _at_callers_line(e: ArgumentError) -> ArgumentError:
    """`e`, naming the user's line that called the kernel (or indexed its grid) if it names none."""
    return e if e.loc is not None else ArgumentError(e.bare_message, user_loc())


def _current_device() -> int:
    import torch
    return torch.cuda.current_device()


def _definition_locals() -> dict:
    """Locals of the frame that applied @tk.kernel (for string annotations inside kernel factories)."""
    from .context import user_frame

    frame = user_frame()
    return dict(frame.f_locals) if frame is not None and frame.f_code.co_name != "<module>" else {}


@dataclass
class Traced:
    kernel: Kernel
    ir: KernelIR
    key: tuple

    @property
    def text(self) -> str:
        return print_ir(self.ir)

    def lower(self) -> "Lowered":
        arg_index = {s.name: i for i, s in enumerate(self.kernel.specs)}
        slots = param_slots(self.ir, arg_index)
        return Lowered(self, kernel_code(self.ir, slots), slots)


@dataclass
class Lowered:
    traced: Traced
    code: KernelCode        # the kernel's C++; its source (with the prelude helpers it uses) made on demand
    slots: list

    @functools.cached_property
    def source(self) -> str:
        """The CUDA C++ NVRTC compiles: the prelude helpers the kernel uses, then the kernel."""
        return self.code.source()

    def compile(self) -> "Compiled":
        """Compiled by NVRTC, or found in the disk cache by the code's identity (a hit makes no source)."""
        from ..runtime import compile_cuda, warn_on_spills

        module = compile_cuda(lambda: self.source, self.traced.ir.name, identity=self.code.identity)
        warn_on_spills(module.resources, self.traced.ir.name)
        facts = spec_records.LaunchFacts.of(self.traced.ir, self.slots, self.traced.key[0])
        return Compiled(module, facts, lowered=self)


class Compiled:
    """A compiled specialization: its module and launch facts, and its Lowered (IR and C++), which one made from a
    record (frontend/spec_records.py) makes by `relower()` when first asked for."""

    def __init__(self, module, facts: "spec_records.LaunchFacts", lowered: Optional[Lowered] = None, relower=None):
        self.module = module
        self.facts = facts
        self._lowered = lowered
        self._relower = relower
        self._ready: dict[int, _Ready] = {}
        self._lock = threading.Lock()   # one _Ready per device, whichever threads launch first; one relowering
        self._sass: Optional[str] = None

    @property
    def lowered(self) -> Lowered:
        if self._lowered is None:
            with self._lock:
                if self._lowered is None:
                    self._lowered = self._relower()
        return self._lowered

    @property
    def resources(self):
        return self.module.resources

    @property
    def cubin(self) -> bytes:
        return self.module.cubin

    def sass(self) -> str:
        """The cubin's SASS, disassembled once (then from memory; in a new process from the disk cache)."""
        if self._sass is None:
            from ..runtime import module_sass
            self._sass = module_sass(self.module)
        return self._sass

    def ready(self, device: int) -> "_Ready":
        r = self._ready.get(device)
        if r is None:
            with self._lock:
                r = self._ready.get(device)
                if r is None:
                    r = self._ready[device] = _Ready(self, device)
        return r


class _Ready:
    """A compiled specialization loaded on one device; `entry` is what the fast launcher unpacks:
    (layout, buffers, stream_of, device, failed, launcher, tensor_maps), `layout` a ParamBuffer that
    describes the parameter block (kinds, offsets) and is never packed, `buffers` each thread's own
    ParamBuffer (fastpath.ThreadBuffers), `failed(err, grid, stream, params_address)`."""

    def __init__(self, compiled: Compiled, device: int):
        from ..runtime import ParamBuffer, load_kernel, stream_getter

        facts = compiled.facts
        loaded = load_kernel(compiled.module, device, facts.dynamic_smem)
        launcher = loaded.launcher((facts.threads, 1, 1), facts.dynamic_smem, facts.cluster, facts.dependent_launch)
        kinds = [s.kind for s in facts.slots]
        tensor_maps = tuple(TensorMapEncoder(s.source[2], device) for s in facts.slots if s.source[0] == "tmap")
        self.entry = (ParamBuffer(kinds), fastpath.ThreadBuffers(kinds), stream_getter(), device,
                      launcher.handle_error, launcher, tensor_maps)
        self._compiled = compiled
        self._native = None

    def native_entry(self, specs):
        """What the native launcher's cache maps a key to (made on first use; called under the kernel's lock)."""
        if self._native is None:
            layout, _, stream_of, device, _, launcher, tensor_maps = self.entry
            self._native = native.entry(self._compiled.facts.slots, specs, launcher, layout, tensor_maps,
                                        device, stream_of)
        return self._native

    def launch_once(self, grid, args, slots, kernel) -> None:
        """Pack and launch without the fast path (strided tensors, whose strides are per call)."""
        _, buffers, stream_of, device, _, launcher, tensor_maps = self.entry
        params = buffers.mine[0]        # this thread's: another's launch must not repack it before ours
        params.pack(*fastpath.slot_values(slots, kernel.specs, args, tensor_maps))
        launcher(grid, stream_of(device), params)


def _cluster3(cluster) -> Optional[tuple[int, int, int]]:
    if cluster is None:
        return None
    c = (cluster,) if isinstance(cluster, int) else tuple(cluster)
    if not 1 <= len(c) <= 3 or any(not isinstance(x, int) or x < 1 for x in c):
        raise ValueError(f"cluster must be 1 to 3 positive ints, got {cluster!r}")
    c = c + (1,) * (3 - len(c))
    if c[0] * c[1] * c[2] > 8:
        raise ValueError(f"a cluster holds at most 8 blocks (portable limit), got {c}")
    return c


def kernel(fn=None, *, warps: int = 4, name: Optional[str] = None, cluster=None, blocks_per_sm: Optional[int] = None,
           fast_division: bool = False, debug: Optional[bool] = None, dependent_launch: bool = True):
    """Decorate a Python function as a tkpy kernel: `@tk.kernel(warps=4)`, optionally launched in
    clusters of blocks (`cluster=(2, 1, 1)`; the grid must be a multiple of it). blocks_per_sm=2 (up to the SM's
    64 warps) compiles it to run that many blocks an SM at once (`__launch_bounds__(threads, 2)`): each gets that
    share of the register file and of shared memory, which the shared-memory check holds it to; blocks_per_sm=1 states one block
    (`__launch_bounds__(threads, 1)`: the whole register file's share of its threads; without it, ptxas may cap the
    registers lower, spilling, to fit a second block). fast_division=True: the divisions in
    loops by values fixed for the kernel (dimensions, the grid size) by divisors made once at its start
    (tkpy/codegen/divisors.py): each division a multiply-high and a shift, each divisor two registers through the
    loops and ~a division's time at the start; for persistent kernels whose blocks loop over several tasks
    (RESULTS.md runs 230-237: attention +3-12%; a GEMM of one tile a block 1% slower, run 236). debug=True: debug
    mode whatever TKPY_DEBUG says (False: never; None: as TKPY_DEBUG): every semaphore wait, tk.sync(), named and
    cluster barrier and wgmma is bounded (TKPY_DEBUG_TIMEOUT_S, default 4 s) and a wait that times out stops the
    kernel and raises tk.GpuTimeoutError naming it and its line; each launch synchronizes (tkpy/runtime/debug.py,
    which lists what stays unbounded: setmaxnreg). dependent_launch=False: launched without programmatic dependent
    launch whatever TKPY_DEPENDENT_LAUNCH says (tkpy/runtime/dependent_launch.py): the kernel starts once the one
    before it on the stream has ended, and the one after it may still start early (e.g. a small kernel between two
    large ones: cross-entropy's prologue, RESULTS.md runs 282-283)."""
    if fn is None:
        return lambda f: Kernel(f, warps, name, cluster, blocks_per_sm, fast_division, debug,
                                dependent_launch=dependent_launch)
    if not callable(fn):
        raise ArgumentError(f"@tk.kernel takes its options by name: @tk.kernel(warps={fn!r}), not @tk.kernel({fn!r})",
                            user_loc())
    return Kernel(fn, warps, name, cluster, blocks_per_sm, fast_division, debug, dependent_launch=dependent_launch)
