import sys, collections, torch
sys.path.insert(0, '.')
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
from kernels import attention as att
from benchmarks.bench_attention import DECODE_CASES

def prof(fn, calls=20):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(calls): fn()
        torch.cuda.synchronize()
    tot = collections.defaultdict(float)
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name[:60]] += e.device_time / calls
    return tot

for b, h, hkv, n, nk, d in DECODE_CASES:
    q = torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(b, hkv, nk, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    print(f"== B{b} H{h}/{hkv} N{n} NK{nk} D{d}")
    for name, fn in [("tkpy", lambda: att.attention(q, k, v))]:
        for kname, us in prof(fn).items(): print(f"   {name:5s} {us:8.2f} us  {kname}")
    def cud():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for kname, us in prof(cud).items(): print(f"   cudnn {us:8.2f} us  {kname}")
