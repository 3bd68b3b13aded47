"""fp8 (e4m3, e5m2) without a GPU: dtypes, the CPU rounding against torch, shared-tile swizzles, the wgmma
descriptors against the tile layout, trace-time errors, generated code, NVRTC/SASS, and the interpreter against
float64 references. GPU counterparts: test_gpu_fp8.py."""
import re

import numpy as np
import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.codegen.prelude import hopper
from tkpy.interpret import fp8 as fp8_codec
from tkpy.interpret.numerics import decode, encode, round_to
from tkpy.tiles import wgmma as wg
from tkpy.tiles.types import RT, ST, SV

from fp8_kernels import (FP8, TORCH8, TORCH_WIDE, conversion_inputs, convert_kernel, plain_copy_kernel,
                         plain_copy_reference, quantize, random_fp8, tma_roundtrip_kernel, wgmma_bound, wgmma_kernel,
                         wgmma_reference)

KINDS = ["e4m3", "e5m2"]


# --------------------------------------------------------------------------- dtypes and rounding

def test_dtypes():
    assert tk.fp8e4m3.nbytes == tk.fp8e5m2.nbytes == 1
    assert tk.fp8e4m3.torch == torch.float8_e4m3fn and tk.fp8e5m2.torch == torch.float8_e5m2
    assert tk.tiles.from_torch(torch.float8_e4m3fn) is tk.fp8e4m3
    assert tk.tiles.from_torch(torch.float8_e5m2) is tk.fp8e5m2


@pytest.mark.parametrize("kind", KINDS)
def test_decode_table_matches_torch(kind):
    """The 256 codes, built from the bit fields, decode as torch's float8 types do (NaN codes included)."""
    ref = torch.arange(256, dtype=torch.uint8).view(TORCH8[kind]).float().numpy()
    assert np.array_equal(fp8_codec.table(f"fp8{kind}"), ref, equal_nan=True)
    assert fp8_codec.max_finite(f"fp8{kind}") == torch.finfo(TORCH8[kind]).max


@pytest.mark.parametrize("kind", KINDS)
def test_encode_rounds_to_nearest_even_and_saturates_like_torch(kind):
    """Random values over many scales, every tie between neighbouring fp8 values (to the even code), the values
    and their neighbours, and overflow (to the largest finite, as cvt's .satfinite)."""
    dt = FP8[kind]
    rng = np.random.default_rng(1)
    t = fp8_codec.table(dt.name)
    v = np.unique(t[np.isfinite(t)].astype(np.float64))
    mids = ((v[1:] + v[:-1]) / 2).astype(np.float32)
    x = np.concatenate([rng.standard_normal(100_000).astype(np.float32) * s for s in (1e-4, 1e-2, 1, 30, 1e3, 1e5)]
                       + [mids, v.astype(np.float32), np.nextafter(mids, np.float32(np.inf)),
                          np.nextafter(mids, np.float32(-np.inf)), np.float32([1e30, -1e30, 0.0, -0.0])])
    got = encode(dt, x)
    want = quantize(torch.from_numpy(x), kind).view(torch.uint8).numpy()
    assert np.array_equal(got, want)
    assert np.array_equal(round_to(dt, x), decode(dt, want))


@pytest.mark.parametrize("kind", KINDS)
def test_saturation_and_nan(kind):
    dt = FP8[kind]
    m = torch.finfo(TORCH8[kind]).max
    x = np.float32([np.inf, -np.inf, 2 * m, -2 * m, np.nan, -np.nan])
    assert decode(dt, encode(dt, x))[:4].tolist() == [m, -m, m, -m]
    assert np.isnan(decode(dt, encode(dt, x))[4:]).all()
    assert encode(dt, np.float32([np.nan])).tolist() == [0x7F]


def test_e4m3_ties_and_subnormals():
    dt = tk.fp8e4m3
    # 1 + 1/16 lies halfway between 1 (mantissa 000, even) and 1.125: even wins; 1.1875 goes up to 1.25.
    assert round_to(dt, np.float32([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -11, 464.0, 449.0])).tolist() == \
        [1.0, 1.25, 0.0, 2.0 ** -9, 448.0, 448.0]


# --------------------------------------------------------------------------- tile types

