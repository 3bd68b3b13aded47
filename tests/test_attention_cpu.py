"""kernels/attention_forward.py in the CPU interpreter (real TMA / mbarrier / wgmma semantics and protocol checks) at small
sizes: odd and unequal lengths, causal (torch's top-left and bottom-right), GQA/MQA, bf16/fp16, head dims 64/128/256
and the others in multiples of 16 (D32, D80, D96, D160, ...), several tasks per persistent block; against an
explicit float64 softmax and torch's SDPA. Plus the input checks, NVRTC compiles and SASS of every variant. No GPU
needed."""
from __future__ import annotations

import functools
import re

import pytest
import torch
import torch.nn.functional as F

import gpu_util
import tkpy.kernels as tkpy_kernels
import tkpy as tk
from gpu_util import rel_err
from tkpy.kernels import attention_forward as att
from tkpy.kernels import attention_policy as policy
from tkpy.kernels import attention_config as att_config
from tkpy.kernels import attention_combine as att_combine
from tkpy.kernels import attention_kernel as att_kernel
from tkpy.kernels import attention

rand = functools.partial(gpu_util.rand, device="cpu")


def kernel_of(*args, **options):
    """The kernel template (attention_kernel._attention's, cached) of AttentionConfig(*args, **options)."""
    return att._attention(att_config.AttentionConfig(*args, **options))

BF16, FP16 = torch.bfloat16, torch.float16


reference = gpu_util.attention_reference


def check(o, lse, ref, ref_lse, n):
    assert o.shape == ref.shape and lse.shape == ref_lse.shape
    assert rel_err(o, ref) < 1e-2
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isinf(lse) & (lse < 0), ~seen), "rows that see no key have lse -inf, others not"
    assert (lse[seen] - ref_lse[seen]).abs().max() < 1e-3


def interpret(q, k, v, causal, scale, blocks, name_part="", **options):
    """kernel_of(**options)'s kernel in the interpreter on `blocks` persistent blocks, into poisoned O and L (L of
    lse_rows(n) rows for the kernel's consumer warpgroups: n rounded up to 128 or 192); checks that `name_part` is
    in the kernel's name; returns O and L's first n rows."""
    b, h, n, d = q.shape
    o = gpu_util.poisoned(b, h, n, d, dtype=q.dtype, device="cpu")
    lse = gpu_util.poisoned(b, h, policy.lse_rows(n, options.get("consumer_warpgroups", 2)), dtype=torch.float32,
                            device="cpu")
    kernel = kernel_of(d, att_config.DTYPES[q.dtype], bool(causal), **options).kernel
    assert name_part in kernel.name
    offset = [] if not causal else [k.shape[2] - n if causal == "bottom_right" else 0]
    kernel.interpret[(blocks,)](q, k, v, o, lse, scale * att_kernel.LOG2E, *offset)
    return o, lse[..., :n]


def as_run(d, dtype, causal, args, **options):
    """kernel_of(**options)'s kernel as attention() takes it on the GPU: its index math by divisors where that
    compiles clean under this NVRTC, by C++'s division otherwise (policy.DIVISION_CHOICES); None if neither is clean."""
    config = functools.partial(att_config.AttentionConfig, d, att_config.DTYPES[dtype], causal, **options)
    template = att.first_clean(config, args, policy.DIVISION_CHOICES)
    assert template is not None, "spills with and without divisors"
    return template.kernel


def compiled_sass(kernel, args) -> str:
    """The kernel's SASS, once checked that it compiles without spills and its wgmma stay asynchronous (no
    ptxas "Performance Loss" warning) as HGMMA."""
    r = kernel.resources(*args)
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_frame == 0
    assert not any("Performance Loss" in w for w in r.warnings), r.warnings
    sass = kernel.sass(*args)
    assert "HGMMA" in sass and "STL" not in sass
    return sass


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
    # head dims between the tuned ones, which take the next tuned one's settings (tuned): D96 and D80 as D128 (Q in
    # registers, 128-row key tiles), D48 and D32 as D64, D160 as D256 (64-row key tiles)
    (1, 2, 2, 150, 170, 96, False, BF16),
    (1, 4, 2, 77, 200, 80, True, FP16),
    (1, 2, 1, 130, 90, 32, "bottom_right", BF16),
    (1, 2, 2, 200, 100, 48, False, BF16),
    (1, 1, 1, 100, 150, 160, True, BF16),
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
    longest first, the warpgroups taking turns at their MMAs (or in lockstep), each softmax
    overlapping the previous P V (or not); GQA; lengths that are not multiples of 128; a custom scale."""
    n, nk, d = 460, 450, 64
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, 3, pingpong=pingpong, stages=stages, overlap=overlap)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


def growing_keys(n, nk, d, spike: bool):
    """q, k, v whose keys grow along the sequence (x1 to x4), and with `spike` one key of the third 64-row tile 40
    times larger: with scale 2 the row maxes pass the running shift by far more than the slack at later tiles, and
    the spike's scores overflow P (inf) on the shift before it in every row its q points at."""
    growth = torch.linspace(1.0, 4.0, nk).view(1, 1, nk, 1)
    k = rand(1, 1, nk, d, dtype=torch.float32) * growth
    if spike:
        k[:, :, 150] *= 40.0
    return rand(1, 2, n, d, dtype=BF16), k.to(BF16), rand(1, 1, nk, d, dtype=BF16)


@pytest.mark.parametrize("d,causal,options,blocks", [
    (128, False, dict(), 3), (128, True, dict(), 3),
    (64, "bottom_right", dict(consumer_warpgroups=3, split_kv=True), 3),
    (64, True, dict(consumer_warpgroups=2, overlap=False), 3), (128, False, dict(consumer_warpgroups=1), 4),
    (128, False, dict(split_kv=True, cluster=2, last_kv=112), 2),
    (192, False, dict(split_kv=True, stale_shift=True), 2),              # past D128 where it compiles clean
    (160, True, dict(split_kv=True, cluster=2, stale_shift=True), 2)])
@pytest.mark.parametrize("scale,spike", [(2.0, False), (0.1, True), (0.1, False)])
def test_stale_shift_redoes_the_steps_whose_max_grew(d, causal, options, blocks, scale, spike):
    """stale_shift (the default): a step's P on the running shift, redone with the max where a row's sum passes
    2^RESCALE_SLACK. Growing keys at scale 2 and a spike key (P = inf on the stale shift: a kept step would give
    NaN) need the redo mid-task; at scale 0.1 without the spike no step needs it (P stays within the slack)."""
    n, nk = 460, 450
    q, k, v = growing_keys(n, nk, d, spike)
    o, lse = interpret(q, k, v, causal, scale, blocks, **options)
    assert "_maxfirst" not in kernel_of(d, tk.bf16, bool(causal), **options).kernel.name
    check(o, lse, *reference(q, k, v, causal, scale=scale), n)


def test_stale_shift_options():
    """stale_shift=False (the row max first every step) is named, as is stale_shift=True where the max first is the
    default (D256)."""
    assert kernel_of(128, tk.bf16, False, stale_shift=False).kernel.name.endswith("_maxfirst")
    assert "_maxfirst" not in kernel_of(256, tk.bf16, False).kernel.name
    assert kernel_of(256, tk.bf16, False, stale_shift=True).kernel.name.endswith("_stale")
    with pytest.raises(ValueError, match="pingpong must be True or False"):
        kernel_of(128, tk.bf16, False, pingpong="softmax")


def test_stale_shift_sass_has_the_vote():
    """The default D128 kernel's steps vote (BAR.RED.OR) and hold the softmax's exponentials twice (kept, and
    redone with the max); the max-first kernel has neither."""
    q, lse = torch.empty(1, 2, 512, 128, dtype=BF16), torch.empty(1, 2, 512)
    stale = compiled_sass(kernel_of(128, tk.bf16, False).kernel, [q, q, q, q, lse, 1.0])
    first = compiled_sass(kernel_of(128, tk.bf16, False, stale_shift=False).kernel, [q, q, q, q, lse, 1.0])
    assert "BAR.RED.OR" in stale and "BAR.RED" not in first
    assert stale.count("MUFU.EX2") > first.count("MUFU.EX2")       # the step's exponentials twice: kept and redone


@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, True)])
def test_q_registers_compile_to_hgmma_without_spills(d, causal):
    """q_registers=True at 2 consumer warpgroups (D128's default): no spills, the wgmma asynchronous, and S = Q K^T
    reads its A from registers (an HGMMA whose second operand is a register, not a descriptor)."""
    q, lse = torch.empty(1, 2, 256, d, dtype=BF16), torch.empty(1, 2, 256)
    kernel = kernel_of(d, att_config.DTYPES[BF16], causal, q_registers=True).kernel
    assert kernel.name.endswith("_qregs") == (d != 128)
    sass = compiled_sass(kernel, [q, q, q, q, lse, 1.0] + ([0] if causal else []))
    assert re.search(r"HGMMA\.64x\d+x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\], R", sass)
    assert not re.search(r"HGMMA\.\S+ R\d+, gdesc", sass)      # (the form without: A and B by descriptor)


@pytest.mark.parametrize("causal", [False, True])
def test_q_registers_stay_apart_from_p(causal):
    """D128's default kernel keeps Q (the A of S = Q K^T) and P (the A of O += P V) in different registers: both
    live through the step loop. (With the serial schedule NVRTC 13.0's ptxas put P into Q's registers: wrong
    outputs on the H200, RESULTS.md run 96; q_registers=True is refused there.)"""
    q, lse = torch.empty(1, 2, 256, 128, dtype=BF16), torch.empty(1, 2, 256)
    kernel = kernel_of(128, att_config.DTYPES[BF16], causal).kernel
    sass = compiled_sass(kernel, [q, q, q, q, lse, 1.0] + ([0] if causal else []))
    a_of = lambda pattern: set(re.findall(rf"HGMMA\.\S+ R\d+, R(\d+), gdesc\[UR\d+\]{pattern}", sass))   # noqa: E731
    s_regs, pv_regs = a_of(", "), a_of(r"\.tnspB")
    assert len(s_regs) == 8 and len(pv_regs) == 8 and not s_regs & pv_regs
    with pytest.raises(ValueError, match="q_registers=True needs overlap=True"):
        kernel_of(128, att_config.DTYPES[BF16], causal, overlap=False, q_registers=True)


@pytest.mark.parametrize("d,causal,q_registers,name", [
    (128, False, True, ""), (128, True, False, "_qshared"), (64, "bottom_right", True, "_qregs")])
def test_q_registers(d, causal, q_registers, name):
    """S = Q K^T with each warp's query rows from registers, loaded once per task (D128's default), or from the
    query tile (several tasks per block, GQA, a partial last query tile)."""
    n, nk = 300, 170
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, 2, name, q_registers=q_registers, consumer_warpgroups=2)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("options,name_part", [(dict(), ""), (dict(q_preload=False), "_noqpreload")],
                         ids=["q_preload", "no_q_preload"])
@pytest.mark.parametrize("heads,n,nk,causal,blocks", [
    (1, 460, 200, "bottom_right", 1), (2, 460, 200, "bottom_right", 3), (2, 300, 170, False, 2), (2, 300, 300, True, 2)])
