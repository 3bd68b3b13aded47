"""A golden record of the GEMMs' choices (kernels/gemm_policy.py): for a grid of shapes (M, N, K, small and odd ones
among them), input and output dtypes, B layouts and epilogues on 132, 114 and 78 SMs, the kernel matmul() runs (its
MatmulConfig's name; with split_k, the product's and the reduction's) and the kernel matmul_fp8() runs (its
MatmulFP8Config's name). A change of policy shows in review as a change of tests/golden/gemm_policy.json; regenerate
it with `python tests/test_gemm_policy.py --write` (and say why in the commit).

No GPU, nothing traced or compiled: meta tensors through the plans (gemm._plan, gemm_fp8._template), the SMs set."""
from __future__ import annotations

import os

import torch

import policy_record
from tkpy.kernels import gemm, gemm_fp8
from tkpy.kernels import gemm_policy as policy
from tkpy.kernels.gemm_splitk import SplitPlan

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "gemm_policy.json")
SMS = (132, 114, 78)
M = (1, 7, 64, 128, 130, 384, 1000, 1024, 2048, 4096, 16384)
N = (8, 200, 1024, 3072, 4096, 8192, 28672)
FP8_N = (16, 208, 1024, 3072, 4096, 8192, 28672)     # (multiples of 16)
K = (70, 4096)
BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
VARIANTS = {   # matmul's options (dtype: a's and b's; b_transposed: b given as w.T)
    "bf16 nn": dict(dtype=BF16),
    "fp16 nt bias=f32 scale gelu out=f32": dict(dtype=FP16, b_transposed=True, bias=F32, scale=0.5,
                                                  activation="gelu", out_dtype=F32),
}
FORCED = [  # (m, n, k, options): block_n and split-K as matmul's arguments
    (1024, 1024, 1024, dict(block_n=128)), (4096, 4096, 4096, dict(block_n=64)),
    (128, 8192, 8192, dict(split_k=4)), (128, 8192, 8192, dict(split_k=2, block_n=128, b_transposed=True)),
    (1, 4096, 4096, dict(split_k=8, deterministic=False)),
    (256, 4096, 8192, dict(split_k=3, bias=BF16, activation="relu", out_dtype=F32)),
]
FP8_VARIANTS = {"e4m3 e4m3 out=bf16": (torch.float8_e4m3fn, torch.float8_e4m3fn, BF16),
                "e5m2 e4m3 out=f32": (torch.float8_e5m2, torch.float8_e4m3fn, F32)}


def matmul_choice(monkeypatch, sms, m, n, k, dtype=BF16, b_transposed=False, bias=None, scale=None, activation=None,
                  out_dtype=None, block_n=None, split_k=None, deterministic=True) -> str:
    """The kernel(s) matmul() plans for these shapes and options on `sms` SMs: `product` or `product + reduction`."""
    monkeypatch.setattr(gemm, "multiprocessors", lambda tensor: sms)
    out_dtype = out_dtype or dtype
    a = torch.empty(m, k, dtype=dtype, device="meta")
    b = torch.empty(n, k, dtype=dtype, device="meta") if b_transposed else torch.empty(k, n, dtype=dtype, device="meta")
    c = torch.empty(m, n, dtype=out_dtype, device="meta")
    v = None if bias is None else torch.empty(n, dtype=bias, device="meta")
    extras = (() if v is None else (v,)) + (() if scale is None else (scale,))
    plan = gemm._plan(a, b, c, extras, out_dtype, b_transposed, v, scale, activation, block_n, split_k, deterministic)
    if isinstance(plan, SplitPlan):
        return f"{plan.template.kernel.name} + {plan.reduce.name}"
    return plan.template.kernel.name


def fp8_choice(monkeypatch, sms, m, n, k, a_dtype, b_dtype, out_dtype) -> str:
    monkeypatch.setattr(gemm_fp8, "multiprocessors", lambda tensor: sms)
    a = torch.empty(m, k, dtype=a_dtype, device="meta")
    b = torch.empty(n, k, dtype=b_dtype, device="meta").T
    return gemm_fp8._template(a, b, out_dtype, None).kernel.name


def cases():
    for sms in SMS:
        for m in M:
            for n in N:
                for k in K:
                    for name, options in VARIANTS.items():
                        yield f"matmul sms={sms} m={m} n={n} k={k} {name}", matmul_choice, (sms, m, n, k), options
        for m, n, k, options in FORCED:
            yield f"matmul sms={sms} m={m} n={n} k={k} {options}", matmul_choice, (sms, m, n, k), options
        for m in M:
            for n in FP8_N:
                for name, kinds in FP8_VARIANTS.items():
                    yield f"matmul_fp8 sms={sms} m={m} n={n} k=4096 {name}", fp8_choice, (sms, m, n, 4096) + kinds, {}


def current(monkeypatch) -> dict:
    monkeypatch.setenv("TKPY_TUNED_TABLES", "0")      # the shipped tables' choices (on any GPU)
    return {name: choice(monkeypatch, *args, **options) for name, choice, args, options in cases()}


def test_policy_choices_match_the_golden_record(monkeypatch):
    policy_record.check(GOLDEN, current(monkeypatch))


def test_every_table_row_carries_its_evidence():
    policy_record.check_evidence(policy)


def test_the_fp8_widths_have_tile_rates():
    """block_n_for models every width it is offered by TILE_RATE (the fp8 GEMM's widths too)."""
    assert set(policy.WIDTHS) | set(policy.FP8_WIDTHS) <= set(policy.TILE_RATE)
    assert set(policy.STAGES) == set(policy.WIDTHS) and set(policy.FP8_STAGES) == set(policy.FP8_WIDTHS)


if __name__ == "__main__":
    policy_record.write_if_asked(GOLDEN, current)
