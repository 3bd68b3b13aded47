"""The architecture, checked: the modules of tkpy and tkpy.kernels import each other without cycles, each package
imports only the layers below it, the code generator never reaches into the runtime, and the kernels use tkpy's
public API only.

The import graph is built statically with `ast` from every `import` and `from ... import` anywhere in a module:
at the top, inside functions (a lazy import is still a dependency, and one that only dodges a cycle is still a
cycle) and inside `try`/`if`. Only imports under `if TYPE_CHECKING:` are left out: they never run. An import is an
edge to the module it names: `from .x import y` to `x.y` when `y` is a submodule of `x`, otherwise to `x` (the
package or module whose names it reads); relative imports are resolved against the importing module's package.
Importing `a.b.c` runs the `__init__.py` of `a` and `a.b` first, so it is an edge to those packages too, except
to the packages that hold the importer itself (they are being imported already).

The layers, lowest first (LAYERS says what each package may import):

    tkpy.errors, tkpy.tiles           the type system and layout math, the exceptions
    tkpy.ir                           typed tiles, ops, statements; printer, passes, checks, scalar evaluation
    tkpy.codegen                      IR -> CUDA C++ (no runtime: what it emits is a pure function of the IR)
    tkpy.runtime                      NVRTC, caches, the driver, launches; reads codegen's device formats
    tkpy.interpret                    runs the IR on the CPU (binds launch arguments with frontend.signature)
    tkpy.frontend.context/.control    the trace context and runtime control flow the ops record into
    tkpy.ops                          the op namespace: thin functions that check operands and record IR
    tkpy.frontend                     signatures, tracing, the launcher and its stages (over codegen, runtime,
                                      interpret; never the ops), the specialization records (with tkpy's
                                      version and the digest of its files: tkpy._version, tkpy._source_tree)
    tkpy.templates                    LCF / LCSF block templates, written with the public ops
    tkpy.tune                         autotuning (tk.autotune, tk.Config) over kernels and templates, parallel
                                      compiles, the tuned tables' records
    tkpy                              the public namespace (tkpy/__init__.py)
    tkpy.kernels                      kernels written in tkpy: tkpy's public API only (PUBLIC), as examples/ are

The Python layer above IR calls down only; where the IR must call up (the syntax `a + b`, `t[16:32]` on a tile
records ops), the op layer registers the behaviour (tkpy.ir.core.tile_syntax), as the code generator's and the
interpreter's op tables do.
"""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ((ROOT / "tkpy", "tkpy"), (ROOT / "kernels", "tkpy.kernels"))   # folder -> package (tkpy/_source_tree.py)

# What each package may import (its own modules always): package or module names, each covering its submodules.
_BASE = {"tkpy.errors", "tkpy.tiles"}
LAYERS = {
    "tkpy.errors": set(),
    "tkpy.tiles": {"tkpy.errors"},
    "tkpy.ir": _BASE,
    "tkpy.codegen": _BASE | {"tkpy.ir"},
    "tkpy.runtime": _BASE | {"tkpy.ir", "tkpy.codegen"},
    "tkpy.interpret": _BASE | {"tkpy.ir", "tkpy.frontend.signature"},
    "tkpy.ops": _BASE | {"tkpy.ir", "tkpy.frontend.context", "tkpy.frontend.control"},
    "tkpy.frontend": _BASE | {"tkpy._version", "tkpy._source_tree", "tkpy.ir", "tkpy.codegen", "tkpy.runtime",
                              "tkpy.interpret"},
    "tkpy.templates": _BASE | {"tkpy.ir", "tkpy.frontend", "tkpy.ops", "tkpy.runtime", "tkpy.interpret"},
    "tkpy.tune": _BASE | {"tkpy._version", "tkpy.ir", "tkpy.frontend", "tkpy.runtime", "tkpy.interpret",
                          "tkpy.templates"},
}

# What kernels and examples may import from tkpy: the package and the subpackages it documents as public, by their
# public names (a package's __all__ where it has one, else its names without a leading underscore).
PUBLIC = {"tkpy", "tkpy.templates", "tkpy.tune"}
# The op namespaces tkpy exports as modules (`tk.tma.load_async`, `tk.cluster.sync()`). Any other module reachable as
# an attribute (`tk.ir`, `tk.frontend`, and the op modules `from .ops import *` leaves in tkpy's namespace, such as
# `tk.elementwise`) is not public: `tk.ir.expr.call` reaches past the public names as an import would.
PUBLIC_NAMESPACES = {"tkpy.ops.tma", "tkpy.ops.cluster"}


