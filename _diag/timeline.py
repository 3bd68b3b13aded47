"""Diagnosis (not part of tkpy): per-step phase timeline of the attention kernel from clock64() marks patched
into its generated source. Lane 0 of each consumer warpgroup's first warp in blocks 0-3 records (clock, mark)."""
import sys, statistics
sys.path.insert(0, '.')
import numpy as np
import torch
import tkpy.runtime as rt
from tkpy.runtime import driver

MAXREC = 8192
NBLK = 4
MARKS = [  # (id, comment prefix to insert before, which occurrence after previous anchor)
    (1, "// lcf.py:479"), (2, "// lcf.py:483"), (3, "// attention.py:356"), (10, "// attention.py:358"), (4, "// attention.py:361"),
    (5, "// attention.py:326"), (11, "// attention.py:336"), (12, "// attention.py:339"),
    (13, "// attention.py:340"), (14, "// attention.py:342"), (15, "// attention.py:365"), (6, "// attention.py:368"), (7, "// attention.py:369"), (8, "// attention.py:383"),
    (9, "// lcf.py:498"),
]
NAMES = {1: "stage wait", 2: "turn wait", 3: "issue S", 10: "issue PV", 4: "S wait", 5: "row max", 11: "shift", 12: "exps", 13: "factor, sum*f", 14: "row sum", 15: "anchor", 6: "PV wait",
         7: "rescale+P", 8: "last-step/release", 9: "loop"}
orig = rt.compile_cuda


def patch(src: str) -> str:
    lines = src.split("\n")
    head = next(i for i, l in enumerate(lines) if "end of prelude" in l)
    lines.insert(head + 1, f"__device__ unsigned long long tk_trace[{NBLK * 3 * MAXREC}];\n"
                 "#define TK_MARK(id) if (tk_on) { tk_trace[tk_base + (tk_rec++ % " + str(MAXREC) + ")] = "
                 "((unsigned long long)clock64() << 8) | (id); }")
    start = next(i for i, l in enumerate(lines) if "__global__" in l)
    brace = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith("{"))
    lines.insert(brace + 1, "    unsigned tk_rec = 0; const bool tk_on = threadIdx.x % 128 == 0 && blockIdx.x < "
                 f"{NBLK}; const unsigned tk_base = (blockIdx.x * 3 + threadIdx.x / 128) * {MAXREC};")
    pos = next(i for i, l in enumerate(lines) if "// lcf.py:477" in l)   # the consumers' step loop
    out = lines[:pos]
    rest = lines[pos:]
    j = 0
    for mid, prefix in MARKS:
        while not rest[j].strip().startswith(prefix):
            out.append(rest[j]); j += 1
        indent = rest[j][:len(rest[j]) - len(rest[j].lstrip())]
        out.append(f"{indent}TK_MARK({mid});")
    out += rest[j:]
    return "\n".join(out)


def patched(source, kernel_name, **kw):
    if kernel_name.startswith("attention_fwd"):
        source = patch(source)
    return orig(source, kernel_name, **kw)


rt.compile_cuda = patched
from kernels import attention as att  # noqa: E402


def run(b, h, n, d, causal, **options):
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, att.lse_rows(n, 3), device="cuda")
    for _ in range(3):
        att._launch(q, k, v, o, lse, causal, None, **options)
    torch.cuda.synchronize()
    lk = [lk for (key, dev), lk in driver._loaded.items() if lk.kernel_name.startswith("attention_fwd")][-1]
    d_ = driver._driver()
    err, ptr, size = d_.cuModuleGetGlobal(lk.module, b"tk_trace")
    buf = np.zeros(size // 8, np.uint64)
    # zero, run once more, read
    d_.cuMemsetD8(ptr, 0, size)
    torch.cuda.synchronize()
    att._launch(q, k, v, o, lse, causal, None, **options)
    torch.cuda.synchronize()
    d_.cuMemcpyDtoH(buf.ctypes.data, ptr, size)
    return buf.reshape(NBLK * 3, MAXREC)


def report(buf, title):
    print(f"\n== {title}")
    per_phase = {m: [] for m in NAMES}
    step_totals = []
    for row in buf[:]:
        recs = [(int(x) >> 8, int(x) & 0xff) for x in row if x]
        if not recs:
            continue
        for (c0, m0), (c1, m1) in zip(recs, recs[1:]):
            per_phase.setdefault(m0, []).append(c1 - c0)
        ones = [c for c, m in recs if m == 1]
        step_totals += [b - a for a, b in zip(ones, ones[1:])]
    tot = statistics.median(step_totals)
    print(f"median step (mark 1 to mark 1): {tot:.0f} cycles; steps {len(step_totals)}")
    for m, name in NAMES.items():
        v = per_phase.get(m, [])
        if v:
            print(f"  {name:>18}: median {statistics.median(v):7.0f}  mean {statistics.mean(v):7.0f}  "
                  f"p90 {sorted(v)[int(len(v) * .9)]:7.0f}")
    # WG0 vs WG1 of block 0: interleaving of marks in the steady state
    r0 = [(int(x) >> 8, int(x) & 0xff, 0) for x in buf[0] if x]
    r1 = [(int(x) >> 8, int(x) & 0xff, 1) for x in buf[1] if x]
    ev = sorted(r0 + r1)
    t0 = ev[len(ev) // 2][0]
    print("  block 0, a window mid-run (cycle, warpgroup, mark):")
    for c, m, w in [e for e in ev if t0 <= e[0]][:36]:
        print(f"    {c - t0:7d}  wg{w}  {'    ' * w}{NAMES[m]}")


if __name__ == "__main__":
    for d, causal, n, opts in ((128, False, 4096, {}),):
        buf = run(16, 16, n, d, causal, **opts)
        report(buf, f"D{d} N{n} causal={causal} {opts}")
