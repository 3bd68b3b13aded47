"""Where a step of the attention kernel spends its cycles: a per-step phase timeline from clock64() marks.

The generated CUDA source of the default kernel gets a mark (the SM's cycle counter and a phase number, stored
to a __device__ array) before chosen statements of the consumers' step loop, found by the Python source text
in the `// file.py:LINE  text` comments every statement carries. Lane 0 of each consumer warpgroup's first
warp in blocks 0-3 records. The table gives each phase's median cycles over all steps (a phase runs from its
mark to the next one); a window of block 0 shows how its two consumer warpgroups interleave.

The marks cost cycles of their own (a step measured about 3700 cycles with 9 marks and 4300 with 15) and
constrain the scheduler around them: read the phases as proportions, not as exact costs.

    PYTHONPATH=. python3 benchmarks/attention_timeline.py [B H N D]     (default 16 16 4096 128)
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECORDS = 8192          # per traced warp (a ring)
BLOCKS = 4              # traced blocks
# (phase that starts here, text of the statement the mark goes before), in program order
MARKS = [
    ("stage wait", "tk.wait(element(self.arrived, s), phase)"),
    ("turn wait", "user.compute(st, self.stage(s), k"),
    ("issue S", "tk.warpgroup.mm_ABt(st.scores, st.q[st.q_tile], inp.k)"),
    ("issue P V", "tk.warpgroup.mma_AB(st.out, st.probs, prev.v)"),
    ("S wait", "tk.warpgroup.mma_async_wait(1)"),
    ("masks, row max", "with tk.if_(k * kv + kv > g.K.rows)"),
    ("shift", "tk.mul(st.shift, st.row_max, g.scale_log2)"),
    ("exponentials", "tk.map(st.scores, lambda s, m: tk.exp2("),
    ("factor", "tk.map(st.factor, lambda prev, m: tk.exp2(prev - m)"),
    ("row sum", "tk.row_sum(st.row_sum, st.scores, st.row_sum)"),
    ("anchor store", "tk.store(st.anchor[tk.warp_id()], st.row_sum)"),
    ("P V wait", "tk.warpgroup.mma_async_wait()               # O and P are free again"),
    ("rescale O, convert P", "tk.mul_row(st.out, st.out, st.factor"),
    ("last step's P V", "with tk.if_(k == st.iters - 1):"),
    ("release", "with if_(k > 0):"),
]


def patch(source: str) -> str:
    """The kernel source with the trace array, per-thread trace state and the marks inserted."""
    lines = source.split("\n")
    head = next(i for i, line in enumerate(lines) if "end of prelude" in line)
    lines.insert(head + 1, f"__device__ unsigned long long tk_trace[{BLOCKS * 3 * RECORDS}];\n"
                 f"#define TK_MARK(id) if (tk_on) tk_trace[tk_base + tk_rec++ % {RECORDS}] = "
                 "((unsigned long long)clock64() << 8) | (id)")
    start = next(i for i, line in enumerate(lines) if "__global__" in line)
    brace = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("{"))
    lines.insert(brace + 1, f"    unsigned tk_rec = 0; const bool tk_on = threadIdx.x % 128 == 0 && blockIdx.x < "
                 f"{BLOCKS}; const unsigned tk_base = (blockIdx.x * 3 + threadIdx.x / 128) * {RECORDS};")
    loop = next(i for i, line in enumerate(lines) if "for k in tk_range(n):" in line and "lcf.py" in line
                and i > next(j for j, x in enumerate(lines) if "consumer_registers" in x))
    out, i = lines[:loop], loop
    for mark, (_, text) in enumerate(MARKS):
        while not (lines[i].lstrip().startswith("// ") and text in lines[i]):
            out.append(lines[i])
            i += 1
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        out.append(f"{indent}TK_MARK({mark});")
    return "\n".join(out + lines[i:])


def trace(b: int, h: int, n: int, d: int):
    """Run the default kernel (non-causal) with the marks; returns each traced warp's records [(cycle, mark)]."""
    import numpy as np
    import torch

    import tkpy.runtime as runtime
    from tkpy.runtime import driver

    compile_cuda = runtime.compile_cuda
    runtime.compile_cuda = lambda source, name, **kw: compile_cuda(
        patch(source) if name.startswith("attention_fwd") else source, name, **kw)
    from kernels import attention as att
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, att.lse_rows(n, 3), device="cuda")
    att._launch(q, k, v, o, lse, False, None, consumer_warpgroups=2, split_kv=False)
    torch.cuda.synchronize()
    loaded = [lk for lk in driver._loaded.values() if lk.kernel_name.startswith("attention_fwd")][-1]
    cu = driver._driver()
    ptr, size = driver.check(cu.cuModuleGetGlobal(loaded.module, b"tk_trace"), "cuModuleGetGlobal")
    driver.check(cu.cuMemsetD8(ptr, 0, size), "cuMemsetD8")
    att._launch(q, k, v, o, lse, False, None, consumer_warpgroups=2, split_kv=False)
    torch.cuda.synchronize()
    raw = np.zeros(size // 8, np.uint64)
    driver.check(cu.cuMemcpyDtoH(raw.ctypes.data, ptr, size), "cuMemcpyDtoH")
    runtime.compile_cuda = compile_cuda
    return [[(int(x) >> 8, int(x) & 0xFF) for x in row if x] for row in raw.reshape(-1, RECORDS)]


def report(warps) -> None:
    phases = {m: [] for m in range(len(MARKS))}
    steps = []
    for records in warps:
        for (c0, m0), (c1, _) in zip(records, records[1:]):
            if m0 != len(MARKS) - 1:            # the last phase runs on into the next task or step
                phases[m0].append(c1 - c0)
        starts = [c for c, m in records if m == 0]
        steps += [y - x for x, y in zip(starts, starts[1:])]
    print(f"median cycles per step: {statistics.median(steps):.0f} ({len(steps)} steps)")
    print(f"{'phase':>22} {'median':>7} {'p90':>7}")
    for m, (name, _) in enumerate(MARKS[:-1]):
        v = sorted(phases[m])
        print(f"{name:>22} {statistics.median(v):7.0f} {v[int(len(v) * 0.9)]:7.0f}")
    events = sorted([(c, m, w) for w in (0, 1) for c, m in warps[w]])
    t0 = events[len(events) // 2][0]
    print("block 0 mid-run (cycle, consumer warpgroup, phase starting):")
    for c, m, w in [e for e in events if e[0] >= t0][:2 * len(MARKS)]:
        print(f"  {c - t0:7d}  wg{w} {'  ' * 12 * w}{MARKS[m][0]}")


if __name__ == "__main__":
    shape = [int(x) for x in sys.argv[1:5]] or [16, 16, 4096, 128]
    report(trace(*shape))
