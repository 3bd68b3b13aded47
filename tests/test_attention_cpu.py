"""kernels/attention.py in the CPU interpreter (real TMA / mbarrier / wgmma semantics and protocol checks) at
small sizes: odd and unequal lengths, causal (torch's top-left and bottom-right), GQA/MQA, bf16/fp16, head
dims 64/128/256, several tasks per persistent block; against an explicit float64 softmax and torch's SDPA.
Plus the input checks, NVRTC compiles and SASS of every variant. No GPU needed."""
from __future__ import annotations

import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F

import gpu_util
from gpu_util import rel_err
from kernels import attention as att
from kernels.attention import attention

rand = functools.partial(gpu_util.rand, device="cpu")
BF16, FP16 = torch.bfloat16, torch.float16


def reference(q, k, v, causal=False, scale=None):
    """float64 softmax(q k^T * scale, masked) v and the log-sum-exp; rows that see no key give 0 and -inf."""
    n, nk, d = q.shape[2], k.shape[2], q.shape[3]
    rep = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(rep, dim=1) for x in (k, v))
    s = q.double() @ k.transpose(-1, -2) * (1 / math.sqrt(d) if scale is None else scale)
    if causal:
        offset = nk - n if causal == "bottom_right" else 0
        s = s.masked_fill(torch.arange(nk)[None] > torch.arange(n)[:, None] + offset, -math.inf)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, torch.logsumexp(s, -1)


def check(o, lse, ref, ref_lse, n):
    assert o.shape == ref.shape and lse.shape == ref_lse.shape
    assert rel_err(o, ref) < 1e-2
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isinf(lse) & (lse < 0), ~seen), "rows that see no key have lse -inf, others not"
    assert (lse[seen] - ref_lse[seen]).abs().max() < 1e-3


CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype
    (1, 2, 2, 200, 130, 64, False, BF16),
    (1, 2, 2, 77, 300, 128, False, FP16),
    (2, 2, 1, 64, 64, 64, False, BF16),                 # MQA, one partial tile each
    (1, 2, 2, 200, 130, 64, True, BF16),                # top-left, n > n_k
    (1, 4, 2, 77, 300, 128, True, FP16),                # GQA, n < n_k
    (1, 4, 1, 130, 200, 64, "bottom_right", BF16),
    (1, 2, 2, 300, 77, 64, "bottom_right", BF16),       # the first 223 rows see no key
    (1, 1, 1, 100, 100, 256, True, BF16),
    (1, 1, 1, 1, 1, 64, True, FP16),
]


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", CASES)
def test_attention_matches_float64(monkeypatch, b, h, hkv, n, nk, d, causal, dtype):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = rand(b, h, n, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype)
    o, lse = attention(q, k, v, causal=causal, return_lse=True)
    assert o.dtype == dtype and lse.dtype == torch.float32
    check(o, lse, *reference(q, k, v, causal), n)


@pytest.mark.parametrize("n,nk", [(200, 130), (77, 300), (128, 128)])
def test_causal_is_torchs_is_causal_and_bottom_right_its_lower_right_bias(monkeypatch, n, nk):
    """causal=True against SDPA(is_causal=True) (top-left) on float32 copies, 'bottom_right' against
    torch.nn.attention.bias.causal_lower_right."""
    from torch.nn.attention.bias import causal_lower_right
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = rand(1, 2, n, 64, dtype=BF16), rand(1, 2, nk, 64, dtype=BF16), rand(1, 2, nk, 64, dtype=BF16)
    qf, kf, vf = q.float(), k.float(), v.float()
    assert rel_err(attention(q, k, v, causal=True), F.scaled_dot_product_attention(qf, kf, vf, is_causal=True)) < 1e-2
    if n <= nk:     # (SDPA's lower-right bias leaves NaN rows when n > n_k)
        lower_right = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=causal_lower_right(n, nk))
        assert rel_err(attention(q, k, v, causal="bottom_right"), lower_right) < 1e-2
    assert rel_err(attention(q, k, v), F.scaled_dot_product_attention(qf, kf, vf)) < 1e-2


@pytest.mark.parametrize("causal,pingpong,stages,overlap", [
    (False, True, None, True), (True, True, None, True), (True, False, None, True), (True, True, 2, True),
    (True, True, None, False), (False, False, 2, False)])
