"""kernels/attention_forward.py against float64 / float32 references on the GPU (skipped without a Hopper GPU): odd and
unequal lengths, causal (top-left as torch, and bottom-right), GQA/MQA, bf16/fp16, head dims 64/128/256 and the others
in multiples of 16, strided inputs; outputs and log-sum-exp buffers poisoned with NaN."""

import re

import pytest
import torch
import torch.nn.functional as F

from gpu_util import attention_reference as reference, poisoned, rand, rel_err, requires_gpu
import tkpy.kernels as tkpy_kernels

pytestmark = requires_gpu
BF16, FP16 = torch.bfloat16, torch.float16


def run_poisoned(q, k, v, causal=False, scale=None, **options):
    """The kernel attention() picks, or the one _launch's `options` name, on NaN-filled output and log-sum-exp
    buffers (the latter padded to a task's rows, 128 or 192): every element of O and of L's first n rows must
    be written."""
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    b, h, n, d = q.shape
    o = poisoned(b, h, n, d, dtype=q.dtype)
    lse = poisoned(b, h, max(policy.lse_rows(n, groups) for groups in (2, 3)), dtype=torch.float32)
    att._launch(q, k, v, o, lse, causal, scale, **options)
    return o, lse[..., :n]


def qkv(b, h, hkv, n, nk, d, dtype=BF16):
    """Random q (b, h, n, d) and k, v (b, hkv, nk, d)."""
    return rand(b, h, n, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype)


def check(o, lse, ref, ref_lse):
    assert rel_err(o, ref) < 1e-2
    seen = torch.isfinite(ref_lse)
    assert not torch.isnan(lse).any()
    assert torch.equal(torch.isinf(lse) & (lse < 0), ~seen), "rows that see no key have lse -inf, others not"
    assert (lse[seen] - ref_lse[seen]).abs().max() < 1e-3


