"""compute-sanitizer over every public kernel at small shapes, on every path: memcheck, racecheck and synccheck.

    PYTHONPATH=. python3 benchmarks/sanitize.py [--tools memcheck,racecheck,synccheck] [--only NAME_SUBSTRING[,...]]

Each tool runs this file's cases (`--cases`) in one process under `compute-sanitizer --tool T`; the kernels are
compiled once beforehand into a shared cache directory, so the tools time launches only. Prints each tool's error
summary and writes $OUT/sanitize.json (and each tool's log) when OUT is set. initcheck is left out: it flags every
element of a TMA-stored output (a tool limitation with TMA stores, seen on matmul: 156000 of 156000 elements).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOOLS = ("memcheck", "racecheck", "synccheck")


def cases() -> dict:
    """name -> a call of a public kernel (small shapes; every dtype, layout and path the kernels choose between)."""
    import torch

    from tkpy.kernels import attention, matmul, matmul_fp8, softmax

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda").to(dtype)

    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    out = {
        "matmul bf16 nn": lambda: matmul(r(200, 96), r(96, 300)),
        "matmul fp16 nt bias gelu scale f32-out": lambda: matmul(r(130, 72, dtype=torch.float16),
                                                                 r(260, 72, dtype=torch.float16).T, bias=r(260),
                                                                 activation="gelu", scale=0.5, out_dtype=torch.float32),
        "matmul 256-wide tiles, several tasks a block": lambda: matmul(r(1024, 128), r(128, 4096), block_n=256),
        "matmul split-K ordered": lambda: matmul(r(128, 2048), r(2048, 256), split_k=4),
        "matmul split-K atomic": lambda: matmul(r(128, 2048), r(2048, 256), split_k=4, deterministic=False),
        "matmul backward": lambda: matmul(r(64, 64).requires_grad_(), r(64, 64).requires_grad_(),
                                          activation="relu").sum().backward(),
        "matmul_fp8 e4m3": lambda: matmul_fp8(r(200, 256).to(e4), r(192, 256).to(e4).T, torch.ones(1, device="cuda"),
                                              torch.rand(192, device="cuda")),
        "matmul_fp8 e5m2 x e4m3": lambda: matmul_fp8(r(128, 128).to(e5), r(128, 128).to(e4).T,
                                                     torch.ones(1, device="cuda"), torch.ones(1, device="cuda")),
        "softmax bf16 + backward": lambda: softmax(r(300, 100).requires_grad_()).sum().backward(),
        "softmax fp16 256": lambda: softmax(r(2, 70, 256, dtype=torch.float16)),
    }
    for d in (64, 128, 256):
        for causal in (False, True, "bottom_right"):
            out[f"attention D{d} causal={causal}"] = lambda d=d, c=causal: attention(
                r(1, 2, 300, d), r(1, 2, 333, d), r(1, 2, 333, d), causal=c, return_lse=True)
    out["attention D128 GQA packed decode"] = lambda: attention(r(2, 8, 4, 128), r(2, 2, 700, 128), r(2, 2, 700, 128))
    out["attention D64 split-K"] = lambda: attention(r(1, 2, 64, 64), r(1, 2, 8192, 64), r(1, 2, 8192, 64))
    for d in (64, 128, 256):
        for causal in (False, True, "bottom_right"):        # the backward: the main kernel, dQ by reduce-adds or pass
            out[f"attention backward D{d} causal={causal}"] = lambda d=d, c=causal: attention(
                r(1, 4, 300, d).requires_grad_(), r(1, 2, 333, d).requires_grad_(), r(1, 2, 333, d).requires_grad_(),
                causal=c).sum().backward()
    out["attention backward D128 deterministic"] = lambda: attention(
        r(1, 2, 300, 128).requires_grad_(), r(1, 2, 400, 128).requires_grad_(), r(1, 2, 400, 128).requires_grad_(),
        causal=True, deterministic=True).sum().backward()
    def backward_with(options, causal, d=64):  # the backward's launches with AttentionBwdConfig fields (variants)
        from tkpy.kernels.attention_backward import _launch
        from tkpy.kernels.attention_forward import causal_variant
        q, k, v = r(1, 4, 300, d), r(1, 2, 333, d), r(1, 2, 333, d)
        o, lse = attention(q, k, v, causal=causal, return_lse=True)
        grads = [torch.empty_like(x) for x in (q, k, v)]
        _launch(torch.randn_like(q), q, k, v, o, lse, *grads, causal_variant(causal), d ** -0.5, options=options)
    variants = [("q_rows=64", 64, dict(q_rows=64)), ("q_rows=64 dq_storer=3", 64, dict(q_rows=64, dq_storer=3)),
                ("dq_storer=2", 128, dict(dq_storer=2)), ("early_p", 128, dict(early_p=True)),
                ("early_p=False", 128, dict(early_p=False)),     # (each order: one of them the default)
                ("snake", 128, dict(snake=True))]
    for name, d, options in variants:
        for causal in (False, True):
            out[f"attention backward D{d} {name} causal={causal}"] = \
                lambda o=options, c=causal, dim=d: backward_with(o, c, dim)
    out["attention D64 fp16 3 warpgroups"] = lambda: attention(r(2, 4, 576, 64, dtype=torch.float16),
                                                             r(2, 4, 576, 64, dtype=torch.float16),
                                                             r(2, 4, 576, 64, dtype=torch.float16), causal=True)
    from tkpy.kernels import layer_norm, rms_norm

    def norm(kind, width, rows=300):     # forward and backward with weight, residual (and bias): every path's kernels
        x, res, w, b = (t.requires_grad_() for t in (r(rows, width), r(rows, width), r(width), r(width)))
        y, h = (rms_norm(x, width, w, residual=res) if kind == "rms" else layer_norm(x, width, w, b, residual=res))
        (y.float().sum() + h.float().sum()).backward()
    for width in (256, 1000, 4096, 12288):     # a warp a row, groups of warps (ragged), a block, a cluster of 2
        for kind in ("rms", "layer"):
            out[f"{kind}_norm {width} + residual, backward"] = lambda k=kind, n=width: norm(k, n)
    out["rms_norm 16384, pieces through shared memory"] = lambda: rms_norm(r(5, 16384), 16384, r(16384))
    out["layer_norm 16384 + residual, pieces through shared memory"] = lambda: layer_norm(
        r(5, 16384), 16384, r(16384), r(16384), residual=r(5, 16384))

    def norm_backward(kind, width, split, rows=37):     # the backward of a split of its own
        from tkpy.kernels import norm_launch
        x, w, dy, dres = r(rows, width), r(width), r(rows, width), r(rows, width)
        _, _, mean, rstd = norm_launch.forward(kind, x, [width], w, r(width) if kind == "layer" else None, None,
                                               1e-5, {})
        norm_launch.backward(kind, dy, dres, x, w, mean, rstd, [width], kind == "layer", split)
    for width, split in ((8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=2)),
                         (16384, dict(warps_per_row=8, rows_per_block=1, cluster=2, blocks_per_sm=2)),
                         (3000, dict(warps_per_row=2, rows_per_block=2, blocks_per_sm=4))):
        for kind in ("rms", "layer"):
            out[f"{kind}_norm {width} backward, pieces through shared memory"] = \
                lambda k=kind, n=width, o=split: norm_backward(k, n, dict(o, stage=True))
    for width, split in ((8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=2, prefetch=False, stages=0,
                                     weight_in_registers=False)),
                         (3000, dict(warps_per_row=4, rows_per_block=2, blocks_per_sm=2, prefetch=False, stages=2)),
                         (8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=1, stage=True))):
        for kind in ("rms", "layer"):                    # (each warp's weight sums in shared memory)
            out[f"{kind}_norm {width} backward, weight sums in shared memory{', staged' if 'stage' in split else ''}"] \
                = lambda k=kind, n=width, o=split: norm_backward(k, n, dict(o, sums_in_shared=True))

    def softmax_both(rows, width, dtype):      # forward and backward of a wide row's split
        x = r(rows, width, dtype=dtype).requires_grad_()
        (softmax(x) * r(rows, width, dtype=dtype)).float().sum().backward()
    for width, dtype in ((32768, torch.bfloat16), (65536, torch.bfloat16), (131072, torch.float32),
                         (262144, torch.bfloat16)):     # pieces through shared memory (x; y, dy), clusters, prefetch
        out[f"softmax wide {width} {dtype} + backward"] = lambda n=width, t=dtype: softmax_both(3, n, t)
    from tkpy.kernels import rotary

    def rope(heads_q, heads_k, head_dim, rotary_dim, interleaved, seq=37):   # forward and backward (the inverse)
        angles = torch.rand(seq + 5, rotary_dim // 2, device="cuda")
        q, k = (r(3, seq, h, head_dim).requires_grad_() for h in (heads_q, heads_k))
        q_out, k_out = rotary(q, k, angles.cos(), angles.sin(), interleaved, position_offset=5)
        (q_out.float().sum() + k_out.float().sum()).backward()
    for shape in ((32, 8, 128, 128), (4, 1, 64, 32), (6, 2, 96, 96), (5, 5, 80, 48)):   # pieces, 2 positions a warp
        for interleaved in (False, True):                                                # (ragged), groups of heads
            out[f"rotary {shape} interleaved={interleaved}, backward"] = lambda s=shape, i=interleaved: rope(*s, i)
    return out


def run_cases(only: str | None) -> int:
    import torch
    for name, call in cases().items():
        if only and not any(part in name for part in only.split(",")):
            continue
        call()
        torch.cuda.synchronize()
        print(f"ran {name}", flush=True)
    return 0


def error_count(tool: str, log: str) -> int | None:
    """The device errors a tool's log reports (None if it printed no summary: it was stopped or crashed)."""
    pattern = r"RACECHECK SUMMARY: \d+ hazards displayed \((\d+) errors" if tool == "racecheck" else \
        r"ERROR SUMMARY: (\d+) errors?$"
    found = re.findall(pattern, log, re.MULTILINE)
    return sum(int(x) for x in found) if found else None


