"""Communication fused into compute on several GPUs of one host (issue 36): tkpy's fused operators against NCCL then
cuBLAS (sequential) and torch's async tensor parallelism (torch.distributed._symmetric_memory's fused ops, without
multicast), in the same run, a process per GPU.

Cases (bf16; a tensor-parallel transformer's linear layers over `world` GPUs):
- ag: column-parallel, all-gather + GEMM: x (M, 8192) sharded by rows (M / world each), a weight of N x 8192 (N =
  8192 or 28672) by its rows (N / world each); every rank computes the gathered x @ its weight shard^T,
  (M, N / world). NCCL + cuBLAS: all_gather_into_tensor then torch.matmul; torch: fused_all_gather_matmul; tkpy:
  all_gather_matmul.
- rs: row-parallel, GEMM + reduce-scatter: x (M, K) sharded by columns (K = 8192 or 28672, K / world each), a weight
  of 8192 x K by its columns; every rank gets its M / world rows of the sum, (M / world, 8192). NCCL + cuBLAS:
  torch.matmul then reduce_scatter_tensor; torch: fused_matmul_reduce_scatter; tkpy: matmul_reduce_scatter.
- ar: all-reduce of (M, 8192): NCCL all_reduce; torch: symm_mem one_shot_all_reduce (input in symmetric memory);
  tkpy: all_reduce.
M in 1024, 4096, 16384 (--full: 1024 to 16384 by powers of 2). TFLOP/s are per GPU (2 M N K / world / time); the
all-reduce's GB/s is the tensor's bytes over the time (NCCL's "algorithm bandwidth"). Times: CUDA events over 20
back-to-back calls after 3 warm-up calls, host launch costs included (the fused operators keep host-side call
counts, so they are not graph-captured), the slowest rank's mean, best of 3. Each row checks tkpy's result against
NCCL + cuBLAS's: the largest difference over the reference's largest magnitude.

    PYTHONPATH=. python3 benchmarks/bench_multi_gpu.py [--world 2 4 8] [--full] [--cases ag rs ar]
    PYTHONPATH=. torchrun --nproc-per-node 8 benchmarks/bench_multi_gpu.py [--full]      (one world: torchrun's)
        (the table on stdout from rank 0; $OUT/multi_gpu.json when OUT is set)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.multi_gpu import no_multicast, spawn, torchrun_main  # noqa: E402

HIDDEN, FFN = 8192, 28672
M_QUICK, M_FULL = (1024, 4096, 16384), (1024, 2048, 4096, 8192, 16384)
CASES = ("ag", "rs", "ar")
ITERS, WARMUP, REPEATS = 20, 3, 3
METHODS = ("nccl+cublas", "torch async-TP", "tkpy")


def timed_ms(fn) -> float:
    """The slowest rank's mean milliseconds per call of fn over ITERS back-to-back calls, best of REPEATS."""
    import torch
    import torch.distributed as dist

    for _ in range(WARMUP):
        fn()
    best = float("inf")
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ITERS):
            fn()
        end.record()
        torch.cuda.synchronize()
        mine = torch.tensor([start.elapsed_time(end) / ITERS], device="cuda")
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        best = min(best, mine.item())
    return best