def test_q_preload(heads, n, nk, causal, blocks, options, name_part):
    """q_preload (D128's default): each task's start loads the next task's Q into the query tile and its finish
    moves it into registers before O goes out through the tile; and without it (each task waits for its Q). Tasks
    of no steps (bottom-right rows that see no key) follow tasks with steps: their O must not land in the tile
    before the previous O's store has read it (the race the interpreter found in the first draft), several tasks
    per block, GQA, partial tiles."""
    q, k, v = rand(1, heads, n, 128, dtype=BF16), rand(1, 1, nk, 128, dtype=BF16), rand(1, 1, nk, 128, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, name_part, **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("causal,n,nk,blocks,cluster", [(False, 300, 400, 2, 1), (False, 512, 300, 2, 2),
                                                       ("bottom_right", 460, 200, 2, 1), (True, 260, 300, 3, 1)])
def test_split_rings_with_q_in_registers(causal, n, nk, blocks, cluster):
    """Split K/V rings of 144-row key tiles with each warp's query rows in registers (and so q_preload), which fit
    NVRTC 13.0's registers without spills at D128 (160 rows spill): bench_attention.py's "splitkv144 qregs"."""
    q, k, v = rand(1, 2, n, 128, dtype=BF16), rand(1, 1, nk, 128, dtype=BF16), rand(1, 1, nk, 128, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, "_kv144_splitkv_3late_qregs", split_kv=True, kv=144, stages=2,
                       late_stages=3, q_registers=True, cluster=cluster)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


def test_q_preload_options():
    with pytest.raises(ValueError, match="q_preload=True .* needs q_registers"):
        kernel_of(128, att_config.DTYPES[BF16], False, q_registers=False, q_preload=True)
    with pytest.raises(ValueError, match="q_preload=True .* needs q_registers"):
        kernel_of(128, att_config.DTYPES[BF16], False, q_ahead=True, kv=96, q_preload=True)


@pytest.mark.parametrize("groups,n,nk,d", [(3, 200, 230, 64), (3, 300, 170, 64), (3, 130, 300, 64),
                                           (2, 300, 260, 128), (3, 1, 90, 64), (3, 50, 40, 64)],
                         ids=["lead2", "lead1", "lead0", "2wg_lead1", "one_row", "one_partial_unit"])
@pytest.mark.parametrize("causal", [True, "bottom_right"])
@pytest.mark.parametrize("pad_first", [None, False], ids=["pad_first", "pad_last"])
def test_causal_padding_before_row_0(groups, n, nk, d, causal, pad_first):
    """Causal kernels put a partial query tile's padding before row 0 (pad_first, the default): the first task's
    first warpgroups (0, 1 or 2 of them: `lead`) load rows 0-63 but store nothing; the rows after them and every
    later task are shifted. And with the padding after row n-1 (pad_first=False, "_padlast")."""
    options = dict(consumer_warpgroups=groups, split_kv=groups == 3)
    if pad_first is not None:
        options["pad_first"] = pad_first
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, 2, "_padlast" if pad_first is False else "", **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("heads,hkv,n,nk,blocks", [(2, 1, 512, 300, 2), (3, 3, 256, 130, 4), (2, 2, 500, 200, 2)])
def test_cluster_pairs_share_key_value_tiles(heads, hkv, n, nk, blocks):
    """cluster=2: two blocks on adjacent query tiles of one head in lockstep, block 0 loading each K tile and
    block 1 each V tile into both (TMA multicast); several tasks per cluster, GQA, partial tiles; its errors."""
    q = rand(1, heads, n, 128, dtype=BF16)
    k, v = rand(1, hkv, nk, 128, dtype=BF16), rand(1, hkv, nk, 128, dtype=BF16)
    o, lse = interpret(q, k, v, False, 0.1, blocks, "_cluster2", cluster=2)
    check(o, lse, *reference(q, k, v, False, scale=0.1), n)
    for bad in (3, 4):
        with pytest.raises(ValueError, match="cluster must be 1 or 2"):
            kernel_of(128, att_config.DTYPES[BF16], False, cluster=bad)
    if heads == 2 and hkv == 1:         # the production kernel: multicast TMA loads, no spills, MMAs asynchronous
        kernel = kernel_of(128, att_config.DTYPES[BF16], False, cluster=2).kernel
        assert "UTMALDG.4D.MULTICAST" in compiled_sass(kernel, [q, k, v, q, torch.empty(1, heads, 512), 1.0])


@pytest.mark.parametrize("heads,hkv,n,nk,blocks", [(2, 1, 700, 300, 2), (3, 3, 300, 130, 4), (1, 1, 640, 200, 2),
                                                   (2, 1, 500, 200, 2)])
def test_cluster_pairs_with_split_rings(heads, hkv, n, nk, blocks):
    """cluster=2 at D64 with 3 warpgroups and split K/V rings: block 0 multicasts K into the input ring, block 1
    V into the late ring (192-row query tiles). The pair's tiles take its 64-row units in turn, so a partial last
    pair's padding is shared (640 rows: 2 + 2 real warpgroups, 700: 3 + 2, 300: 3 + 2), and an odd number of tiles
    pairs up with a tile of padding (500 rows, 8 units in 4 tiles: 3 + 2, 2 + 1)."""
    q = rand(1, heads, n, 64, dtype=BF16)
    k, v = rand(1, hkv, nk, 64, dtype=BF16), rand(1, hkv, nk, 64, dtype=BF16)
    o, lse = interpret(q, k, v, False, 0.1, blocks, "_3wg_splitkv_cluster2", cluster=2, consumer_warpgroups=3,
                       split_kv=True)
    check(o, lse, *reference(q, k, v, False, scale=0.1), n)


@pytest.mark.parametrize("heads,hkv,n,nk,causal,blocks", [
    (2, 1, 512, 512, True, 2),              # 4 tiles a head: two pairs, the blocks taking the upper tile in turns
    (3, 3, 500, 500, True, 4),              # a partial tile (its padding before row 0), two clusters
    (2, 2, 480, 300, "bottom_right", 2),    # keys fewer than queries: the first tiles see none (tasks of no steps)
    (1, 1, 256, 600, "bottom_right", 2),    # more keys than queries
    (2, 1, 512, 512, "bottom_right", 6),    # more clusters than pairs of tiles
    (2, 1, 300, 300, True, 2),              # 3 tiles: a fourth of padding before row 0 pairs with the first
    (1, 1, 300, 700, "bottom_right", 2),    # ... whose padding rows see keys (computed, not stored)
])
def test_causal_cluster_pairs(heads, hkv, n, nk, causal, blocks):
    """cluster=2, causal: the pair's query tiles see different numbers of key tiles; the producers load those of
    the one that sees more and the other block skips the extra stages (the template's clusters of unequal tasks),
    the upper tile going to the blocks in turns; an odd number of tiles pairs up with a tile of padding before
    row 0."""
    q = rand(1, heads, n, 128, dtype=BF16)
    k, v = rand(1, hkv, nk, 128, dtype=BF16), rand(1, hkv, nk, 128, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, "_causal_cluster2", cluster=2)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("n,nk,causal,blocks", [(700, 700, True, 2), (384, 200, "bottom_right", 4),
                                               (500, 500, True, 2)])       # (3 tiles and one of padding)
def test_causal_cluster_pairs_with_split_rings(n, nk, causal, blocks):
    """cluster=2, causal, at D64 with 3 warpgroups and split K/V rings: the skipped steps release the late ring too
    (192-row tiles: the pair's tiles differ by one or two key tiles of 128)."""
    q = rand(1, 2, n, 64, dtype=BF16)
    k, v = rand(1, 1, nk, 64, dtype=BF16), rand(1, 1, nk, 64, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, "_3wg_causal_splitkv_cluster2", cluster=2,
                       consumer_warpgroups=3, split_kv=True)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("causal,d,n,nk,options", [
    ("bottom_right", 128, 300, 200, {}), (False, 64, 640, 300, dict(consumer_warpgroups=3, split_kv=True, cluster=2)),
    (False, 128, 130, 700, dict(splits=3))])
def test_without_lse(monkeypatch, causal, d, n, nk, options):
    """lse=None (attention() without return_lse): a kernel that takes no L and computes no log-sum-exp ("_nolse");
    under split-K the splits still do (their kernel takes L), merged into a scratch buffer."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o = gpu_util.poisoned(1, 2, n, d, dtype=BF16, device="cpu")
    template, args = att._prepared(q, k, v, o, None, causal, 0.1, **options)
    split = options.get("splits", 1) > 1
    assert template.kernel.name.endswith("_nolse") != split
    assert len(args) == 6 + bool(causal) + split - (not split)          # q k v O [L] scale [offset] [splits]
    att._launch(q, k, v, o, None, causal, 0.1, **options)
    assert rel_err(o, reference(q, k, v, causal, scale=0.1)[0]) < 1e-2
    with pytest.raises(ValueError, match="split_k=True needs lse=True"):
        kernel_of(d, att_config.DTYPES[BF16], False, split_k=True, lse=False)


def launch_split(q, k, v, causal, splits, **options):
    """_launch with `splits` tasks per query tile (split-K) in the interpreter, into poisoned O and L."""
    b, h, n, d = q.shape
    options = {"consumer_warpgroups": 2, **options}
    o = gpu_util.poisoned(b, h, n, d, dtype=q.dtype, device="cpu")
    lse = gpu_util.poisoned(b, h, policy.lse_rows(n, options["consumer_warpgroups"]), dtype=torch.float32, device="cpu")
    att._launch(q, k, v, o, lse, causal, 0.1, splits=splits, **options)
    return o, lse[..., :n]


@pytest.mark.parametrize("causal,d,hkv,n,nk,splits,options", [
    (False, 128, 1, 200, 700, 3, {}),                       # GQA, partial key and query tiles
    (True, 128, 2, 300, 300, 2, {}),                        # causal: the splits' shares of each tile's steps
    ("bottom_right", 128, 1, 500, 200, 2, {}),              # rows that see no key in any split: 0 and -inf
    (False, 128, 2, 130, 200, 4, {}),                       # more splits than key tiles: splits of no steps
    (False, 64, 1, 400, 900, 3, dict(consumer_warpgroups=3, split_kv=True)),   # both rings from the share's first
    (True, 64, 2, 400, 400, 2, dict(consumer_warpgroups=3, split_kv=True)),
    (False, 128, 2, 256, 520, 2, dict(q_registers=False)),
    (True, 64, 1, 300, 900, 3, dict(q_ahead=True)),        # the second query tile's buffer, with no O staged in it
    (False, 128, 1, 200, 1500, 3, dict(split_kv=True)),    # D128's split rings of 176-row tiles (long keys)
    ("bottom_right", 256, 1, 150, 400, 3, {}),            # D256: 64-row key tiles
    (False, 96, 1, 150, 700, 3, {}),                       # D96: the combine's last block of 2 warps of columns
    (False, 80, 2, 64, 600, 2, dict(consumer_warpgroups=1)),   # D80 decoding on one warpgroup (D128's serial)
])
def test_split_k(monkeypatch, causal, d, hkv, n, nk, splits, options):
    """splits > 1: each query tile's key tiles shared by `splits` tasks writing fp32 partial results into
    workspaces, merged by combine_kernel (flash-decoding)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 2, n, d, dtype=BF16)
    k, v = rand(1, hkv, nk, d, dtype=BF16), rand(1, hkv, nk, d, dtype=BF16)
    o, lse = launch_split(q, k, v, causal, splits, **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


# -- last_kv: the partial last key tile's step on the keys it holds (rounded up to 16), causal on a diagonal --------
@pytest.mark.parametrize("d,causal,n,nk,last_kv,blocks,options", [
    (128, False, 200, 300, 48, 2, {}),                      # 44 keys left: the step's rows exactly
    (128, False, 200, 300, 64, 2, {}),                      # fewer keys than its rows: masked inside them
    (128, False, 200, 300, 32, 2, {}),                      # more: the whole-tile step masks (last_kv is a hint)
    (128, True, 300, 300, 48, 3, {}),                       # causal: the diagonal inside the narrow tile
    (128, "bottom_right", 100, 300, 48, 2, {}),
    (128, False, 512, 300, 128, 2, dict(split_kv=True, cluster=2)),           # 176-row split rings: 124 keys left
    (64, True, 200, 230, 112, 2, dict(consumer_warpgroups=3, split_kv=True)),
    (128, False, 64, 300, 48, 2, dict(consumer_warpgroups=1)),                # the serial schedule
    (128, False, 200, 40, 48, 2, {}),                       # one key tile, partial: the first step is the last
    (128, True, 512, 512, 64, 2, {}),                       # causal: the first warpgroup's diagonal step
    (128, True, 300, 300, 64, 2, {}),                       # ... with padding before row 0, and a partial tile
    (128, "bottom_right", 200, 520, 64, 2, {}),             # ... off the tiles' grid
    (64, True, 384, 500, 64, 2, dict(consumer_warpgroups=3, split_kv=True, cluster=2)),   # (an even number of
    (64, True, 500, 500, 64, 3, dict(consumer_warpgroups=3, split_kv=True)),              # query tiles for pairs)
    (128, True, 16, 300, 64, 2, dict(consumer_warpgroups=1)),
])
def test_partial_last_key_tile(d, causal, n, nk, last_kv, blocks, options):
    q = rand(1, 2, n, d, dtype=BF16)
    k, v = rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, f"_last{last_kv}", last_kv=last_kv, **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("groups,n,nk,causal,blocks", [(3, 500, 500, True, 3), (3, 384, 700, "bottom_right", 2),
                                                      (2, 300, 520, "bottom_right", 2), (3, 700, 300, True, 2),
                                                      (3, 500, 500, False, 2), (3, 1000, 300, False, 3)])
@pytest.mark.parametrize("skip_masked", [None, False], ids=["skips", "noskip"])
def test_warpgroups_skip_steps_no_row_of_theirs_sees(groups, n, nk, causal, blocks, skip_masked):
    """A warpgroup's steps on key tiles none of its rows sees are skipped (only its turn taken): causal, past its
    diagonal; with 3 warpgroups, every step of one whose rows are all padding past N (500 rows: the last task's
    third warpgroup; 1000: its second and third). skip_masked=False computes them; either way the same result."""
    d = 64 if groups == 3 else 128
    q = rand(1, 2, n, d, dtype=BF16)
    k, v = rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    options = dict(consumer_warpgroups=groups, split_kv=groups == 3, skip_masked=skip_masked)
    o, lse = interpret(q, k, v, causal, 0.1, blocks, "_noskip" if skip_masked is False else "", **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)
    if skip_masked is False:
        with pytest.raises(ValueError, match="skip_masked=True is for kernels of 2 or 3"):
            kernel_of(d, att_config.DTYPES[BF16], True, consumer_warpgroups=1, skip_masked=True)


def test_two_warpgroups_skip_padding_rows_on_request():
    """skip_masked=True on a 2-warpgroup non-causal kernel (not the default, "_skip"): 1050 rows leave the last
    128-row task 26, so its second warpgroup's rows are all padding and it skips every step."""
    q = rand(1, 2, 1050, 128, dtype=BF16)
    k, v = rand(1, 1, 300, 128, dtype=BF16), rand(1, 1, 300, 128, dtype=BF16)
    o, lse = interpret(q, k, v, False, 0.1, 3, "_skip", skip_masked=True)
    check(o, lse, *reference(q, k, v, False, scale=0.1), 1050)


@pytest.mark.parametrize("nk,kv,diagonal,last_kv", [
    (4096, 176, False, 48), (4096, 128, False, None), (1000, 128, False, 112), (1, 128, False, 16),
    (300, 176, False, 128), (175, 176, False, None),
    (4096, 128, True, 64), (1000, 128, True, 64), (1030, 128, True, 16), (4096, 64, True, None)])
def test_last_kv_for(nk, kv, diagonal, last_kv):
    """The rows left in the last tile rounded up to 16, where that is fewer than a tile's; causal, where that is
    none or more than 64, a warpgroup's 64."""
    assert policy.last_kv_for(nk, kv, diagonal) == last_kv


def test_last_kv_checks_and_switch(monkeypatch):
    for bad in (40, 128, 0, 256):
        with pytest.raises(ValueError, match="last_kv"):
            kernel_of(128, att_config.DTYPES[BF16], False, last_kv=bad)
    monkeypatch.setattr(policy, "NARROW_LAST", False)
    assert policy.last_kv_for(4096, 176) is None


@pytest.mark.parametrize("d,causal,last_kv,options", [
    (128, False, 48, dict(cluster=2)), (128, False, 112, dict(cluster=2)), (128, True, 112, {}),
    (128, False, 160, dict(split_kv=True)), (64, False, 112, dict(consumer_warpgroups=3, split_kv=True)),
    (128, False, 48, dict(consumer_warpgroups=1)), (64, True, 64, dict(consumer_warpgroups=3, split_kv=True))])
def test_partial_last_key_tile_compiles_to_hgmma_without_spills(d, causal, last_kv, options):
    """The narrow step's S in a tile of its own and its P in P's first columns (see the kernel's `tiles`): no
    serialized wgmmas, no spills, with Q in registers too."""
    q, lse = torch.empty(1, 2, 384, d, dtype=BF16), torch.empty(1, 2, 384)
    args = [q, q, q, q, lse, 1.0] + ([0] if causal else [])
    sass = compiled_sass(as_run(d, BF16, causal, args, last_kv=last_kv, **options), args)
    assert re.search(rf"HGMMA\.64x{last_kv}x16", sass)


def test_attention_splits_few_tasks_over_many_keys(monkeypatch):
    """attention() on 2 query tiles over 1024 keys (8 key tiles): split-K in 2 (splits_for), the result merged."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    launched = []
    real = att.AttentionConfig
    monkeypatch.setattr(att, "AttentionConfig", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    q, k, v = rand(1, 2, 128, 128, dtype=BF16), rand(1, 1, 1024, 128, dtype=BF16), rand(1, 1, 1024, 128, dtype=BF16)
    o, lse = tkpy_kernels.attention(q, k, v, return_lse=True)
    assert launched[-1]["split_k"] and launched[-1]["cluster"] == 1
    check(o, lse, *reference(q, k, v, False), 128)


@pytest.mark.parametrize("h,hkv,n,nk,causal,transposed,packed", [
    (8, 2, 37, 300, False, False, (2, 148)),    # 4 heads of 37 rows: 2 tiles of 128 instead of 4
    (4, 1, 1, 200, False, False, (1, 4)),       # MQA decoding: one row per head
    (8, 2, 37, 300, False, True, None),         # (B, N, H, D) transposed: heads and rows do not merge in place
    (8, 2, 37, 300, "bottom_right", False, (2, 148)),   # causal: each row masked at its own position (packed=True)
    (8, 2, 37, 30, "bottom_right", False, (2, 148)),    # ... rows that see no key (37 queries, 30 keys)
    (8, 1, 5, 400, True, False, (1, 40)),       # top-left: rows 0-4 of each head see keys 0-4
    (6, 2, 50, 1000, True, False, (2, 150)),    # 3 heads of 50 rows: a warp's 16 rows cross from one head to the next
    (4, 2, 256, 300, False, False, None)])      # whole tiles already
def test_gqa_heads_packed_into_one_sequence(monkeypatch, h, hkv, n, nk, causal, transposed, packed):
    """attention() runs GQA with partial query tiles as one sequence per key/value head (packed_heads) where q's
    heads and rows merge without a copy; the output and the log-sum-exp come back per query head."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    launched = []
    real = att._prepared
    monkeypatch.setattr(att, "_FORWARD_PLANS", {})          # (a plan made earlier would not call _prepared again)
    monkeypatch.setattr(att, "_prepared", lambda q, *a, **kw: launched.append(q.shape) or real(q, *a, **kw))
    q = rand(1, n, h, 64, dtype=BF16).transpose(1, 2) if transposed else rand(1, h, n, 64, dtype=BF16)
    k, v = rand(1, hkv, nk, 64, dtype=BF16), rand(1, hkv, nk, 64, dtype=BF16)
    o, lse = tkpy_kernels.attention(q, k, v, causal, return_lse=True)
    assert launched[-1][1:3] == (packed or (h, n))
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    check(o, lse, *reference(q, k, v, causal), n)


def random_configuration(seed: int) -> tuple:
    """A random small attention case and _launch options (seeded): head dim, causality, consumer warpgroups, split
    rings, split-K, narrow last steps, skips and padding placement in combination."""
    import random
    r = random.Random(seed)
    d, causal = r.choice([64, 128]), r.choice([False, True, "bottom_right"])
    groups = r.choice([1, 2, 3] if d == 64 else [1, 2])
    n = r.choice([1, 7, 64, 130, 257, 384, 500] if groups > 1 else [1, 4, 16, 40, 64])
    nk, hkv = r.choice([1, 15, 100, 129, 177, 300, 530]), r.choice([1, 2])
    options = dict(consumer_warpgroups=groups, split_kv=groups == 3 or (d == 128 and groups == 2 and r.random() < 0.5))
    if r.random() < 0.3:
        options["splits"] = r.choice([1, 2, 3])
    if groups > 1 and r.random() < 0.2:
        options["skip_masked"] = False
    if r.random() < 0.4:
        options["last_kv"] = r.choice([None, *range(16, policy.default_tiles(d, groups, options["split_kv"])[0], 16)])
    if causal and groups > 1 and r.random() < 0.2:
        options["pad_first"] = False
    return d, causal, n, nk, hkv, hkv * r.choice([1, 2]), options


@pytest.mark.parametrize("seed", range(40))
def test_random_configurations(monkeypatch, seed):
    """Seeded random combinations of the kernel's options and odd shapes (480 such passed when last_kv and
    skip_masked came in), into poisoned O and L."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    d, causal, n, nk, hkv, h, options = random_configuration(seed)
    q = rand(1, h, n, d, dtype=BF16)
    k, v = rand(1, hkv, nk, d, dtype=BF16), rand(1, hkv, nk, d, dtype=BF16)
    o = gpu_util.poisoned(1, h, n, d, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, h, policy.lse_rows(n, options["consumer_warpgroups"]), dtype=torch.float32, device="cpu")
    att._launch(q, k, v, o, lse, causal, 0.1, **options)
    check(o, lse[..., :n], *reference(q, k, v, causal, scale=0.1), n)


def test_split_k_choices_and_sass(monkeypatch):
    """splits_for leaves tasks that fill half the SMs unsplit; split-K takes no clusters; its kernels compile without
    spills or serialized MMAs, and the combine kernel too."""
    monkeypatch.setattr(policy, "SPLIT_K_DEFAULT", True)
    assert policy.splits_for(1, 32, 128, 128, 32768, 128, 2, 132) == 4   # 32 tasks over 256 key tiles: 4 splits
    assert policy.splits_for(1, 2, 128, 128, 512, 128, 2, 132) == 1      # 4 key tiles: too few to split
    assert policy.splits_for(16, 16, 1024, 128, 1024, 128, 2, 132) == 1  # 2048 tasks: no split
    assert policy.splits_for(1, 8, 192, 64, 65536, 128, 3, 132) == 1     # 3 warpgroups: not timed split
    assert policy.splits_for(1, 4, 1000, 256, 1000, 64, 2, 132) == 4     # D256: 16 key tiles of 64
    assert policy.splits_for(1, 4, 1000, 256, 1000, 80, 2, 132) == 3     # ... 13 of 80 (wide_kv's): 3 of 4 or more
    monkeypatch.setattr(policy, "SPLIT_K_DEFAULT", False)
    assert policy.splits_for(1, 32, 128, 128, 32768, 128, 2, 132) == 1
    with pytest.raises(ValueError, match="split_k=True shares a task's keys between tasks that run apart"):
        kernel_of(128, att_config.DTYPES[BF16], False, split_k=True, cluster=2)
    q = torch.empty(1, 2, 384, 128, dtype=BF16)
    kernel = kernel_of(128, att_config.DTYPES[BF16], True, split_k=True).kernel
    compiled_sass(kernel, [q, q, q, torch.empty(2, 2, 384, 128), torch.empty(2, 2, 384), 1.0, 0, 2])
    for d in (64, 128, 256):                    # D256 in column slices of 128: its whole rows would need 268 registers
        combine = att_combine.combine_kernel(d, att_config.DTYPES[BF16], policy.MAX_SPLITS)
        r = combine.resources(torch.empty(policy.MAX_SPLITS, 2, 384, d), torch.empty(policy.MAX_SPLITS, 2, 384),
                              torch.empty(1, 2, 384, d, dtype=BF16), torch.empty(1, 2, 384))
        assert r.spill_stores == r.spill_loads == 0, (d, r)


def test_cluster_pairs_need_an_even_number_of_query_tiles(monkeypatch):
    """The template's grid check, before any launch: 300 query rows are 3 tiles of 128."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 1, 300, 128, dtype=BF16)
    o, lse = torch.empty_like(q), torch.empty(1, 1, policy.lse_rows(300))
    with pytest.raises(tk.ArgumentError, match="clusters of 2 blocks take 2 rows of tiles"):
        att._launch(q, q, q, o, lse, False, None, consumer_warpgroups=2, cluster=2)


def test_odd_query_tiles_pair_with_a_tile_of_padding(monkeypatch):
    """attention()'s pairs at D64 with 3 warpgroups, non-causal, on 13 tiles of 192 rows a head: 14 tiles in the
    grid (the last of padding); with skip_masked=False (padding rows computed) no pairs, 13 tiles."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 132)
    q = torch.empty(1, 4, 13 * 192, 64, dtype=BF16)
    for options, cluster, tiles in (({}, 2, 14), (dict(skip_masked=False), 1, 13)):
        template, args = att._prepared(q, q, q, torch.empty_like(q), None, False, None, consumer_warpgroups=3,
                                       **options)
        assert template.cluster == cluster and template.grid(*args) == (4 * tiles,)     # (a block a task here)


@pytest.mark.parametrize("options,cluster", [({}, 2), (dict(skip_masked=False), 2), (dict(pad_first=False), 1)])
def test_causal_odd_pairs_follow_the_kernels_padding(monkeypatch, options, cluster):
    """Causal pairs take an odd number of query tiles (9 of 128 rows a head at D64 with 2 warpgroups) wherever the
    kernel puts its padding before row 0 (whole_clusters: skip_masked does not matter), not with pad_first=False;
    the paired kernel, its padding tile's task of no steps included, stays right in the interpreter."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    monkeypatch.setattr(policy, "CLUSTER_PAIRS", policy.CLUSTER_PAIRS | {(64, 2, True)})
    q, k, v = (rand(1, 2, 9 * 128 - 50, 64, dtype=BF16) for _ in range(3))
    o = gpu_util.poisoned(*q.shape, dtype=BF16, device="cpu")
    template, args = att._prepared(q, k, v, o, None, True, 0.125, consumer_warpgroups=2, **options)
    assert template.cluster == cluster and template.grid(*args) == (2 * (10 if cluster == 2 else 9),)
    template.kernel.interpret[template.grid(*args)](*args)
    assert rel_err(o, reference(q, k, v, True, scale=0.125)[0]) < 1e-2


@pytest.mark.parametrize("causal,nk,name", [(True, 700, "cluster2_packed_last64_cdiv"),
                                            ("bottom_right", 300, "qahead_cluster2_packed_last48_cdiv")])
def test_packed_causal_cluster_pairs(monkeypatch, causal, nk, name):
    """A packed causal kernel in cluster pairs at D64 with 3 warpgroups and split rings: 4 heads of 90 rows in 192-row
    tiles (positions wrap mid-tile; the pair's tiles differ in key tiles), into poisoned O and L; the partial last
    key tile's step on the 60 or 44 keys it holds, rounded up to 16; over 300 keys, each consumer's next query tile
    loaded ahead (few_keys_options); a task a block, so C++'s division (FAST_DIVISION_TASKS)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 8, 90, 64, dtype=BF16)
    k, v = rand(1, 2, nk, 64, dtype=BF16), rand(1, 2, nk, 64, dtype=BF16)
    o = gpu_util.poisoned(1, 8, 90, 64, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, 2, policy.lse_rows(360, 3), dtype=torch.float32, device="cpu")
    options = dict(consumer_warpgroups=3, split_kv=True, cluster=2, packed=4, splits=1)
    template, _ = att._prepared(q.view(1, 2, 360, 64), k, v, o.view(1, 2, 360, 64), lse, causal, 0.1, **options)
    assert template.kernel.name == f"attention_fwd_d64_3wg_causal_splitkv_{name}"
    att._launch(q.view(1, 2, 360, 64), k, v, o.view(1, 2, 360, 64), lse, causal, 0.1, **options)
    check(o, lse[..., :360].reshape(1, 8, 90), *reference(q, k, v, causal, scale=0.1), 90)


@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_decoding_runs_the_serial_one_warpgroup_kernel(monkeypatch, causal):
    """attention() on speculative decoding's drafts at D128 (4 rows a head, 4 heads a key/value head): packed into 16
    rows, one consumer warpgroup in the serial schedule with one ring (SERIAL_ONE_GROUP), split-K over the keys; the
    last key tile's step on its 104 keys, rounded up to 16."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    launched = []
    real = att.AttentionConfig
    monkeypatch.setattr(att, "AttentionConfig", lambda *a, **kw: launched.append(real(*a, **kw).name) or real(*a, **kw))
    q, k, v = rand(1, 8, 4, 128, dtype=BF16), rand(1, 2, 1000, 128, dtype=BF16), rand(1, 2, 1000, 128, dtype=BF16)
    o, lse = tkpy_kernels.attention(q, k, v, causal, return_lse=True)
    assert launched[-1] == "attention_fwd_d128_1wg" + ("_causal" if causal else "") + "_serial_splitk" \
        + ("_packed" if causal else "") + "_last112_cdiv"
    check(o, lse, *reference(q, k, v, causal), 4)


def test_packed_kernels_are_causal_and_pad_last():
    assert kernel_of(64, att_config.DTYPES[BF16], True, packed=True).kernel.name == "attention_fwd_d64_causal_packed"
    with pytest.raises(ValueError, match="packed=True is for causal attention"):
        kernel_of(64, att_config.DTYPES[BF16], False, packed=True)
    with pytest.raises(ValueError, match="pad_first=True does not go with packed=True"):
        kernel_of(64, att_config.DTYPES[BF16], True, packed=True, pad_first=True)


def test_pad_first_is_for_causal():
    assert "_padlast" not in kernel_of(128, att_config.DTYPES[BF16], False).kernel.name
    with pytest.raises(ValueError, match="pad_first=True is for causal attention"):
        kernel_of(128, att_config.DTYPES[BF16], False, pad_first=True)


def test_mul_row_skip_ones_is_in_place_and_votes():
    """skip_ones: a warp vote (tk::any_not_one) and a uniform branch around the multiplication, in place only."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[tk.f32, 16, 64], f: tk.gl[tk.f32, 16]):
        t = tk.rt(tk.f32, 16, 64)
        v = tk.col_vec(t)
        tk.load(t, x, (0, 0))
        tk.load(v, f, (0,))
        tk.mul_row(t, t, v, skip_ones=True)
        tk.store(x, t, (0, 0))
    x, f = torch.randn(16, 64), torch.ones(16)
    f[3] = 2.0
    assert "if (tk::any_not_one(v)) tk::mul_row(t, t, v);" in k.source(x, f)
    expected = x.clone()
    expected[3] *= 2
    k.interpret[(1,)](x, f)
    assert torch.equal(x, expected)

    @tk.kernel(warps=1)
    def bad(x: tk.gl[tk.f32, 16, 64], f: tk.gl[tk.f32, 16]):
        t, u = tk.rt(tk.f32, 16, 64), tk.rt(tk.f32, 16, 64)
        v = tk.col_vec(t)
        tk.mul_row(u, t, v, skip_ones=True)
    with pytest.raises(tk.TraceError, match="skip_ones skips an in-place multiplication"):
        bad.trace(x, f)


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
    o, lse = interpret(q, k, v, causal, 0.1, 2, f"_kv{kv}", stages=stages, kv=kv)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


def test_kv_must_suit_wgmma():
    with pytest.raises(ValueError, match="multiple of 16 from 16 to 256"):
        kernel_of(64, att_config.DTYPES[BF16], kv=200)


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
        ((q[..., :40], q[..., :40], q[..., :40]), "head dim 40 is not supported .*multiples of 16 from 16 to 256"),
        ((torch.zeros(1, 2, 128, 272, dtype=BF16),) * 3, "head dim 272 is not supported"),
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
    kernel = kernel_of(d, att_config.DTYPES[dtype], causal, policy.PINGPONG, stages, policy.OVERLAP, kv).kernel
    compiled_sass(kernel, [q, q, q, q, lse, 1.0] + ([0] if causal else []))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("stale_shift", [True, False])
def test_softmax_is_one_ffma_and_one_mufu_ex2_per_score(d, stale_shift):
    """P = exp2(S * scale_log2 - shift) is an FFMA and a MUFU.EX2 per score, without the range fix-up of a non-ftz
    exp2 (FSETP + FSEL / predicated FMUL) and without a separate scale multiply or max subtraction."""
    q, lse = torch.empty(1, 2, 256, d, dtype=BF16), torch.empty(1, 2, 256)
    sass = kernel_of(d, att_config.DTYPES[BF16], False, stale_shift=stale_shift).kernel.sass(q, q, q, q, lse, 1.0)
    count = lambda op: len(re.findall(rf"\b{op}\b", sass))   # noqa: E731
    scores = 16 * policy.CONFIGS[d][0] // 32               # per lane per step
    copies = 3 if stale_shift else 2                    # the softmax inlined for k == 0 and k > 0 (stale: and redone)
    assert copies * scores <= count("MUFU.EX2") <= copies * scores + 8
    assert count("FFMA") >= copies * scores
    assert count("FSETP") <= 4
    out = 16 * d // 32                                  # O elements per lane
    assert count("FMUL") <= 4 * out + 16                # O's rescales (twice) and final division: none per score


@pytest.mark.parametrize("blocks,n,heads", [(3, 600, 3), (2, 640, 2), (4, 300, 1), (3, 512, 2)])
def test_causal_task_pairs_cover_every_tile(blocks, n, heads):
    """Causal tasks go to the persistent blocks in pairs of a long and a short query tile (causal_pairs_order): every
    query tile is still computed exactly as the reference, with an odd tile count (middle tiles paired across
    heads, the last alone when tiles * heads is odd), an even one, and a last partial pair of rounds."""
    d = 64
    q, k, v = (rand(1, heads, n, d, dtype=BF16) for _ in range(3))
    o, lse = interpret(q, k, v, True, 0.125, blocks)
    check(o, lse, *reference(q, k, v, True, scale=0.125), n)


@pytest.mark.parametrize("causal", [False, True])
def test_sections_of_fewer_heads_cover_every_tile(causal, monkeypatch):
    """Long keys make the task order's sections narrower (SECTION_BYTES of K and V per section): with room
    for 2 of 5 heads, sections of 2, 2 and 1 heads still compute every tile."""
    d, n, heads = 64, 300, 5
    monkeypatch.setattr(att_kernel, "SECTION_BYTES", 2 * n * d * 2 * 2)
    att._attention.cache_clear()
    q, k, v = (rand(1, heads, n, d, dtype=BF16) for _ in range(3))
    try:
        o, lse = interpret(q, k, v, causal, 0.125, 4)
    finally:
        att._attention.cache_clear()
    check(o, lse, *reference(q, k, v, causal, scale=0.125), n)


# -- 3 consumer warpgroups (consumer_warpgroups=3: 192 query rows per task, the turns go round a ring of 3) ------

run_3wg = functools.partial(interpret, name_part="_3wg", consumer_warpgroups=3)


@pytest.mark.parametrize("d,causal,pingpong,stages,overlap,kv", [
    (64, False, True, None, True, None), (64, True, True, None, True, None), (64, True, False, None, True, None),
    (64, True, True, 2, True, None), (64, True, True, None, False, None), (64, False, False, 2, False, None),
    (64, True, True, None, True, 80), (64, False, True, None, True, 112), (128, False, True, None, True, None),
    (128, True, True, None, True, None)])
def test_three_consumer_warpgroups_several_tasks_per_persistent_block(d, causal, pingpong, stages, overlap, kv):
    """As test_several_tasks_per_persistent_block with 3 consumer warpgroups: 6 tasks of 192 query rows over 2
    blocks (460 rows: the last task has 76, its third warpgroup none), GQA, turns round the ring of 3 (or in
    lockstep), overlap or not, other stage counts and tile heights, a custom scale."""
    n, nk = 460, 450
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = run_3wg(q, k, v, causal, 0.1, 2, pingpong=pingpong, stages=stages, overlap=overlap, kv=kv)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("b,h,hkv,n,nk,causal,dtype", [
    (1, 4, 2, 77, 300, False, FP16),                    # GQA, one partial task
    (2, 2, 1, 200, 130, True, BF16),                    # MQA, top-left, n > n_k
    (1, 3, 3, 130, 500, "bottom_right", BF16),
    (1, 2, 2, 1, 1, True, FP16)])
def test_three_consumer_warpgroups_odd_lengths(b, h, hkv, n, nk, causal, dtype):
    q, k, v = rand(b, h, n, 64, dtype=dtype), rand(b, hkv, nk, 64, dtype=dtype), rand(b, hkv, nk, 64, dtype=dtype)
    o, lse = run_3wg(q, k, v, causal, 0.125, 3)
    check(o, lse, *reference(q, k, v, causal, scale=0.125), n)


@pytest.mark.parametrize("blocks,n", [(3, 900), (2, 960), (4, 450)])
def test_three_consumer_warpgroups_causal_task_pairs(blocks, n):
    """The causal task pairs over the persistent blocks with 192-row tasks: odd and even tile counts, a last
    partial pair of rounds."""
    q, k, v = (rand(1, 1, n, 64, dtype=BF16) for _ in range(3))
    o, lse = run_3wg(q, k, v, True, 0.125, blocks)
    check(o, lse, *reference(q, k, v, True, scale=0.125), n)


def test_three_consumer_warpgroups_tasks_of_no_steps_take_no_turns():
    """Bottom-right causal with n - n_k of several tasks: one block runs the task with steps and then 3 tasks of
    none in a row; those take no turn (otherwise the last warpgroup would hand warpgroup 0 a turn twice before it
    takes the first back)."""
    n, nk = 760, 50
    q, k, v = rand(1, 1, n, 64, dtype=BF16), rand(1, 1, nk, 64, dtype=BF16), rand(1, 1, nk, 64, dtype=BF16)
    o, lse = run_3wg(q, k, v, "bottom_right", 0.125, 1)
    check(o, lse, *reference(q, k, v, "bottom_right", scale=0.125), n)


def test_default_kernel_tasks_of_no_steps_in_a_row():
    """Bottom-right causal rows that see no key make tasks of no steps; several in a row on one block take no
    turns (the turns go round across tasks; a hand-over per task start let warpgroup 1 arrive twice on
    TURN[0] in one phase, which the interpreter reported)."""
    n, nk = 600, 50
    q, k, v = rand(1, 1, n, 64, dtype=BF16), rand(1, 1, nk, 64, dtype=BF16), rand(1, 1, nk, 64, dtype=BF16)
    o, lse = interpret(q, k, v, "bottom_right", 0.125, 1)
    check(o, lse, *reference(q, k, v, "bottom_right", scale=0.125), n)


@pytest.mark.parametrize("d,kv,causal", [(64, 80, False), (64, None, False), (64, None, True), (128, None, False),
                                         (128, None, True)])
def test_three_consumer_warpgroups_compile_to_hgmma_without_spills(d, kv, causal):
    """3 consumer warpgroups and the producer (512 threads) at REGISTERS_3WG (32 / 160 registers per thread), one
    ring: D64 with 80- and 96-row (CONFIGS_3WG) key/value tiles, D128 with 64, hold S, P and O without spills, and
    the wgmma stay asynchronous, with NVRTC 13.0 (the H200's; it serializes them at D64 112 rows and D128 80, which
    13.5 does not) and later."""
    q, lse = torch.empty(1, 2, 384, d, dtype=BF16), torch.empty(1, 2, 384)
    kernel = kernel_of(d, att_config.DTYPES[BF16], causal, kv=kv, consumer_warpgroups=3).kernel
    args = [q, q, q, q, lse, 1.0] + ([0] if causal else [])
    compiled_sass(kernel, args)
    assert "setmaxnreg.inc.sync.aligned.u32 160" in kernel.ptx(*args)


def test_head_dims_take_the_next_tuned_ones_settings():
    """tuned(d): D16-D64 take D64's settings, D80-D128 D128's, D144-D256 D256's; so the defaults of a kernel between
    them (tiles, Q in registers, stale_shift, split rings, cluster pairs) are those of the tuned one above, and its
    kernel compiles to HGMMA without spills (its tiles are narrower)."""
    assert [policy.tuned(d) for d in (16, 48, 64, 80, 128, 144, 256)] == [64, 64, 64, 128, 128, 256, 256]
    assert policy.default_tiles(96, 2, False) == policy.default_tiles(128, 2, False)
    assert policy.default_tiles(48, 3, True) == policy.default_tiles(64, 3, True)
    assert policy.split_kv_for(4096, 96, 2, False) and policy.cluster_for(1024, 96, 2, False) == 2
    assert policy.consumer_warpgroups_for(16, 16, 4096, 48, 132) == 3
    for bad in (8, 40, 272):
        with pytest.raises(ValueError, match="multiple of 16 from 16 to 256"):
            kernel_of(bad)
    with pytest.raises(ValueError, match="3 consumer warpgroups take head dims up to 128"):
        kernel_of(160, consumer_warpgroups=3)
    q, lse = torch.empty(1, 2, 1024, 96, dtype=BF16), torch.empty(1, 2, 1024)
    kernel = kernel_of(96).kernel
    assert kernel.name == "attention_fwd_d96"
    compiled_sass(kernel, [q, q, q, q, lse, 1.0])


def test_wide_head_dims_in_causal_cluster_pairs(monkeypatch):
    """D160 causal on 9 query tiles a head: attention()'s cluster pairs past D128, an odd count paired with a tile
    of padding before row 0, on split rings of 128-row key tiles (two SMs: no split-K)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 2)
    launched = []
    real = att.AttentionConfig
    monkeypatch.setattr(att, "AttentionConfig", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    q, k, v = rand(1, 2, 1100, 160, dtype=BF16), rand(1, 1, 1100, 160, dtype=BF16), rand(1, 1, 1100, 160, dtype=BF16)
    o, lse = attention(q, k, v, causal=True, return_lse=True)
    assert launched[-1]["cluster"] == 2 and launched[-1]["split_kv"]
    check(o, lse, *reference(q, k, v, True), 1100)


@pytest.mark.parametrize("d,causal", [(160, True), (192, False), (192, True), (256, True)])
def test_wide_head_dims_take_split_rings_of_the_tallest_tiles_that_fit(d, causal):
    """Past D128 attention() runs 2 warpgroups on split K/V rings of 2 + 2 stages of wide_kv's tiles (D160 128 rows,
    D192 112, D256 80: the stages and Q within WIDE_SHARED_BYTES), with stale_shift where that kernel compiles
    clean under this NVRTC (STALE_WHERE_IT_FITS) and the max first otherwise; either way without spills."""
    assert [policy.wide_kv(x) for x in (144, 160, 192, 208, 224, 240, 256)] == [128, 128, 112, 96, 96, 80, 80]
    q = torch.empty(1, 16, 4096, d, dtype=BF16)
    template, args = att._prepared(q, q, q, q, None, causal, None)
    assert (template.stages, template.late_stages) == (2, 2) and "_splitkv" in template.kernel.name
    assert policy.default_tiles(d, 2, True)[0] == policy.wide_kv(d)
    stale = att._prepared(q, q, q, q, None, causal, None, stale_shift=True)[0]
    assert ("_stale" in template.kernel.name) == att._compiles_clean(stale, args)
    compiled_sass(template.kernel, args)


def test_consumer_warpgroups_option(monkeypatch):
    """2 is the default (same kernel name and code); 3 only for CONFIGS_3WG's head dims; the log-sum-exp buffer
    must have the kernel's rows."""
    q, lse = torch.empty(1, 2, 256, 64, dtype=BF16), torch.empty(1, 2, 256)
    default, explicit = kernel_of(64), kernel_of(64, consumer_warpgroups=2)
    assert default.kernel.name == explicit.kernel.name == "attention_fwd_d64"
    assert default.kernel.source(q, q, q, q, lse, 1.0) == explicit.kernel.source(q, q, q, q, lse, 1.0)
    assert kernel_of(64, consumer_warpgroups=3).kernel.name == "attention_fwd_d64_3wg"
    assert kernel_of(128, consumer_warpgroups=1).kernel.name == "attention_fwd_d128_1wg_serial"   # (SERIAL_...)
    assert kernel_of(64, consumer_warpgroups=1).kernel.name == "attention_fwd_d64_1wg" and policy.q_rows(1) == 64
    assert policy.q_rows() == policy.Q_ROWS == 128 and policy.q_rows(3) == 192
    assert policy.lse_rows(460) == 512 and policy.lse_rows(460, 3) == 576
    with pytest.raises(ValueError, match="consumer_warpgroups must be 1, 2 or 3"):
        kernel_of(64, consumer_warpgroups=4)
    with pytest.raises(ValueError, match="3 consumer warpgroups take head dims up to 128"):
        kernel_of(256, consumer_warpgroups=3)
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 2, 200, 64, dtype=BF16)
    o, lse = torch.empty_like(q), torch.empty(1, 2, 256)
    with pytest.raises(ValueError, match="needs 384 rows"):
        att._launch(q, q, q, o, lse, False, None, consumer_warpgroups=3)


