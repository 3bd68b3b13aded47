"""Attention's backward (kernels/attention_backward.py and its kernels): dq, dk and dv against float64 references on
fresh random inputs into poisoned (NaN-filled) outputs and workspaces, every element checked, in the CPU interpreter
at small sizes (TKPY_INTERPRET=1) and on the GPU at larger ones: odd and unequal lengths, GQA and MQA, causal
top-left and bottom-right, zero and negative scales, bf16 and fp16, head dims from 16 to 256 (padded and split
ones), deterministic=True bit for bit; attention's autograd formula (loss.backward(), the log-sum-exp's gradient,
torch.library.opcheck, the SDPA drop-in); the config's checks, the policy's choices; NVRTC compiles without spills."""
from __future__ import annotations

import functools
import importlib
import re
import warnings

import pytest
import torch

import gpu_util
import tkpy as tk
from tkpy.kernels import attention, scaled_dot_product_attention
from tkpy.kernels import attention_backward as ab
from tkpy.kernels import attention_bwd_policy as policy
from tkpy.kernels.attention_bwd_config import AttentionBwdConfig
from tkpy.kernels.attention_bwd_dq_kernel import _attention_bwd_dq
from tkpy.kernels.attention_bwd_kernel import _attention_bwd
from tkpy.kernels.attention_bwd_prep import convert_kernel, prep_kernel
from tkpy.kernels.attention_forward import causal_variant

BF16, FP16 = torch.bfloat16, torch.float16
TOL = {BF16: 2e-2, FP16: 4e-3}      # worst element's error / the largest reference element (bf16: 8 bits)


@pytest.fixture(autouse=True)
def interpret(monkeypatch, request):
    """The interpreter for CPU tensors; the GPU tests run on the GPU."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("TKPY_INTERPRET", "1")


def inputs(b, h, hkv, n, nk, d, dtype, device="cpu"):
    rand = functools.partial(gpu_util.rand, dtype=dtype, device=device)
    return rand(b, h, n, d), rand(b, hkv, nk, d), rand(b, hkv, nk, d), rand(b, h, n, d)


def check(grads, inputs, dtype, causal=False, scale=None, grad_lse=None):
    """The gradients against attention_grads_reference of `inputs` (q, k, v, dO): every element within TOL of the
    reference's largest element, or of a hundredth of its terms' absolute sums where that is more; no NaN (the
    poison of an element not written fails); the whole within half of TOL in norm, or of a twentieth of the terms'.
    (D = rowsum(dO * O) is the rounded O's, as FlashAttention's: where dS = P (dP - D) cancels, dq and dk are off by
    D's rounding times a sum of P K or P Q, e.g. dq and dk of a single key, exactly 0, or dq's norm 6e-3 off in bf16
    at D144 and scale 0.5, 2e-3 in fp16 on a row whose P is nearly one key's, 3e-4 from a reference of that D.)"""
    ref = gpu_util.attention_grads_reference(*inputs, causal, scale, grad_lse)
    terms = gpu_util.attention_grads_reference(*inputs, causal, scale, grad_lse, absolute=True)
    for name, x, r, t in zip(("dq", "dk", "dv"), grads, ref, terms):
        assert x.shape == r.shape and x.dtype == dtype, name
        assert not torch.isnan(x).any(), f"{name} has NaN: elements not written"
        size, worst = r.abs().max().item(), (x.double() - r).abs().max().item()
        assert worst <= TOL[dtype] * max(size, 1e-2 * t.max().item()), (name, worst, size)
        error = (x.double() - r).norm().item()
        assert error <= TOL[dtype] / 2 * max(r.norm().item(), 5e-2 * t.norm().item()), (name, error, r.norm().item())


def backward(q, k, v, do, causal, scale, deterministic=False, grad_lse=None, options=None):
    """The forward's output and lse, then the backward's launches into NaN-filled dq, dk, dv and workspaces
    (`options`: AttentionBwdConfig fields over the policy's)."""
    o, lse = attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    grads = [gpu_util.poisoned(*x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v)]
    d = policy.native_dim(q.shape[3])
    atomic = not AttentionBwdConfig(d, deterministic=deterministic, **(options or {})).dq_pass
    workspace = [w.fill_(float("nan")) for w in ab.workspaces(q.new_empty(*q.shape[:3], d), atomic)]
    scale = q.shape[3] ** -0.5 if scale is None else scale
    ab._launch(do, q, k, v, o, lse, *grads, causal_variant(causal), scale, deterministic, grad_lse, workspace,
               options)
    return grads


CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype, scale
    (1, 1, 1, 1, 1, 64, False, BF16, None),             # one query, one key
    (1, 2, 2, 17, 17, 64, True, FP16, None),
    (1, 4, 2, 100, 70, 64, False, BF16, None),          # GQA, n > n_k
    (1, 4, 2, 70, 150, 32, True, BF16, None),           # GQA, top-left n < n_k: keys past 69 see no query
    (1, 2, 1, 100, 60, 64, "bottom_right", BF16, None),  # MQA: the first 40 rows see no key
    (1, 2, 1, 50, 130, 128, "bottom_right", FP16, None),
    (2, 1, 1, 33, 47, 64, False, BF16, 0.0),            # every score 0
    (1, 2, 2, 64, 64, 64, True, BF16, -0.3),
    (1, 2, 1, 40, 90, 48, True, BF16, None),            # D48 on zero columns to D64
    (1, 1, 1, 70, 90, 96, False, FP16, None),           # D96: pieces of 48
    (1, 1, 1, 60, 80, 256, True, BF16, None),           # past D128: two tasks a key tile, the dQ pass
    (1, 2, 1, 45, 30, 144, False, BF16, 0.5),           # D144 on zero columns to D160
]


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype,scale", CASES)
def test_gradients_match_float64(b, h, hkv, n, nk, d, causal, dtype, scale):
    q, k, v, do = inputs(b, h, hkv, n, nk, d, dtype)
    check(backward(q, k, v, do, causal, scale), (q, k, v, do), dtype, causal, scale)


