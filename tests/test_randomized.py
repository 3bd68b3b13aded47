"""Randomized tests (hypothesis): shapes, dtypes, layouts and options of matmul and attention against float64
references, every element. CPU tensors in the interpreter (TKPY_INTERPRET=1) at small sizes and few examples on
CI; on the GPU more examples at larger sizes. Examples are derandomized (the same on every run) so that a failure
reproduces; hypothesis prints the failing example's arguments."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpu_util
from gpu_util import rel_err
from tkpy.kernels import attention, gemm, matmul
from tkpy.runtime import gpu_available

BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
TOL = {BF16: 1e-2, FP16: 2e-3, F32: 1e-5}
ON_GPU = gpu_available()
DEVICE = "cuda" if ON_GPU else "cpu"
EXAMPLES = 60 if ON_GPU else 25
MAX_ROWS = 700 if ON_GPU else 150
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    if not ON_GPU:
        monkeypatch.setenv("TKPY_INTERPRET", "1")


def rand(*shape, dtype):
    return gpu_util.rand(*shape, dtype=dtype, device=DEVICE)


@SETTINGS
@given(m=st.integers(1, MAX_ROWS), n=st.integers(1, MAX_ROWS), k=st.integers(1, MAX_ROWS // 2),
       dtype=st.sampled_from([BF16, FP16]), transposed=st.booleans(), out_dtype=st.sampled_from([None, F32, BF16]),
       bias=st.sampled_from([None, F32, BF16]), activation=st.sampled_from([None, "relu", "gelu", "silu"]),
       scale=st.sampled_from([None, 0.5, -1.25]))
def test_matmul_randomized(m, n, k, dtype, transposed, out_dtype, bias, activation, scale):
    a = rand(m, k, dtype=dtype)
    b = rand(n, k, dtype=dtype).T if transposed else rand(k, n, dtype=dtype)
    v = None if bias is None else rand(n, dtype=bias)
    c = matmul(a, b, bias=v, activation=activation, scale=scale, out_dtype=out_dtype)
    ref = gemm._epilogue(a.double() @ b.double(), None if v is None else v.double(), activation, scale)
    assert c.shape == (m, n) and c.dtype == (out_dtype or dtype)
    assert rel_err(c, ref) < TOL[c.dtype] * 2


@SETTINGS
@given(b=st.integers(1, 2), hkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 3]),
       n=st.integers(1, MAX_ROWS), nk=st.integers(1, MAX_ROWS), d=st.sampled_from([16, 32, 64, 80, 128]),
       dtype=st.sampled_from([BF16, FP16]), causal=st.sampled_from([False, True, "bottom_right"]),
       scale=st.sampled_from([None, 0.3, -0.2, 0.0]), transposed=st.booleans())
def test_attention_randomized(b, hkv, group, n, nk, d, dtype, causal, scale, transposed):
    h = hkv * group
    q = rand(b, n, h, d, dtype=dtype).transpose(1, 2) if transposed else rand(b, h, n, d, dtype=dtype)
    k, v = rand(b, hkv, nk, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype)
    o, lse = attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    ref, ref_lse = gpu_util.attention_reference(q, k, v, causal, scale)
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    assert rel_err(o, ref) < TOL[BF16]
    seen = torch.isfinite(ref_lse)                       # (rows that see no key: -inf, checked as such)
    assert torch.equal(torch.isfinite(lse), seen) and rel_err(lse[seen], ref_lse[seen]) < 1e-3
