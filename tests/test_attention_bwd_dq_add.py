"""The main kernel's other ways of adding dQ (AttentionBwdConfig.dq_add; the default "tma" is tested with the rest of
the backward in tests/test_attention_bwd.py): "split" (a column piece of the step's dQ per warpgroup, over the
task's 128 keys) and "own" (each warpgroup's dQ over its own 64 keys, no barrier between the warpgroups), both added
from the registers with tk.warpgroup.store_add. dq, dk and dv against float64 references into poisoned outputs and
workspaces, in the interpreter at small sizes (D64 and D128, also D96's and D48's pieces; causal top-left and
bottom-right, GQA and MQA, odd lengths, several tasks a block) and on the GPU; the config's checks and names; NVRTC
compiles without spills or serialized wgmmas, adding by REDG and never by TMA."""
from __future__ import annotations

import importlib
import re

import pytest

import gpu_util
import tkpy as tk
from test_attention_bwd import BF16, FP16, backward, check, compiled_clean, inputs, interpret, kernel_args  # noqa: F401
from tkpy.kernels.attention_bwd_config import AttentionBwdConfig
from tkpy.kernels.attention_bwd_kernel import _attention_bwd

DQ_ADDS = ["split", "own"]
CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype, scale
    (1, 2, 2, 17, 17, 64, True, FP16, None),
    (1, 4, 2, 100, 70, 64, False, BF16, None),          # GQA, n > n_k
    (1, 2, 1, 100, 60, 64, "bottom_right", BF16, -0.3),  # MQA: the first 40 rows see no key
    (1, 2, 1, 50, 130, 128, "bottom_right", FP16, None),
    (1, 4, 2, 70, 150, 128, True, BF16, None),          # GQA, top-left n < n_k: keys past 69 see no query
    (2, 1, 1, 33, 47, 128, False, BF16, 0.0),           # every score 0
    (1, 1, 1, 70, 90, 96, False, FP16, None),           # D96: pieces of 48
    (1, 2, 1, 40, 90, 48, True, BF16, None),            # D48 on zero columns to D64
]


@pytest.mark.parametrize("dq_add", DQ_ADDS)
@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype,scale", CASES)
def test_gradients_match_float64(dq_add, b, h, hkv, n, nk, d, causal, dtype, scale):
    q, k, v, do = inputs(b, h, hkv, n, nk, d, dtype)
    check(backward(q, k, v, do, causal, scale, options=dict(dq_add=dq_add)), (q, k, v, do), dtype, causal, scale)


@pytest.mark.parametrize("dq_add", DQ_ADDS)
@pytest.mark.parametrize("causal", [False, True])
def test_several_tasks_per_persistent_block(monkeypatch, dq_add, causal):
    """Two blocks for 6 key tiles' tasks (of different lengths, causal): K and V reloaded per task (after a barrier
    of the warpgroup's own with "own"), the dS^T buffers' parity running on across tasks."""
    monkeypatch.setattr(importlib.import_module("tkpy.templates.lcf"), "multiprocessors", lambda tensor: 2)
    q, k, v, do = inputs(1, 2, 1, 150, 390, 64, BF16)
    check(backward(q, k, v, do, causal, 0.2, options=dict(dq_add=dq_add)), (q, k, v, do), BF16, causal, 0.2)


def test_config_checks_and_names():
    assert AttentionBwdConfig(128).name == "attention_bwd_d128"
    assert AttentionBwdConfig(128, dq_add="tma") == AttentionBwdConfig(128)
    assert AttentionBwdConfig(64, causal=True, dq_add="split").name == "attention_bwd_d64_causal_dq_add_split"
    assert AttentionBwdConfig(128, dq_add="own", stages=3).name == "attention_bwd_d128_3stages_dq_add_own"
    with pytest.raises(ValueError, match=r"dq_add must be one of \('tma', 'split', 'own'\), got 'registers'"):
        AttentionBwdConfig(128, dq_add="registers")
    for d, deterministic in ((128, True), (256, False)):     # the dQ pass computes dQ there
        with pytest.raises(ValueError, match="dq_add='split' is how the main kernel adds dQ"):
            AttentionBwdConfig(d, deterministic=deterministic, dq_add="split")


@pytest.mark.parametrize("dq_add", DQ_ADDS)
@pytest.mark.parametrize("d,causal,stages", [(64, False, None), (64, True, None), (128, False, None),
                                             (128, True, None), (128, False, 3)])
def test_kernels_compile_without_spills(dq_add, d, causal, stages):
    """HGMMA without spills or ptxas's serialization warnings; dQ added by REDG.E.ADD.F32x2 (a register pair a
    reduction), never by TMA (no UTMAREDG); "split" meets at the dS barrier (DS_READY, 256 threads), "own" never
    does. D128 also with a third (Q, dO) stage in the shared memory that the staging tiles no longer take."""
    c = AttentionBwdConfig(d, tk.bf16, causal, dq_add=dq_add, stages=stages)
    sass = compiled_clean(_attention_bwd(c).kernel, kernel_args(d, causal, True))
    assert "UTMAREDG" not in sass and "REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU" in sass
    assert bool(re.search(r"BAR\.SYNC\.DEFER_BLOCKING 0x2, 0x100", sass)) == (dq_add == "split")


# -- on the GPU ------------------------------------------------------------------------------------------------

GPU_CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype, scale
    (2, 4, 4, 1024, 1024, 128, False, BF16, None), (2, 4, 4, 1024, 1024, 128, True, BF16, None),
    (2, 4, 4, 1000, 1000, 64, True, FP16, None), (1, 8, 2, 777, 1500, 128, "bottom_right", BF16, None),
    (1, 8, 1, 1500, 777, 64, "bottom_right", BF16, -0.2), (2, 4, 2, 513, 257, 128, False, FP16, 0.0),
    (1, 4, 4, 1, 300, 64, False, BF16, None), (1, 2, 2, 300, 1, 128, True, BF16, None),
]


@gpu_util.on_gpu
@pytest.mark.parametrize("dq_add", DQ_ADDS)
@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype,scale,stages",     # D128 also with a third stage
                         [(*case, None) for case in GPU_CASES] + [(*case, 3) for case in GPU_CASES if case[5] == 128])
def test_gpu_gradients_match_float64(dq_add, b, h, hkv, n, nk, d, causal, dtype, scale, stages):
    q, k, v, do = inputs(b, h, hkv, n, nk, d, dtype, device="cuda")
    options = dict(dq_add=dq_add, stages=stages)
    check(backward(q, k, v, do, causal, scale, options=options), (q, k, v, do), dtype, causal, scale)