@pytest.mark.parametrize("d,causal,stages", [(64, True, 2), (64, False, 0), (128, False, 2), (128, True, 1)])
def test_dq_through_the_storer_warp_or_not(d, causal, stages):
    """dQ's pieces at 64 query rows a step through a step-output ring of `stages` to the producer's storer warp
    (dq_storer), which issues their reduce-adds, or (0) by the first consumer warpgroup itself: several tasks a
    block (the persistent loop), odd lengths, GQA."""
    q, k, v, do = inputs(1, 4, 2, 150, 300, d, BF16)
    check(backward(q, k, v, do, causal, None, options=dict(dq_storer=stages, q_rows=64)), (q, k, v, do), BF16, causal)


@pytest.mark.parametrize("causal,n,nk,hkv", [(False, 150, 300, 2), (True, 300, 150, 1), ("bottom_right", 200, 333, 4)])
def test_128_query_rows_a_step(causal, n, nk, hkv):
    """D64's main kernel at 128 query rows a step (its default, q_rows=128; each warpgroup dQ's rows of its half of
    them through the storer): partial query and key tiles, GQA and MQA, both causal corners; and the deterministic
    dQ pass beside it (the main kernel without dQ)."""
    q, k, v, do = inputs(1, 4, hkv, n, nk, 64, BF16)
    check(backward(q, k, v, do, causal, None, options=dict(q_rows=128)), (q, k, v, do), BF16, causal)
    if causal is True:
        check(backward(q, k, v, do, causal, None, deterministic=True, options=dict(q_rows=128)), (q, k, v, do), BF16,
              causal)


EARLY_P_CASES = [(128, False, dict(early_p=True)), (128, "bottom_right", dict(early_p=True, deterministic=True)),
                 (128, True, dict(early_p=False)), (64, True, dict(q_rows=64, early_p=True)),
                 (256, True, dict(early_p=True)), (64, False, dict(q_rows=64, dq_storer=0, early_p=True))]
DQ_TILE_CASES = [(256, True, False, dict(dq_kv=64, dq_stages=1)),
                 (256, "bottom_right", False, dict(dq_kv=48, dq_stages=2)),
                 (128, True, True, dict(dq_kv=32, dq_stages=3)), (64, False, True, dict(dq_kv=64, dq_stages=2))]


