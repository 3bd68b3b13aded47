"""tkpy attention backward against SDPA's cuDNN and flash backends in the same run (bf16): the backward alone and the
forward + backward.

Cases: B16 H16 N4096 at D128 and D64, B4 H16 N16384 D128, B16 H16 N1024 D128, B8 H16 N4096 D256 and GQA (H32 over 8
key/value heads) B8 N4096 D128; each non-causal and causal. FLOPs: the forward's 4 B H N^2 D (causal at half), the
backward's 2.5 times that (its five matrix products to the forward's two), forward + backward 3.5 times.

The backward alone: tkpy's attention_backward (kernels/attention_backward.py) on the forward's output and
log-sum-exp, against torch.autograd.grad of SDPA's output under each backend (its forward recorded once, on a side
stream, the graph retained); "tkpy det" is deterministic=True. Forward + backward: torch.autograd.grad of each one's
forward, on the same inputs. GPU time per call from CUDA-graph replays (benchmarks/timing.py), tkpy timed in pairs with each backend
(timing.paired_ms), the ratios from each pair; the tkpy columns are its times in the cuDNN pairs. Each row also gives
the largest relative difference of tkpy's dq, dk, dv from cuDNN's (norms). GQA: SDPA with enable_gqa where the backend
takes it, else on key/value heads repeated to the query heads (marked "kv repeated").

    PYTHONPATH=. python3 benchmarks/bench_attention_bwd.py [--only causal|noncausal]
        (--only: those cases alone, for a short call; the table on stdout; $OUT/attention_bwd.json and $OUT/attention_bwd.png when OUT is set)
    PYTHONPATH=. python3 benchmarks/bench_attention_bwd.py --compare dq_storer=1[,stages=3] [--compare ...]
        [--only ...] [--deterministic] [--dims 256]
        (tkpy's backward with those AttentionBwdConfig fields against its default, timed in pairs, and the largest
        relative difference of its gradients from the default's; several --compare: each variant in turn on each
        case's inputs, one process)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [(b, h, hkv, n, d, causal) for b, h, hkv, n, d in
         ((16, 16, 16, 4096, 128), (16, 16, 16, 4096, 64), (4, 16, 16, 16384, 128), (16, 16, 16, 1024, 128),
          (8, 16, 16, 4096, 256), (8, 32, 8, 4096, 128)) for causal in (False, True)]
BACKWARD, FORWARD_BACKWARD = 2.5, 3.5          # FLOPs relative to the forward's


def main(only: str | None = None) -> list[dict]:
    from benchmarks.bench_attention import save
    print_header()
    rows = []
    for case in CASES:                  # each row printed as it is measured
        if only and case[-1] != (only == "causal"):
            continue
        rows.append(case_row(*case))
        print_row(rows[-1], flush=True)
    out_dir = save("attention_bwd.json", rows)
    if out_dir:
        plot(rows, out_dir / "attention_bwd.png")
    return rows


def case_row(b: int, h: int, hkv: int, n: int, d: int, causal: bool) -> dict:
    """TFLOP/s of tkpy's backward (and deterministic backward) and forward + backward against SDPA's cuDNN and flash
    backends on random bf16 inputs, and the largest relative difference of tkpy's gradients from cuDNN's."""
    import torch

    from benchmarks.timing import median_ms, paired_ms
    from tkpy.kernels import attention
    from tkpy.kernels.attention_backward import attention_backward

    q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    k, v = (torch.randn(b, hkv, n, d, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(2))
    do = torch.randn_like(q)
    forward = 4 * b * h * n * n * d / (2 if causal else 1)
    with torch.no_grad():
        o, lse = attention(q, k, v, causal=causal, return_lse=True)
    ours = attention_backward(do, q, k, v, o, lse, causal)
    tkpy_bwd = lambda: attention_backward(do, q, k, v, o, lse, causal)  # noqa: E731
    tkpy_det = lambda: attention_backward(do, q, k, v, o, lse, causal, deterministic=True)  # noqa: E731
    tkpy_both = lambda: torch.autograd.grad(attention(q, k, v, causal=causal), (q, k, v), do)  # noqa: E731
    row = {"b": b, "h": h, "hkv": hkv, "n": n, "d": d, "causal": causal,
           "tkpy_det": BACKWARD * forward / median_ms(tkpy_det) / 1e9}
    for name in ("cudnn", "flash"):
        try:
            sdpa, note = baseline(name, q, k, v, causal)
            out = forward_on_side_stream(sdpa)
            theirs_bwd = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)  # noqa: E731
            theirs_both = lambda: torch.autograd.grad(sdpa(), (q, k, v), do)  # noqa: E731
            reference = theirs_bwd()
            t_ours, t_theirs = paired_ms(tkpy_bwd, theirs_bwd)
        except RuntimeError as e:           # a backend that does not take this case
            print(f"  {name} unavailable for B{b} H{h}/{hkv} N{n} D{d} causal={causal}: {str(e).splitlines()[0]}")
            continue
        row[name], row[f"vs_{name}"] = BACKWARD * forward / t_theirs / 1e9, t_theirs / t_ours
        row[f"{name}_note"] = note
        if name == "cudnn":
            row["tkpy"] = BACKWARD * forward / t_ours / 1e9
            row["diff_vs_cudnn"] = max(((x.float() - y.float()).norm() / y.float().norm()).item()
                                       for x, y in zip(ours, reference))
        try:
            t_ours_both, t_theirs_both = paired_ms(tkpy_both, theirs_both)
        except RuntimeError as e:
            print(f"  forward + backward against {name} failed: {str(e).splitlines()[0]}")
            continue
        row[f"{name}_both"] = FORWARD_BACKWARD * forward / t_theirs_both / 1e9
        row[f"vs_{name}_both"] = t_theirs_both / t_ours_both
        if name == "cudnn":
            row["tkpy_both"] = FORWARD_BACKWARD * forward / t_ours_both / 1e9
    for key in ("cudnn", "flash", "vs_cudnn", "vs_flash", "cudnn_both", "flash_both", "vs_cudnn_both",
                "vs_flash_both"):
        row.setdefault(key, float("nan"))
    row.setdefault("tkpy", BACKWARD * forward / median_ms(tkpy_bwd) / 1e9)
    if "tkpy_both" not in row:
        try:
            row["tkpy_both"] = FORWARD_BACKWARD * forward / median_ms(tkpy_both) / 1e9
        except RuntimeError as e:
            print(f"  tkpy forward + backward failed: {str(e).splitlines()[0]}")
            row["tkpy_both"] = float("nan")
    del q, k, v, do, o, lse, ours
    torch.cuda.empty_cache()
    return row


def compare(variants: list[dict], only: str | None = None, deterministic: bool = False, dims=None) -> list[dict]:
    """TFLOP/s of tkpy's backward with each of `variants` (AttentionBwdConfig fields) against its default on each case
    (of head dims `dims` where given), timed in pairs (timing.paired_ms), and the variant's largest relative
    difference from the default's gradients; both deterministic=True where asked (the dQ pass's)."""
    import math

    import torch

    from benchmarks.timing import paired_ms
    from tkpy.errors import TraceError
    from tkpy.kernels import attention
    from tkpy.kernels.attention_backward import _launch
    from tkpy.kernels.attention_forward import causal_variant
    print(f"{'case':>28} | {'default':>8} {'variant':>8} {'ratio':>6} | {'diff':>7}   (TFLOP/s; variants: "
          f"{', '.join(map(str, variants))}{', deterministic' if deterministic else ''})")
    rows = []
    for b, h, hkv, n, d, causal in CASES:
        if only and causal != (only == "causal") or dims and d not in dims:
            continue
        q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(b, hkv, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        do = torch.randn_like(q)
        with torch.no_grad():
            o, lse = attention(q, k, v, causal=causal, return_lse=True)
        grads = {name: tuple(torch.empty_like(x) for x in (q, k, v)) for name in ("default", "variant")}

        def run(name, opts):
            return lambda: _launch(do, q, k, v, o, lse, *grads[name], causal_variant(causal), 1 / math.sqrt(d),
                                   deterministic, options=opts)
        case = f"B{b} H{h}/{hkv} N{n} D{d}{' causal' if causal else ''}"
        for options in variants:
            label = case if len(variants) == 1 else f"{case} {','.join(f'{f}={x}' for f, x in options.items())}"
            try:
                t_default, t_variant = paired_ms(run("default", None), run("variant", options))
            except (ValueError, TraceError) as refused:         # (a variant a case's kernels cannot take)
                print(f"{label:>28} | refused: {str(refused).splitlines()[0]}", flush=True)
                continue
            diff = max(((x.float() - y.float()).norm() / y.float().norm()).item()
                       for x, y in zip(grads["variant"], grads["default"]))
            flops = BACKWARD * 4 * b * h * n * n * d / (2 if causal else 1)
            row = dict(b=b, h=h, hkv=hkv, n=n, d=d, causal=causal, variant_options=options,
                       default=flops / t_default / 1e9, variant=flops / t_variant / 1e9, ratio=t_default / t_variant,
                       diff=diff)
            rows.append(row)
            print(f"{label:>28} | {row['default']:>8.1f} {row['variant']:>8.1f} {row['ratio']:>6.3f} | "
                  f"{diff:>7.1e}", flush=True)
        del q, k, v, do, o, lse, grads
        torch.cuda.empty_cache()
    return rows


def forward_on_side_stream(forward):
    """forward()'s output, recorded on a stream of its own: its backward nodes then run on that stream, which a
    CUDA-graph capture can fork into and join (recorded on the default stream, the backward's launches there would
    break the capture: "operation would make the legacy stream depend on a capturing blocking stream")."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = forward()
    torch.cuda.current_stream().wait_stream(side)
    return out


