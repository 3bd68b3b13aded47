"""`python -m tkpy.warmup`: compile tkpy.kernels' operators for a list of shapes into the disk cache ahead of time
(e.g. while building a deployment image), on a pool of threads, so that their first calls only load cubins.

    python -m tkpy.warmup matmul:4096x4096x4096 attention:16x16x4096x128:causal:train softmax:8192x128
    python -m tkpy.warmup --file shapes.txt        # one spec a line; '#' starts a comment
    python -m tkpy.warmup --list                   # the operators, their dims and flags

A spec is OP:DIMS[:FLAG[=VALUE]...], e.g. attention:1x32x1x128:kv_heads=8:keys=8192 (decoding, GQA). Each runs the
operator's launch path (tkpy.kernels.warmup) under compile_only(): every kernel it would launch is traced and
compiled by NVRTC, nothing is run. NVRTC needs no GPU: by default the tensors are meta tensors and the choices that
depend on the GPU's SM count are an H200's (132 SMs); `--device cuda` plans for the GPU at hand (empty tensors on
it; still nothing launched). TKPY_CACHE_DIR chooses the cache directory, as at run time; the cache is keyed by
NVRTC's version too, so warm up with the NVRTC the deployment runs. It also builds the native launcher into that
directory (tkpy.runtime.native: once per machine, which a process's first launch would otherwise start in the
background).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .frontend.kernel import compile_only
from .runtime import cache
from .tune import run_all


def parse(spec: str, ops: dict) -> tuple:
    """(operator, dims, flags) of an OP:DIMS[:FLAG[=VALUE]...] spec; a ValueError saying what is wrong."""
    name, _, rest = spec.strip().partition(":")
    if name not in ops:
        raise ValueError(f"{spec!r}: no operator {name!r} (operators: {', '.join(ops)})")
    op = ops[name]
    text, *flag_texts = rest.split(":")
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        raise ValueError(f"{spec!r}: dims are {op.dims}, e.g. {name}:{'x'.join(['64'] * op.dims.count('x') + ['64'])}"
                         ) from None
    flags = {}
    for flag in flag_texts:
        key, eq, value = flag.partition("=")
        if key not in op.flags:
            raise ValueError(f"{spec!r}: {name} has no flag {key!r} (flags: {', '.join(op.flags)})")
        flags[key] = value if eq else True
    return op, dims, flags


def warm(specs: list[str], device: str = "meta", threads: int | None = None) -> tuple[list, list]:
    """Compile the kernels of every spec: (the Compiled specializations, [(spec, error)] of the specs that failed).
    Specs that do not parse raise ValueError before anything compiles."""
    from tkpy.kernels.warmup import OPS

    parsed = [parse(s, OPS) for s in specs]

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype, device=device)

    def job(op, dims, flags):
        return lambda: op.run(dims, flags, empty)
    with compile_only() as compiled:
        results = run_all([job(*p) for p in parsed], "warm-up", keep=(Exception,), limit=threads)
    return list({id(c): c for c in compiled}.values()), [(s, r) for s, r in zip(specs, results)
                                                         if isinstance(r, Exception)]


def native_launcher() -> str:
    """Build the native launcher into the cache directory unless it is there (tkpy.runtime.native), and say where it
    is, or why there is none (launches then go through the Python launcher)."""
    from .runtime import native

    if not native.enabled():
        return f"off ({native.ENV}=0)"
    try:
        return str(native.build())
    except (native.NativeBuildError, OSError) as e:
        return f"none ({e}); launches go through the Python launcher"


def _specs_from(path: str) -> list[str]:
    with open(path) as f:
        return [line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()]


def _list_ops() -> str:
    from tkpy.kernels.warmup import OPS

    lines = []
    for name, op in OPS.items():
        lines.append(f"{name}:{op.dims}")
        lines += [f"    :{flag:<14} {meaning}" for flag, meaning in op.flags.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tkpy.warmup", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="*", help="OP:DIMS[:FLAG[=VALUE]...] (see --list)")
    parser.add_argument("--file", action="append", default=[], help="a file of specs, one a line")
    parser.add_argument("--device", default="meta", choices=("meta", "cuda"),
                        help="meta (default: no GPU; an H200's SM count) or cuda (the GPU at hand's)")
    parser.add_argument("--threads", type=int, default=None, help="compile threads (default: one per core)")
    parser.add_argument("--list", action="store_true", help="list the operators, their dims and flags")
    args = parser.parse_args(argv)
    if args.list:
        print(_list_ops())
        return 0
    specs = args.specs + [s for path in args.file for s in _specs_from(path)]
    if not specs:
        parser.error("give specs (or --file); --list shows the operators")
    if cache.root() is None:
        print("tkpy warmup: no disk cache (TKPY_CACHE=0 or no private cache directory): nothing would be kept",
              file=sys.stderr)
        return 1
    start = time.perf_counter()
    try:
        compiled, failed = warm(specs, args.device, args.threads)
    except ValueError as e:
        parser.error(str(e))
    new = [c for c in compiled if not c.module.from_cache]
    print(f"tkpy warmup: {len(compiled)} kernels for {len(specs)} specs in {time.perf_counter() - start:.1f} s, "
          f"{len(new)} compiled (NVRTC {sum(c.module.compile_seconds for c in new):.1f} s), "
          f"{len(compiled) - len(new)} already in {cache.root()}")
    for c in sorted(compiled, key=lambda c: c.module.kernel_name):
        done = f"compiled in {c.module.compile_seconds:.2f} s" if not c.module.from_cache else "cached"
        print(f"  {c.module.kernel_name}: {done} ({c.resources.summary()})")
    print(f"  native launcher: {native_launcher()}")
    for spec, error in failed:
        print(f"  {spec}: {type(error).__name__}: {error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
