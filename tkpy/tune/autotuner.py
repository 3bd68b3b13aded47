"""`@tk.autotune(configs=[...], key=[...])`: run the fastest of several configurations of a kernel, in Triton's
convention.

    @tk.autotune(configs=[tk.Config(BLOCK=64, warps=4), tk.Config(BLOCK=128, warps=8)], key=["R", "C"])
    @tk.kernel
    def rows(x: tk.gl[bf16, "R", "C"], y: tk.gl[bf16, "R", "C"], BLOCK: tk.constexpr): ...

    rows[lambda meta: (R // meta["BLOCK"],)](x, y)      # the call leaves out what the configurations set

The first call of each key (the values `key` names: parameters, a tensor's shape, dims; and every tensor's dtype)
tunes: the user's `prune_configs_by` first, then every configuration traced and compiled on a pool of threads
(NVRTC releases the GIL; one whose trace-time checks fail, e.g. stages that do not fit in shared memory, is pruned
before NVRTC runs, and the reason reported), then each timed on the GPU in turn (GpuTimer: warm-up and the median
of CUDA-graph replays), the tensors named in `reset_to_zero` zeroed and those in `restore_value` restored before
each and after the last (a kernel that writes its inputs: in one measurement it runs many times on its own
results). The winner is kept in memory and on disk (winners.py; TKPY_CACHE=0: in memory only), printed with the
line that pins it, and the call runs it; later calls with the key, in this process or another, run it at once.

`TKPY_AUTOTUNE=0`: the first configuration, nothing timed or read from disk. `TKPY_AUTOTUNE=force`: tune again,
ignoring the winners on disk. Where nothing can be timed (TKPY_INTERPRET=1, no GPU) every call runs the first
configuration, and a warning says so once: list the one to pin first (or alone: a single configuration is never
timed). Threads calling at once with a new key tune it once (a lock per key), and so do processes (a file lock).
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass

from ..errors import ArgumentError, TkpyError, TraceError
from ..frontend.context import user_loc
from ..frontend.kernel import Kernel
from ..frontend.once import Once
from ..runtime import CompileError
from . import winners
from .config import Config
from .keys import key_reader
from .parallel import run_all
from .progress import bar
from .targets import parameters, target_of
from .timer import GpuTimer, on_device_of

ENV = "TKPY_AUTOTUNE"
PRUNED = (TraceError, CompileError)     # a configuration that does not trace (fit) or compile: left out, reported


class AutotuneWarning(UserWarning):
    """tk.autotune could not time configurations here (TKPY_INTERPRET=1, no GPU) and runs the first one."""


def mode() -> str:
    """TKPY_AUTOTUNE: "tune" (default: once per key, winners cached), "first" (0) or "force"."""
    value = os.environ.get(ENV, "1").strip().lower()
    if value in ("", "1", "on", "true", "yes"):
        return "tune"
    if value in ("0", "off", "false", "no"):
        return "first"
    if value == "force":
        return "force"
    raise ValueError(f"{ENV} must be 1 (tune once per key, winners cached on disk), 0 (the first configuration, "
                     f"nothing timed) or force (tune again); got {value!r}")


@dataclass
class _Shape:
    """What the calls look like, known once the first configuration's kernel is (a factory's: made): the
    runnable's parameters, those a call passes, the key reader (keys.py) and whether the runnable is a kernel."""

    params: list
    call_names: list
    key: object
    is_kernel: bool