# -- the graph ------------------------------------------------------------------------------------------------

def find_modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package) for every module of tkpy and tkpy.kernels."""
    found = {}
    for folder, package in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            if package == "tkpy" and parts[:1] == ["kernels"]:
                continue    # (an installed layout's tkpy/kernels: read from kernels/ instead)
            found[".".join([package, *parts])] = (path, is_package)
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def imports_of(name: str, path: Path, is_package: bool, modules) -> list[tuple[str, int, tuple]]:
    """(imported module, line, names taken from it) for each tkpy import in the module, as written."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_only(tree)
    package = name if is_package else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno, ()) for alias in node.names if alias.name.split(".")[0] == "tkpy"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "tkpy":
                continue
            names = []
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    out.append((f"{target}.{alias.name}", node.lineno, ()))
                else:
                    names.append(alias.name)
            if names or not node.names:
                out.append((target, node.lineno, tuple(names)))
    return out


def enclosing(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def build_graph():
    """(modules, {module: {imported module: line}}): the direct edges plus the packages each import runs first."""
    modules = find_modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        own = set(enclosing(name)) | ({name} if is_package else set())
        edges: dict[str, int] = {}
        for target, line, _ in imports_of(name, path, is_package, modules):
            for t in [*enclosing(target), target]:
                if t != name and t not in own and t in modules:
                    edges.setdefault(t, line)
        graph[name] = edges
    return modules, graph


def strongly_connected(graph) -> list[list[str]]:
    """The components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def a_cycle(graph, component: list[str]) -> str:
    """One shortest cycle through the component's first module, as `a (line) -> b (line) -> ... -> a`."""
    members, start = set(component), component[0]
    parents = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while parents[path[-1]] is not None:
                        path.append(parents[path[-1]])
                    path.reverse()
                    hops = path + [start]
                    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(hops, hops[1:])) + f" -> {start}"
                if w in members and w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("not a cycle")


@pytest.fixture(scope="module")
def graph():
    return build_graph()


# -- the checks -----------------------------------------------------------------------------------------------

def test_every_tkpy_import_resolves(graph):
    """Each tkpy module an import names exists (else the graph below would miss it)."""
    modules, _ = graph
    missing = [f"{name}:{line} imports {target}" for name, (path, pkg) in modules.items()
               for target, line, _ in imports_of(name, path, pkg, modules) if target not in modules]
    assert not missing, "imports of modules that do not exist:\n  " + "\n  ".join(missing)


def test_no_import_cycles(graph):
    modules, edges = graph
    cycles = list(strongly_connected(edges))
    assert not cycles, ("import cycles (move the shared piece to the lower module, invert the dependency, or let "
                        "the lower layer take a registered hook):\n  " + "\n  ".join(a_cycle(edges, c) for c in cycles))


def _layer(name: str):
    """The LAYERS entry that rules module `name` (its longest enclosing key), or None."""
    keys = [k for k in LAYERS if name == k or name.startswith(k + ".")]
    return max(keys, key=len) if keys else None


def _covered(target: str, allowed) -> bool:
    """Whether `target` is an allowed module, inside one, or a package holding one (whose __init__ importing it
    runs)."""
    return any(target == a or target.startswith(a + ".") or a.startswith(target + ".") for a in allowed)


def test_layers(graph):
    """Each package imports only its own modules and the layers LAYERS lists for it."""
    _, edges = graph
    bad = []
    for name in sorted(edges):
        layer = _layer(name)
        if layer is None:
            continue
        for target, line in sorted(edges[name].items()):
            if _layer(target) != layer and not _covered(target, LAYERS[layer]):
                bad.append(f"{name}:{line} imports {target}, above {layer} (it may import {sorted(LAYERS[layer])})")
    assert not bad, "imports against the layering:\n  " + "\n  ".join(bad)


def test_codegen_never_imports_the_runtime(graph):
    """Generated C++ is a function of the IR alone: codegen shares formats with the runtime by owning them."""
    _, edges = graph
    bad = [f"{name}:{line} imports {target}" for name in sorted(edges) if name.startswith("tkpy.codegen")
           for target, line in edges[name].items() if target == "tkpy.runtime" or target.startswith("tkpy.runtime.")]
    assert not bad, "the code generator imports the runtime:\n  " + "\n  ".join(bad)


