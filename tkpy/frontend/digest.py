"""A digest of what a kernel's trace depends on besides the call: the key of its specialization records.

A kernel's IR is a function of the call's specialization key (contiguity, constexprs, debug settings) and of: its
Python function and what that reaches (code, closure cells, defaults, the globals its code names, the attributes it
names of the user's modules), its @tk.kernel options and parameter specs, tkpy's own files, and the Python version.
`value_digest(kernel)` digests the kernel's part; `tkpy._source_tree.tree_digest()` tkpy's files (each one's path,
size and modification time: what Python's own bytecode cache checks), so that an edit of tkpy or of its kernels is a
new digest.

A user's function whose code names `environ` or `getenv` adds the whole environment (a switch read while tracing),
one that names what reads the GPU (`get_device_properties`, `multi_processor_count`, `sm_count`, ...) the current
GPU's name, SM count and compute capability.

Values are digested by content: numbers, strings, containers, dtypes, dataclasses, enums, functions (their code and
its file's size and modification time, closure cells, defaults, and the globals the code names), classes (their
namespace), other objects (their class and attributes); tkpy's own module-level functions and classes, and the
standard library's and torch's, by name. A value it cannot vouch for (a tensor, a lock, a C object without a rule)
makes the kernel undigestable (None): that kernel is traced in each new process, as without records.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import linecache
import os
import sys
import types

MAX_VALUES = 50_000                 # more than this many values reached: undigestable (a table to hash each process)
_BY_NAME = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "builtins"}   # stable across a process's life
_SKIPPED_CLASS_ENTRIES = ("__dict__", "__weakref__")
_ENVIRONMENT_READS = frozenset({"environ", "getenv", "environb", "getenvb"})
# what a user's code names where it reads the GPU it runs on while it traces (an SM count baked into the code)
_DEVICE_READS = frozenset({"get_device_properties", "multi_processor_count", "get_device_capability",
                           "get_device_name", "device_count", "sm_count", "device_attribute", "mem_get_info"})


class Undigestable(Exception):
    """A value the digest cannot vouch for."""


def value_digest(value) -> str | None:
    """sha256 (hex) of `value` and what it reaches (a tk.Kernel: what its trace depends on besides the call and
    tkpy's files; a specialization's constexprs), or None (undigestable)."""
    try:
        return _sub_digest(value)
    except (Undigestable, RecursionError):
        return None


def _top_module(name: str) -> str:
    return (name or "").partition(".")[0]


def _by_name(module: str) -> bool:
    """Whether a module's functions and classes are digested by name: tkpy's (the tree digest vouches for them),
    the standard library's, torch's and numpy's."""
    top = _top_module(module)
    return top == "tkpy" or top in _BY_NAME


def _defined_at_top(obj) -> bool:
    """Whether `obj` (a function or class) is what its module's attribute of its qualified name is: made once at
    import, not by a factory (whose closures and namespaces then differ by call)."""
    return "<locals>" not in getattr(obj, "__qualname__", "<locals>")