CASES = [  # b, h, h_kv, n, n_k, d, causal, dtype
    (1, 2, 2, 128, 128, 64, False, BF16),
    (2, 4, 4, 512, 384, 128, False, BF16),
    (1, 8, 2, 256, 1024, 64, False, FP16),
    (2, 4, 1, 384, 256, 128, False, BF16),
    (1, 16, 16, 2048, 2048, 128, False, BF16),
    (2, 3, 3, 1000, 777, 64, False, BF16),
    (1, 4, 2, 1, 1, 128, False, FP16),
    (1, 2, 2, 4099, 129, 128, False, BF16),
    (1, 4, 4, 1000, 1000, 256, False, BF16),
    (2, 4, 4, 1024, 1024, 128, True, BF16),
    (1, 4, 4, 1000, 1000, 64, True, FP16),
    (1, 8, 2, 700, 1300, 128, True, BF16),
    (1, 8, 1, 1300, 700, 64, True, BF16),
    (1, 2, 2, 2048, 2048, 256, True, FP16),
    (1, 4, 4, 300, 1000, 128, "bottom_right", BF16),
    (1, 4, 2, 1000, 300, 64, "bottom_right", FP16),     # the first 700 rows see no key
    (4, 16, 4, 2048, 2048, 128, True, BF16),            # 1024 tasks: several per persistent block
    (1, 4, 2, 4200, 4300, 128, True, BF16),             # causal pairs (33 query tiles a head, a tile of padding)
    (1, 2, 2, 4096, 4096, 128, "bottom_right", FP16),   # ... and 32
    (8, 16, 4, 1024, 1024, 128, True, BF16),            # D128 causal on 3 warpgroups, one ring (CAUSAL_GROUP_ROWS)
    (8, 16, 8, 1100, 1300, 128, "bottom_right", FP16),  # ... odd lengths
    (8, 16, 16, 1024, 1024, 64, False, FP16),
]
OTHER_HEAD_DIMS = [  # head dims between the tuned ones (tkpy.kernels.attention_forward.tuned: the next tuned one's settings)
    (2, 4, 2, 1000, 1300, 96, False, BF16),             # D128's: Q in registers, split rings, cluster pairs
    (1, 8, 8, 2048, 2048, 96, True, FP16),
    (2, 4, 4, 777, 1024, 80, False, BF16),
    (1, 4, 2, 1500, 1500, 80, True, BF16),
    (1, 4, 4, 1024, 1024, 112, False, BF16),
    (2, 4, 4, 1000, 700, 48, False, FP16),              # D64's: 3 consumer warpgroups, split rings
    (1, 8, 4, 2048, 2048, 32, True, BF16),
    (2, 2, 2, 640, 900, 16, "bottom_right", BF16),
    (2, 4, 2, 700, 1000, 160, True, BF16),              # D256's: split rings of wide_kv's tiles, cluster pairs
    (1, 4, 4, 1000, 1000, 192, False, FP16),
    (1, 4, 2, 1500, 1500, 192, True, BF16),             # causal pairs (12 query tiles a head)
    (1, 2, 2, 1300, 1300, 160, True, BF16),             # ... and 11, with a tile of padding
    (1, 2, 2, 2048, 2048, 256, True, FP16),
    (1, 2, 1, 513, 800, 224, "bottom_right", BF16),
    (1, 2, 2, 300, 300, 240, False, BF16),
]


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", CASES + OTHER_HEAD_DIMS)
def test_attention_forward(b, h, hkv, n, nk, d, causal, dtype):
    q, k, v = qkv(b, h, hkv, n, nk, d, dtype)
    o, lse = run_poisoned(q, k, v, causal)
    ref, ref_lse = reference(q, k, v, causal)
    check(o, lse, ref, ref_lse)
    if causal != "bottom_right":     # torch's own kernel, on float32 copies (is_causal is top-left)
        kf, vf = (x.float().repeat_interleave(h // hkv, 1) for x in (k, v))
        assert rel_err(o, F.scaled_dot_product_attention(q.float(), kf, vf, is_causal=bool(causal))) < 1e-2


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", CASES[::3] + CASES[-1:])
def test_attention_without_lse(b, h, hkv, n, nk, d, causal, dtype):
    """lse=None, as attention() without return_lse runs: kernels that compute no log-sum-exp, on a poisoned O."""
    from tkpy.kernels import attention_forward as att
    q, k, v = qkv(b, h, hkv, n, nk, d, dtype)
    o = poisoned(b, h, n, d, dtype=q.dtype)
    att._launch(q, k, v, o, None, causal, None)
    assert rel_err(o, reference(q, k, v, causal)[0]) < 1e-2


def test_torch_facing_function_and_lse_view():
    from tkpy.kernels import attention
    q, k, v = (rand(2, 4, 333, 128, dtype=BF16) for _ in range(3))
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    assert o.shape == q.shape and o.is_contiguous() and lse.shape == (2, 4, 333)
    check(o, lse, *reference(q, k, v, True))
    assert torch.equal(attention(q, k, v, causal=True), o)          # deterministic


@pytest.mark.parametrize("causal", [False, True])
def test_attention_runs_three_warpgroups_with_split_rings_at_d64(causal):
    """At D64 with many waves of tasks attention() runs 3 consumer warpgroups with split K/V rings: the same
    output, bit for bit, as that kernel launched by name, and the float64 reference's."""
    from tkpy.kernels import attention_policy as policy
    from tkpy.templates.common import multiprocessors
    q, k, v = qkv(8, 16, 4, 2048, 2048, 64)
    assert policy.consumer_warpgroups_for(*q.shape, multiprocessors(q)) == 3
    o, lse = tkpy_kernels.attention(q, k, v, causal=causal, return_lse=True)
    check(o, lse, *reference(q, k, v, causal))
    o3, _ = run_poisoned(q, k, v, causal, consumer_warpgroups=3, split_kv=True)
    assert torch.equal(o, o3)


@pytest.mark.parametrize("scale", [1.0, 0.01])
def test_large_and_small_scales(scale):
    """scale 1 with d=128 makes scores of tens: the running max must keep exp2 in range."""
    from tkpy.kernels import attention
    q, k, v = (rand(1, 4, 700, 128, dtype=BF16) for _ in range(3))
    o, lse = attention(q, k, v, causal=True, scale=scale, return_lse=True)
    check(o, lse, *reference(q, k, v, True, scale=scale))


@pytest.mark.parametrize("scale", [-0.125, -1.0, 0.0])
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_negative_and_zero_scales(scale, causal):
    """The kernel's running max is of the raw scores (valid for a positive scale): a negative scale runs on -k with
    |scale|, a zero one on zero keys (uniform weights over the keys a row sees)."""
    q, k, v = qkv(2, 4, 2, 700, 900, 128)
    check(*run_poisoned(q, k, v, causal, scale), *reference(q, k, v, causal, scale=scale))


def test_strided_bnhd_inputs_are_read_in_place():
    """(B, N, H, D) tensors viewed as (B, H, N, D): TMA tensor maps and the Q loads use their strides."""
    from tkpy.kernels import attention_forward as att
    q = rand(2, 515, 8, 128, dtype=BF16).transpose(1, 2)
    k, v = (rand(2, 600, 2, 128, dtype=BF16).transpose(1, 2) for _ in range(2))
    assert att._usable(q) is q and att._usable(k) is k
    check(*tkpy_kernels.attention(q, k, v, causal="bottom_right", return_lse=True), *reference(q, k, v, "bottom_right"))
    k_copied = rand(2, 2, 600, 132, dtype=BF16)[..., :128]         # 264-byte rows: copied with .contiguous()
    assert att._usable(k_copied) is not k_copied
    check(*tkpy_kernels.attention(q, k_copied, v, return_lse=True), *reference(q, k_copied, v))


def test_expanded_inputs_are_copied():
    """K and V broadcast over the batch and Q over the heads (stride 0, .expand()): a TMA map cannot repeat a dim,
    so attention() copies them (_usable) rather than read past their storage."""
    from tkpy.kernels import attention_forward as att
    q = rand(2, 1, 300, 128, dtype=BF16).expand(-1, 4, -1, -1)
    k, v = (rand(1, 2, 700, 128, dtype=BF16).expand(2, -1, -1, -1) for _ in range(2))
    assert att._usable(k) is not k and att._usable(k).is_contiguous()
    for causal in (False, True):
        check(*tkpy_kernels.attention(q, k, v, causal=causal, return_lse=True), *reference(q, k, v, causal))


def test_attention_rejects_what_it_cannot_do():
    from tkpy.kernels import attention
    q = torch.empty(1, 2, 128, 64, dtype=BF16, device="cuda")
    with pytest.raises(ValueError, match="head dim 40 is not supported"):
        attention(q[..., :40], q[..., :40], q[..., :40])
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention(torch.empty(1, 3, 128, 64, dtype=BF16, device="cuda"), q, q)
    with pytest.raises(ValueError, match="bf16 and fp16"):
        attention(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="same dtype"):
        attention(q, q.half(), q)
    with pytest.raises(ValueError, match="same device"):
        attention(q, q.cpu(), q)
    with pytest.raises(ValueError, match="causal must be"):
        attention(q, q, q, causal="yes")


@pytest.mark.parametrize("pingpong,overlap,stages,kv", [
    (True, True, None, None), (True, False, None, None), (False, True, None, None), (False, False, None, None),
    (False, False, 2, None), (True, True, 4, 96)])
@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, True)])
def test_kernel_variants(pingpong, overlap, stages, kv, d, causal):
    """Every variant benchmarks/bench_attention.py times: warpgroups taking turns or not, softmax overlapping the
    previous P V or not, fewer stages, 96-row tiles in 4 stages; several tasks per persistent block, odd
    lengths."""
    stages = stages if d == 128 or stages is None else 3
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    o, lse = run_poisoned(q, k, v, causal, pingpong=pingpong, stages=stages, overlap=overlap, kv=kv,
                          consumer_warpgroups=2)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("d,causal,options", [
    (128, False, dict()), (128, True, dict()), (64, False, dict()), (64, "bottom_right", dict()),
    (128, False, dict(consumer_warpgroups=1)), (64, True, dict()), (128, False, dict(split_kv=True)),
    (192, False, dict(stale_shift=True)), (160, True, dict(stale_shift=True)), (256, False, dict(stale_shift=True))])