def test_bench_variants_are_kernel_options():
    """benchmarks/bench_attention.py's variant table: every variant's options, per head dim where it applies, name
    a kernel, causal and not (the 3-warpgroup ones included; `splits`, _launch's, as the kernel's split_k)."""
    from benchmarks.bench_attention import VARIANTS
    for name, options in VARIANTS.items():
        options = dict(options)
        config = options.pop("config", None)
        for d in (128, 64):
            if config is not None and d not in config:
                continue
            options_here = {**options, **(config or {}).get(d, {})}
            if "splits" in options_here:
                options_here["split_k"] = options_here.pop("splits") > 1
            for causal in (True, False):
                kernel = kernel_of(d, att_config.DTYPES[BF16], causal, **options_here).kernel
                assert ("_3wg" in kernel.name) == (options_here.get("consumer_warpgroups") == 3), name


# -- split K/V (split_kv=True: K in the template's input ring, V in its late ring, each released on its own) ---------

run_split = functools.partial(interpret, name_part="_splitkv", split_kv=True)


@pytest.mark.parametrize("d,causal,options", [
    (64, False, {}), (64, True, {}), (128, False, {}), (128, True, {}), (256, True, {}),
    (128, True, dict(kv=128, stages=3, late_stages=3)), (128, False, dict(kv=128, stages=2, late_stages=3)),
    (64, True, dict(kv=160, stages=5, late_stages=5)), (64, False, dict(kv=224, stages=4, late_stages=3)),
    (128, True, dict(pingpong=False)), (64, False, dict(pingpong=False)),
    (64, True, dict(consumer_warpgroups=3)), (128, False, dict(consumer_warpgroups=3))])
