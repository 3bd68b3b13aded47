"""tkpy attention forward against SDPA's cuDNN and flash backends in the same run (bf16; --fp16 the same cases in fp16).

Cases: B16 H16 N4096 and B4 H16 N16384 at head dims 64 and 128, plus a short-sequence B16 H16 N1024
D128; each non-causal and causal (causal counted at half the FLOPs: 4 B H N^2 D / 2). Each row also
gives the relative difference between tkpy's and cuDNN's outputs. A second table times variants of
tkpy's kernel at B16 H16 N4096, to pick the defaults from: the default, and (OTHER_CONFIGS) consumer
warpgroups taking turns (ping-pong) or each step's softmax overlapping the previous step's P V product
(overlap) alone, other key/value tile heights, stage counts, consumer warpgroups and K/V rings.

Times are GPU time per call from CUDA-graph replays (benchmarks/timing.py): a graph of back-to-back
calls is replayed between CUDA events, so the host's launch work is not timed, for tkpy and SDPA alike.
tkpy is timed in pairs with each backend (timing.paired_ms: tkpy, SDPA, SDPA, tkpy), the ratios from each
pair; the tkpy column is its time in the cuDNN pair.

    PYTHONPATH=. python3 benchmarks/bench_attention.py [--no-variants]
                  (tables on stdout; $OUT/attention.json and $OUT/attention.png when OUT is set)
    PYTHONPATH=. python3 benchmarks/bench_attention.py --split | --decode | --dims | --fp16 | --sweep
                  (split-K on few query tiles over many keys; decoding shapes with GQA; other head dims:
                   D80, D96, D160, D192, D256; the main cases in fp16; sequence lengths from 256 to 32768)
    PYTHONPATH=. python3 benchmarks/bench_attention.py --compare ROUNDS NAME [NAME ...] [--short | --sweep] [--dim D]
                  (VARIANTS named, e.g. default "splitkv 3wg", against cuDNN on every case, interleaved:
                   each round times each of them once per case; medians and spread of the ratios to cuDNN;
                   $OUT/attention_compare.json; on CASES, or --short: SHORT_CASES, sequences of 128-1024 rows,
                   --sweep: SWEEP_CASES; --dim D: only the cases at head dim D)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
import tkpy.kernels as tkpy_kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(16, 16, 4096, 128), (16, 16, 4096, 64), (4, 16, 16384, 128), (4, 16, 16384, 64), (16, 16, 1024, 128)]
CASES = [(b, h, n, d, causal) for b, h, n, d in SHAPES for causal in (False, True)]
# Sequence lengths from 256 to 32768 (odd ones among them), 32768 query rows a batch (B = 32768 / N), H16 (--sweep)
SWEEP_LENGTHS = (256, 512, 1000, 1024, 2048, 3000, 4096, 8192, 16384, 32768)
SWEEP_CASES = [(max(1, 32768 // n), 16, n, d, causal) for d in (128, 64) for n in SWEEP_LENGTHS
               for causal in (False, True)]
# Short sequences, where tasks have few key tiles (--compare ... --short): D64 0.78-0.95x cuDNN at N256-512 in run 218
SHORT_CASES = [(32768 // n, 16, n, d, causal) for d in (64, 128) for n in (128, 256, 384, 512, 1024)
               for causal in (False, True)]
# Head dims other than the 64 and 128: between the tuned ones, which take the next tuned one's settings, and
# D256 (--dims)
OTHER_DIM_CASES = [(16, 16, 4096, d, causal) for d in (80, 96, 160, 192, 256) for causal in (False, True)]


def main(variants: bool | None = None) -> list[dict]:
    """The issue's cases against cuDNN and flash (and, unless `variants` is False or --no-variants is given, the
    variant table); returns the cases' rows."""
    rows = [case_row(*case) for case in CASES]
    print_rows(rows)
    if variants is None:
        variants = "--no-variants" not in sys.argv
    variant_rows = variant_table() if variants else []
    out_dir = save("attention.json", {"cases": rows, "variants": variant_rows})
    if out_dir:
        plot(rows, out_dir / "attention.png")
    return rows


def other_dims_table() -> list[dict]:
    """OTHER_DIM_CASES (head dims other than 64 and 128) against cuDNN and flash, as main's table."""
    return case_table(OTHER_DIM_CASES, "other head dims (tkpy.kernels.attention_forward.tuned, wide_kv)", "attention_dims.json")