@pytest.mark.parametrize("d,causal,options", EARLY_P_CASES)
def test_p_computed_while_dp_runs(d, causal, options):
    """early_p, each way from its default (True: P^T and dV's products before the wait for dP^T; the main kernel at
    64 query rows a step, with dQ by the first warpgroup, the storer, the dQ pass, the split tasks): partial tiles,
    GQA, causal corners."""
    options = dict(options)
    deterministic = options.pop("deterministic", False)
    q, k, v, do = inputs(1, 4, 2, 150, 170, d, BF16)
    check(backward(q, k, v, do, causal, None, deterministic, options=options), (q, k, v, do),
          BF16, causal)


@pytest.mark.parametrize("deterministic", [False, True])
def test_keys_past_nk_contribute_nothing_where_their_p_would_overflow(deterministic):
    """Every score about -256 (q's first column 128, k's 2, the others' products small; scale -1): lse_log2 about
    -365, so the zero-filled keys past N_k would get P = exp2(0 - lse_log2) = inf (and dS, dq NaN) but for the mask
    that sets their P to 0."""
    q, k, v, do = inputs(1, 1, 1, 40, 70, 64, BF16)
    q, k = q / 8, k.clone()
    q[..., 0], k[..., 0] = 128.0, 2.0
    check(backward(q, k, v, do, False, -1.0, deterministic), (q, k, v, do), BF16, False, -1.0)


def random_case(seed: int) -> tuple:
    """A seeded random small case: (b, h, h_kv, n, n_k, d, causal, dtype, scale, deterministic)."""
    import random
    r = random.Random(seed)
    hkv = r.choice([1, 2])
    return (1, hkv * r.choice([1, 2]), hkv, r.choice([1, 15, 64, 65, 130, 191]), r.choice([1, 30, 127, 129, 200]),
            r.choice([16, 32, 64, 80, 96, 128]), r.choice([False, True, "bottom_right"]), r.choice([BF16, FP16]),
            r.choice([None, 0.1, -0.5, 1.0]), r.random() < 0.3)


@pytest.mark.parametrize("seed", range(16))
def test_random_cases(seed):
    b, h, hkv, n, nk, d, causal, dtype, scale, deterministic = random_case(seed)
    q, k, v, do = inputs(b, h, hkv, n, nk, d, dtype)
    check(backward(q, k, v, do, causal, scale, deterministic), (q, k, v, do), dtype, causal, scale)


@pytest.mark.parametrize("d,causal", [(64, True), (256, False)])
def test_deterministic_gradients_are_bit_identical(d, causal):
    """deterministic=True (the dQ pass): the same gradients bit for bit from run to run, right."""
    q, k, v, do = inputs(1, 2, 1, 90, 300, d, BF16)       # 3 key tiles: dQ sums over them
    first = backward(q, k, v, do, causal, None, deterministic=True)
    second = backward(q, k, v, do, causal, None, deterministic=True)
    assert all(torch.equal(x, y) for x, y in zip(first, second))
    check(first, (q, k, v, do), BF16, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_several_tasks_per_persistent_block(monkeypatch, causal):
    """Two blocks for 6 key tiles' tasks (of different lengths, causal): K and V reloaded per task, the dS^T buffers'
    parity and the dQ reduce-adds running on across tasks."""
    monkeypatch.setattr(importlib.import_module("tkpy.templates.lcf"), "multiprocessors", lambda tensor: 2)
    q, k, v, do = inputs(1, 2, 1, 150, 390, 64, BF16)
    check(backward(q, k, v, do, causal, 0.2), (q, k, v, do), BF16, causal, 0.2)


def test_loss_backward_through_attention():
    """The issue's `loss = attention(q, k, v, causal=True).sum(); loss.backward()`, GQA at odd lengths, and the
    log-sum-exp's gradient where the loss uses it too."""
    q, k, v, _ = (x.requires_grad_() for x in inputs(1, 4, 2, 37, 50, 64, BF16))
    attention(q, k, v, causal=True).sum().backward()
    check([x.grad for x in (q, k, v)], (q, k, v, torch.ones_like(q)), BF16, True)
    for x in (q, k, v):
        x.grad = None
    o, lse = attention(q, k, v, causal="bottom_right", return_lse=True)
    (o.float().square().sum() + 0.5 * lse.sum()).backward()
    grad_out, grad_lse = 2 * o.detach().float(), torch.full(lse.shape, 0.5)
    check([x.grad for x in (q, k, v)], (q, k, v, grad_out), BF16, "bottom_right", grad_lse=grad_lse)


def test_sdpa_drop_in_differentiates():
    q, k, v, do = (x.requires_grad_() for x in inputs(1, 2, 2, 40, 40, 32, FP16))
    scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3).backward(do)
    check([x.grad for x in (q, k, v)], (q, k, v, do), FP16, True, 0.3)