def test_split_kv_several_tasks_per_persistent_block(d, causal, options):
    """8 tasks (6 with 3 consumer warpgroups) over 3 blocks: both rings run on across tasks of different lengths
    (causal), GQA, lengths that are not multiples of the tiles, a custom scale; the defaults per head dim
    (CONFIGS_SPLIT), other tile heights and stage counts, lockstep warpgroups, 3 consumer warpgroups."""
    n, nk = 460, 450
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = run_split(q, k, v, causal, 0.1, 3, **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", [
    (1, 2, 2, 200, 130, 64, False, BF16),
    (1, 2, 2, 77, 300, 128, False, FP16),
    (2, 2, 1, 64, 64, 64, False, BF16),                 # MQA, one partial tile each
    (1, 4, 2, 77, 300, 128, True, FP16),                # GQA, n < n_k
    (1, 4, 1, 130, 200, 64, "bottom_right", BF16),
    (1, 2, 2, 300, 77, 128, "bottom_right", BF16),      # the first 223 rows see no key
    (1, 1, 1, 1, 1, 64, True, FP16)])
def test_split_kv_odd_lengths(b, h, hkv, n, nk, d, causal, dtype):
    q, k, v = rand(b, h, n, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype)
    o, lse = run_split(q, k, v, causal, 0.125, 2)
    check(o, lse, *reference(q, k, v, causal, scale=0.125), n)