def run_stopping_after(command: list, env: dict, seconds: float) -> tuple[str, int | None]:
    """(stdout + stderr, return code) of `command`; after `seconds` its whole process group is killed and the
    return code is None (the log then ends at the case it was in)."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        return proc.communicate(timeout=seconds)[0], proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()[0] + f"\n[stopped after {seconds:.0f} s]\n", None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--only", default=None,
                        help="run only the cases whose name contains this (or one of these, comma-separated)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per tool before it is stopped")
    parser.add_argument("--cases", action="store_true", help="(run the cases in this process: what each tool runs)")
    args = parser.parse_args()
    if args.cases:
        return run_cases(args.only)
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    env = dict(os.environ, PYTHONPATH=str(ROOT), TKPY_CACHE_DIR=tempfile.mkdtemp(prefix="tkpy-sanitize-"))
    me = [sys.executable, str(Path(__file__).resolve()), "--cases"] + (["--only", args.only] if args.only else [])
    first = subprocess.run(me, env=env, capture_output=True, text=True)       # compile everything once
    if first.returncode:
        print(f"the cases failed without a sanitizer (rc={first.returncode}):\n{(first.stdout + first.stderr)[-4000:]}")
        return 1
    report = {}
    for tool in args.tools.split(","):
        t0 = time.perf_counter()
        log, returncode = run_stopping_after(["compute-sanitizer", "--tool", tool, "--target-processes", "all",
                                              "--print-limit", "20", "--report-api-errors", "no"] + me, env, args.timeout)
        errors = error_count(tool, log)
        ran = log.count("\nran ") + log.startswith("ran ")
        report[tool] = {"errors": errors, "cases_run": ran, "returncode": returncode,
                        "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{tool:10s} errors: {errors}  cases run: {ran}  rc={returncode}  "
              f"({report[tool]['seconds']} s)", flush=True)
        if out:
            (out / f"sanitize_{tool}.log").write_text(log)
        elif errors:
            print(log[-4000:])
    if out:
        (out / "sanitize.json").write_text(json.dumps(report, indent=2))
    return 0 if all(r["errors"] == 0 and r["returncode"] == 0 for r in report.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