def test_compiled_training_step_matches_eager():
    """torch.compile(fullgraph=True) of a function calling attention, differentiated: the same gradients as eager."""
    q, k, v, do = inputs(1, 2, 1, 30, 40, 32, BF16)
    grads = []
    for run in (lambda *x: attention(*x, causal=True),
                torch.compile(lambda *x: attention(*x, causal=True), fullgraph=True, backend="aot_eager")):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        run(*leaves).backward(do)
        grads.append([x.grad for x in leaves])
    assert all(torch.equal(x, y) for x, y in zip(*grads))
    check(grads[1], (q, k, v, do), BF16, True)


@pytest.mark.parametrize("causal,return_lse", [("bottom_right", True), (None, False)])
def test_opcheck_attention_and_its_backward(causal, return_lse):
    """torch.library.opcheck of the attention operator with its autograd formula (the forward without the
    log-sum-exp: the backward recomputes it) and of the backward operator."""
    q, k, v, do = inputs(1, 2, 1, 20, 24, 32, BF16)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    torch.library.opcheck(torch.ops.tkpy.attention.default, leaves, dict(causal=causal, return_lse=return_lse))
    o, lse = attention(q, k, v, causal=causal or False, return_lse=True)
    torch.library.opcheck(torch.ops.tkpy.attention_backward.default, (do, q, k, v, o, lse),
                          dict(causal=causal, scale=0.4, deterministic=True))


def test_checks_say_what_they_cannot_take():
    q, k, v, do = inputs(1, 2, 1, 20, 24, 32, BF16)
    o, lse = attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="grad_out must be a tensor of q's shape"):
        ab.attention_backward(do[..., :16], q, k, v, o, lse)
    with pytest.raises(ValueError, match="lse must be an fp32 tensor of shape"):
        ab.attention_backward(do, q, k, v, o, lse[..., :5])
    with pytest.raises(ValueError, match="causal must be"):
        ab.attention_backward(do, q, k, v, o, lse, causal="diagonal")
    with pytest.raises(ValueError, match="multiples of 32"):
        AttentionBwdConfig(48)
    with pytest.raises(ValueError, match="dq_kv"):
        AttentionBwdConfig(64, dq_kv=40)
    with pytest.raises(ValueError, match="dq_storer .* must be 0..4 at head dim 64"):
        AttentionBwdConfig(64, dq_storer=5, q_rows=64)
    with pytest.raises(ValueError, match="dq_storer .* must be 0..1 at head dim 64"):
        AttentionBwdConfig(64, dq_storer=2)                             # (at 128 query rows a step)
    with pytest.raises(ValueError, match="dq_storer .* must be 0..2 at head dim 128"):
        AttentionBwdConfig(128, dq_storer=3)
    with pytest.raises(ValueError, match="q_rows=128 hands dQ to the storer warp"):
        AttentionBwdConfig(64, dq_storer=0)
    assert AttentionBwdConfig(64, dq_storer=2, q_rows=64).name == "attention_bwd_d64_storer2_q64"
    assert AttentionBwdConfig(64, dq_storer=0, q_rows=64).name == "attention_bwd_d64_storer0_q64"
    assert AttentionBwdConfig(64).name == "attention_bwd_d64"
    assert AttentionBwdConfig(64, deterministic=True).storer_stages == 0      # (the dQ pass's dQ)
    with pytest.raises(ValueError, match="q_rows .* is 64, or 128 at head dims up to 64"):
        AttentionBwdConfig(128, q_rows=128)
    with pytest.raises(ValueError, match="q_rows .* is 64"):
        AttentionBwdConfig(64, q_rows=96)
    with pytest.raises(ValueError, match="q_rows=128 hands dQ to the storer warp"):
        AttentionBwdConfig(64, q_rows=128, dq_storer=0)
    with pytest.raises(ValueError, match="dq_storer .* must be 0..1 at head dim 64"):
        AttentionBwdConfig(64, q_rows=128, dq_storer=2)
    narrow = AttentionBwdConfig(64, q_rows=64)
    assert (narrow.name, narrow.stage_count, narrow.storer_stages) == ("attention_bwd_d64_q64", 4, 1)
    with pytest.raises(ValueError, match="dq_storer is the main kernel's dQ"):
        AttentionBwdConfig(256, dq_storer=1)
    empty = ab.attention_backward(do[:, :, :0], q[:, :, :0], k, v, o[:, :, :0], lse[:, :, :0])
    assert empty[0].shape == (1, 2, 0, 32) and not empty[1].any() and not empty[2].any()