@pytest.mark.parametrize("scale,spike", [(2.0, False), (None, True)])
def test_stale_shift_redoes_the_steps_whose_max_grew(d, causal, options, scale, spike):
    """stale_shift (the default): P on the running shift, a step redone with the max where a row's P sums past
    2^RESCALE_SLACK. Keys growing along the sequence (scale 2: the maxes pass the shift by far more than the slack
    mid-task), or one key 40 times larger than the others in the middle (its P is inf on the shift before it: a
    kept step gives NaN)."""
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    k = k.float() * torch.linspace(1.0, 4.0, k.shape[2], device="cuda").view(1, 1, -1, 1)
    if spike:
        k[:, :, 700] *= 40.0
    k = k.to(q.dtype)
    o, lse = run_poisoned(q, k, v, causal, scale, **options)
    check(o, lse, *reference(q, k, v, causal, scale=scale))


@pytest.mark.parametrize("d,causal,q_registers", [(128, False, False), (128, True, False), (64, False, True),
                                                 (64, "bottom_right", True)])
def test_q_registers(d, causal, q_registers):
    """The other choice than the default of q_registers (each warp's query rows in registers for S = Q K^T, D128's
    default) with 2 consumer warpgroups."""
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    o, lse = run_poisoned(q, k, v, causal, q_registers=q_registers, consumer_warpgroups=2)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("n,nk", [(1100, 1300), (1300, 700)])
def test_without_q_preload(causal, n, nk):
    """q_preload=False at D128 (the default preloads): each task waits for its own Q at its start and moves it
    into registers (bottom-right with n > n_k: tasks of no steps among the others)."""
    q, k, v = qkv(2, 16, 8, n, nk, 128)
    o, lse = run_poisoned(q, k, v, causal, q_preload=False)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("causal", [True, "bottom_right"])