def sweep_table() -> list[dict]:
    """SWEEP_CASES (sequence lengths from 256 to 32768, 32768 query rows each) against cuDNN and flash."""
    return case_table(SWEEP_CASES, "sequence lengths (B = 32768 / N, H16)", "attention_sweep.json")


def fp16_table() -> list[dict]:
    """CASES in fp16 against cuDNN and flash."""
    return case_table(CASES, "fp16", "attention_fp16.json", dtype="fp16")


def case_table(cases: list, title: str, saved_as: str, dtype: str = "bf16") -> list[dict]:
    """case_row of each of `cases`, printed as main's table under `title` and saved as $OUT/`saved_as`."""
    rows = [case_row(*case, dtype=dtype) for case in cases]
    print(f"\n{title}:")
    print_rows(rows)
    save(saved_as, rows)
    return rows


def case_row(b: int, h: int, n: int, d: int, causal: bool, dtype: str = "bf16") -> dict:
    """TFLOP/s of attention() and of SDPA's cuDNN and flash backends on random (b, h, n, d) inputs of `dtype` ("bf16"
    or "fp16"), tkpy timed in pairs with each (timing.paired_ms), and the relative difference of its output from
    cuDNN's."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.timing import median_ms, paired_ms
    from tkpy.kernels import attention
    element = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q, k, v = (torch.randn(b, h, n, d, dtype=element, device="cuda") for _ in range(3))
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    out = attention(q, k, v, causal=causal)
    ours = lambda: attention(q, k, v, causal=causal)  # noqa: E731
    row = {"b": b, "h": h, "n": n, "d": d, "causal": causal, "dtype": dtype}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        try:
            with sdpa_kernel(backend):
                ref = fn()
                t_ours, t_theirs = paired_ms(ours, fn)            # tkpy timed against each, in pairs
            row[name], row[f"vs_{name}"] = flops / t_theirs / 1e9, t_theirs / t_ours
            if name == "cudnn":
                row["tkpy"] = flops / t_ours / 1e9
        except RuntimeError as e:          # a backend that does not take this case
            print(f"  {name} unavailable for B{b} H{h} N{n} D{d} causal={causal}: {str(e).splitlines()[0]}")
            row[name], row[f"vs_{name}"], ref = float("nan"), float("nan"), None
        if name == "cudnn" and ref is not None:
            row["diff_vs_cudnn"] = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    row.setdefault("tkpy", flops / median_ms(ours) / 1e9)
    del q, k, v, out
    torch.cuda.empty_cache()
    return row


def print_rows(rows: list[dict]) -> None:
    print(f"{'B H N D':>18} {'causal':>6} {'tkpy':>6} {'cuDNN':>6} {'flash':>6} {'vs cuDNN':>9} {'vs flash':>9} "
          f"{'diff':>8}  (TFLOP/s; causal at half the FLOPs)")
    for r in rows:
        print(f"{r['b']:>3} {r['h']:>3} {r['n']:>6} {r['d']:>4} {'yes' if r['causal'] else 'no':>6} {r['tkpy']:>6.0f} "
              f"{r['cudnn']:>6.0f} {r['flash']:>6.0f} {r['vs_cudnn']:>9.2f} {r['vs_flash']:>9.2f} "
              f"{r.get('diff_vs_cudnn', float('nan')):>8.1e}")


# Other configurations: per head dim where they apply, keyword options of _launch. The default (attention()'s
# choice for these shapes) is D128: 2 consumer warpgroups, one ring of 128-row K/V tiles in 3 stages; D64: 3
# consumer warpgroups (192 query rows per task, FlashAttention-3's choice at D64) with split K/V rings of 128-row
# tiles in 4 + 4 stages (RESULTS.md run 41). "2wg" is D64's previous default (2 warpgroups, one ring of 160-row
# tiles in 4 stages), with its ping-pong / overlap alone, 128-row tiles and 5 stages. D128 in 96-row tiles fits 4
# stages (further ahead). 3 consumer warpgroups with one ring (CONFIGS_3WG: D64 96-row tiles, D128 64: NVRTC
# 13.0's ptxas serializes taller ones). Split K/V rings with 2 warpgroups (CONFIGS_SPLIT: D128 176-row tiles in
# 2 K + 2 V stages, still a step ahead; D64 192 rows in 4 + 4; D128 128 rows in 3 + 3, the default's tiles and
# memory, and 2 + 3), and with 3 (CONFIGS_SPLIT_3WG: D128 80 rows in 4 + 4; D64 in 5 + 5; without turns).
# q_ahead (a second query tile per warpgroup, the next task's Q loading while a task runs) where it fits: the
# default D64 kernels, D128 in 96-row tiles (3 stages) or split rings of 128-row tiles in 2 + 3 stages.
# "with lse":
# the kernel that also stores the log-sum-exp (attention(return_lse=True)); the others compute none, as attention().
# "max first": every step's row max before its exponentials (stale_shift=False; the default's steps use the running
# shift and are redone where it falls behind by the slack). "c division": the task loops' index math by C++'s
# division (fast_division=False), not by divisors made once.
TWO, THREE, SPLIT = dict(consumer_warpgroups=2), dict(consumer_warpgroups=3), dict(split_kv=True)
OTHER_CONFIGS = {"2wg": {64: TWO}, "2wg pingpong only": {64: dict(TWO, overlap=False)},
                 "2wg overlap only": {64: dict(TWO, pingpong=False)},
                 "pingpong only": {128: dict(overlap=False)}, "overlap only": {128: dict(pingpong=False)},
                 "2wg kv128": {64: dict(TWO, kv=128)}, "2wg 5 stages": {64: dict(TWO, stages=5)},
                 "kv96 4 stages": {128: dict(stages=4, kv=96)},
                 "3wg": {d: dict(THREE, split_kv=False) for d in (64, 128)},
                 "splitkv": {d: dict(TWO, **SPLIT) for d in (64, 128)},
                 "splitkv128 3+3": {128: dict(SPLIT, kv=128, stages=3, late_stages=3)},
                 "splitkv128 2+3": {128: dict(SPLIT, kv=128, stages=2, late_stages=3)},
                 "splitkv144 qregs": {128: dict(SPLIT, kv=144, stages=2, late_stages=3, q_registers=True)},
                 "splitkv160": {128: dict(SPLIT, kv=160, stages=2, late_stages=2)},
                 "qahead splitkv160": {128: dict(SPLIT, kv=160, stages=2, late_stages=2, q_ahead=True)},
                 "splitkv 3wg": {d: dict(THREE, **SPLIT) for d in (64, 128)},
                 "splitkv 3wg 5+5": {64: dict(THREE, stages=5, late_stages=5, **SPLIT)},
                 "splitkv 3wg no turns": {d: dict(THREE, pingpong=False, **SPLIT) for d in (64, 128)},
                 "lockstep": {d: dict(pingpong=False) for d in (64, 128)},
                 "q load at start": {64: dict(next_q_in_step=False)},
                 "c division": {d: dict(fast_division=False) for d in (64, 128)},
                 "max first": {d: dict(stale_shift=False) for d in (64, 128)},
                 "qahead": {64: dict(q_ahead=True)},
                 "2wg qahead": {64: dict(TWO, q_ahead=True)},
                 "2wg kv128 qahead": {64: dict(TWO, kv=128, q_ahead=True)},
                 "1wg qahead": {64: dict(consumer_warpgroups=1, q_ahead=True)},
                 "qahead kv96": {128: dict(kv=96, q_ahead=True)},
                 "qahead splitkv128 2+3": {128: dict(SPLIT, kv=128, stages=2, late_stages=3, q_ahead=True)},
                 "q registers": {64: dict(TWO, q_registers=True)}, "q shared": {128: dict(q_registers=False)},
                 "no q preload": {128: dict(q_preload=False)},
                 "pad last": {d: dict(pad_first=False) for d in (64, 128)},
                 "cluster2": {d: dict(cluster=2) for d in (64, 128)},
                 "no cluster": {d: dict(cluster=1) for d in (64, 128)},
                 "no split": {d: dict(splits=1) for d in (64, 128)},
                 "with lse": {d: dict(lse=True) for d in (64, 128)},
                 "whole last tile": {d: dict(last_kv=None) for d in (64, 128)},
                 "no skips": {d: dict(skip_masked=False) for d in (64, 128)},
                 "skips": {128: dict(skip_masked=True)}}
VARIANTS = {  # name -> keyword options of tkpy.kernels.attention_forward._launch (attention()'s choices where not given)
    "default": {}, **{name: dict(config=config) for name, config in OTHER_CONFIGS.items()}}


def variant_table() -> list[dict]:
    """tkpy's kernel with and without ping-pong or intra-warpgroup overlap, and other key/value tile heights,
    stage counts, consumer warpgroups and split K/V rings (OTHER_CONFIGS; a head dim they do not name shows nan)."""
    import torch

    from benchmarks.timing import median_ms
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    b, h, n = 16, 16, 4096
    rows = []
    for d in (128, 64):
        for causal in (False, True):
            q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            o = torch.empty_like(q)
            lse = torch.empty(b, h, max(policy.lse_rows(n, w) for w in (2, 3)), dtype=torch.float32, device="cuda")
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            row = {"b": b, "h": h, "n": n, "d": d, "causal": causal}
            for name in VARIANTS:
                options, buffer = launch_options(name, d, lse)
                if not runnable((q, k, v, o, buffer, causal, None), options):
                    row[name] = float("nan")
                    continue
                fn = lambda: att._launch(q, k, v, o, buffer, causal, None, **options)  # noqa: E731
                row[name] = flops / median_ms(fn) / 1e9
            rows.append(row)
            del q, k, v, o
    print(f"\ntkpy variants, B{b} H{h} N{n} (TFLOP/s; default: attention()'s choice, see OTHER_CONFIGS)")
    w = max(map(len, VARIANTS))
    print(f"{'D':>4} {'causal':>6} " + " ".join(f"{k:>{w}}" for k in VARIANTS))
    for r in rows:
        print(f"{r['d']:>4} {'yes' if r['causal'] else 'no':>6} " + " ".join(f"{r[k]:>{w}.0f}" for k in VARIANTS))
    return rows


def launch_options(name: str, d: int, lse) -> tuple[dict | None, object]:
    """Keyword options of tkpy.kernels.attention_forward._launch for VARIANTS[name] at head dim d (None: not for this d), and
    its log-sum-exp buffer: `lse` for a variant with lse=True, otherwise None (as attention() without
    return_lse)."""
    options = dict(VARIANTS[name])
    config = options.pop("config", None)
    if config is not None and d not in config:
        return None, None
    options.update((config or {}).get(d, {}))
    return options, lse if options.pop("lse", False) else None


def runnable(launch_args: tuple, options: dict | None) -> bool:
    """Whether tkpy.kernels.attention_forward._launch(*launch_args, **options) would run: options for this head dim that the
    kernel does not refuse for this case (e.g. cluster pairs on an odd number of query tiles) and whose tiles fit
    (traced: e.g. stages that leave the query tile no shared memory)."""
    from tkpy.kernels import attention_forward as att
    from tkpy.errors import ArgumentError, TraceError
    if options is None:
        return False
    try:
        prepared = att._prepared(*launch_args, **options)
        if prepared is not None:
            prepared[0].grid(*prepared[1])
            prepared[0].kernel.trace(*prepared[1])
    except (ValueError, ArgumentError, TraceError):
        return False
    return True


def compare_arguments(args: list[str]) -> tuple[list[str], list]:
    """--compare's variant names and cases from the arguments after ROUNDS (see the module's docstring)."""
    cases = SHORT_CASES if "--short" in args else SWEEP_CASES if "--sweep" in args else CASES
    if "--dim" in args:
        at = args.index("--dim")
        dim = int(args[at + 1])
        cases, args = [case for case in cases if case[3] == dim], args[:at] + args[at + 2:]
    return [a for a in args if a not in ("--short", "--sweep")], cases


def compare(names: list[str], rounds: int, cases: list | None = None,
            saved_as: str = "attention_compare.json") -> list[dict]:
    """Variants against cuDNN on every case (of CASES, or `cases`) in `rounds` interleaved rounds (a round times
    each variant and cuDNN once per case, in timing.balanced_orders: with rounds a multiple of its orders, each
    follows every other equally often), so a slow stretch of the GPU touches all of them alike; prints the
    median ratio to cuDNN and the lowest and highest of the rounds (the rows also go to $OUT/`saved_as`)."""
    import statistics

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.timing import balanced_orders, median_ms
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    rows = []
    for b, h, n, d, causal in cases or CASES:
        q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(b, h, max(policy.lse_rows(n, w) for w in (2, 3)), dtype=torch.float32, device="cuda")
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        fns = {"cudnn": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
        for name in names:
            options, buffer = launch_options(name, d, lse)
            if runnable((q, k, v, o, buffer, causal, None), options):
                fns[name] = lambda options=options, buffer=buffer: att._launch(q, k, v, o, buffer, causal, None,
                                                                               **options)
        times = {name: [] for name in fns}
        names_here, orders = list(fns), balanced_orders(len(fns))
        for round_ in range(rounds):           # each round in another order: the one timed after another gains
            for name in (names_here[i] for i in orders[round_ % len(orders)]):
                fn = fns[name]
                if name == "cudnn":
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        times[name].append(median_ms(fn))
                else:
                    times[name].append(median_ms(fn))
        row = {"b": b, "h": h, "n": n, "d": d, "causal": causal,
               "cudnn": flops / statistics.median(times["cudnn"]) / 1e9}
        for name in names:
            if name not in times:
                row[name] = row[name + " spread"] = None
                continue
            ratios = sorted(c / t for c, t in zip(times["cudnn"], times[name]))
            row[name] = statistics.median(ratios)
            row[name + " spread"] = (ratios[0], ratios[-1])
        rows.append(row)
        del q, k, v, o
        torch.cuda.empty_cache()
    print(f"\nvs cuDNN, median of {rounds} interleaved rounds [lowest, highest]")
    print(f"{'B H N D':>18} {'causal':>6} {'cuDNN':>6} " + " ".join(f"{name:>22}" for name in names))
    for r in rows:
        cells = [f"{r[name]:.3f} [{r[name + ' spread'][0]:.2f}, {r[name + ' spread'][1]:.2f}]"
                 if r[name] is not None else "-" for name in names]
        print(f"{r['b']:>3} {r['h']:>3} {r['n']:>6} {r['d']:>4} {'yes' if r['causal'] else 'no':>6} "
              f"{r['cudnn']:>6.0f} " + " ".join(f"{c:>22}" for c in cells))
    save(saved_as, rows)
    return rows


def save(name: str, data) -> Path | None:
    """Write `data` as JSON to $OUT/`name` when OUT is set; the folder, or None."""
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out_dir:
        (out_dir / name).write_text(json.dumps(data, indent=2))
    return out_dir


def plot(rows: list[dict], path: Path) -> None:
    """Grouped bars of TFLOP/s per case (tkpy, cuDNN, flash); skipped without matplotlib."""
    from benchmarks.plotting import pyplot
    plt = pyplot("attention.png")
    if plt is None:
        return
    labels = [f"B{r['b']} H{r['h']}\nN{r['n']} D{r['d']}\n{'causal' if r['causal'] else 'full'}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(rows)), 4.5))
    width = 0.27
    for i, (key, name) in enumerate((("tkpy", "tkpy"), ("cudnn", "SDPA cuDNN"), ("flash", "SDPA flash"))):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ax.bar(xs, [r[key] for r in rows], width, label=name)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("TFLOP/s (causal at half the FLOPs)")
    ax.set_title("Attention forward, bf16, H200")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


# Few query tiles over many keys (decode-like chunks, short prompts on long caches): (b, h, kv heads, n, keys, d,
# causal, consumer warpgroups), shapes whose query tiles fill few SMs
SPLIT_CASES = [(1, 32, 32, 128, 16384, 128, False, 2), (4, 32, 32, 128, 8192, 128, False, 2),
               (1, 16, 16, 512, 32768, 128, False, 2), (2, 32, 32, 64, 16384, 64, False, 2),
               (1, 8, 8, 1024, 65536, 64, False, 2), (1, 32, 8, 128, 16384, 128, False, 2),
               (1, 32, 32, 128, 16384, 128, "bottom_right", 2), (2, 32, 8, 64, 16384, 64, "bottom_right", 2),
               (1, 16, 16, 128, 16384, 256, False, 2), (1, 8, 8, 1024, 65536, 64, False, 3),
               (2, 16, 16, 192, 16384, 64, False, 3)]


def visible_pairs(n: int, nk: int, causal) -> int:
    """(query, key) pairs a head computes: all of them, or bottom-right causal's (query i sees keys j <= i + nk - n)."""
    if causal != "bottom_right":
        return n * nk
    return sum(max(0, min(nk, i + nk - n + 1)) for i in range(n))