POLICY = {  # head dim, deterministic -> (kernel names, dQ pass, splits, query rows a step, ring stages, storer's,
    # early_p non-causal and causal, the dQ pass's key rows a tile and stages)
    (64, False): ("attention_bwd_d64", False, 1, 128, 2, 1, (False, False), (128, 2)),
    (64, True): ("attention_bwd_d64_nodq attention_bwd_dq_d64", True, 1, 128, 2, 0, (False, False), (128, 2)),
    (128, False): ("attention_bwd_d128", False, 1, 64, 2, 0, (False, True), (64, 2)),
    (128, True): ("attention_bwd_d128_nodq attention_bwd_dq_d128", True, 1, 64, 2, 0, (False, True), (64, 2)),
    (96, False): ("attention_bwd_d96", False, 1, 64, 2, 0, (False, True), (64, 2)),
    (256, False): ("attention_bwd_d256 attention_bwd_dq_d256", True, 2, 64, 1, 0, (False, False), (32, 2)),
    (160, False): ("attention_bwd_d160 attention_bwd_dq_d160", True, 2, 64, 1, 0, (False, False), (32, 2)),
}


@pytest.mark.parametrize("d,deterministic", POLICY)
def test_policy_choices(d, deterministic):
    """A golden record of the policy's choices: the kernels each head dim runs."""
    c = AttentionBwdConfig(d, tk.bf16, False, deterministic)
    names = c.name + (" " + c.dq_name if c.dq_pass else "")
    early_p = tuple(AttentionBwdConfig(d, tk.bf16, causal, deterministic).p_first for causal in (False, True))
    assert (names, c.dq_pass, c.splits, c.step_rows, c.stage_count, c.storer_stages, early_p,
            (c.dq_kv_rows, c.dq_stage_count)) == POLICY[d, deterministic]
    assert [AttentionBwdConfig(d, tk.bf16, causal, deterministic).snake_order for causal in (False, True)] == \
        [False, True]
    assert [policy.native_dim(x) for x in (16, 48, 80, 112, 144, 240, 256)] == [32, 64, 96, 128, 160, 256, 256]


def kernel_args(d, causal, atomic, dq_pass=False, n=512):
    x, rows = torch.empty(1, 2, n, d, dtype=BF16), torch.empty(1, 2, n)
    scalars = [0.1, 0.1] + ([0] if causal else [])
    if dq_pass:
        return [x, x, x, x, rows, rows, x] + scalars
    return [x, x, x, x, rows, rows, x, x] + ([torch.empty(1, 2, n, d)] if atomic else []) + scalars