@pytest.mark.parametrize("d,groups,n", [(64, 3, 4096), (64, 3, 1000), (64, 3, 1090), (128, 2, 1050), (128, 2, 1100)],
                         ids=["3wg_lead2", "3wg_lead2_short", "3wg_lead0", "2wg_lead1", "2wg_lead0"])
@pytest.mark.parametrize("pad_first", [None, False], ids=["pad_first", "pad_last"])
def test_causal_padding(causal, d, groups, n, pad_first):
    """A partial query tile's padding before row 0 (causal's default: the first task's first `lead` warpgroups
    store nothing) or after row n-1 (pad_first=False)."""
    q, k, v = qkv(2, 16, 8, n, n + 70, d)
    options = dict(consumer_warpgroups=groups) | ({} if pad_first is None else dict(pad_first=pad_first))
    o, lse = run_poisoned(q, k, v, causal, **options)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("b,h,hkv,n,nk", [(2, 16, 8, 1024, 1300), (1, 8, 1, 2000, 777), (4, 16, 16, 256, 64)])
def test_cluster_pairs(b, h, hkv, n, nk, causal):
    """cluster=2: pairs of blocks on adjacent query tiles of one head, K and V multicast, one from each block (GQA
    and MQA, partial key tiles, several tasks per cluster; causal: the pair's tiles see different key tiles, the
    bottom-right cases with n > n_k tasks of no steps); D128 with one ring, D64 with 3 warpgroups and split rings
    (n chosen for an even number of 192-row tiles)."""
    q, k, v = qkv(b, h, hkv, n, nk, 128)
    o, lse = run_poisoned(q, k, v, causal, cluster=2)
    check(o, lse, *reference(q, k, v, causal))
    n64 = 384 * (n // 384 + 1) - 100
    q, k, v = qkv(b, h, hkv, n64, nk, 64)
    o, lse = run_poisoned(q, k, v, causal, cluster=2, consumer_warpgroups=3)
    check(o, lse, *reference(q, k, v, causal))
    q, k, v = qkv(b, h, hkv, n64 - 192, nk, 64)    # an odd number of 192-row tiles a head: the pairs add a tile of
    o, lse = run_poisoned(q, k, v, causal, cluster=2, consumer_warpgroups=3)    # padding (causal: before row 0)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("splits", [None, 1])
@pytest.mark.parametrize("b,h,hkv,n,nk", [(1, 4, 2, 512, 8200), (2, 2, 2, 300, 9000), (1, 8, 1, 1000, 16384),
                                         (2, 4, 2, 1000, 2100), (1, 4, 4, 256, 2100)])
def test_long_keys_split_rings(b, h, hkv, n, nk, splits):
    """attention()'s kernel for D128 non-causal from SPLIT_KEYS keys on: split K/V rings of 176-row tiles (in
    cluster pairs where a head's query tiles pair up; partial key tiles, GQA, MQA), or of 128-row tiles in 2 + 3
    stages where few query tiles read each key/value head's (streaming: 3 at B2 H2 N300, 2 at B1 H4 N256, those in
    cluster pairs with splits=1); these few tasks also split their keys (split-K, splits=None: attention()'s choice)
    or not (splits=1)."""
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    q, k, v = qkv(b, h, hkv, n, nk, 128)
    lse = torch.empty(b, h, policy.lse_rows(n), device=q.device)
    template, _ = att._prepared(q, k, v, q, lse, False, None, splits=splits)
    assert "_splitkv" in template.kernel.name
    assert ("_kv128_splitkv_3late" in template.kernel.name) == policy.streaming(q, k, 2)
    o, lse = run_poisoned(q, k, v, False, splits=splits)
    check(o, lse, *reference(q, k, v, False))


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,splits,groups", [
    (1, 32, 8, 128, 16384, 128, False, 4, 2), (1, 16, 16, 100, 5000, 64, False, 3, 2),
    (2, 8, 2, 300, 3000, 128, True, 2, 2), (1, 4, 4, 1000, 300, 128, "bottom_right", 2, 2),
    (1, 16, 4, 64, 8192, 64, True, 4, 2), (1, 2, 2, 130, 200, 128, False, 5, 2),
    (1, 8, 2, 200, 3000, 256, False, 3, 2), (1, 4, 4, 130, 2000, 256, "bottom_right", 4, 2),
    (1, 8, 8, 400, 9000, 64, False, 4, 3), (1, 8, 4, 200, 5000, 64, "bottom_right", 3, 3),
    (1, 8, 2, 200, 3000, 96, False, 3, 2), (1, 4, 4, 130, 2000, 80, True, 4, 2)])   # the combine's partial last block
