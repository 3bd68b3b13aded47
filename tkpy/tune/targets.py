"""What tk.autotune decorates, and what it makes of a configuration.

Three targets: a `@tk.kernel` (configurations set its constexpr parameters and @tk.kernel's options), a template
(`@tk.lcf` / `@tk.lcsf`: its decorator's options) and a factory, a function whose parameters the configurations
set and which returns a kernel or a template (for tile sizes that shape a template's buffers, or any other choice
made in Python). Each configuration makes a `Variant`: the kernel or template it runs, the arguments it fills into
each call, and the values a grid function reads.
"""
from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass

from ..errors import ArgumentError
from ..frontend.kernel import Kernel
from ..templates import LCF
from ..tiles.types import GL
from .config import Config

KERNEL_OPTIONS = ("warps", "cluster", "blocks_per_sm", "fast_division")   # @tk.kernel's options a config may set


@dataclass(frozen=True)
class Param:
    """A parameter of a kernel or template: its name, kind ("gl", "int", "float", "constexpr") and tensor type."""

    name: str
    kind: str
    gl: GL | None = None


def parameters(runnable) -> list[Param]:
    """The parameters of a kernel (its signature) or a template (its class's annotations), in order."""
    if isinstance(runnable, Kernel):
        return [Param(s.name, s.kind, s.gl) for s in runnable.specs]
    return [Param(n, "gl", a) if isinstance(a, GL) else Param(n, a.__name__) for n, a in runnable.globals.items()]


@dataclass
class Variant:
    """One configuration made: `runnable` (a Kernel, launched as runnable[grid](...), or a template, called), the
    constexpr `arguments` it fills into each call, `meta` (arguments and options: what a grid function reads)."""

    config: Config
    runnable: object
    arguments: dict
    meta: dict
    fill: object = None       # a call's arguments -> the runnable's (bind)

    @property
    def is_kernel(self) -> bool:
        return isinstance(self.runnable, Kernel)

    def bind(self, params: list[Param], call_names: list[str]) -> None:
        """Make `fill`: the runnable's arguments (`params`, in order) from a call's (`call_names`, in order) and the
        configuration's."""
        if not self.arguments:
            self.fill = _same
            return
        at = {n: i for i, n in enumerate(call_names)}
        slots = [(False, self.arguments[p.name]) if p.name in self.arguments else (True, at[p.name]) for p in params]
        self.fill = lambda args: tuple(args[v] if from_call else v for from_call, v in slots)

    def compile(self, args: tuple):
        """Trace, lower and compile for `args` (no GPU; into the disk cache), as the first launch would."""
        kernel = self.runnable if self.is_kernel else self.runnable.kernel
        return kernel.compile(*args)

    def launch(self, grid, args: tuple) -> None:
        if self.is_kernel:
            self.runnable[grid(self.meta) if callable(grid) else grid](*args)
        else:
            self.runnable(*args)


def _same(args: tuple) -> tuple:
    return args


class KernelTarget:
    """A @tk.kernel: a config sets constexpr parameters (keywords or its dict) and @tk.kernel options."""

    def __init__(self, kernel: Kernel):
        self.base, self.name = kernel, kernel.name
        self.constexprs = [s.name for s in kernel.specs if s.kind == "constexpr"]

    def split(self, config: Config) -> tuple[dict, dict]:
        arguments, options = dict(config.kwargs), {}
        for name, value in config.keywords.items():
            (options if name in KERNEL_OPTIONS else arguments)[name] = value
        unknown = [n for n in arguments if n not in self.constexprs]
        if unknown:
            raise ArgumentError(f"{config!r}: kernel {self.name} has no constexpr parameter or option "
                                f"{', '.join(map(repr, unknown))} (constexprs: {', '.join(self.constexprs) or 'none'}; "
                                f"options: {', '.join(KERNEL_OPTIONS)})", config.loc)
        return arguments, options

    def fills(self, config: Config) -> set:
        """The kernel's parameters that `config` sets (the calls leave them out)."""
        return set(self.split(config)[0])

    def make(self, config: Config) -> Variant:
        arguments, options = self.split(config)
        return Variant(config, _made(config, self.base.variant, options) if options else self.base, arguments,
                       {**arguments, **self.base.options, **options})

    def source_hash(self) -> str:
        return _source_hash(self.base.fn)


