"""Where a step of the attention kernel spends its cycles: its timeline marks (tk.mark, tkpy/runtime/timeline.py).

The attention kernel and the LCF template carry marks (stage waits, the turn, the MMA issues and waits, the
softmax's parts); this script traces the kernel attention() runs (or the one the options name) with
TKPY_TIMELINE=1, runs it twice (the second run recorded), and prints a window of block 0's first consumer warp of
each warpgroup, then the phases between consecutive marks of the consumer warps, most cycles first, and what a switch
between tasks costs a warp (task_switches), last.

A mark costs a warp about 90 cycles (a clock read and a global store; RESULTS.md runs 74-76) and the scheduler
does not move instructions across it freely: read the phases as proportions, not exact costs.

    PYTHONPATH=. python3 benchmarks/attention_timeline.py [B H N D] [--causal] [--backward] [key=value ...]
        (default 16 16 4096 128; key=value: options of tkpy.kernels.attention_forward._launch, e.g. q_preload=True,
        or with --backward of the backward's main kernel, AttentionBwdConfig's fields, e.g. stages=1)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(b: int, h: int, n: int, d: int, causal: bool = False, **options) -> dict:
    """Records of the kernel attention() runs (or the one tkpy.kernels.attention_forward._launch's `options` name), its consumer
    warps: {(block, warp): [(cycle, label), ...]}."""
    import torch

    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    from tkpy.runtime import timeline
    os.environ[timeline.ENV] = "1"      # before the kernel is traced (a process that traced it before: no marks)
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, policy.lse_rows(n, 3), device="cuda")
    template, args = att._prepared(q, k, v, o, lse, causal, None, **options)   # attention()'s, or the options'
    return consumer_records(template, lambda: template(*args))


def consumer_records(template, launch) -> dict:
    """The marks of `template`'s kernel's consumer warps in the second of two launch() calls (the first: warm-up)."""
    import torch

    from tkpy.runtime import timeline
    launch()
    timeline.reset(template.kernel)
    launch()
    torch.cuda.synchronize()
    consumers = 4 * template.consumers
    return {key: marks for key, marks in timeline.records(template.kernel).items() if key[1] < consumers}


def run_backward(b: int, h: int, n: int, d: int, causal: bool = False, **options) -> dict:
    """Records of the backward's main kernel (kernels/attention_bwd_kernel.py) for attention_backward's config, with
    AttentionBwdConfig fields `options` over it, its consumer warps: {(block, warp): [(cycle, label), ...]}."""
    import torch

    from tkpy.kernels import attention, attention_backward as bwd
    from tkpy.kernels.attention_bwd_config import AttentionBwdConfig
    from tkpy.kernels.attention_bwd_kernel import _attention_bwd
    from tkpy.kernels.attention_bwd_policy import native_dim
    from tkpy.kernels.attention_config import DTYPES
    from tkpy.runtime import timeline
    os.environ[timeline.ENV] = "1"
    q, k, v, grad = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(4))
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    template = _attention_bwd(AttentionBwdConfig(native_dim(d), DTYPES[q.dtype], causal, False, **options))
    variant = "top_left" if causal else None
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    return consumer_records(template, lambda: bwd._launch(grad, q, k, v, out, lse, dq, dk, dv, variant, d ** -0.5,
                                                          options=options))


def parse(argv: list[str]) -> tuple[list[int], bool, dict]:
    """[B H N D] [--causal] [--backward] [key=value ...] -> (shape, causal, options)."""
    from benchmarks.profile_cases import attention_option
    options = dict(attention_option(x) for x in argv if "=" in x)
    shape = [int(x) for x in argv if not x.startswith("--") and "=" not in x] or [16, 16, 4096, 128]
    return shape, "--causal" in argv, options


def task_switches(recs: dict) -> str:
    """What a task switch costs a warp: the span from a task's last step's end ("step: computed" before "task
    finish") to the end of the next task's first step, against a step's span mid-task (one "step: computed" to
    the next within a task), and the switch's phases in order (medians). The difference is what a task's switch
    adds to its steps: the last P V's wait, the finish, the start and the first step without a P V to overlap."""
    import statistics

    switch_spans, step_spans, phases = [], [], {}
    for marks in recs.values():
        ends = [i for i, (_, label) in enumerate(marks) if label == "step: computed"]
        for i, j in zip(ends, ends[1:]):
            between = [label for _, label in marks[i + 1:j]]
            span = marks[j][0] - marks[i][0]
            if "task finish" not in between:
                step_spans.append(span)
            elif between.count("task finish") == 1 and "task start" in between:
                switch_spans.append(span)
                for (c0, a), (c1, b) in zip(marks[i:j], marks[i + 1:j + 1]):
                    phases.setdefault((a, b), []).append(c1 - c0)
    if not switch_spans or not step_spans:
        return "task switches: none recorded (each warp needs two tasks of two steps or more)"
    lines = [f"task switch: {statistics.median(switch_spans):.0f} cycles from a task's last step's end to the next "
             f"task's first step's end ({len(switch_spans)} switches), a step mid-task "
             f"{statistics.median(step_spans):.0f} ({len(step_spans)} steps); in order (median cycles):"]
    lines += [f"  {a} -> {b}: {statistics.median(v):.0f}" for (a, b), v in phases.items()]
    return "\n".join(lines)


def window(recs: dict, steps: int = 3) -> str:
    """A stretch of block 0 mid-run: each consumer warpgroup's first warp, its marks in time order."""
    warps = sorted(w for b, w in recs if b == 0 and w % 4 == 0)
    events = sorted((c, w, label) for w in warps for c, label in recs[(0, w)])
    middle = events[len(events) // 2][0]
    shown = [e for e in events if e[0] >= middle][:steps * 12 * len(warps)]
    return "\n".join(f"  {c - middle:7d}  warp {w:2d} {'  ' * 14 * (w // 4)}{label}" for c, w, label in shown)


if __name__ == "__main__":
    from tkpy.runtime import timeline
    shape, causal, options = parse(sys.argv[1:])
    backward = "--backward" in sys.argv
    records = (run_backward if backward else run)(*shape, causal=causal, **options)
    what = "attention backward" if backward else "attention"
    print(f"{what} B{shape[0]} H{shape[1]} N{shape[2]} D{shape[3]}{' causal' if causal else ''}"
          f"{''.join(f' {k}={v}' for k, v in options.items())}: cycles between consecutive marks "
          f"(consumer warps of blocks 0-{timeline.BLOCKS - 1})")
    print("block 0 mid-run (cycle, warp, mark):")          # (the long window first: the summaries come last)
    print(window(records))
    print(timeline.table(records, top=40))
    print(task_switches(records))
