"""Where a step of the attention kernel spends its cycles: its timeline marks (tk.mark, tkpy/runtime/timeline.py).

The attention kernel and the LCF template carry marks (stage waits, the turn, the MMA issues and waits, the
softmax's parts); this script traces the default kernel with TKPY_TIMELINE=1, runs it twice (the second run
recorded), and prints the phases between consecutive marks of the consumer warps, most cycles first, and a
window of block 0's first consumer warp of each warpgroup.

A mark costs a warp about 90 cycles (a clock read and a global store; RESULTS.md runs 74-76) and the scheduler
does not move instructions across it freely: read the phases as proportions, not exact costs.

    PYTHONPATH=. python3 benchmarks/attention_timeline.py [B H N D] [--causal]     (default 16 16 4096 128)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["TKPY_TIMELINE"] = "1"       # before any kernel is traced


def run(b: int, h: int, n: int, d: int, causal: bool = False) -> dict:
    """Records of the kernel attention() runs, its consumer warps: {(block, warp): [(cycle, label), ...]}."""
    import torch

    from kernels import attention as att
    from tkpy.runtime import timeline
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, att.lse_rows(n, 3), device="cuda")
    template, args = att._prepared(q, k, v, o, lse, causal, None)   # the kernel attention() runs
    template(*args)
    timeline.reset(template.kernel)
    template(*args)
    consumers = 4 * att.consumer_warpgroups_for(b, h, n, d, att.multiprocessors(q))
    return {key: marks for key, marks in timeline.records(template.kernel).items() if key[1] < consumers}


def window(recs: dict, steps: int = 3) -> str:
    """A stretch of block 0 mid-run: each consumer warpgroup's first warp, its marks in time order."""
    warps = sorted(w for b, w in recs if b == 0 and w % 4 == 0)
    events = sorted((c, w, label) for w in warps for c, label in recs[(0, w)])
    middle = events[len(events) // 2][0]
    shown = [e for e in events if e[0] >= middle][:steps * 12 * len(warps)]
    return "\n".join(f"  {c - middle:7d}  warp {w:2d} {'  ' * 14 * (w // 4)}{label}" for c, w, label in shown)


if __name__ == "__main__":
    from tkpy.runtime import timeline
    causal = "--causal" in sys.argv
    shape = [int(x) for x in sys.argv[1:] if x != "--causal"] or [16, 16, 4096, 128]
    records = run(*shape, causal=causal)
    print(f"attention B{shape[0]} H{shape[1]} N{shape[2]} D{shape[3]}{' causal' if causal else ''}: cycles between "
          f"consecutive marks "
          f"(consumer warps of blocks 0-{timeline.BLOCKS - 1})")
    print(timeline.table(records, top=40))
    print("block 0 mid-run (cycle, warp, mark):")
    print(window(records))