@pytest.mark.parametrize("cols,swizzle", [(128, 128), (256, 128), (64, 64), (32, 32), (16, 0), (96, 32)])
def test_shared_tile_swizzle_is_chosen_from_the_row_width_in_bytes(cols, swizzle):
    t = ST(tk.fp8e4m3, 64, cols)
    assert t.swizzle == swizzle
    assert t.nbytes == 64 * cols
    assert t.panel_cols == (swizzle or cols)            # one byte per element: a panel is `swizzle` elements
    # inside a panel, the 16-byte chunk of (row, col) is XORed with address bits 7.. (Swizzle<b,4,3>)
    if swizzle:
        for r in range(16):
            for c in range(0, min(cols, swizzle), 16):
                off = t.byte_offset(r, c)
                assert off % 16 == 0 and off // swizzle == r
                assert (off % swizzle) // 16 == (c // 16) ^ (((r * swizzle) >> 7) % (swizzle // 16))


def test_fp8_register_tiles_and_vectors():
    t = RT(tk.fp8e4m3, 16, 64)
    assert t.registers_per_lane == 8                     # 32 elements per lane, 4 per register
    assert t.col_vec().dtype == f32 and t.row_vec().dtype == f32    # no fp8 vectors: reductions give f32
    with pytest.raises(TypeError, match="fp8 is for register and shared tiles"):
        SV(tk.fp8e5m2, 64)


# --------------------------------------------------------------------------- wgmma descriptors