def test_split_k(b, h, hkv, n, nk, d, causal, splits, groups):
    """splits > 1 (flash-decoding): each query tile's keys shared by `splits` tasks, their fp32 results merged by
    combine_kernel (GQA, MQA-like groups, causal both ways with rows that see no key, more splits than key tiles;
    D256, and 3 consumer warpgroups with D64's split rings)."""
    q, k, v = qkv(b, h, hkv, n, nk, d)
    o, lse = run_poisoned(q, k, v, causal, splits=splits, consumer_warpgroups=groups)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal", [
    (2, 32, 8, 1, 4096, 128, False), (1, 16, 2, 37, 3000, 64, False), (3, 8, 1, 64, 8192, 256, False),
    (1, 28, 4, 100, 5000, 128, False), (4, 32, 8, 4, 8192, 128, "bottom_right"), (2, 16, 2, 50, 1000, 64, True),
    (1, 8, 2, 37, 30, 128, "bottom_right"), (2, 32, 8, 64, 9000, 128, "bottom_right"),
    (2, 32, 8, 1, 8192, 96, False), (4, 32, 8, 4, 4096, 80, "bottom_right"), (2, 16, 2, 1, 5000, 160, False)])
def test_decoding_packs_gqa_heads(b, h, hkv, n, nk, d, causal):
    """attention() on decoding shapes: each key/value head's query heads run as one sequence (packed_heads; groups of
    4, 8 and 7; causal rows masked at their own positions, rows that see no key included), split-K where the tiles
    are few; output and log-sum-exp per query head."""
    from tkpy.kernels import attention_forward as att
    q, k, v = qkv(b, h, hkv, n, nk, d)
    assert att.packed_heads(q, hkv) == h // hkv
    o, lse = tkpy_kernels.attention(q, k, v, causal, return_lse=True)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,splits", [
    (2, 8, 2, 64, 4096, 128, False, None), (1, 8, 8, 200, 1000, 64, True, 1), (2, 4, 1, 8, 5000, 256, False, None),
    (1, 16, 4, 40, 3000, 128, "bottom_right", 3), (1, 4, 4, 300, 300, 128, True, 1),
    (1, 16, 4, 16, 9000, 128, False, None),              # D128 from 8192 keys: split rings
    (2, 8, 2, 8, 9000, 128, False, "serial"), (1, 8, 8, 100, 3000, 128, "bottom_right", "serial")])
