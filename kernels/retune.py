"""tkpy.kernels.tune(): re-measure the GPU-dependent rows of attention()'s and matmul()'s policy tables on the GPU at
hand and keep them for it, so that the policies use them there instead of the rows measured on the H200 (their
MEASURED_ON). They are kept in tkpy's disk cache under the GPU's name (tkpy.tune.tables) and read by the policies
through tuned_rows; an operator's call never tunes anything. From a shell:

    python -m tkpy.kernels.retune                            # every table below (a few minutes)
    python -m tkpy.kernels.retune --tables gemm.TILE_RATE    # some
    python -m tkpy.kernels.retune --show                     # the tables in use here, and where they were measured

The tables (TABLES): gemm.TILE_RATE, the TFLOP/s of each tile width at 4096^3 (block_n_for's model); attention's
CONFIGS (key/value rows, stages of the 2-warpgroup kernels on one ring, chosen among CANDIDATES at B16 H16 N1024
non-causal, where D128 runs them) and CONFIGS_SPLIT (rows, K stages, V stages of the split rings, at N4096), each
candidate compiled on a thread pool and timed by tk.autotune (those that do not fit pruned), for the head dims 64
and 128. Needs a GPU.
"""
from __future__ import annotations

import argparse
import functools

import torch

import tkpy as tk
from tkpy.tune import current_gpu, load_table, median_ms, store_table

from . import attention_policy, gemm, gemm_policy
from .attention_forward import _prepared

RATE_SHAPE = 4096                   # gemm.TILE_RATE: M = N = K
ATTENTION_SHAPE = (16, 16)          # batch, heads
DIMS = (64, 128)
CANDIDATES = {                      # table -> (query rows N, split_kv, the option each position of a row sets, rows)
    "CONFIGS": (1024, False, ("kv", "stages"),
                [(kv, s) for kv in (64, 96, 128, 160, 176, 192) for s in (2, 3, 4)]),
    "CONFIGS_SPLIT": (4096, True, ("kv", "stages", "late_stages"),
                      [(kv, s, late) for kv in (128, 144, 160, 176, 192) for s in (2, 3) for late in (2, 3)]),
}


def matmul_rates(gpu: str, dtype: torch.dtype) -> tuple[dict, dict]:
    """gemm.TILE_RATE's rows on this GPU: TFLOP/s of a RATE_SHAPE^3 product in each tile width."""
    n = RATE_SHAPE
    a, b = (torch.randn(n, n, device="cuda").to(dtype) for _ in range(2))
    rows, evidence = {}, {}
    for width in gemm_policy.WIDTHS:
        ms = median_ms(functools.partial(gemm.run, a, b, block_n=width))
        rows[width] = round(2 * n ** 3 / ms / 1e9)
        evidence[width] = f"tkpy.kernels.tune on {gpu}: {n}^3 {dtype} in {width}-wide tiles, {rows[width]} TFLOP/s"
    return rows, evidence


def attention_tiles(table: str, gpu: str, dtype: torch.dtype) -> tuple[dict, dict]:
    """attention_policy's `table` (CONFIGS or CONFIGS_SPLIT) on this GPU: per head dim, the fastest of its
    CANDIDATES (tk.autotune over the kernels _prepared makes with them) at ATTENTION_SHAPE x N."""
    n, split, names, candidates = CANDIDATES[table]
    rows, evidence = {}, {}
    for d in DIMS:
        q, k, v = (torch.randn(*ATTENTION_SHAPE, n, d, device="cuda").to(dtype) for _ in range(3))
        o = torch.empty_like(q)
        options = dict(consumer_warpgroups=2, split_kv=split)

        def make(**tiles):
            return _prepared(q, k, v, o, None, False, None, **options, **tiles)[0]
        tuned = tk.autotune(configs=[tk.Config(**dict(zip(names, c))) for c in candidates], key=[], cache=False)(make)
        tuned(*_prepared(q, k, v, o, None, False, None, **options)[1])    # (the same arguments for any tiles)
        best = sorted(tuned.timings.items(), key=lambda item: item[1])
        rows[d] = tuple(best[0][0].keywords[name] for name in names)
        evidence[d] = (f"tkpy.kernels.tune on {gpu}: B{ATTENTION_SHAPE[0]} H{ATTENTION_SHAPE[1]} N{n} D{d} non-causal "
                       f"{dtype}, " + ", ".join(f"{tuple(c.keywords.values())} {ms:.3f} ms" for c, ms in best[:3]))
    return rows, evidence


TABLES = {
    "gemm.TILE_RATE": (gemm_policy, "TILE_RATE", matmul_rates),
    "attention.CONFIGS": (attention_policy, "CONFIGS", functools.partial(attention_tiles, "CONFIGS")),
    "attention.CONFIGS_SPLIT": (attention_policy, "CONFIGS_SPLIT", functools.partial(attention_tiles, "CONFIGS_SPLIT")),
}


def tune(tables=tuple(TABLES), dtype: torch.dtype = torch.bfloat16) -> dict:
    """Re-measure `tables` (names of TABLES) on the current GPU and keep them for it: {name: tkpy.tune.TunedTable}.
    A RuntimeError without a GPU (or under TKPY_INTERPRET=1)."""
    unknown = sorted(set(tables) - TABLES.keys())
    if unknown:
        raise ValueError(f"tkpy.kernels.tune: no table {', '.join(unknown)} (tables: {', '.join(TABLES)})")
    gpu = current_gpu()
    if gpu is None:
        raise RuntimeError("tkpy.kernels.tune times kernels on the GPU: it needs a Hopper GPU (and no "
                           "TKPY_INTERPRET=1)")
    return {name: store_table(name, *TABLES[name][2](gpu, dtype), gpu) for name in tables}


def in_use(gpu: str | None = None) -> dict:
    """{table: (the GPU its rows were measured on, its rows)} as the policies read them on `gpu` (default: the current
    one; none: the shipped tables)."""
    out = {}
    for name, (policy, attribute, _) in TABLES.items():
        tuned = load_table(name, gpu)
        shipped = getattr(policy, attribute)
        out[name] = (policy.MEASURED_ON, shipped) if tuned is None else \
            (f"{tuned.gpu} ({tuned.tuned})", {**shipped, **tuned.rows})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tkpy.kernels.retune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES), help=f"comma-separated, of {', '.join(TABLES)}")
    parser.add_argument("--show", action="store_true", help="print the tables in use here and stop")
    args = parser.parse_args(argv)
    if not args.show:
        for name, table in tune(args.tables.split(",")).items():
            print(f"{name} tuned on {table.gpu}:")
            for key, value in table.rows.items():
                print(f"  {key}: {value}    # {table.evidence[key]}")
    for name, (where, rows) in in_use().items():
        print(f"{name} (measured on {where}): {rows}")


if __name__ == "__main__":
    main()