class TemplateTarget:
    """A template made by @tk.lcf / @tk.lcsf: a config sets its decorator's options."""

    def __init__(self, template: LCF):
        self.base, self.name = template, template.made_by[0].__name__
        self.options = template.options

    def split(self, config: Config) -> tuple[dict, dict]:
        unknown = [n for n in config.names() if n not in self.options or n in config.kwargs]
        if unknown:
            raise ArgumentError(f"{config!r}: @tk.{self.base.kind.lower()} has no option "
                                f"{', '.join(map(repr, unknown))} (it has {', '.join(self.options)}); a template takes "
                                "no constexpr arguments: for tile sizes, autotune a function that makes the template "
                                "from them", config.loc)
        return {}, dict(config.keywords)

    def fills(self, config: Config) -> set:
        self.split(config)
        return set()

    def make(self, config: Config) -> Variant:
        _, options = self.split(config)
        return Variant(config, _made(config, self.base.variant, options) if options else self.base, {},
                       {**self.options, **options})

    def source_hash(self) -> str:
        return _source_hash(self.base.made_by[0])


class FactoryTarget:
    """A function of the configuration's values that returns a kernel or a template."""

    base = None        # (the kernel or template: made by the first configuration)

    def __init__(self, fn, loc):
        self.fn, self.name, self.loc = fn, fn.__name__, loc
        self.accepts = inspect.signature(fn).parameters

    def split(self, config: Config) -> tuple[dict, dict]:
        arguments = {**config.kwargs, **config.keywords}
        try:
            inspect.signature(self.fn).bind(**arguments)
        except TypeError as e:
            raise ArgumentError(f"{config!r}: {self.name}({', '.join(self.accepts)}) cannot take it: {e}",
                                config.loc) from None
        return arguments, {}

    def fills(self, config: Config) -> set:
        self.split(config)
        return set()

    def make(self, config: Config) -> Variant:
        arguments, _ = self.split(config)
        made = _made(config, self.fn, arguments)
        if not isinstance(made, (Kernel, LCF)):
            raise ArgumentError(f"tk.autotune: {self.name}(**config) must return a @tk.kernel or a template "
                                f"(@tk.lcf, @tk.lcsf); {config!r} returned {type(made).__name__}", self.loc)
        return Variant(config, made, {}, dict(arguments))

    def source_hash(self) -> str:
        return _source_hash(self.fn)


def _made(config: Config, make, options: dict):
    """make(**options); a ValueError or TypeError (an option's value it refuses) as an ArgumentError naming the
    configuration's line (a TraceError, e.g. stages that do not fit, passes: the tuner prunes the configuration)."""
    try:
        return make(**options)
    except (ValueError, TypeError) as e:
        raise ArgumentError(f"{config!r}: {e}", config.loc) from None


def target_of(obj, loc):
    """The target tk.autotune makes of what it decorates; a TypeError naming the decorator's line otherwise."""
    if isinstance(obj, Kernel):
        return KernelTarget(obj)
    if isinstance(obj, LCF):
        return TemplateTarget(obj)
    if inspect.isfunction(obj):
        return FactoryTarget(obj, loc)
    raise ArgumentError(f"tk.autotune decorates a @tk.kernel, a template (@tk.lcf, @tk.lcsf) or a function that "
                        f"makes one from a configuration's values; got {type(obj).__name__}", loc)


def _source_hash(obj) -> str:
    """sha256 of the Python source of a function or class (where Python has none, of its code object)."""
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else obj.__qualname__
    return hashlib.sha256(text.encode()).hexdigest()