def test_one_consumer_warpgroup(b, h, hkv, n, nk, d, causal, splits):
    """consumer_warpgroups=1 (tasks of 64 query rows, no turns), with split-K (splits_for's or given) or without;
    "serial": the serial schedule with one ring (overlap=False, split_kv=False) and splits_for's split-K."""
    q, k, v = qkv(b, h, hkv, n, nk, d)
    options = dict(overlap=False, split_kv=False) if splits == "serial" else dict(splits=splits)
    o, lse = run_poisoned(q, k, v, causal, consumer_warpgroups=1, **options)
    check(o, lse, *reference(q, k, v, causal))


def test_persistent_clusters_are_all_resident():
    """The LCF grid of a persistent clustered kernel holds no more clusters than the GPU runs at once
    (cuOccupancyMaxActiveClusters): a second wave would double the time (RESULTS.md run 117)."""
    from tkpy.kernels import attention_forward as att
    q, k, v = qkv(16, 16, 16, 4096, 4096, 128)
    o, lse = torch.empty_like(q), torch.empty(16, 16, 4096, device=q.device)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    template, args = att._prepared(q, k, v, o, lse, False, None, cluster=2)
    fits = template.kernel.max_active_clusters(*args)
    assert 1 <= fits <= sms // 2
    assert template.grid(*args) == (min(sms // 2, fits) * 2,)


@pytest.mark.parametrize("d,stages,kv", [(128, 2, 160), (128, 2, 176), (128, 4, 96), (64, None, 128), (64, None, 192),
                                        (64, 5, None)])
@pytest.mark.parametrize("causal", [False, True])
def test_other_key_value_tile_heights(d, stages, kv, causal):
    """Key/value tile heights other than the defaults (the kv option): partial last tiles, diagonals at other
    offsets within a tile, several tasks per persistent block."""
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    o, lse = run_poisoned(q, k, v, causal, stages=stages, kv=kv, consumer_warpgroups=2)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("d,pingpong,overlap,kv", [
    (d, *variant) for d in (64, 128) for variant in [(True, True, None), (True, False, None), (False, True, None)]
    + ([(True, True, 80), (True, True, 112)] if d == 64 else [])])
@pytest.mark.parametrize("causal", [False, True])
def test_three_consumer_warpgroups(d, pingpong, overlap, kv, causal):
    """consumer_warpgroups=3 with one K/V ring (192 query rows per task, the turns round a ring of 3;
    benchmarks/bench_attention.py's "3wg" variants; D64 also in 80- and 112-row tiles): GQA, odd lengths, several
    tasks per persistent block, the log-sum-exp buffer rounded up to 192 rows."""
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    o, lse = run_poisoned(q, k, v, causal, pingpong=pingpong, overlap=overlap, kv=kv, consumer_warpgroups=3,
                          split_kv=False)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", [
    (1, 2, 2, 192, 192, 64, False, BF16),
    (1, 8, 2, 256, 1024, 64, False, FP16),
    (1, 4, 4, 1000, 1000, 64, True, FP16),
    (1, 8, 1, 1300, 700, 64, True, BF16),
    (1, 4, 2, 1, 1, 64, True, FP16),
    (4, 16, 4, 1000, 300, 64, "bottom_right", BF16),    # 384 tasks, 192 of them of no steps: several in a row per block
    (1, 4, 4, 300, 1000, 128, "bottom_right", BF16),
    (8, 16, 16, 1024, 1024, 64, False, BF16)])