def _tiles(dtype):
    for rows in (64, 16, 128, 256):
        for cols_bytes in (32, 64, 128, 256, 512):
            for swz in (32, 64, 128):
                if cols_bytes % swz == 0:
                    yield ST(dtype, rows, cols_bytes // dtype.nbytes, swz)


@pytest.mark.parametrize("dtype", [tk.fp8e4m3, bf16], ids=["fp8", "bf16"])
def test_k_major_descriptors_read_the_tile_layout(dtype):
    """Through each instruction's descriptor (PTX's canonical K-major swizzled layout) the hardware reads row r,
    byte kb of the instruction's 32 bytes of K exactly where tkpy's tile keeps element (r, k0 + kb / size)."""
    base = 3 * 1024
    kk = wg.k_per_instruction(dtype)
    for t in _tiles(dtype):
        for step in range(t.cols // kk):
            d = wg.descriptor(t, step, mn_major=False)
            r, kb = np.meshgrid(np.arange(t.rows), np.arange(32), indexing="ij")
            got = wg.address(d, base, r, kb, mn_major=False)
            want = base + t.byte_offset(r, step * kk + kb // dtype.nbytes) + kb % dtype.nbytes
            assert np.array_equal(got, want), (t, step)


def test_mn_major_descriptors_read_the_tile_layout():
    """bf16 only (wgmma transposes 16-bit types only): a K x N tile read MN-major, 16 K rows per instruction."""
    base = 2048
    for t in _tiles(bf16):
        for step in range(t.rows // 16):
            d = wg.descriptor(t, step, mn_major=True)
            k, nb = np.meshgrid(np.arange(16), np.arange(0, t.cols * 2, 2), indexing="ij")
            got = wg.address(d, base, nb, k, mn_major=True)
            assert np.array_equal(got, base + t.byte_offset(step * 16 + k, nb // 2)), (t, step)


@pytest.mark.parametrize("swizzle,sbo,mode,starts", [
    (128, 1024, 1, [0, 32, 64, 96, 128 * 64, 128 * 64 + 32]),
    (64, 512, 2, [0, 32, 64 * 64, 64 * 64 + 32]),
    (32, 256, 3, [0, 32 * 64, 2 * 32 * 64, 3 * 32 * 64])])
def test_fp8_descriptor_parameters(swizzle, sbo, mode, starts):
    """The fp8 descriptor fields per swizzle, for a 64-row tile: LBO 16 bytes (unused by swizzled K-major
    layouts), SBO 8 rows x the swizzle width, and per m64nNk32 instruction the start address 32 bytes further
    inside a panel, then the next panel (rows x swizzle bytes on)."""
    t = ST(tk.fp8e4m3, 64, 256 if swizzle == 128 else 128, swizzle)
    ds = [wg.descriptor(t, s, mn_major=False) for s in range(len(starts))]
    assert [d.start for d in ds] == starts
    assert {(d.leading, d.stride, d.swizzle) for d in ds} == {(16, sbo, swizzle)}
    enc = ds[1].encode(0x400)
    assert enc & 0x3FFF == (0x400 + starts[1]) >> 4
    assert (enc >> 16) & 0x3FFF == 1 and (enc >> 32) & 0x3FFF == sbo >> 4 and enc >> 62 == mode


def test_prelude_descriptor_matches_the_model():
    """tk::descriptor in the prelude computes what tiles/wgmma.py models (the same expressions)."""
    text = hopper._WGMMA
    assert ": (k16 % (swz / 32)) * 32 + (k16 / (swz / 32)) * panel_bytes;" in text      # K-major step offset
    assert "MN_MAJOR ? u32(k16) * 16 * swz" in text                                    # MN-major step offset
    # the low word (bits 0-31): start address and leading byte offset, plus the step's offset
    assert "u32(desc_encode(smem_addr(s.base))) | u32(desc_encode(leading)) << 16" in text
    assert '"r"(low + (offset >> 4))' in text and "constexpr u32 leading = MN_MAJOR ? panel_bytes : 16;" in text
    # the high word (bits 32-63): stride byte offset and the swizzle mode in bits 62-63
    assert "u32(desc_encode(8 * swz)) | mode << 30" in text and "mode = swz == 128 ? 1 : swz == 64 ? 2 : 3" in text


# --------------------------------------------------------------------------- trace-time errors

def _trace(body, *tensors, warps=4):
    kern = tk.kernel(warps=warps)(body)
    return kern.trace(*tensors)


def _fp8(*shape, kind="e4m3"):
    return torch.zeros(*shape, dtype=TORCH8[kind])


@pytest.mark.parametrize("op", ["mma_AB", "mm_AB", "mma_AtB", "mma_AtBt", "mm_AtBt"])
def test_fp8_wgmma_needs_k_major_operands(op):
    def k(x: tk.gl[tk.fp8e4m3, 64, 64]):
        a = tk.st(tk.fp8e4m3, 64, 64)
        b = tk.st(tk.fp8e4m3, 64, 64)
        d = tk.rt(f32, 16, 64)
        getattr(tk.warpgroup, op)(d, a, b)
    with pytest.raises(tk.TraceError, match=rf"{op}: fp8 wgmma needs K-major operands .* only mma_ABt / mm_ABt"):
        _trace(k, _fp8(64, 64))


def test_fp8_wgmma_k_in_steps_of_32():
    def k(x: tk.gl[tk.fp8e4m3, 64, 64]):
        a = tk.st(tk.fp8e4m3, 64, 48, swizzle=0)
        b = tk.st(tk.fp8e4m3, 64, 48, swizzle=0)
        d = tk.rt(f32, 16, 64)
        tk.warpgroup.mm_ABt(d, a, b)
    with pytest.raises(tk.TraceError, match="fp8 wgmma takes K in steps of 32"):
        _trace(k, _fp8(64, 64))


def test_fp8_and_bf16_do_not_mix_in_wgmma():
    def k(x: tk.gl[tk.fp8e4m3, 64, 64]):
        a = tk.st(tk.fp8e4m3, 64, 64)
        b = tk.st(bf16, 64, 64)
        d = tk.rt(f32, 16, 64)
        tk.warpgroup.mm_ABt(d, a, b)
    with pytest.raises(tk.TraceError, match="must both be bf16, both fp16, or both fp8"):
        _trace(k, _fp8(64, 64))


def test_fp8_warp_mma_is_refused():
    def k(x: tk.gl[tk.fp8e4m3, 64, 64]):
        a = tk.rt(tk.fp8e4m3, 16, 32)
        b = tk.rt(tk.fp8e4m3, 16, 32, "col")
        c = tk.rt(f32, 16, 16)
        tk.mma_AB(c, a, b, c)
    with pytest.raises(tk.TraceError, match="mma_AB: warp mma.sync .* takes bf16/fp16, not fp8"):
        _trace(k, _fp8(64, 64), warps=1)


@pytest.mark.parametrize("which", ["swap_layout", "transpose", "copy_across_layouts"])
def test_fp8_register_layout_changes_are_refused(which):
    def k(x: tk.gl[tk.fp8e4m3, 64, 64]):
        a = tk.rt(tk.fp8e4m3, 32, 32)
        tk.load(a, x, (0, 0))
        if which == "swap_layout":
            tk.swap_layout(tk.rt(tk.fp8e4m3, 32, 32, "col"), a)
        elif which == "transpose":
            tk.transpose(tk.rt(tk.fp8e4m3, 32, 32), a)
        else:
            tk.copy(tk.rt(tk.fp8e4m3, 32, 32, "col"), a)
    name = "transpose" if which == "transpose" else "swap_layout"
    with pytest.raises(tk.TraceError, match=rf"{name} does not support fp8 register tiles \(\w+: rt<fp8e4m3"):
        _trace(k, _fp8(64, 64), warps=1)


def test_fp8_vectors_and_tma_adds_are_refused():
    def vec(x: tk.gl[tk.fp8e4m3, 64, 64]):
        tk.rv(tk.fp8e4m3, 16)
    with pytest.raises(tk.TraceError, match="rv element type fp8e4m3 is not supported"):
        _trace(vec, _fp8(64, 64), warps=1)

    def add(x: tk.gl[tk.fp8e5m2, 64, 64]):
        s = tk.st(tk.fp8e5m2, 64, 64)
        tk.tma.store_add_async(x, s, (0, 0))
    with pytest.raises(tk.TraceError, match="TMA reductions do not add fp8"):
        _trace(add, _fp8(64, 64, kind="e5m2"), warps=1)


def test_expect_counts_fp8_bytes():
    k = wgmma_kernel("e4m3", "e5m2", 128, 128)
    args = (_fp8(64, 128), _fp8(128, 128, kind="e5m2"), torch.zeros(64, 128))
    assert "tk::expect_bytes(sem, 24576);" in k.source(*args)     # 64 x 128 + 128 x 128 bytes


# --------------------------------------------------------------------------- generated code, NVRTC, SASS

def test_wgmma_instruction_text():
    ss = hopper.wgmma_instruction(64, "fp8e4m3", False)
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " in ss
    assert "%32, %33, p, 1, 1;" in ss and "TRANS" not in ss      # no transpose operands for fp8
    mixed = hopper.wgmma_instruction(256, "fp8e5m2_fp8e4m3", True)
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e4m3 " in mixed
    assert "{%128, %129, %130, %131}, %132, p, 1, 1;" in mixed
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " in hopper.wgmma_instruction(64, "bf16", False)


def test_fp8_prelude_only_in_fp8_kernels():
    k = wgmma_kernel("e4m3", "e4m3", 64, 64)
    src = k.source(_fp8(64, 64), _fp8(64, 64), torch.zeros(64, 64))
    assert "struct fp8e4m3 { unsigned char x; };" in src
    assert "cvt.rn.satfinite.e4m3x2.f32" in src and "cvt.rn.f16x2.e4m3x2" in src
    assert "fp8e5m2" not in src                  # the helpers of the fp8 kind it uses only
    assert "wgmma_m64n64k32_ss_fp8e4m3(d, descriptor<st<fp8e4m3, RA, CA, SA, PRA, PCA>, false>(a, k)" in src

    @tk.kernel(warps=1)
    def plain(x: tk.gl[bf16, 16, 16]):
        t = tk.rt(bf16, 16, 16)
        tk.load(t, x, (0, 0))
        tk.store(x, t, (0, 0))
    assert "fp8e4m3" not in plain.source(torch.zeros(16, 16, dtype=torch.bfloat16))


def test_tensor_map_dtype():
    from tkpy.runtime.tensor_map import _DTYPES, geometry
    assert _DTYPES["fp8e4m3"] == _DTYPES["fp8e5m2"] == "CU_TENSOR_MAP_DATA_TYPE_UINT8"
    geo = geometry((300, 256), (256, 1), 1, ST(tk.fp8e4m3, 64, 256))
    assert geo.box == (128, 64, 1, 1) and geo.strides == (256, 300 * 256, 300 * 256)   # one 128-byte panel


@pytest.mark.parametrize("a_kind,b_kind,n,k,a_regs", [
    ("e4m3", "e4m3", 16, 32, False), ("e4m3", "e4m3", 128, 128, False), ("e5m2", "e5m2", 256, 64, False),
    ("e4m3", "e5m2", 64, 256, False), ("e5m2", "e4m3", 96, 128, True), ("e4m3", "e4m3", 256, 64, True)])
def test_wgmma_compiles_to_qgmma(a_kind, b_kind, n, k, a_regs):
    """NVRTC to sm_90a and nvdisasm (no GPU): one QGMMA.64xNx32 per 32 of K, per product (mm then mma)."""
    kern = wgmma_kernel(a_kind, b_kind, n, k, a_regs)
    args = (_fp8(64, k, kind=a_kind), _fp8(n, k, kind=b_kind), torch.zeros(64, n))
    ptx = kern.ptx(*args)
    assert len(re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k32\.f32\.{a_kind}\.{b_kind} ", ptx)) == 2 * k // 32
    sass = kern.sass(*args)
    a_op = r"R\d+" if a_regs else r"gdesc\[UR\d+\]"
    pattern = rf"QGMMA\.64x{n}x32\.F32\.{a_kind.upper()}\.{b_kind.upper()} R\d+, {a_op}"
    assert len(re.findall(pattern, sass)) == 2 * k // 32, sass
    res = kern.resources(*args)
    assert res.spill_stores == res.spill_loads == 0
    assert not any("C7514" in w for w in res.warnings)      # wgmma not serialized


@pytest.mark.parametrize("kind", KINDS)
def test_conversions_compile_to_f2fp(kind):
    kern = convert_kernel(kind, "f32", "row")
    args = (torch.zeros(32, 64), _fp8(32, 64, kind=kind), _fp8(32, 64, kind=kind),
            torch.zeros(32, 64, dtype=torch.bfloat16), torch.zeros(32, 64))
    sass = kern.sass(*args)
    assert f"F2FP.SATFINITE.{kind.upper()}.F32.PACK_AB" in sass       # cvt.rn.satfinite.<kind>x2.f32
    assert f"F2FP.F16.{kind.upper()}.UNPACK_B" in sass                # cvt.rn.f16x2.<kind>x2


# --------------------------------------------------------------------------- interpreter

@pytest.mark.parametrize("a_kind,b_kind,n,k,a_regs", [
    ("e4m3", "e4m3", 16, 32, False), ("e4m3", "e4m3", 64, 128, False), ("e5m2", "e5m2", 128, 64, False),
    ("e4m3", "e5m2", 256, 256, False), ("e5m2", "e4m3", 32, 96, True), ("e4m3", "e4m3", 48, 64, True)])
def test_interpreted_wgmma_against_float64(a_kind, b_kind, n, k, a_regs):
    a = random_fp8(128, k, kind=a_kind, seed=1)
    b = random_fp8(2 * n, k, kind=b_kind, seed=2)
    c = torch.full((128, 2 * n), float("nan"))
    wgmma_kernel(a_kind, b_kind, n, k, a_regs).interpret[(2, 2)](a, b, c)
    assert ((c.double() - wgmma_reference(a, b)).abs() <= wgmma_bound(a, b)).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,cols,swizzle", [(64, 128, 128), (32, 256, 128), (64, 64, 64), (16, 32, 32),
                                               (64, 16, 0), (16, 96, 32)])
def test_interpreted_tma_round_trip(kind, rows, cols, swizzle):
    x = random_fp8(2 * rows, 3 * cols, kind=kind, scale=10)
    y, z = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    tma_roundtrip_kernel(kind, rows, cols, swizzle).interpret[(3, 2)](x, y, z)
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    assert torch.equal(z.view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wide", ["f32", "bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_interpreted_conversions(kind, wide, layout):
    x = conversion_inputs(64, 64, kind).to(TORCH_WIDE[wide])
    q, qs = (torch.full((64, 64), float("nan"), dtype=TORCH8[kind]) for _ in range(2))
    back, back32 = torch.full((64, 64), float("nan"), dtype=torch.bfloat16), torch.full((64, 64), float("nan"))
    convert_kernel(kind, wide, layout).interpret[(4,)](x, q, qs, back, back32)
    want = quantize(x, kind)
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(qs.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(back, want.to(torch.bfloat16))    # e4m3 and e5m2 values are all exact in bf16
    assert torch.equal(back32, want.float())


def test_interpreted_fp8_maps_and_reductions():
    """Maps on fp8 tiles compute in fp32 and round to fp8 (satfinite); reductions of fp8 tiles give f32 vectors."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[tk.fp8e4m3, 16, 64], y: tk.gl[tk.fp8e4m3, 16, 64], s: tk.gl[f32, 1, 16]):
        t = tk.rt(tk.fp8e4m3, 16, 64)
        tk.load(t, x, (0, 0))
        tk.map(t, lambda v: v * 3.0 + 1.0, t)
        tk.store(y, t, (0, 0))
        v = tk.row_sum(t)
        tk.store(s, v, (0, 0))
    x = random_fp8(16, 64, kind="e4m3", scale=100, seed=3)
    y, s = torch.zeros_like(x), torch.zeros(1, 16)
    k.interpret[(1,)](x, y, s)
    want = quantize(x.float() * 3 + 1, "e4m3")
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))
    assert torch.allclose(s[0].double(), want.double().sum(1), rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_interpreted_plain_copies(kind):
    """cp.async into an fp8 shared tile and block stores (zero-filled / clipped at ragged edges), and
    bounds-checked register loads whose fill value is rounded to fp8 (saturated in e4m3)."""
    x = random_fp8(100, 80, kind=kind, scale=10)
    y = torch.full_like(x, float("nan"))
    z = torch.full((100, 96), float("nan"))
    plain_copy_kernel(kind).interpret[(3, 2)](x, y, z)
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    assert torch.equal(z, plain_copy_reference(x, kind))