class Autotuner:
    """What @tk.autotune returns: launch as `tuned[grid](*args)` (a kernel; `grid` a tuple or a function of the
    configuration's values, `meta`) or `tuned(*args)` (a template). `best_config`: the configuration of the last
    call; `variant(config)`: the kernel or template a configuration makes (for `.source(...)` and the like)."""

    def __init__(self, fn, configs, key, *, prune_configs_by=None, restore_value=(), reset_to_zero=(), timer=None,
                 cache=True, loc=None):
        self.loc = loc
        self.target = target_of(fn, loc)
        self.name = self.target.name
        if not isinstance(configs, (list, tuple)) or not configs or not all(isinstance(c, Config) for c in configs):
            raise ArgumentError(f"tk.autotune({self.name}): configs must be a non-empty list of tk.Config, got "
                                f"{configs!r}", loc)
        if len(set(map(repr, configs))) < len(configs):
            raise ArgumentError(f"tk.autotune({self.name}): a configuration is listed twice", loc)
        if isinstance(key, str) or not all(isinstance(k, str) for k in key):
            raise ArgumentError(f"tk.autotune({self.name}): key is a list of names (parameters or dims), got {key!r}",
                                loc)
        self.configs = list(configs)
        fills = [self.target.fills(c) for c in self.configs]      # (each configuration checked, naming its line)
        for config, names in zip(self.configs, fills):
            if names != fills[0]:
                raise ArgumentError(f"tk.autotune({self.name}): every configuration must set the same arguments; "
                                    f"{config!r} sets {sorted(names)}, {self.configs[0]!r} {sorted(fills[0])}", loc)
        self.supplied = fills[0]
        self.key_names = list(key)
        self.prune = _pruner(prune_configs_by, self.name, loc)
        self.restore_value, self.reset_to_zero = list(restore_value), list(reset_to_zero)
        self.timer = timer if timer is not None else GpuTimer()
        self.cache = cache
        self.best_config = None
        self.timings: dict = {}       # milliseconds of each configuration the last tuning in this process timed
        self._shape = None
        self._variants: dict = {}
        self._memo: dict = {}
        self._once = Once()
        self._lock = threading.Lock()
        self._warned = False
        self._source_hash = None
        if self.target.base is not None:
            self._shape_of()          # a kernel's or template's calls are known now: check key and names at once
        functools.update_wrapper(self, fn, updated=())

    def __repr__(self) -> str:
        return f"<tk.autotune {self.name}: {len(self.configs)} configurations, key {self.key_names}>"

    # -- calls -----------------------------------------------------------------------------------------------
    def __getitem__(self, grid):
        if not self._shape_of().is_kernel:
            raise ArgumentError(f"{self.name} is a template: call it as {self.name}(*tensors) (it makes its own grid)",
                                user_loc())
        return functools.partial(self._run, grid)

    def __call__(self, *args):
        if self._shape_of().is_kernel:
            names = ", ".join(self._shape_of().call_names)
            raise ArgumentError(f"{self.name}(...) needs a grid: {self.name}[grid]({names}), grid a tuple or a "
                                "function of the configuration's values (meta)", user_loc())
        self._run(None, *args)

    def variant(self, config: Config):
        """The kernel or template that `config` makes (made once)."""
        return self._variant(config).runnable

    def _run(self, grid, *args) -> None:
        """A call: the key read from the arguments, its variant from memory (or chosen: _chosen), launched."""
        shape = self._shape or self._shape_of()
        if len(args) != len(shape.call_names):
            raise ArgumentError(f"{self.name} takes {len(shape.call_names)} arguments ({', '.join(shape.call_names)}"
                                f"; the configurations set {', '.join(sorted(self.supplied)) or 'no others'}), got "
                                f"{len(args)}", user_loc())
        key = shape.key(args)
        variant = self._memo.get(key)
        if variant is None:
            variant = self._chosen(grid, args, key)
        self.best_config = variant.config
        variant.launch(grid, variant.fill(args))

    def _chosen(self, grid, args: tuple, key: tuple):
        """The variant for a key not in memory yet (the key on disk: all but its device), chosen once however many
        threads ask (_choose)."""
        named = dict(zip(self._shape_of().call_names, args))
        return self._once.get(self._memo, key, lambda: self._variant(self._choose(grid, named, key[:-1])))

    # -- choosing ----------------------------------------------------------------------------------------------
    def _choose(self, grid, named: dict, key: tuple) -> Config:
        """The configuration for a new key: the only one, the first (TKPY_AUTOTUNE=0, or nothing to time with),
        the winner on disk, or a new winner."""
        how = mode()
        if len(self.configs) == 1 or how == "first":
            return self.configs[0]
        why = self.timer.unavailable()
        if why is not None:
            self._warn_once(why)
            return self.configs[0]
        gpu = self.timer.device(self._tensors(named))
        rkey = winners.record_key(self.name, self._source(), self.configs, key, gpu)
        reuse = how != "force" and self.cache
        if reuse:
            found = winners.load(rkey, self.configs)
            if found is not None:
                return found
        with winners.lock(rkey):
            found = winners.load(rkey, self.configs) if reuse else None
            if found is None:       # (another process may have tuned it while this one waited)
                found = self._tune(grid, named, key, gpu, rkey)
        return found

    def _warn_once(self, why: str) -> None:
        if self._warned:
            return
        self._warned = True
        loc = user_loc()
        warnings.warn_explicit(f"tk.autotune({self.name}): {why}: nothing is timed, every call runs the first "
                               f"configuration {self.configs[0]!r}", AutotuneWarning, loc.file, loc.line)

    def _tune(self, grid, named: dict, key: tuple, gpu: tuple, rkey: str) -> Config:
        start = time.perf_counter()
        configs = self.prune(self.configs, named)
        made = run_all([functools.partial(self._compiled, c, named) for c in configs], f"{self.name}: compiling",
                       keep=PRUNED)
        outcome = {c: f"pruned: {_first_line(m)}" for c, m in zip(configs, made) if isinstance(m, Exception)}
        outcome.update({c: "pruned by prune_configs_by" for c in self.configs if c not in configs})
        saved = {n: named[n].clone() for n in self.restore_value}
        timings = {}
        ready = [(c, v) for c, v in zip(configs, made) if not isinstance(v, Exception)]
        try:
            with on_device_of(self._tensors(named)), bar(len(ready), f"{self.name}: timing") as progress:
                for config, variant in ready:
                    self._reset(named, saved)
                    args = variant.fill(tuple(named.values()))
                    try:
                        timings[config] = self.timer(functools.partial(variant.launch, grid, args))
                    except TkpyError as e:      # e.g. a launch the driver refuses (too many resources)
                        outcome[config] = f"failed: {_first_line(e)}"
                    progress.update()
        finally:
            self._reset(named, saved)
        if not timings:
            raise TkpyError(f"tk.autotune({self.name}): no configuration ran for key {self._key_text(key)}:\n"
                            + "\n".join(f"  {c!r}: {outcome[c]}" for c in self.configs))
        winner = min(timings, key=timings.get)
        self.timings = timings
        outcome.update({c: f"{ms:.4f} ms" for c, ms in timings.items()})
        if self.cache:
            winners.store(rkey, {"kernel": self.name, "key": self._key_text(key), "gpu": gpu[0], "sms": gpu[1],
                                 "winner": self.configs.index(winner), "config": repr(winner),
                                 "results": {repr(c): outcome[c] for c in self.configs},
                                 "tuned": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._report(winner, outcome, key, gpu, time.perf_counter() - start)
        return winner

    def _tensors(self, named: dict) -> list:
        """The call's tensor arguments (its gl parameters')."""
        return [named[p.name] for p in self._shape_of().params if p.kind == "gl" and p.name in named]

    def _compiled(self, config: Config, named: dict):
        """(a job of the compile pool) `config`'s variant, traced and compiled for the call's arguments."""
        variant = self._variant(config)
        variant.compile(variant.fill(tuple(named.values())))
        return variant

    def _reset(self, named: dict, saved: dict) -> None:
        for n in self.reset_to_zero:
            named[n].zero_()
        for n, value in saved.items():
            named[n].copy_(value)

    def _report(self, winner: Config, outcome: dict, key: tuple, gpu: tuple, seconds: float) -> None:
        lines = [f"tk.autotune: {self.name} for {self._key_text(key)} on {gpu[0]} ({gpu[1]} SMs), {seconds:.1f} s:"]
        lines += [f"  {'*' if c == winner else ' '} {c!r}: {outcome[c]}" for c in self.configs]
        lines.append(f"  pin it: @tk.autotune(configs=[{winner!r}], key={self.key_names!r})")
        print("\n".join(lines), file=sys.stderr)

    def _key_text(self, key: tuple) -> str:
        named = [f"{n}={v}" for n, v in zip(self.key_names, key)]
        return ", ".join(named + [str(d) for d in key[len(self.key_names):]])

    # -- what the configurations make ----------------------------------------------------------------------------
    def _variant(self, config: Config):
        """`config`'s Variant, made once, ready to take a call's arguments (Variant.fill)."""
        def make():
            variant = self.target.make(config)
            if self._shape is not None:
                variant.bind(self._shape.params, self._shape.call_names)
            return variant
        return self._once.get(self._variants, repr(config), make)

    def _source(self) -> str:
        if self._source_hash is None:
            self._source_hash = self.target.source_hash()
        return self._source_hash

    def _shape_of(self) -> _Shape:
        """The calls' parameters and key, from the kernel or template (a factory's: its first configuration's);
        names that `key`, `restore_value` or `reset_to_zero` give but the calls do not have raise here."""
        if self._shape is None:
            with self._lock:
                if self._shape is None:
                    self._shape = self._make_shape()
        return self._shape

    def _make_shape(self) -> _Shape:
        first = self._variant(self.configs[0]) if self.target.base is None else None    # (a factory's: made first)
        runnable = self.target.base if first is None else first.runnable
        is_kernel = isinstance(runnable, Kernel)
        params = parameters(runnable)
        what = f"{'kernel' if is_kernel else 'template'} {self.name}"
        call_names = [p.name for p in params if p.name not in self.supplied]
        tensors = [p.name for p in params if p.kind == "gl" and p.name not in self.supplied]
        for option in ("restore_value", "reset_to_zero"):
            unknown = [n for n in getattr(self, option) if n not in tensors]
            if unknown:
                raise ArgumentError(f"tk.autotune: {option} names {', '.join(map(repr, unknown))}, not a tensor "
                                    f"parameter of {what} ({', '.join(tensors)})", self.loc)
        if first is not None:
            first.bind(params, call_names)
        return _Shape(params, call_names, key_reader(self.key_names, params, call_names, what, self.loc), is_kernel)


def _pruner(prune_configs_by, name: str, loc):
    """The user's pruning hook as a function (configs, named args) -> configs: a function, or Triton's dict with
    "early_config_prune"; its result checked."""
    if prune_configs_by is None:
        return lambda configs, named: configs
    if isinstance(prune_configs_by, dict):
        unknown = sorted(prune_configs_by.keys() - {"early_config_prune"})
        if unknown:
            raise ArgumentError(f"tk.autotune({name}): prune_configs_by takes a function (configs, args) -> configs "
                                f"or {{'early_config_prune': function}}; {', '.join(unknown)} is not supported", loc)
        prune_configs_by = prune_configs_by.get("early_config_prune")
    if not callable(prune_configs_by):
        raise ArgumentError(f"tk.autotune({name}): prune_configs_by must be a function (configs, args) -> configs, "
                            f"got {prune_configs_by!r}", loc)

    def prune(configs, named):
        kept = list(prune_configs_by(list(configs), dict(named)))
        if not kept or not all(c in configs for c in kept):
            raise ArgumentError(f"tk.autotune({name}): prune_configs_by must return some of the configurations it "
                                f"is given, at least one; it returned {kept!r}", loc)
        return kept
    return prune


def _first_line(e: Exception) -> str:
    """The error's class and first line (and the next where that ends with a colon, as NVRTC's heading does)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [""]
    text = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return f"{type(e).__name__}: {text}"


def autotune(configs=None, key=None, *, prune_configs_by=None, restore_value=(), reset_to_zero=(), timer=None,
             cache=True):
    """Decorate a @tk.kernel, a template (@tk.lcf / @tk.lcsf) or a function that makes one from a configuration's
    values: `@tk.autotune(configs=[tk.Config(...), ...], key=["M", "N"])` above it (see the module docstring).

    configs: tk.Config's to try, the first the default (TKPY_AUTOTUNE=0, the interpreter, no GPU). key: names of
    the parameters (a tensor's: its shape) and dims whose values choose the configuration (with every tensor's
    dtype). prune_configs_by: a function (configs, args by name) -> the configurations to try. restore_value /
    reset_to_zero: tensor parameters that the kernel reads and writes, restored, or zeroed, around each timing.
    timer: what times a launch (GpuTimer; a stand-in in tests). cache=False: winners neither read from nor written
    to disk (each process tunes; e.g. to re-measure)."""
    loc = user_loc()
    if configs is None or callable(configs) or key is None:
        raise ArgumentError("tk.autotune takes the configurations and the key: @tk.autotune(configs=[tk.Config(...), "
                            "...], key=[names of parameters or dims]) above the @tk.kernel or template", loc)

    def decorate(fn):
        return Autotuner(fn, configs, key, prune_configs_by=prune_configs_by, restore_value=restore_value,
                         reset_to_zero=reset_to_zero, timer=timer, cache=cache, loc=loc)
    return decorate