def _calls(case: str, m: int, n: int, k: int, world: int, rank: int) -> tuple:
    """(the three methods' calls, each returning its result, the work per GPU: FLOPs or bytes)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    from tkpy.kernels import all_gather_matmul, all_reduce, matmul_reduce_scatter

    group = dist.group.WORLD
    name = group.group_name
    symm_mem.enable_symm_mem_for_group(name)
    torch.manual_seed(rank)

    def rand(*shape):
        return torch.randn(*shape, device="cuda").to(torch.bfloat16)

    if case == "ag":
        shard, weight = rand(m // world, k), rand(n // world, k)
        b = weight.T
        gathered = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)

        def nccl():
            dist.all_gather_into_tensor(gathered, shard)
            return gathered @ b
        return {"nccl+cublas": nccl,
                "torch async-TP": lambda: torch.ops.symm_mem.fused_all_gather_matmul(shard, [b], 0, name)[1][0],
                "tkpy": lambda: all_gather_matmul(shard, b, group)}, 2 * m * (n // world) * k
    if case == "rs":
        x, weight = rand(m, k // world), rand(n, k // world)
        b = weight.T
        out = torch.empty(m // world, n, device="cuda", dtype=torch.bfloat16)

        def nccl():
            dist.reduce_scatter_tensor(out, x @ b)
            return out
        return {"nccl+cublas": nccl,
                "torch async-TP": lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(x, b, "sum", 0, name),
                "tkpy": lambda: matmul_reduce_scatter(x, b, group)}, 2 * m * n * (k // world)
    x = rand(m, n)
    inplace = x.clone()
    symmetric = symm_mem.empty(m, n, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(symmetric, name)
    symmetric.copy_(x)

    def nccl():
        dist.all_reduce(inplace.copy_(x))
        return inplace
    return {"nccl+cublas": nccl,
            "torch async-TP": lambda: torch.ops.symm_mem.one_shot_all_reduce(symmetric, "sum", name),
            "tkpy": lambda: all_reduce(x, group)}, m * n * 2


def run(rank: int, world: int, cases: list, ms: tuple) -> list:
    """(in each process) Every case's rows: each method's time and rate, tkpy's check."""
    import torch

    rows = []
    for case in cases:
        shapes = [(n, HIDDEN) for n in (HIDDEN, FFN)] if case == "ag" else \
            [(HIDDEN, k) for k in (HIDDEN, FFN)] if case == "rs" else [(HIDDEN, 0)]
        for m in ms:
            for n, k in shapes:
                calls, work = _calls(case, m, n, k, world, rank)
                row = {"case": case, "world": world, "M": m, "N": n, "K": k}
                results = {}
                for method in METHODS:
                    try:
                        results[method] = calls[method]().clone()
                        ms_ = timed_ms(calls[method])
                        row[method] = ms_
                        row[method + " rate"] = work / ms_ / (1e9 if case != "ar" else 1e6)
                    except Exception as e:               # noqa: BLE001 - a method that cannot run this shape
                        row[method] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
                ref, ours = results.get("nccl+cublas"), results.get("tkpy")
                if ref is not None and ours is not None:
                    row["check"] = ((ours.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                rows.append(row)
                torch.cuda.empty_cache()
    return rows


def table(rows: list) -> str:
    unit = {"ag": "TFLOP/s", "rs": "TFLOP/s", "ar": "GB/s"}
    lines = ["| case | GPUs | M | N | K | " + " | ".join(f"{m} ms (rate)" for m in METHODS) +
             " | tkpy / best peer | check |", "|" + "---|" * (7 + len(METHODS))]
    for r in rows:
        cells = []
        for m in METHODS:
            v = r.get(m)
            cells.append(f"{v:.3f} ({r[m + ' rate']:.0f} {unit[r['case']]})" if isinstance(v, float) else str(v))
        peers = [r[m] for m in METHODS[:2] if isinstance(r.get(m), float)]
        ratio = f"{min(peers) / r['tkpy']:.2f}x" if peers and isinstance(r.get("tkpy"), float) else "-"
        check = f"{r['check']:.1e}" if "check" in r else "-"
        lines.append(f"| {r['case']} | {r['world']} | {r['M']} | {r['N']} | {r['K'] or '-'} | " + " | ".join(cells) +
                     f" | {ratio} | {check} |")
    return "\n".join(lines)


def main() -> None:
    no_multicast()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, nargs="*", default=None, help="GPUs per run (default: 2, 4, 8 present)")
    parser.add_argument("--full", action="store_true", help="M from 1024 to 16384 by powers of 2")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    ms = M_FULL if args.full else M_QUICK
    if "RANK" in os.environ:                               # under torchrun: its world only
        rows = torchrun_main(run, args.cases, ms)
        if int(os.environ["RANK"]) != 0:
            return
    else:
        import torch

        worlds = args.world or [w for w in (2, 4, 8) if w <= torch.cuda.device_count()]
        if not worlds:
            raise SystemExit("bench_multi_gpu needs 2 or more GPUs")
        rows = [row for w in worlds for row in spawn(w, run, args.cases, ms)[0]]
    print(table(rows))
    out = os.environ.get("OUT")
    if out:
        Path(out, "multi_gpu.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