def baseline(name: str, q, k, v, causal: bool):
    """(SDPA's forward under backend `name` as a function, a note): with enable_gqa for fewer key/value heads where
    the backend takes it, else on k and v repeated to q's heads ("kv repeated")."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]

    def sdpa(kk=k, vv=v, gqa=k.shape[1] != q.shape[1]):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)
    if k.shape[1] == q.shape[1]:
        return sdpa, ""
    try:
        sdpa()
        return sdpa, "enable_gqa"
    except RuntimeError:
        group = q.shape[1] // k.shape[1]
        return (lambda: sdpa(k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), False)), "kv repeated"


def print_header() -> None:
    print(f"{'B H/HKV N D':>20} {'causal':>6} | {'tkpy':>5} {'det':>5} {'cuDNN':>5} {'flash':>5} {'xcuDNN':>6} "
          f"{'xflash':>6} | {'tkpy':>5} {'cuDNN':>5} {'flash':>5} {'xcuDNN':>6} {'xflash':>6} | {'diff':>7}")
    print(f"{'':>29}   backward (TFLOP/s, 2.5x fwd)        | forward + backward (3.5x fwd)")


def print_row(r: dict, flush: bool = False) -> None:
    print(f"{r['b']:>3} {r['h']:>3}/{r['hkv']:<3} {r['n']:>5} {r['d']:>4} {'yes' if r['causal'] else 'no':>6} | "
              f"{r['tkpy']:>5.0f} {r['tkpy_det']:>5.0f} {r['cudnn']:>5.0f} {r['flash']:>5.0f} {r['vs_cudnn']:>6.2f} "
              f"{r['vs_flash']:>6.2f} | {r['tkpy_both']:>5.0f} {r['cudnn_both']:>5.0f} {r['flash_both']:>5.0f} "
              f"{r['vs_cudnn_both']:>6.2f} {r['vs_flash_both']:>6.2f} | {r.get('diff_vs_cudnn', float('nan')):>7.1e}"
              + ("  (GQA baselines: " + ", ".join(f"{n} {r[f'{n}_note']}" for n in ("cudnn", "flash")
                                                   if r.get(f"{n}_note")) + ")" if r["hkv"] != r["h"] else ""), flush=flush)


def plot(rows: list[dict], path: Path) -> None:
    """Grouped bars of TFLOP/s per case (tkpy, cuDNN, flash): the backward above, forward + backward below; skipped
    without matplotlib."""
    from benchmarks.plotting import pyplot
    plt = pyplot("attention_bwd.png")
    if plt is None:
        return
    labels = [f"B{r['b']} H{r['h']}/{r['hkv']}\nN{r['n']} D{r['d']}\n{'causal' if r['causal'] else 'full'}"
              for r in rows]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.3 * len(rows)), 8))
    width = 0.27
    for ax, suffix, title in ((axes[0], "", "backward (2.5x the forward's FLOPs)"),
                              (axes[1], "_both", "forward + backward (3.5x)")):
        for i, (key, name) in enumerate((("tkpy", "tkpy"), ("cudnn", "SDPA cuDNN"), ("flash", "SDPA flash"))):
            ax.bar([j + (i - 1) * width for j in range(len(rows))], [r[key + suffix] for r in rows], width, label=name)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("TFLOP/s (causal at half)")
        ax.set_title(f"Attention {title}, bf16, H200")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("causal", "noncausal"), default=None)
    parser.add_argument("--compare", action="append", default=None,
                        help="FIELD=INT[,FIELD=INT]: AttentionBwdConfig fields against the default (several: each)")
    parser.add_argument("--deterministic", action="store_true", help="--compare: both deterministic=True")
    parser.add_argument("--dims", default=None, help="--compare: the cases of these head dims alone (e.g. 256)")
    a = parser.parse_args()
    if a.compare:
        compare([{f: int(x) for f, x in (kv.split("=") for kv in variant.split(","))} for variant in a.compare],
                a.only, a.deterministic, a.dims and {int(x) for x in a.dims.split(",")})
    else:
        main(a.only)