def compiled_clean(kernel, args) -> str:
    """The kernel's SASS, once checked that NVRTC compiles it without spills, with its wgmma asynchronous (no
    ptxas "Performance Loss" warning) as HGMMA."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.SpillWarning)
        r = kernel.resources(*args)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0, (kernel.name, r)
    assert not any("Performance Loss" in w for w in r.warnings), (kernel.name, r.warnings)
    sass = kernel.sass(*args)
    assert "HGMMA" in sass and "STL" not in sass
    return sass


@pytest.mark.parametrize("d,causal,deterministic", [(64, False, False), (64, True, False), (128, False, False),
                                                    (128, True, False), (128, False, True), (256, True, False),
                                                    (96, True, False), (160, False, False)])
def test_kernels_compile_without_spills(d, causal, deterministic):
    """The main kernel and the dQ pass at D64, D128 and D256 (and D96, D160: pieces of 48 and 80 columns, 32-byte
    swizzles) compile to HGMMA without spills; the main kernel's dQ goes out by TMA reduce-adds (UTMAREDG)."""
    c = AttentionBwdConfig(d, tk.bf16, causal, deterministic)
    sass = compiled_clean(_attention_bwd(c).kernel, kernel_args(d, causal, not c.dq_pass))
    assert ("UTMAREDG" in sass) == (not c.dq_pass)
    assert re.search(rf"HGMMA\.64x{d // 2}x16\.F32\.BF16 R\d+, R\d+, gdesc", sass)   # dV, dK: P^T, dS^T in registers
    if c.dq_pass:
        compiled_clean(_attention_bwd_dq(c).kernel, kernel_args(d, causal, False, dq_pass=True))


@pytest.mark.parametrize("d,causal", [(64, True), (128, True), (256, True), (128, False)])
def test_the_snake_task_order_compiles_without_spills(d, causal):
    """snake (and the dQ pass's dq_snake): the round's mirror, a few integer operations a task, within the
    registers."""
    c = AttentionBwdConfig(d, tk.bf16, causal, snake=True, dq_snake=True)
    compiled_clean(_attention_bwd(c).kernel, kernel_args(d, causal, not c.dq_pass))
    if c.dq_pass:                                  # (and the dQ pass's, dq_snake)
        compiled_clean(_attention_bwd_dq(c).kernel, kernel_args(d, causal, False, dq_pass=True))


@pytest.mark.parametrize("d,causal,stages", [(64, False, 2), (64, True, 3), (64, False, 0), (128, True, 1),
                                             (128, False, 2)])
def test_the_dq_storer_compiles_without_spills(d, causal, stages):
    """The main kernel at 64 query rows a step with its dQ through the storer warp (or not, 0): within the
    registers, its rings in shared memory."""
    c = AttentionBwdConfig(d, tk.bf16, causal, dq_storer=stages, q_rows=64)
    compiled_clean(_attention_bwd(c).kernel, kernel_args(d, causal, not c.dq_pass))


@pytest.mark.parametrize("d,causal,options", EARLY_P_CASES)
def test_p_computed_while_dp_runs_compiles_without_spills(d, causal, options):
    options = dict(options)
    c = AttentionBwdConfig(d, tk.bf16, bool(causal), options.pop("deterministic", False), **options)
    sass = compiled_clean(_attention_bwd(c).kernel, kernel_args(d, bool(causal), not c.dq_pass))
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x2" in sass or "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass) == c.p_first


@pytest.mark.parametrize("causal", [False, True])
def test_the_128_row_step_compiles(causal):
    """D64 at 128 query rows a step: within the consumers' 240 registers (S^T and dP^T of 128 queries, converted
    for dV and dK a 64-query band at a time), the wgmmas asynchronous, S^T and dP^T 128 wide."""
    c = AttentionBwdConfig(64, tk.bf16, causal, q_rows=128)
    sass = compiled_clean(_attention_bwd(c).kernel, kernel_args(64, causal, True))
    assert len(re.findall(r"HGMMA\.64x128x16\.F32\.BF16", sass)) >= 2                 # S^T, dP^T


def test_small_kernels_compile_without_spills():
    for d in (64, 128, 256):
        x, rows, work = torch.empty(1, 2, 512, d, dtype=BF16), torch.empty(1, 2, 512), torch.empty(1, 2, 512, d)
        for zero_dq in (False, True):
            r = prep_kernel(d, tk.bf16, zero_dq).resources(x, x, rows, rows, rows, *[work] * zero_dq)
            assert r.spill_stores == r.spill_loads == 0
        assert convert_kernel(d, tk.bf16).resources(work, x, 0.1).spill_stores == 0


# -- on the GPU ------------------------------------------------------------------------------------------------