class _Digest:
    """One walk over a kernel's reachable values into a sha256; a value met again goes in as a reference."""

    def __init__(self):
        self.hash = hashlib.sha256()
        self._seen: dict[int, int] = {}
        self._kept: list = []         # what was seen, alive until the walk ends (ids stay unique)
        self._files: dict[str, str] = {}
        self._modules: list = []      # the user's modules whose attributes are being read (config.sub.BLOCK)
        self._environment_read = self._device_read = False

    def put(self, *texts: str) -> None:
        for text in texts:
            self.hash.update(text.encode())
            self.hash.update(b"\0")

    def add(self, value) -> None:
        kind = type(value)
        if value is None or kind in (bool, int, float, complex, str, bytes):
            self.put(kind.__name__, repr(value))
            return
        seen = self._seen.get(id(value))
        if seen is not None:
            self.put("ref", str(seen))
            return
        if len(self._seen) >= MAX_VALUES:
            raise Undigestable(f"more than {MAX_VALUES} values")
        self._seen[id(value)] = len(self._seen)
        self._kept.append(value)
        self._add_new(value, kind)

    def _add_new(self, value, kind) -> None:
        if kind in (tuple, list):
            self.put(kind.__name__, str(len(value)))
            for item in value:
                self.add(item)
        elif kind is dict:
            self.put("dict", str(len(value)))
            for k, v in value.items():
                self.add(k)
                self.add(v)
        elif kind in (set, frozenset):
            self.put(kind.__name__, str(len(value)))
            for text in sorted(_sub_digest(item) for item in value):
                self.put(text)
        elif kind is types.FunctionType:
            self._function(value)
        elif kind is types.CodeType:
            self._code(value)
        elif kind is types.ModuleType:
            self.put("module", value.__name__)
        elif kind is types.MethodType:
            self.put("method")
            self.add(value.__func__)
            self.add(value.__self__)
        elif kind is functools.partial:
            self.put("partial")
            self.add(value.func)
            self.add(value.args)
            self.add(value.keywords)
        elif kind in (staticmethod, classmethod):
            self.put(kind.__name__)
            self.add(value.__func__)
        elif kind is property:
            self.put("property")
            self.add((value.fget, value.fset, value.fdel))
        elif kind in (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                      types.GetSetDescriptorType, types.MemberDescriptorType, types.MethodWrapperType,
                      types.ClassMethodDescriptorType):
            self._builtin(value)
        elif isinstance(value, type):
            self._class(value)
        else:
            self._object(value, kind)

    def _builtin(self, value) -> None:
        owner = getattr(value, "__self__", None)
        self.put("builtin", getattr(value, "__module__", None) or "", getattr(value, "__qualname__", repr(value)))
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            self.add(owner)             # a bound method of a builtin (a list's append): its object

    def _function(self, fn) -> None:
        module = fn.__module__ or ""
        self.put("function", module, fn.__qualname__)
        if _by_name(module):
            if _defined_at_top(fn):
                return
            self.put(str(fn.__code__.co_firstlineno))       # a factory's function: its code is the file's, by name
        else:
            self._code(fn.__code__)
            self._file(fn.__code__.co_filename)
        names = _names(fn.__code__)
        cells = tuple(_cell_value(c) for c in fn.__closure__ or ())
        self.add(cells)
        for value in cells:
            self._module_attributes(value, names)
        if not _by_name(module):
            self._globals(fn, names)
            if names & _ENVIRONMENT_READS:
                self._environment()
            if names & _DEVICE_READS:
                self._device()
        self.add(fn.__defaults__)
        self.add(fn.__kwdefaults__)
        self.add(getattr(fn, "__dict__", None) or None)     # attributes set on it (functools.wraps' __wrapped__)

    def _globals(self, fn, names: set) -> None:
        """The globals `fn`'s code names (and their attributes it names, of the user's modules)."""
        scope = fn.__globals__
        for name in sorted(names):
            if name in scope:
                value = scope[name]
                self.put("global", name)
                self.add(value)
                self._module_attributes(value, names)

    def _environment(self) -> None:
        """The environment, once a walk, where a user's code names `environ` or `getenv` (a kernel that reads a
        switch while it traces)."""
        if not self._environment_read:
            self._environment_read = True
            self.put("environment", repr(sorted(os.environ.items())))

    def _device(self) -> None:
        """The current GPU (its name, SM count and compute capability), once a walk, where a user's code names what
        reads it (_DEVICE_READS): a kernel that bakes the SM count in while it traces."""
        if self._device_read:
            return
        self._device_read = True
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            self.put("device", "none")
            return
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.put("device", props.name, str(props.multi_processor_count), f"{props.major}.{props.minor}")

    def _module_attributes(self, value, names: set) -> None:
        """Of a user's module (not tkpy's, the standard library's or torch's), the attributes a code names, and of
        those that are modules theirs: its settings read as `config.BLOCK`."""
        if isinstance(value, types.ModuleType) and not _by_name(value.__name__) and value not in self._modules:
            self._modules.append(value)
            for attribute in sorted(names):
                if attribute in value.__dict__:
                    self.put("attribute", attribute)
                    self.add(value.__dict__[attribute])
                    self._module_attributes(value.__dict__[attribute], names)     # config.sub.BLOCK
            self._modules.pop()

    def _code(self, code) -> None:
        self.put("code", code.co_filename, code.co_name, str(code.co_firstlineno), str(code.co_flags),
                 str((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)),
                 repr(code.co_names), repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars))
        self.hash.update(code.co_code)
        self.hash.update(getattr(code, "co_linetable", b"") or b"")
        self.hash.update(getattr(code, "co_exceptiontable", b"") or b"")
        self.put(str(len(code.co_consts)))
        for const in code.co_consts:
            self.add(const)

    def _file(self, filename: str) -> None:
        """The file a user's code comes from, by size and modification time (a notebook cell's by its text): any
        edit of it is a new digest (its lines are in the generated source's comments)."""
        stamp = self._files.get(filename)
        if stamp is None:
            try:
                st = os.stat(filename)
                stamp = f"{st.st_size}:{st.st_mtime_ns}"
            except OSError:             # a notebook's cell (its lines in linecache), <string>: by its text
                stamp = hashlib.sha256("".join(linecache.getlines(filename)).encode()).hexdigest()
            self._files[filename] = stamp
        self.put("file", filename, stamp)

    def _class(self, cls) -> None:
        module = getattr(cls, "__module__", "") or ""
        self.put("class", module, cls.__qualname__)
        if _by_name(module) and _defined_at_top(cls):
            return
        self.add(cls.__bases__)
        for name, value in vars(cls).items():
            if name not in _SKIPPED_CLASS_ENTRIES:
                self.put(name)
                self.add(value)

    def _object(self, value, kind) -> None:
        hook = getattr(kind, "__tkpy_digest__", None)
        if hook is not None:
            self.put("tkpy", kind.__qualname__)
            self.add(hook(value))
            return
        module = _top_module(kind.__module__)
        if module == "torch" and kind.__name__ in ("dtype", "device", "Size", "layout", "memory_format"):
            self.put("torch", repr(value))
            return
        if module == "numpy" and hasattr(value, "dtype") and getattr(value, "shape", None) == ():
            self.put("numpy", repr(value))        # a numpy scalar
            return
        if kind is inspect.Signature:                # a function's __signature__ (tkpy's template bodies)
            self.put("signature")
            for p in value.parameters.values():
                self.put(p.name, str(p.kind))
                self.add(p.default)
                self.add(p.annotation)
            self.add(value.return_annotation)
            return
        if isinstance(value, enum.Enum):
            self.add(kind)
            self.put(value.name)
            return
        if dataclasses.is_dataclass(value):
            self.add(kind)
            for f in dataclasses.fields(value):
                self.put(f.name)
                self.add(getattr(value, f.name))
            return
        if module in _BY_NAME:
            raise Undigestable(f"a {kind.__module__}.{kind.__qualname__}")
        state = getattr(value, "__dict__", None)
        if state is None:
            raise Undigestable(f"a {kind.__module__}.{kind.__qualname__} without attributes to read")
        self.add(kind)
        self.add(dict(state))


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:              # a cell not yet filled (a function that refers to itself before it is bound)
        return _EMPTY_CELL


_EMPTY_CELL = ("<empty cell>",)


def _names(code) -> set:
    """The names `code` and the code nested in it look up (globals, attributes)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _sub_digest(value) -> str:
    """`value`'s own digest (Undigestable raised): a set member's (set order is not stable across processes)."""
    digest = _Digest()
    digest.add(value)
    return digest.hash.hexdigest()
