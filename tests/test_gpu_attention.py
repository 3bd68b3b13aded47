"""kernels/attention.py against a float32 reference on the GPU (skipped without a Hopper GPU)."""
import math

import pytest
import torch

from gpu_util import rand, rel_err, requires_gpu

pytestmark = requires_gpu


def reference(q, k, v, scale):
    """Explicit softmax(q k^T) v in float64, with key/value heads repeated for GQA."""
    rep = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(rep, dim=1) for x in (k, v))
    s = q.double() @ k.transpose(-1, -2) * scale
    lse = torch.logsumexp(s, dim=-1)
    return torch.softmax(s, dim=-1) @ v, lse


@pytest.mark.parametrize("b,h,hkv,n,nk,d", [(1, 2, 2, 128, 128, 64), (2, 4, 4, 512, 384, 128), (1, 8, 2, 256, 1024, 64),
                                            (2, 4, 1, 384, 256, 128), (1, 16, 16, 2048, 2048, 128)])
def test_attention_forward(b, h, hkv, n, nk, d):
    from kernels.attention import attention
    q, k, v = rand(b, h, n, d, dtype=torch.bfloat16), rand(b, hkv, nk, d, dtype=torch.bfloat16), \
        rand(b, hkv, nk, d, dtype=torch.bfloat16)
    o, lse = attention(q, k, v, return_lse=True)
    ref, ref_lse = reference(q, k, v, 1 / math.sqrt(d))
    assert rel_err(o, ref) < 1e-2
    assert rel_err(lse, ref_lse) < 1e-4
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(h // hkv, 1),
                                                            v.float().repeat_interleave(h // hkv, 1))
    assert rel_err(o, sdpa) < 1e-2


def test_attention_rejects_what_it_cannot_do():
    from kernels.attention import attention
    q = torch.empty(1, 2, 128, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="head dim"):
        attention(q[..., :32], q[..., :32], q[..., :32])
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention(torch.empty(1, 3, 128, 64, dtype=torch.bfloat16, device="cuda"), q, q)
    with pytest.raises(NotImplementedError, match="causal"):
        attention(q, q, q, causal=True)