@pytest.mark.parametrize("split_kv", [True, False])
def test_three_consumer_warpgroups_cases(b, h, hkv, n, nk, d, causal, dtype, split_kv):
    """3 consumer warpgroups with split K/V rings (attention()'s D64 kernel for most shapes) and with one ring."""
    q, k, v = qkv(b, h, hkv, n, nk, d, dtype)
    o, lse = run_poisoned(q, k, v, causal, consumer_warpgroups=3, split_kv=split_kv)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("d", [64, 128])
def test_tasks_of_no_steps_in_a_row(d):
    """Bottom-right causal with many more queries than keys: half of the 256 tasks see no key, several in a row
    per persistent block; the consumer warpgroups' turns go round across tasks and those take none."""
    q, k, v = qkv(4, 16, 4, 1000, 300, d)
    check(*run_poisoned(q, k, v, "bottom_right"), *reference(q, k, v, "bottom_right"))


@pytest.mark.parametrize("d,options", [
    (128, {}), (64, {}), (256, {}), (128, dict(kv=128, stages=3, late_stages=3)),
    (128, dict(kv=128, stages=2, late_stages=3)), (64, dict(kv=160, stages=5, late_stages=5)),
    (64, dict(kv=224, stages=4, late_stages=3)), (128, dict(pingpong=False)), (64, dict(consumer_warpgroups=3)),
    (64, dict(consumer_warpgroups=3, stages=5, late_stages=5)), (64, dict(consumer_warpgroups=3, pingpong=False)),
    (128, dict(consumer_warpgroups=3)), (128, dict(kv=144, stages=2, late_stages=3, q_registers=True))])
@pytest.mark.parametrize("causal", [False, True])
def test_split_kv(d, options, causal):
    """split_kv=True (K and V in rings of their own; benchmarks/bench_attention.py's "splitkv" variants): the
    defaults per head dim (CONFIGS_SPLIT), other tile heights and stage counts, lockstep warpgroups, 3 consumer
    warpgroups; GQA, odd lengths, several tasks per persistent block."""
    q, k, v = qkv(2, 16, 8, 1100, 1300, d)
    o, lse = run_poisoned(q, k, v, causal, split_kv=True, **{"consumer_warpgroups": 2, **options})
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", [
    (1, 4, 2, 1, 1, 128, False, FP16),
    (1, 2, 2, 4099, 129, 128, False, BF16),
    (1, 8, 2, 700, 1300, 128, True, BF16),
    (1, 8, 1, 1300, 700, 64, True, BF16),
    (1, 4, 4, 300, 1000, 128, "bottom_right", BF16),
    (4, 16, 4, 1000, 300, 128, "bottom_right", FP16),    # half the tasks of no steps, several in a row per block
    (4, 16, 4, 2048, 2048, 128, True, BF16),             # 1024 tasks: several per persistent block
    (8, 16, 16, 1024, 1024, 64, False, FP16)])