GPU_CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype, scale
    (2, 4, 4, 1024, 1024, 128, False, BF16, None), (2, 4, 4, 1024, 1024, 128, True, BF16, None),
    (2, 4, 4, 1000, 1000, 64, True, FP16, None), (1, 8, 2, 777, 1500, 128, "bottom_right", BF16, None),
    (1, 8, 1, 1500, 777, 64, "bottom_right", BF16, -0.2), (2, 4, 2, 513, 257, 128, False, FP16, 0.0),
    (1, 4, 4, 1, 300, 64, False, BF16, None), (1, 2, 2, 300, 1, 128, True, BF16, None),
    (1, 4, 2, 1024, 1024, 256, True, BF16, None), (1, 4, 2, 700, 900, 256, False, FP16, None),
]


@gpu_util.on_gpu
@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype,scale", GPU_CASES)
def test_gpu_gradients_match_float64(b, h, hkv, n, nk, d, causal, dtype, scale):
    q, k, v, do = inputs(b, h, hkv, n, nk, d, dtype, device="cuda")
    check(backward(q, k, v, do, causal, scale), (q, k, v, do), dtype, causal, scale)


@gpu_util.on_gpu
@pytest.mark.parametrize("d", range(16, 257, 16))
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_every_head_dim(d, causal):
    q, k, v, do = inputs(1, 4, 2, 300, 333, d, BF16, device="cuda")
    check(backward(q, k, v, do, causal, None), (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("d,causal,stages", [(64, False, 0), (64, True, 0), (64, False, 2), (64, True, 3),
                                             (64, False, 1), (128, False, 1), (128, True, 2)])
def test_gpu_dq_through_the_storer_warp_or_not(d, causal, stages):
    q, k, v, do = inputs(2, 4, 2, 1000, 1100, d, BF16, device="cuda")
    check(backward(q, k, v, do, causal, None, options=dict(dq_storer=stages, q_rows=64)), (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("causal,n,nk,hkv", [(False, 1000, 1100, 2), (True, 1000, 1100, 2),
                                             ("bottom_right", 777, 1500, 1), (False, 4096, 4096, 4)])
def test_gpu_128_query_rows_a_step(causal, n, nk, hkv):
    q, k, v, do = inputs(2, 4, hkv, n, nk, 64, BF16, device="cuda")
    check(backward(q, k, v, do, causal, None, options=dict(q_rows=128)), (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("d,causal,deterministic,options", DQ_TILE_CASES)
def test_gpu_the_dq_pass_tiles(d, causal, deterministic, options):
    q, k, v, do = inputs(2, 4, 2, 1000, 1100, d, BF16, device="cuda")
    check(backward(q, k, v, do, causal, None, deterministic, options=options), (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("d,causal,options", [(128, True, dict(snake=False)), (64, "bottom_right", dict(snake=True)),
                                            (128, True, dict(snake=True, group=1)), (256, True, dict(snake=True)),
                                            (256, True, dict(dq_snake=True))])
def test_gpu_the_snake_task_order(d, causal, options):
    q, k, v, do = inputs(2, 8, 2, 3000, 3100, d, BF16, device="cuda")    # (96-100 tasks: one round on 132 SMs)
    check(backward(q, k, v, do, causal, None, options=options), (q, k, v, do), BF16, causal)
    q, k, v, do = inputs(2, 8, 8, 4096, 4096, d, BF16, device="cuda")    # (512 tasks: rounds 1 and 3 reversed)
    check(backward(q, k, v, do, causal, None, options=options), (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("d,causal,options", EARLY_P_CASES)
def test_gpu_p_computed_while_dp_runs(d, causal, options):
    options = dict(options)
    deterministic = options.pop("deterministic", False)
    q, k, v, do = inputs(2, 4, 2, 1000, 1100, d, BF16, device="cuda")
    check(backward(q, k, v, do, causal, None, deterministic, options=options), (q, k, v, do),
          BF16, causal)


@gpu_util.on_gpu
@pytest.mark.parametrize("d,causal", [(64, False), (128, True), (256, False)])
def test_gpu_deterministic_gradients_are_bit_identical(d, causal):
    q, k, v, do = inputs(2, 8, 2, 2048, 2048, d, BF16, device="cuda")
    runs = [backward(q, k, v, do, causal, None, deterministic=True) for _ in range(3)]
    assert all(torch.equal(x, y) for run in runs[1:] for x, y in zip(runs[0], run))
    check(runs[0], (q, k, v, do), BF16, causal)


@gpu_util.on_gpu
def test_gpu_loss_backward_matches_torch_sdpa():
    q, k, v, do = (x.requires_grad_() for x in inputs(2, 8, 8, 2048, 2048, 128, BF16, device="cuda"))
    attention(q, k, v, causal=True).backward(do)
    ours = [x.grad.clone() for x in (q, k, v)]
    check(ours, (q, k, v, do), BF16, True)


@pytest.mark.parametrize("rows,heads", [(32, 256), (8, 256), (128, 64), (32, 64)])
def test_causal_task_order_deals_every_block_every_row(rows, heads):
    """The causal kernels' task order (policy.task_group) on the H200's 132 persistent blocks: a block's steps (a
    key tile's shrink with its row) stay within 4% of the average at N4096, N1024 and N16384 (B16 H16, B4 H16);
    the template's default rows of 8 gave a block every fourth row (11% over at N4096, 37% at N1024). With the
    snake (every other full round in reverse, tk.templates.Grouped's) the busiest block is no busier, and within
    3.5% also at GQA B8 H32/8 N4096 (64 key/value heads; 7% without)."""
    from tkpy.templates import Grouped, grouped_order

    def busiest(group, snake=False):
        steps = [0] * 132
        for i in range(rows * heads):
            row, _ = grouped_order(Grouped(group, snake).dealt(i, 132, rows * heads), rows, heads, group)
            steps[i % 132] += 2 * rows - 2 * int(getattr(row, "value", row))
        return max(steps) / (sum(steps) / 132)

    group = policy.task_group(True)
    if (rows, heads) != (32, 64):
        assert busiest(group) < 1.04
    assert busiest(group, snake=True) <= busiest(group) and busiest(group, snake=True) < 1.035


@pytest.mark.parametrize("d,causal,deterministic,options", DQ_TILE_CASES)
def test_the_dq_pass_tiles(d, causal, deterministic, options):
    """The dQ pass's key/value tiles and ring other than DQ_TILES' (D256: 64 keys a tile in one stage, or 48 with
    two): partial query and key tiles, GQA, causal corners."""
    q, k, v, do = inputs(1, 4, 2, 150, 170, d, BF16)
    check(backward(q, k, v, do, causal, None, deterministic, options=options), (q, k, v, do), BF16, causal)


@pytest.mark.parametrize("causal,options", [(True, dict(snake=True)), ("bottom_right", dict(snake=True, group=1)),
                                            (False, dict(snake=True, group=3))])
def test_the_snake_task_order(causal, options, monkeypatch):
    """snake (and a group of its own): on 2 persistent blocks (an H200's 132 stood in for), 7 key tiles' tasks (MQA)
    dealt over 4 rounds, the odd full one reversed, the last, partial and odd, as it is: gradients against
    float64."""
    import sys
    monkeypatch.setattr(sys.modules["tkpy.templates.lcf"], "multiprocessors", lambda tensor: 2)
    q, k, v, do = inputs(1, 4, 1, 257, 846, 128, BF16)         # (shapes of their own: the template caches grids)
    check(backward(q, k, v, do, causal, None, options=options), (q, k, v, do), BF16, causal)


def test_the_dq_pass_snake_task_order(monkeypatch):
    """dq_snake (the dQ pass's order, deterministic=True): on 2 persistent blocks, the query tiles' tasks of 4 heads
    dealt over several rounds, the odd full ones reversed: gradients against float64, bit-identical from run to
    run."""
    import sys
    monkeypatch.setattr(sys.modules["tkpy.templates.lcf"], "multiprocessors", lambda tensor: 2)
    q, k, v, do = inputs(1, 4, 2, 300, 330, 64, BF16)
    runs = [backward(q, k, v, do, True, None, True, options=dict(dq_snake=True)) for _ in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(*runs))
    check(runs[0], (q, k, v, do), BF16, True)