def lower_right_flash(q, k, v):
    """SDPA with torch's causal_lower_right bias (bottom-right causal, which the cuDNN backend does not take: its
    flash kernel), on k and v repeated to q's heads."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    kk, vv = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
    mask = causal_lower_right(q.shape[2], k.shape[2])
    return lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)


def interleaved_tflops(fns: dict, rounds: int, flops: float) -> dict:
    """TFLOP/s of each of `fns` from the median of `rounds` rounds, each round timing every one once, in
    timing.balanced_orders."""
    import statistics

    from benchmarks.timing import balanced_orders, median_ms
    times = {name: [] for name in fns}
    names, orders = list(fns), balanced_orders(len(fns))
    for round_ in range(rounds):
        for name in (names[i] for i in orders[round_ % len(orders)]):
            times[name].append(median_ms(fns[name]))
    return {name: flops / statistics.median(t) / 1e9 for name, t in times.items()}


def split_table(rounds: int = 4) -> list[dict]:
    """Split-K (flash-decoding) against one task per query tile and SDPA on SPLIT_CASES: TFLOP/s, medians of
    `rounds` interleaved rounds; the splits that fill the SMs (splits_to_fill), at least 2. The peer is cuDNN, or
    for bottom-right causal (which SDPA's cuDNN backend does not take) SDPA with torch's causal_lower_right bias
    (its flash kernel)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    rows = []
    for b, h, hkv, n, nk, d, causal, groups in SPLIT_CASES:
        q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(b, hkv, nk, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        o = torch.empty_like(q)
        tasks = b * h * att.cdiv(n, policy.q_rows(groups))
        split_kv = policy.split_kv_for(nk, d, groups, causal is not False)      # (the key tiles attention() takes)
        kv = (policy.stream_tiles(q, k, groups, split_kv) or policy.default_tiles(d, groups, split_kv))[0]
        splits = max(2, policy.splits_to_fill(tasks, nk, kv, att.multiprocessors(q)))
        if causal == "bottom_right":
            peer = lower_right_flash(q, k, v)
        else:
            def peer():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != h)
        options = dict(consumer_warpgroups=groups)
        fns = {"peer": peer,
               "tkpy": lambda: att._launch(q, k, v, o, None, causal, None, splits=1, **options),
               "split": lambda: att._launch(q, k, v, o, None, causal, None, splits=splits, **options)}
        row = dict(b=b, h=h, hkv=hkv, n=n, nk=nk, d=d, causal=causal, groups=groups, splits=splits,
                   peer_name="flash (lower-right)" if causal == "bottom_right" else "cuDNN",
                   **interleaved_tflops(fns, rounds, 4 * b * h * visible_pairs(n, nk, causal) * d))
        rows.append(row)
    print(f"\nsplit-K, TFLOP/s (medians of {rounds} rounds; peer: cuDNN, flash for bottom-right causal)")
    print(f"{'B H HKV N NK D':>26} {'causal':>12} {'wg':>2} {'splits':>6} {'peer':>6} {'tkpy':>6} {'split':>6} "
          f"{'split/peer':>10} {'split/tkpy':>10}")
    for r in rows:
        print(f"{r['b']:>3} {r['h']:>3} {r['hkv']:>3} {r['n']:>5} {r['nk']:>6} {r['d']:>3} {str(r['causal']):>12} "
              f"{r['groups']:>2} {r['splits']:>6} {r['peer']:>6.0f} {r['tkpy']:>6.0f} {r['split']:>6.0f} "
              f"{r['split'] / r['peer']:>10.2f} {r['split'] / r['tkpy']:>10.2f}")
    save("attention_split.json", rows)
    return rows


# (b, h, kv heads, n, keys, d, causal): decoding with grouped-query heads; non-causal (the new rows see the whole
# cache) or bottom-right causal (speculative decoding's draft rows, each seeing the cache and the drafts before it)
DECODE_CASES = [(8, 32, 8, 1, 8192, 128, False), (8, 32, 8, 16, 8192, 128, False), (1, 64, 8, 1, 32768, 128, False),
                (16, 32, 4, 4, 4096, 128, False), (4, 32, 8, 64, 16384, 64, False), (8, 16, 2, 1, 8192, 256, False),
                (8, 32, 32, 64, 4096, 128, False), (8, 32, 8, 4, 8192, 128, "bottom_right"),
                (8, 32, 8, 16, 8192, 128, "bottom_right"), (2, 32, 8, 64, 16384, 64, "bottom_right"),
                (4, 16, 4, 16, 8192, 256, "bottom_right")]


def decode_table(rounds: int = 4) -> list[dict]:
    """attention() as users call it (query heads packed per key/value head, packed_heads, consumer_warpgroups_for's
    choice, split-K) against the same without packing (2 consumer warpgroups), packed with 1 and with 2 consumer
    warpgroups, and SDPA's cuDNN and flash backends (the faster taken as the peer; a backend that refuses the case
    is left out; bottom-right causal, which the cuDNN backend does not take: SDPA with torch's causal_lower_right
    bias, its flash kernel) on DECODE_CASES: TFLOP/s, medians of `rounds` interleaved rounds."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tkpy.kernels import attention_forward as att
    rows = []
    for b, h, hkv, n, nk, d, causal in DECODE_CASES:
        q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(b, hkv, nk, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        o = torch.empty_like(q)
        group = att.packed_heads(q, hkv)
        qp, op = (x.view(b, h // group, group * n, d) for x in (q, o))
        fns = {"tkpy": lambda: tkpy_kernels.attention(q, k, v, causal),
               "unpacked": lambda: att._launch(q, k, v, o, None, causal, None, consumer_warpgroups=2),
               "1wg": lambda: att._launch(qp, k, v, op, None, causal, None, consumer_warpgroups=1, packed=group),
               "2wg": lambda: att._launch(qp, k, v, op, None, causal, None, consumer_warpgroups=2, packed=group)}
        if causal == "bottom_right":
            fns["flash"] = lower_right_flash(q, k, v)
        else:
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                def peer(backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                try:
                    peer()
                except RuntimeError:
                    continue
                fns[name] = peer
        row = dict(b=b, h=h, hkv=hkv, n=n, nk=nk, d=d, causal=causal, group=group,
                   **interleaved_tflops(fns, rounds, 4 * b * h * visible_pairs(n, nk, causal) * d))
        row["peer_name"] = max((name for name in ("cudnn", "flash") if name in row), key=row.get)
        row["peer"] = row[row["peer_name"]]
        rows.append(row)
    print(f"\ndecoding (GQA), TFLOP/s (medians of {rounds} rounds)")
    print(f"{'B H HKV N NK D':>26} {'causal':>12} {'cuDNN':>6} {'flash':>6} {'unpacked':>8} {'1wg':>6} {'2wg':>6} "
          f"{'tkpy':>6} {'tkpy/peer':>9} {'tkpy/unpacked':>13}")
    for r in rows:
        print(f"{r['b']:>3} {r['h']:>3} {r['hkv']:>3} {r['n']:>5} {r['nk']:>6} {r['d']:>3} {str(r['causal']):>12} "
              f"{r.get('cudnn', float('nan')):>6.1f} {r.get('flash', float('nan')):>6.1f} {r['unpacked']:>8.1f} "
              f"{r['1wg']:>6.1f} {r['2wg']:>6.1f} {r['tkpy']:>6.1f} {r['tkpy'] / r['peer']:>9.2f} "
              f"{r['tkpy'] / r['unpacked']:>13.2f}")
    save("attention_decode.json", rows)
    return rows


if __name__ == "__main__":
    if "--compare" in sys.argv:
        at = sys.argv.index("--compare")
        names, cases = compare_arguments(sys.argv[at + 2:])
        compare(names, int(sys.argv[at + 1]), cases)
    elif "--split" in sys.argv:
        split_table()
    elif "--decode" in sys.argv:
        decode_table()
    elif "--dims" in sys.argv:
        other_dims_table()
    elif "--fp16" in sys.argv:
        fp16_table()
    elif "--sweep" in sys.argv:
        sweep_table()
    else:
        main()