def test_split_kv_cases(b, h, hkv, n, nk, d, causal, dtype):
    q, k, v = qkv(b, h, hkv, n, nk, d, dtype)
    o, lse = run_poisoned(q, k, v, causal, split_kv=True, consumer_warpgroups=2)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("n,nk,d,causal,options,last_kv", [
    (1024, 4096, 128, False, dict(consumer_warpgroups=2, split_kv=True), 48),     # 176-row split rings: 23 + 48 rows
    (1024, 4000, 128, False, dict(consumer_warpgroups=2, split_kv=True), 128),
    (1000, 1000, 128, False, dict(consumer_warpgroups=2), 112),                   # Q in registers, cluster pairs
    (1000, 1000, 128, True, dict(consumer_warpgroups=2), 64),                     # causal: a warpgroup's diagonal
    (1024, 1024, 128, True, dict(consumer_warpgroups=2), 64),                     # step (104 keys left: 64 rows)
    (700, 1000, 128, "bottom_right", dict(consumer_warpgroups=2), 64),
    (1000, 1000, 64, True, dict(consumer_warpgroups=3, split_kv=True), 64),
    (1030, 1030, 128, True, dict(consumer_warpgroups=2), 16),                     # 6 keys left: 16 rows
    (2000, 1000, 64, False, dict(consumer_warpgroups=3, split_kv=True), 112),
    (16, 1000, 128, False, dict(consumer_warpgroups=1, splits=4), 112),           # serial, split-K
    (16, 1000, 256, False, dict(consumer_warpgroups=1, splits=4), 16),           # 32-row tiles: 8 keys left
    (1000, 1000, 128, False, dict(consumer_warpgroups=2, last_kv=64), 64),        # fewer keys than its rows:
    (1000, 1000, 128, False, dict(consumer_warpgroups=2, last_kv=96), 96),        # the narrow step masks them
])
def test_partial_last_key_tile(n, nk, d, causal, options, last_kv):
    """The step on a partial last key tile runs on the keys it holds, and causal, a warpgroup's last step on the keys
    its rows see (attention()'s last_kv_for, or given)."""
    from tkpy.kernels import attention_forward as att
    q, k, v = qkv(2, 4, 2, n, nk, d)
    template, _ = att._prepared(q, k, v, q, torch.empty(2, 4, 4096), causal, None, **options)
    assert re.search(rf"_last{last_kv}(_cdiv)?$", template.kernel.name)          # (few tasks: C++'s division)
    o, lse = run_poisoned(q, k, v, causal, **options)
    check(o, lse, *reference(q, k, v, causal))


@pytest.mark.parametrize("d,options", [
    (64, dict(consumer_warpgroups=2)), (64, dict(consumer_warpgroups=3, split_kv=True)),
    (128, dict(consumer_warpgroups=2, kv=96)),
    (128, dict(consumer_warpgroups=2, split_kv=True, kv=128, stages=2, late_stages=3)),
    (128, dict(consumer_warpgroups=2, split_kv=True, kv=160, stages=2, late_stages=2))])
@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
def test_q_ahead(d, options, causal):
    """q_ahead=True (the next task's Q loads into a second query tile while this task runs; bench_attention.py's
    "qahead" variants): GQA, odd lengths, several tasks per persistent block, bottom-right tasks of no steps."""
    n, nk = (1100, 1300) if causal != "bottom_right" else (1000, 300)
    q, k, v = qkv(2, 16, 8, n, nk, d)
    o, lse = run_poisoned(q, k, v, causal, q_ahead=True, **options)
    check(o, lse, *reference(q, k, v, causal))