def _public_names(module_name: str) -> set:
    """A public module's public names: its __all__, or else its names without a leading underscore that are not
    modules other than the public ones."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and (not isinstance(v, types.ModuleType) or v.__name__ in PUBLIC | PUBLIC_NAMESPACES)]
    return set(names)


def _tkpy_aliases(tree: ast.AST) -> set:
    """Names bound to the tkpy package itself (`import tkpy`, `import tkpy as tk`)."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
            for alias in node.names if alias.name == "tkpy"}


def _private_uses(where: str, name: str, path: Path, is_package: bool, modules) -> list[str]:
    """What a module of tkpy.kernels or examples/ takes from tkpy that is not its public API."""
    bad = []
    for target, line, names in imports_of(name, path, is_package, modules):
        if target == "tkpy.kernels" or target.startswith("tkpy.kernels."):
            continue
        if target not in PUBLIC:
            bad.append(f"{where}:{line} imports {target}, not public ({', '.join(sorted(PUBLIC))} are)")
            continue
        public = _public_names(target)
        bad += [f"{where}:{line} takes {n} from {target}, not among its public names" for n in names
                if n != "*" and (n.startswith("_") or n not in public)]
    tree = ast.parse(path.read_text())
    aliases = _tkpy_aliases(tree)
    public = _public_names("tkpy")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr not in public:
                bad.append(f"{where}:{node.lineno} uses {node.value.id}.{node.attr}, not among tkpy's public names")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain = node.value
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            if isinstance(chain, ast.Name) and chain.id in aliases:
                bad.append(f"{where}:{node.lineno} uses .{node.attr} of tkpy, not public")
    return bad


def test_kernels_and_examples_use_the_public_api_only(graph):
    modules, _ = graph
    bad = []
    for name, (path, is_package) in sorted(modules.items()):
        if name.startswith("tkpy.kernels"):
            bad += _private_uses(f"kernels/{path.relative_to(ROOT / 'kernels')}", name, path, is_package, modules)
    for path in sorted((ROOT / "examples").glob("*.py")):
        bad += _private_uses(f"examples/{path.name}", f"examples.{path.stem}", path, False, modules)
    assert not bad, "kernels or examples reaching past tkpy's public API:\n  " + "\n  ".join(bad)


_IMPORT_ALONE = """
import importlib, sys, traceback
import numpy, torch                       # (not tkpy's: they stay loaded between the imports below)

def fresh():
    for m in [m for m in sys.modules if m == "tkpy" or m.startswith("tkpy.")]:
        del sys.modules[m]

names, failed = sys.argv[1:], []
def load(name):
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ":\\n" + traceback.format_exc(limit=-4))

load("tkpy")
for name in [n for n in names if not n.startswith("tkpy.kernels") and n not in sys.modules]:
    fresh()
    load(name)
fresh()
load("tkpy.kernels")
for name in [n for n in names if n.startswith("tkpy.kernels") and n not in sys.modules]:
    load(name)                            # (torch ops register once a process: no fresh state for these)
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_each_module_imports_alone():
    """Every module imports in a fresh interpreter, as `python -c "import tkpy.X"` would: no import-order reliance
    that the test process, with everything loaded, hides. Importing any tkpy.X runs tkpy/__init__.py first, which
    loads nearly every module in one fixed order; so one subprocess imports tkpy from scratch, then each module
    that left out, each from a fresh state again (tkpy's modules dropped from sys.modules), then tkpy.kernels and
    the kernel modules its __init__ does not load (after it, as any import of them runs it first)."""
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALONE, *sorted(find_modules())], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, f"modules that fail to import alone:\n{done.stdout}{done.stderr}"


# -- the checker checks itself ----------------------------------------------------------------------------------

def test_the_graph_sees_lazy_and_relative_imports():
    """Function-local imports are edges; `from . import x` is an edge to submodule x; a package's own modules do
    not depend on it; a cycle is reported as a path."""
    edges = {"p": {"p.a": 1}, "p.a": {"p.b": 3}, "p.b": {"p.a": 7}}
    (component,) = strongly_connected(edges)
    assert component == ["p.a", "p.b"]
    assert a_cycle(edges, component) == "p.a (line 3) -> p.b (line 7) -> p.a"
    _, real = build_graph()
    assert "tkpy.ir.evaluate" in real["tkpy.ir.protocol"]                  # a top-level relative import
    assert "tkpy.runtime.driver" in real["tkpy.runtime.timeline"]          # a lazy one (`from . import driver`)
    assert "tkpy.codegen" in real["tkpy.runtime.debug"]                    # the package a submodule import runs
    assert "tkpy.interpret" not in real["tkpy.interpret.machine"]          # ... but not the importer's own
