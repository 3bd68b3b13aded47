"""A/B of kernels.attention against a saved copy (kernels/attention_prev.py), interleaved rounds, vs cuDNN."""
import statistics, sys
sys.path.insert(0, ".")
import torch
import torch.nn.functional as F
from benchmarks.timing import median_ms
from kernels import attention as new
from kernels import attention_prev as old
from kernels import attention_mid as mid
cases = [(16, 16, 1024, 128, False), (8, 16, 1536, 128, False), (32, 16, 512, 128, False), (16, 16, 1024, 128, True)]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
for b, h, n, d, causal in cases:
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, new.lse_rows(n, 3), device="cuda")
    fns = {"cudnn": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
           "prev": lambda: old._launch(q, k, v, o, lse, causal, None),
           "mid": lambda: mid._launch(q, k, v, o, lse, causal, None),
           "new": lambda: new._launch(q, k, v, o, lse, causal, None),
           "nosahead": lambda: new._launch(q, k, v, o, lse, causal, None, s_ahead=False)}
    for f in fns.values():
        f()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    new._launch(q, k, v, o, lse, causal, None)
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    times = {name: [] for name in fns}
    order = list(fns)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            times[name].append(median_ms(fns[name]))
    ratio = {name: statistics.median(c / t for c, t in zip(times["cudnn"], times[name])) for name in fns if name != "cudnn"}
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    print(f"B{b} H{h} N{n} D{d} causal={causal}: cuDNN {flops / statistics.median(times['cudnn']) / 1e9:.0f} TFLOP/s; "
          + ", ".join(f"{k} {v:.3f}" for k, v in ratio.items()) + f"  (max err {err:.1e})", flush=True)