@pytest.mark.parametrize("d,blocks", [(64, 1), (128, 2)])
def test_split_kv_tasks_of_no_steps_in_a_row(d, blocks):
    """Bottom-right causal with n - n_k of several tasks: tasks of no steps in a row on a block release nothing
    and take no turns; the rings' running counts stay in step."""
    n, nk = 760, 50
    q, k, v = rand(1, 1, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = run_split(q, k, v, "bottom_right", 0.125, blocks)
    check(o, lse, *reference(q, k, v, "bottom_right", scale=0.125), n)


@pytest.mark.parametrize("blocks,n", [(3, 600), (2, 640)])
def test_split_kv_causal_task_pairs(blocks, n):
    q, k, v = (rand(1, 1, n, 128, dtype=BF16) for _ in range(3))
    o, lse = run_split(q, k, v, True, 0.125, blocks)
    check(o, lse, *reference(q, k, v, True, scale=0.125), n)


def test_split_kv_through_launch(monkeypatch):
    """_launch's split_kv and late_stages options (bench_attention.py's variants) under TKPY_INTERPRET."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = rand(1, 4, 300, 128, dtype=BF16), rand(1, 2, 500, 128, dtype=BF16), rand(1, 2, 500, 128, dtype=BF16)
    o = gpu_util.poisoned(1, 4, 300, 128, dtype=BF16, device="cpu")
    lse = gpu_util.poisoned(1, 4, policy.lse_rows(300), dtype=torch.float32, device="cpu")
    att._launch(q, k, v, o, lse, True, None, split_kv=True, kv=128, stages=2, late_stages=3)
    check(o, lse[..., :300], *reference(q, k, v, True), 300)


def test_split_kv_source_releases_each_k_stage_after_its_step():
    """K_k's stage is released right after step k (every MMA of the step waited for in compute: the last step's
    P V too), not a step later; V_{k-1}'s late stage after step k, and the task's last V after its last step. The
    consumers wait for a V stage right before the P V product that reads it."""
    q, lse = torch.empty(1, 2, 384, 128, dtype=BF16), torch.empty(1, 2, 384)
    kernel = kernel_of(128, att_config.DTYPES[BF16], True, split_kv=True).kernel
    assert kernel.name == "attention_fwd_d128_causal_splitkv"
    src = kernel.source(q, q, q, q, lse, 1.0, 0)
    consumer = src[src.index("int ring_1 = 0;"):]
    assert re.search(r"tk::arrive\(&finished\[stage_1\], 1\)", consumer)           # this step's own stage
    assert "finished[(it_1 - 1)" not in consumer                                       # (not the previous one)
    assert re.search(r"tk::wait\(&late_arrived\[late_previous_stage\w*\], late_previous_phase\w*\);\s*(//.*\s*)?"
                     r"tk::warpgroup::mma_AB\(out, probs, v\[late_previous_stage", consumer)
    assert re.search(r"tk::wait\(&late_arrived\[late_stage\w*\], late_phase\w*\);\s*(//.*\s*)?"
                     r"tk::warpgroup::mma_AB\(out, probs, v\[late_stage", consumer)
    assert consumer.count("tk::arrive(&late_finished[") == 2


def test_split_kv_options():
    with pytest.raises(ValueError, match="split_kv=True .* needs overlap=True"):
        kernel_of(128, att_config.DTYPES[BF16], split_kv=True, overlap=False)
    with pytest.raises(ValueError, match="late_stages .* is for split_kv=True"):
        kernel_of(128, att_config.DTYPES[BF16], late_stages=3)
    names = {kernel_of(128, att_config.DTYPES[BF16], split_kv=True, **o).kernel.name for o in
             (dict(), dict(kv=176, stages=2, late_stages=2), dict(kv=128, stages=3, late_stages=3))}
    assert names == {"attention_fwd_d128_splitkv", "attention_fwd_d128_3stages_kv128_splitkv_3late"}
    template = kernel_of(128, att_config.DTYPES[BF16], split_kv=True)
    assert (template.stages, template.late_stages) == policy.CONFIGS_SPLIT[128][1:]
    with pytest.raises(tk.TraceError, match=r"stages=3 x 44 KB of inputs \(k: 176x128 bf16\) \+ late_stages=3 x 44 KB "
                                            r"of late_inputs \(v: 176x128 bf16\) \+ task input tiles=2 x 16 KB of "
                                            r"task_inputs \(q: 64x128 bf16\) .*; only one stage fits \(with "
                                            r"late_stages=3\), or only one late_stage fits \(with stages=3\)"):
        kernel_of(128, att_config.DTYPES[BF16], split_kv=True, stages=3, late_stages=3)


@pytest.mark.parametrize("d,causal,options", [
    (64, False, {}), (64, True, {}), (128, False, {}), (128, True, {}), (256, True, {}),
    (128, True, dict(kv=128, stages=3, late_stages=3)), (128, False, dict(kv=128, stages=2, late_stages=3)),
    (64, True, dict(kv=160, stages=5, late_stages=5)), (64, False, dict(kv=224, stages=4, late_stages=3)),
    (128, True, dict(dtype=FP16)), (64, True, dict(consumer_warpgroups=3)), (128, True, dict(consumer_warpgroups=3))])
def test_split_kv_compiles_to_hgmma_without_spills(d, causal, options):
    """The split-K/V defaults (CONFIGS_SPLIT, CONFIGS_SPLIT_3WG) and benchmarks/bench_attention.py's other split
    configurations compile without spills, the wgmma kept asynchronous. (D128 at 192 rows in 2 + 2 stages spills.)"""
    options = dict(options)
    dtype = options.pop("dtype", BF16)
    q, lse = torch.empty(1, 2, 384, d, dtype=dtype), torch.empty(1, 2, 384)
    args = [q, q, q, q, lse, 1.0] + ([0] if causal else [])
    compiled_sass(as_run(d, dtype, causal, args, split_kv=True, **options), args)


# -- attention()'s choice of kernel per shape ---------------------------------------------------------------------

@pytest.mark.parametrize("b,h,n,d,groups", [
    (16, 16, 4096, 64, 3), (4, 16, 16384, 64, 3), (16, 16, 2048, 64, 3),   # many waves: 192-row tasks, 25% faster
    (16, 16, 1024, 64, 3),       # 1024 rows padded to 1152 by 192-row tasks: 12 waves of 192 beat 16 of 128
    (2, 16, 4096, 64, 3),        # 6 waves of 192 rows against 8 of 128
    (16, 16, 100, 64, 2),        # 2 waves either way of 2 warpgroups of rows: a third would have nothing to do
    (128, 16, 256, 64, 2),       # 32 waves either way, 2 warpgroups busy a task on average (RESULTS.md run 221)
    (128, 16, 320, 64, 3),       # 32 waves of 2.5 busy warpgroups against 48 of 2 (run 217: 1.21x against 0.97x)
    (1, 1, 192, 64, 2),          # one wave either way: 2 tasks of 128 rows finish before 1 of 192
    (16, 16, 4096, 128, 2), (4, 16, 16384, 256, 2),
    (1, 2, 1, 64, 1), (16, 16, 64, 128, 1), (8, 8, 33, 256, 1)])   # a head's rows fit one 64-row task
def test_consumer_warpgroups_for_models_waves_of_tasks(b, h, n, d, groups):
    assert policy.consumer_warpgroups_for(b, h, n, d, 132) == groups


@pytest.mark.parametrize("b,h,n,groups", [
    (16, 16, 1024, 3), (16, 16, 4096, 3), (4, 16, 8192, 3),    # 3-5% faster, 2% at N8192 (RESULTS.md runs 245-246)
    (64, 16, 512, 2), (4, 16, 16384, 2),                         # 9% slower at N512; level at N16384
    (1, 1, 1024, 2)])                                            # one wave either way: 8 tasks of 128 rows finish first
def test_causal_d128_takes_three_warpgroups_on_one_ring(b, h, n, groups):
    """D128 causal runs 3 consumer warpgroups on one ring of 64-row key tiles for CAUSAL_GROUP_ROWS's lengths, where
    the wave model says (CAUSAL_GROUP_RATE); non-causal and D64's choices are the causal-blind model's."""
    assert policy.consumer_warpgroups_for(b, h, n, 128, 132, causal=True) == groups
    assert policy.consumer_warpgroups_for(b, h, n, 128, 132) == 2
    assert policy.consumer_warpgroups_for(b, h, n, 64, 132, causal=True) == policy.consumer_warpgroups_for(b, h, n, 64, 132)
    assert not policy.split_kv_for(n, 128, 3, True) and policy.split_kv_for(n, 128, 3, False)
    assert policy.split_kv_for(n, 64, 3, True)
    q = torch.empty(b, h, n, 128, dtype=BF16)
    template = att._prepared(q, q, q, q, None, True, None)[0]
    assert ("_3wg" in template.kernel.name) == (groups == 3) and "_splitkv" not in template.kernel.name


def test_attention_runs_the_kernel_it_picks(monkeypatch):
    """attention() runs consumer_warpgroups_for's choice, with split K/V rings for 3 warpgroups, in cluster pairs
    where cluster_for says, and sizes the log-sum-exp buffer for its tasks' rows (here 2 SMs make 192-row tasks the
    better fit for 384 rows: two query tiles a head, too few for causal pairs), with narrow last steps (causal: a
    warpgroup's 64 rows, as 72 keys left would round to 80; non-causal: the 72 keys left of 200 in 128-row tiles,
    rounded to 80), loading the next query tile ahead over few keys (few_keys_options: 2 warpgroups then on
    Q_AHEAD_KV's 128-row tiles, in lockstep); without return_lse, a kernel that computes no log-sum-exp; blocks of
    one task each in the second call (2 SMs, 2 tasks), so C++'s division there, not divisors made at each block's
    start (FAST_DIVISION_TASKS)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    launched = []
    real = att.AttentionConfig
    monkeypatch.setattr(att, "AttentionConfig", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 2)
    q, k, v = rand(1, 2, 384, 64, dtype=BF16), rand(1, 1, 200, 64, dtype=BF16), rand(1, 1, 200, 64, dtype=BF16)
    o, lse = tkpy_kernels.attention(q, k, v, causal="bottom_right", return_lse=True)
    assert launched[-1] == dict(consumer_warpgroups=3, split_kv=True, q_ahead=True, cluster=1, split_k=False, lse=True,
                                last_kv=64)
    assert lse.shape == (1, 2, 384)
    check(o, lse, *reference(q, k, v, "bottom_right"), 384)
    o2 = tkpy_kernels.attention(rand(1, 1, 192, 64, dtype=BF16), k, v)   # one wave either way: two 128-row tasks of 96 rows
    assert launched[-1] == dict(consumer_warpgroups=2, split_kv=False, q_ahead=True, kv=128, pingpong=False,
                                cluster=1, split_k=False, lse=False, last_kv=80, fast_division=False)
    assert o2.shape == (1, 1, 192, 64)                           # on average finish before one of 192


@pytest.mark.parametrize("n,nk,d,options,name", [
    (256, 256, 64, {}, "attention_fwd_d64_lockstep_kv128_qahead_nolse"),   # 2 warpgroups: Q_AHEAD_KV's tiles
    (512, 512, 64, {}, "attention_fwd_d64_3wg_splitkv_qahead_nolse"),   # 3 warpgroups on their split rings
    (512, 513, 64, {}, "attention_fwd_d64_3wg_splitkv_last16_nolse"),   # past Q_AHEAD_KEYS
    (48, 256, 64, {}, "attention_fwd_d64_1wg_last96_nolse"),            # one warpgroup: one query tile a task
    (256, 256, 128, {}, "attention_fwd_d128_cluster2_nolse"),           # D128: Q in registers, preloaded
    (256, 256, 64, dict(kv=96), "attention_fwd_d64_kv96_qahead_last64_nolse"),   # kv as given
    (256, 256, 64, dict(consumer_warpgroups=2, q_registers=True), "attention_fwd_d64_qregs_last96_nolse"),
    (256, 256, 64, dict(q_ahead=False), "attention_fwd_d64_last96_nolse")])
def test_q_ahead_by_default_over_few_keys(n, nk, d, options, name):
    """attention()'s kernels load each consumer's next query tile ahead (q_ahead) up to Q_AHEAD_KEYS keys at the head
    dims it names, with 2 or 3 consumer warpgroups, unless the options choose how Q is held."""
    q, k = torch.empty(32768 // n, 16, n, d, dtype=BF16), torch.empty(32768 // n, 16, nk, d, dtype=BF16)
    template, _ = att._prepared(q, k, k, q, None, False, None, **options)
    assert template.kernel.name == name


@pytest.mark.parametrize("nk,d,groups,causal,split", [
    (8192, 128, 2, False, True), (16384, 128, 2, False, True),   # 176-row split tiles on long keys (runs 125-126)
    (2048, 128, 2, False, True), (4096, 128, 2, False, True),    # and from 2048 keys (runs 155-157)
    (1024, 128, 2, False, False), (16384, 128, 2, True, False),  # slower at 1024 keys; causal not timed
    (100, 64, 3, True, True),                                     # 3 warpgroups: always split
    (16384, 256, 2, False, True), (100, 160, 2, True, True),      # past D128 with 2: always split (run 195)
    (16384, 256, 1, False, False)])                               # never with 1
def test_split_kv_for(nk, d, groups, causal, split):
    assert policy.split_kv_for(nk, d, groups, causal) == split


@pytest.mark.parametrize("b,h,hkv,n,nk,streams,tiles", [
    (4, 32, 32, 128, 8192, True, (128, 2, 3)),     # 1 query tile reads each key/value head's tiles: they stream
    (4, 32, 8, 128, 8192, True, (128, 2, 3)),      # 4 (GQA): still streaming (RESULTS.md run 203)
    (1, 16, 16, 512, 32768, True, (128, 2, 3)),    # 4 query tiles a head, split-K
    (2, 8, 1, 300, 9000, False, (176, 2, 2)),      # 8 x 3 tiles share them: from the L2
    (16, 16, 16, 4096, 4096, False, (176, 2, 2)),  # 32 tiles a head
    (4, 32, 32, 128, 1024, True, None)])           # too few keys for split rings: one ring, CONFIGS's
def test_split_rings_of_streaming_tasks(monkeypatch, b, h, hkv, n, nk, streams, tiles):
    """D128 non-causal split rings take CONFIGS_STREAM's 128-row tiles in 2 + 3 stages where at most STREAM_READERS
    query tiles read each key/value head's tiles, CONFIGS_SPLIT's 176 rows in 2 + 2 otherwise; split-K counts its
    key tiles in the rows the kernel takes."""
    launched = []
    real = att.AttentionConfig
    monkeypatch.setattr(att, "AttentionConfig", lambda *a, **kw: launched.append(kw) or real(*a, **kw))
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 132)
    q = torch.empty(b, h, n, 128, dtype=BF16)
    k = torch.empty(b, hkv, nk, 128, dtype=BF16)
    att._prepared(q, k, k, q, None, False, None)
    options = launched[-1]
    default = policy.default_tiles(128, 2, options["split_kv"])
    got = tuple(options.get(name, fallback) for name, fallback in zip(("kv", "stages", "late_stages"), default))
    assert options["split_kv"] == (tiles is not None)
    assert got == (default if tiles is None else tiles)
    assert policy.streaming(q, k, 2) == streams
    assert policy.stream_tiles(q, k, 2, options["split_kv"]) == (tiles if streams else None)
    if options["split_k"]:                  # split-K at least SPLIT_MIN_STEPS of the kernel's key tiles a split
        splits = policy.splits_for(b, h, n, 128, nk, got[0], 2, 132)
        assert att.cdiv(nk, got[0]) // splits >= policy.SPLIT_MIN_STEPS


@pytest.mark.parametrize("n,d,groups,causal,cluster", [
    (4096, 128, 2, False, 2), (1000, 128, 2, False, 2),     # 32 and 8 query tiles a head
    (1100, 128, 2, False, 1),                                # 9: no pairs
    (3000, 128, 2, True, 1), (4096, 128, 2, True, 2),        # D128 causal: from 32 tiles (runs 240-241)
    (4200, 128, 2, True, 2),                                 # ... and 33, with a tile of padding
    (4096, 64, 3, True, 2), (4096, 64, 3, False, 2),         # 22 tiles of 192 rows
    (900, 64, 3, False, 1), (1000, 64, 3, False, 2),         # 5 and 6 tiles of 192 rows
    (1024, 64, 3, True, 1), (1536, 64, 3, True, 2),          # causal: 6 tiles too few (run 172), 8 enough (176)
    (2048, 64, 3, False, 1), (8192, 64, 3, False, 2),        # 11 and 43 tiles: odd, a tile of padding (run 177)
    (8192, 64, 3, True, 2), (2048, 64, 3, True, 2),          # causal: 43 and 11 tiles, odd: padding before row 0
    (1300, 64, 3, True, 1),                                  # 7: too few
    (1024, 64, 2, False, 1),                                 # not timed in pairs
    (4096, 256, 2, False, 2), (4096, 192, 2, True, 2),       # past D128, causal or not (run 198)
    (1300, 160, 2, True, 2), (800, 160, 2, True, 1)])        # causal: 11 tiles (padding before row 0), 7 too few
def test_cluster_for(n, d, groups, causal, cluster):
    assert policy.cluster_for(n, d, groups, causal) == cluster
    if n == 8192:       # (a tile of padding: not without skips, nor with the padding after the last row)
        assert policy.cluster_for(n, d, groups, causal, odd=False) == 1


def test_clean_choices_try_divisors_then_single_blocks():
    """On the GPU _prepared tries the index math by divisors, then by C++'s division, each in the cluster pairs
    cluster_for picked and then in single blocks; in the interpreter (and for pairs the caller gave) nothing but
    the stale shift at its head dims."""
    cdiv_, single = dict(fast_division=False), dict(cluster=1)
    assert policy.clean_choices(128, 2, {}, True, True) == [{}, single, cdiv_, dict(cdiv_, **single)]
    assert policy.clean_choices(128, 2, {}, True, False) == [{}, cdiv_]
    assert policy.clean_choices(128, 2, cdiv_, True, True) == [{}, single]
    assert policy.clean_choices(128, 2, {}, False, True) == []
    stale = dict(stale_shift=True)
    assert policy.clean_choices(256, 2, {}, False, True) == [stale]
    assert policy.clean_choices(256, 2, {}, True, False) == [stale, dict(stale, **cdiv_), {}, cdiv_]


def test_default_causal_pairs_at_d128_compile_clean_or_run_single(monkeypatch):
    """D128 causal from 32 query tiles a head runs in cluster pairs where their kernel compiles clean under the
    NVRTC at hand, in single blocks otherwise (NVRTC 13.5's pair kernel spills 16 bytes, 13.0's none), with the
    divisors before either (first_clean over clean_choices); a pair's spills are never what runs."""
    q, lse = torch.empty(4, 16, 4096, 128, dtype=BF16), torch.empty(4, 16, 4096)
    args = [q, q, q, q, lse, 1.0, 0]
    assert policy.cluster_for(4096, 128, 2, True) == 2
    kernel = functools.partial(att_config.AttentionConfig, 128, att_config.DTYPES[BF16], True, cluster=2)
    template = att.first_clean(kernel, args, policy.clean_choices(128, 2, {}, True, True))
    assert template is not None
    compiled_sass(template.kernel, args)
    monkeypatch.setattr(att, "_compiles_clean", lambda template, args: "_cluster2" not in template.kernel.name)
    chosen = att.first_clean(kernel, args, policy.clean_choices(128, 2, {}, True, True))
    assert chosen.kernel.name == "attention_fwd_d128_causal"


# -- q_ahead=True: two query tiles per consumer warpgroup, the next task's Q loading while this task runs -------

run_q_ahead = functools.partial(interpret, name_part="_qahead", q_ahead=True)


Q_AHEAD_CONFIGS = [          # the configurations whose stages leave room for a second query tile per warpgroup
    (64, {}), (64, dict(consumer_warpgroups=3, split_kv=True)), (128, dict(kv=96)),
    (128, dict(split_kv=True, kv=128, stages=2, late_stages=3)), (64, dict(pingpong=False)),
    (64, dict(overlap=False, stages=2)), (64, dict(next_q_in_step=False))]


@pytest.mark.parametrize("d,options", Q_AHEAD_CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
def test_q_ahead_several_tasks_per_persistent_block(d, options, causal):
    """8 tasks (6 of 192 rows) over 3 blocks: each block's next Q lands in the other buffer while a task runs
    on one; GQA, odd lengths, a custom scale."""
    n, nk = 460, 450
    q, k, v = rand(1, 2, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = run_q_ahead(q, k, v, causal, 0.1, 3, **options)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


@pytest.mark.parametrize("d,options", Q_AHEAD_CONFIGS[:4])
@pytest.mark.parametrize("blocks", [1, 2])
def test_q_ahead_tasks_of_no_steps_in_a_row(d, options, blocks):
    """Bottom-right causal with tasks of no steps in a row: they still load and wait for their Q (a warp cannot
    run ahead and load a buffer twice while another waits for it)."""
    n, nk = 760, 50
    q, k, v = rand(1, 1, n, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16), rand(1, 1, nk, d, dtype=BF16)
    o, lse = run_q_ahead(q, k, v, "bottom_right", 0.125, blocks, **options)
    check(o, lse, *reference(q, k, v, "bottom_right", scale=0.125), n)


@pytest.mark.parametrize("b,h,hkv,n,nk,d,causal,dtype", [
    (1, 2, 2, 77, 300, 128, False, FP16), (2, 2, 1, 64, 64, 64, False, BF16), (1, 1, 1, 1, 1, 64, True, FP16),
    (1, 4, 1, 130, 200, 64, "bottom_right", BF16), (1, 1, 1, 900, 900, 64, True, BF16)])
def test_q_ahead_odd_lengths(b, h, hkv, n, nk, d, causal, dtype):
    q, k, v = rand(b, h, n, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype), rand(b, hkv, nk, d, dtype=dtype)
    o, lse = run_q_ahead(q, k, v, causal, 0.125, 2, **({} if d == 64 else dict(kv=96)))
    check(o, lse, *reference(q, k, v, causal, scale=0.125), n)


def test_next_q_in_step_needs_a_first_step_in_every_task():
    """next_q_in_step (by default with q_ahead where every task has a first step) is refused where a task or a
    warpgroup may have none, or without q_ahead."""
    for options in (dict(causal=True), dict(consumer_warpgroups=3, split_kv=True), dict(q_ahead=False),
                    dict(split_k=True)):
        options = {"causal": False, "q_ahead": True, **options}
        with pytest.raises(ValueError, match="next_q_in_step=True needs q_ahead"):
            kernel_of(64, att_config.DTYPES[BF16], options.pop("causal"), next_q_in_step=True, **options)
    assert "_qloadatstart" in kernel_of(64, att_config.DTYPES[BF16], False, q_ahead=True,
                                             next_q_in_step=False).kernel.name


def test_q_ahead_needs_the_shared_memory_of_a_second_query_tile():
    """D128's default one-ring kernel (3 stages of 128-row K and V tiles) leaves no room for it."""
    q, lse = torch.empty(1, 2, 384, 128, dtype=BF16), torch.empty(1, 2, 384)
    with pytest.raises(Exception, match="shared memory"):
        kernel_of(128, att_config.DTYPES[BF16], False, q_ahead=True).kernel.source(q, q, q, q, lse, 1.0)


@pytest.mark.parametrize("d,options", Q_AHEAD_CONFIGS[:4])
def test_q_ahead_compiles_to_hgmma_without_spills(d, options):
    """No spills, asynchronous wgmma, and their descriptors made in uniform registers: no R2UR (a vector register
    moved to a uniform one) among the 4 instructions before any HGMMA. Loading the next Q through a branch per
    warpgroup and buffer (RESULTS.md run 49) had ptxas build the P V descriptors in vector registers, 7-10%
    slower."""
    q, lse = torch.empty(1, 2, 384, d, dtype=BF16), torch.empty(1, 2, 384)
    kernel = kernel_of(d, att_config.DTYPES[BF16], True, q_ahead=True, **options).kernel
    before = before_hgmma(compiled_sass(kernel, [q, q, q, q, lse, 1.0, 0]))
    assert before and not any("R2UR" in line for line in before)


def before_hgmma(sass: str, window: int = 4) -> list[str]:
    """The `window` instructions before each HGMMA of a SASS listing (nvdisasm's, one instruction a line)."""
    lines = [line for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    return [lines[j] for i, text in enumerate(lines) if "HGMMA" in text for j in range(max(0, i - window), i)]


@pytest.mark.parametrize("d,causal", [(128, False), (128, True), (64, False)])
def test_wgmma_descriptor_steps_are_one_32_bit_add(d, causal):
    """The default kernels: a wgmma's descriptor for step k is the tile's descriptor plus k's offset in the low
    word, one uniform add; no 64-bit add with carry (UIADD3.X) before any HGMMA, as when the prelude wrote it
    in 64-bit arithmetic (NVRTC 13.0, the H200's, widened the add: three dependent instructions before every
    HGMMA; 13.5 did not, so this fails only under 13.0 on the old prelude)."""
    q, lse = torch.empty(1, 2, 384, d, dtype=BF16), torch.empty(1, 2, 384)
    kernel = kernel_of(d, att_config.DTYPES[BF16], causal, consumer_warpgroups=3 if d == 64 else 2,
                            split_kv=d == 64).kernel
    before = before_hgmma(compiled_sass(kernel, [q, q, q, q, lse, 1.0] + ([0] if causal else [])))
    assert before and not any("UIADD3.X" in line for line in before)


@pytest.mark.parametrize("d,causal,hkv,n,nk,splits,split_kv", [
    (128, False, 1, 100, 300, 1, False), (64, True, 2, 150, 150, 1, False), (256, "bottom_right", 1, 40, 200, 1, False),
    (128, False, 1, 8, 1000, 3, False), (64, "bottom_right", 2, 64, 700, 2, False),
    (128, False, 1, 8, 1500, 2, True)])                 # D128's split rings (attention() from 8192 keys on)
def test_one_consumer_warpgroup(monkeypatch, d, causal, hkv, n, nk, splits, split_kv):
    """consumer_warpgroups=1: tasks of 64 query rows, no turns (decoding's few rows: no 64-row half of padding),
    alone or with split-K."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 2, n, d, dtype=BF16)
    k, v = rand(1, hkv, nk, d, dtype=BF16), rand(1, hkv, nk, d, dtype=BF16)
    o, lse = launch_split(q, k, v, causal, splits, consumer_warpgroups=1, split_kv=split_kv)
    check(o, lse, *reference(q, k, v, causal, scale=0.1), n)


def test_expanded_inputs_are_copied_before_the_kernel(monkeypatch):
    """K and V broadcast over the batch (stride 0): _usable copies them (a TMA map cannot repeat a dim; the kernel's
    arguments refuse such tensors, tk.ArgumentError), and the result is right (interpreter)."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(2, 2, 70, 64, dtype=BF16)
    k, v = (rand(1, 2, 90, 64, dtype=BF16).expand(2, -1, -1, -1) for _ in range(2))
    assert att._usable(k) is not k and att._usable(q) is q
    o, lse = attention(q, k, v, return_lse=True)
    check(o, lse, *reference(q, k, v), 70)
    kernel = kernel_of(64, att_config.DTYPES[BF16], False, lse=False).kernel
    with pytest.raises(tk.ArgumentError, match="repeats its elements along dim 0"):
        kernel.trace(q, k, v, torch.empty_like(q), 1.0)


@pytest.mark.parametrize("n,d,causal", [(256, 64, False), (256, 64, True), (4096, 64, False), (4096, 128, False),
                                        (1024, 128, True), (16384, 128, False)])
def test_task_loops_divide_only_by_divisors(monkeypatch, n, d, causal):
    """In attention()'s kernels over many tasks a block, every division in the loops is by a constant or by a
    tk::divisor made at the kernel's start (fast_division; RESULTS.md runs 230-237): none by a runtime value."""
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 132)
    q = torch.empty(max(1, 32768 // n), 16, n, d, dtype=BF16)
    template, args = att._prepared(q, q, q, q, None, causal, None)
    body = template.kernel.source(*args).split("end of prelude")[1]
    loops = body[body.index("for ("):]
    assert "tk::divisor" in body
    assert not [line for line in loops.splitlines() if not line.strip().startswith("//")
                and re.search(r" [/%] (?!\d|\w+_divisor\b|divisor_\d+\b)", line)]
