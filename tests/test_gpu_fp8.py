"""fp8 (e4m3, e5m2) on the GPU (skipped without one): TMA round trips of fp8 tiles in every swizzle, wgmma ABt
(both operands from shared memory, or A from registers) against float64 products of the fp8 inputs, and the
register/shared conversions against torch's rounding. Outputs are poisoned (NaN) and every element is checked.
The same kernels run on the CPU interpreter in test_fp8.py."""
import pytest
import torch

from gpu_util import poisoned, requires_gpu

from fp8_kernels import (TORCH8, TORCH_WIDE, conversion_inputs, convert_kernel, fp8_poisoned, plain_copy_kernel,
                         plain_copy_reference, quantize, random_fp8, tma_roundtrip_kernel, wgmma_bound, wgmma_kernel,
                         wgmma_reference)

pytestmark = requires_gpu
KINDS = ["e4m3", "e5m2"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows,cols,swizzle", [(64, 128, 128), (32, 256, 128), (64, 64, 64), (16, 32, 32),
                                               (64, 16, 0), (16, 96, 32), (32, 128, 0)])
def test_tma_round_trip(kind, rows, cols, swizzle):
    """TMA (UINT8 tensor maps) writes fp8 tiles where tkpy's swizzle looks for them (y, read through registers)
    and stores them back unchanged (z); 3 x 2 tiles per tensor."""
    x = random_fp8(2 * rows, 3 * cols, kind=kind, scale=10, device="cuda")
    y, z = fp8_poisoned(*x.shape, kind=kind), fp8_poisoned(*x.shape, kind=kind)
    tma_roundtrip_kernel(kind, rows, cols, swizzle)[(3, 2)](x, y, z)
    torch.cuda.synchronize()
    assert torch.equal(z.view(torch.uint8), x.view(torch.uint8)), "TMA load + store changed the tile"
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8)), "the tile TMA wrote is not where tkpy looks for it"


@pytest.mark.parametrize("a_kind,b_kind", [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")])
@pytest.mark.parametrize("n,k", [(16, 32), (64, 64), (128, 128), (256, 128), (48, 256), (96, 32), (256, 256)])
def test_wgmma_abt_from_shared(a_kind, b_kind, n, k):
    """c = 2 a b^T per 64 x n tile (mm_ABt then mma_ABt); K of 32, 64 and 128+ bytes puts A and B in 32-, 64- and
    128-byte swizzles (K = 256: two 128-byte panels), so every fp8 descriptor layout is read."""
    a = random_fp8(128, k, kind=a_kind, seed=1, device="cuda")
    b = random_fp8(3 * n, k, kind=b_kind, seed=2, device="cuda")
    c = poisoned(128, 3 * n, dtype=torch.float32)
    wgmma_kernel(a_kind, b_kind, n, k)[(2, 3)](a, b, c)
    torch.cuda.synchronize()
    err = (c.double() - wgmma_reference(a, b)).abs()
    assert not torch.isnan(c).any()
    assert (err <= wgmma_bound(a, b)).all(), f"max error {err.max().item()}"


@pytest.mark.parametrize("a_kind,b_kind", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
@pytest.mark.parametrize("n,k", [(16, 32), (64, 64), (128, 128), (256, 256)])
def test_wgmma_abt_with_a_in_registers(a_kind, b_kind, n, k):
    """A as each warp's 16 x K fp8 register tile: its pairs are gathered into wgmma's 8-bit A fragment by shuffles."""
    a = random_fp8(128, k, kind=a_kind, seed=3, device="cuda")
    b = random_fp8(2 * n, k, kind=b_kind, seed=4, device="cuda")
    c = poisoned(128, 2 * n, dtype=torch.float32)
    wgmma_kernel(a_kind, b_kind, n, k, True)[(2, 2)](a, b, c)
    torch.cuda.synchronize()
    err = (c.double() - wgmma_reference(a, b)).abs()
    assert not torch.isnan(c).any()
    assert (err <= wgmma_bound(a, b)).all(), f"max error {err.max().item()}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wide", ["f32", "bf16", "fp16"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_conversions(kind, wide, layout):
    """f32/bf16/fp16 -> fp8 in registers (cvt.rn.satfinite, into q) and into a shared tile (st <- rt, TMA-stored
    into qs), bit for bit as torch rounds after clamping (ties to even, every midpoint between fp8 values is in
    the input; overflow saturates); fp8 -> bf16 registers and fp8 shared -> f32 registers exactly."""
    x = conversion_inputs(64, 64, kind).to(TORCH_WIDE[wide]).cuda()
    q, qs = fp8_poisoned(64, 64, kind=kind), fp8_poisoned(64, 64, kind=kind)
    back, back32 = poisoned(64, 64, dtype=torch.bfloat16), poisoned(64, 64, dtype=torch.float32)
    convert_kernel(kind, wide, layout)[(4,)](x, q, qs, back, back32)
    torch.cuda.synchronize()
    want = quantize(x.cpu(), kind)
    assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(qs.cpu().view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(back.cpu(), want.to(torch.bfloat16))
    assert torch.equal(back32.cpu(), want.float())


@pytest.mark.parametrize("kind", KINDS)
def test_plain_copies(kind):
    """cp.async into fp8 shared tiles and block stores at ragged edges; bounds-checked fp8 register loads with a
    fill value (rounded to fp8: 448 in e4m3, saturated) widened to f32."""
    x = random_fp8(100, 80, kind=kind, scale=10, device="cuda")
    y = fp8_poisoned(100, 80, kind=kind)
    z = poisoned(100, 96, dtype=torch.float32)
    plain_copy_kernel(kind)[(3, 2)](x, y, z)
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    assert torch.equal(z, plain_copy_reference(x, kind))