def test_several_tasks_per_persistent_block(causal, pingpong, stages, overlap):
    """8 tasks over 3 blocks: the ring of stages runs on across tasks of different lengths (causal), the
    longest first, the warpgroups taking turns (or in lockstep), each softmax overlapping the previous P V
    (or not); GQA; lengths that are not multiples of 128; a custom scale."""
    n, nk, d = 460, 450, 64
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o = gpu_util.poisoned(1, 2, n, d, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, 2, 512, dtype=torch.float32, device="cpu")
    args = [q, k, v, o, lse, 0.1 * att.LOG2E] + ([0] if causal else [])
    att._attention(d, att.DTYPES[BF16], causal, pingpong, stages, overlap).kernel.interpret[(3,)](*args)
    check(o, lse[..., :n], *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("scale", [-0.2, -1.0, 0.0, -0.0])
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_negative_and_zero_scales(monkeypatch, scale, causal):
    """The kernel's running max is of the raw scores, valid for a positive scale: attention() runs a negative
    scale on -k with |scale| and a zero scale on zero keys (uniform weights over the keys a row sees)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = rand(1, 2, 150, 64, dtype=BF16), rand(1, 1, 200, 64, dtype=BF16), rand(1, 1, 200, 64, dtype=BF16)
    o, lse = attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    check(o, lse, *reference(q, k, v, causal, scale=scale), 150)


@pytest.mark.parametrize("d,stages,kv,causal", [(128, 2, 176, False), (128, 2, 176, True), (64, None, 192, True)])
def test_wider_key_value_tiles(d, stages, kv, causal):
    """_attention's kv (key/value rows per tile) other than CONFIGS': partial last tiles, causal diagonals that
    cross tiles at other offsets, several tasks per block."""
    n, nk = 300, 400                                   # 400 keys: 2 full 176-row tiles and 48 rows (or 192 + 192 + 16)
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o = gpu_util.poisoned(1, 2, n, d, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, 2, 384, dtype=torch.float32, device="cpu")
    kernel = att._attention(d, att.DTYPES[BF16], causal, True, stages, True, kv).kernel
    assert kernel.name.endswith(f"_kv{kv}")
    kernel.interpret[(2,)](q, k, v, o, lse, 0.1 * att.LOG2E, *([0] if causal else []))
    check(o, lse[..., :n], *reference(q, k, v, causal, scale=0.1), n)


def test_kv_must_suit_wgmma():
    with pytest.raises(ValueError, match="multiple of 16 from 16 to 256"):
        att._attention(64, att.DTYPES[BF16], kv=200)


def test_strided_inputs_are_read_in_place_and_others_copied(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 150, 2, 64, dtype=BF16).transpose(1, 2)          # (B, N, H, D) viewed as (B, H, N, D)
    k, v = (rand(1, 140, 2, 64, dtype=BF16).transpose(1, 2) for _ in range(2))
    k_odd = rand(1, 2, 140, 68, dtype=BF16)[..., :64]           # 136-byte rows: not 16-byte aligned
    assert att._usable(q) is q and att._usable(k) is k and att._usable(k_odd) is not k_odd
    for kk in (k, k_odd):
        o, lse = attention(q, kk, v, causal=True, return_lse=True)
        check(o, lse, *reference(q, kk, v, True), 150)


def test_empty_query_and_batch(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    k = rand(1, 2, 10, 64, dtype=BF16)
    o, lse = attention(torch.empty(1, 2, 0, 64, dtype=BF16), k, k, causal=True, return_lse=True)
    assert o.shape == (1, 2, 0, 64) and lse.shape == (1, 2, 0)


def test_clear_errors(monkeypatch):
    q = torch.zeros(1, 2, 128, 64, dtype=BF16)
    with pytest.raises(ValueError, match="runs on CUDA tensors .* TKPY_INTERPRET=1"):
        attention(q, q, q)
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    bad = [
        ((q[..., :32], q[..., :32], q[..., :32]), "head dim 32 is not supported"),
        ((torch.zeros(1, 3, 128, 64, dtype=BF16), q, q), r"multiple of key/value heads"),
        ((q.float(), q.float(), q.float()), "supports bf16 and fp16"),
        ((q, q.half(), q), "same dtype"),
        ((q, q, q[:, :1]), "same shape"),
        ((q, torch.zeros(2, 2, 128, 64, dtype=BF16), torch.zeros(2, 2, 128, 64, dtype=BF16)), "batch"),
        ((q, q[..., :0, :], q[..., :0, :]), "zero keys"),
        ((q[0], q, q), r"\(batch, heads, seq, head_dim\)"),
    ]
    for args, match in bad:
        with pytest.raises(ValueError, match=match):
            attention(*args)
    with pytest.raises(ValueError, match="causal must be"):
        attention(q, q, q, causal="diagonal")


@pytest.mark.parametrize("d,dtype,causal,stages,kv", [
    (64, BF16, False, None, None), (64, BF16, True, None, None), (128, FP16, True, None, None),
    (128, BF16, False, None, None), (256, BF16, True, None, None), (64, BF16, True, None, 128),
    (64, BF16, False, 5, None), (128, BF16, True, 4, 96)])
def test_variants_compile_to_hgmma_without_spills(d, dtype, causal, stages, kv):
    """The default kernels compile without spills, and so do benchmarks/bench_attention.py's other tile heights
    and stage counts (OTHER_CONFIGS)."""
    q, lse = torch.empty(1, 2, 256, d, dtype=dtype), torch.empty(1, 2, 256)
    kernel = att._attention(d, att.DTYPES[dtype], causal, att.PINGPONG, stages, att.OVERLAP, kv).kernel
    args = [q, q, q, q, lse, 1.0] + ([0] if causal else [])
    r = kernel.resources(*args)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0
    assert not any("Performance Loss" in w for w in r.warnings), r.warnings      # wgmma kept asynchronous
    sass = kernel.sass(*args)
    assert "HGMMA" in sass and "STL" not in sass


@pytest.mark.parametrize("d", [64, 128])
def test_softmax_is_one_ffma_and_one_mufu_ex2_per_score(d):
    """P = exp2(S * scale_log2 - shift) is an FFMA and a MUFU.EX2 per score, without the range fix-up of a non-ftz
    exp2 (FSETP + FSEL / predicated FMUL) and without a separate scale multiply or max subtraction."""
    q, lse = torch.empty(1, 2, 256, d, dtype=BF16), torch.empty(1, 2, 256)
    sass = att._attention(d, att.DTYPES[BF16], False).kernel.sass(q, q, q, q, lse, 1.0)
    count = lambda op: len(re.findall(rf"\b{op}\b", sass))   # noqa: E731
    scores = 16 * att.CONFIGS[d][0] // 32               # per lane per step; the softmax is inlined twice (k == 0 or not)
    assert 2 * scores <= count("MUFU.EX2") <= 2 * scores + 8
    assert count("FFMA") >= 2 * scores
    assert count("FSETP") <= 4
    out = 16 * d // 32                                  # O elements per lane
    assert count("FMUL") <= 4 * out + 16                # O's rescales (twice) and final division: none per score


@pytest.mark.parametrize("blocks,n", [(3, 600), (2, 640), (4, 300)])
def test_causal_tasks_dealt_as_a_snake_cover_every_tile(blocks, n):
    """Causal tasks go to the persistent blocks as a snake (odd rounds reversed, a last partial round too):
    every query tile is still computed exactly as the reference, for round counts odd and even."""
    d = 64
    q, k, v = rand(1, 1, n, d, dtype=BF16), rand(1, 1, n, d, dtype=BF16), rand(1, 1, n, d, dtype=BF16)
    o = gpu_util.poisoned(1, 1, n, d, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, 1, att.cdiv(n, 128) * 128, dtype=torch.float32, device="cpu")
    args = [q, k, v, o, lse, 0.125 * att.LOG2E, 0]
    att._attention(d, att.DTYPES[BF16], True).kernel.interpret[(blocks,)](*args)
    check(o, lse[..., :n], *reference(q, k, v, True, scale=0.125), n)


@pytest.mark.parametrize("causal", [False, True])
def test_sections_of_fewer_heads_cover_every_tile(causal, monkeypatch):
    """Long keys make the task order's sections narrower (SECTION_BYTES of K and V per section): with room
    for 2 of 5 heads, sections of 2, 2 and 1 heads still compute every tile."""
    d, n, heads = 64, 300, 5
    monkeypatch.setattr(att, "SECTION_BYTES", 2 * n * d * 2 * 2)
    att._attention.cache_clear()
    q, k, v = (rand(1, heads, n, d, dtype=BF16) for _ in range(3))
    o = gpu_util.poisoned(1, heads, n, d, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, heads, att.cdiv(n, 128) * 128, dtype=torch.float32, device="cpu")
    args = [q, k, v, o, lse, 0.125 * att.LOG2E] + ([0] if causal else [])
    try:
        att._attention(d, att.DTYPES[BF16], causal).kernel.interpret[(4,)](*args)
    finally:
        att._attention.cache_clear()
    check(o, lse[..., :n], *reference(q, k, v, causal, scale=0.125), n)
