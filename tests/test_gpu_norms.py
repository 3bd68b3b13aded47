"""tkpy.kernels.rms_norm and layer_norm on the GPU (tests/test_norms.py's checks): forward and every gradient against
float64 torch on every element, outputs poisoned, across row widths 256..65536 (one warp a row, several, a block's
16, clusters of 2-8 blocks), both dtypes, with and without weight, bias, fp32 weights and the fused residual (y,
residual_out or both in the loss); few and many rows (the persistent grid's loop); the policy's variants; the
weight's and bias's gradients the same bits every run, the backward its kernels on the timeline; opcheck and
torch.compile on CUDA tensors."""
from __future__ import annotations

import pytest
import torch

from gpu_util import compiled_grads_match_eager, rand, requires_gpu
from test_norms import REACH, check, check_column_sums, check_a_mean_far_from_zero
from tkpy.kernels import layer_norm, rms_norm

pytestmark = requires_gpu

WIDTHS = [256, 512, 1000, 1024, 2048, 3072, 4096, 5120, 8192, 12288, 16384, 32768, 65536]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_forward_and_backward_across_widths(kind, width, dtype):
    rows = max(3, min(2000, 2 ** 22 // width))             # a few MB: several rows a block of the grid
    check(kind, rows, width, dtype, weight=True, bias=kind == "layer", residual=True, device="cuda")


@pytest.mark.parametrize("rows", [1, 7, 133, 5000])
@pytest.mark.parametrize("width", [1024, 4096, 65536])
def test_row_counts(rows, width):
    check("rms", rows, width, torch.bfloat16, device="cuda")
    check("layer", rows, width, torch.bfloat16, bias=True, device="cuda")


@pytest.mark.parametrize("kind,weight,bias,residual,wdtype", [
    ("rms", False, False, False, None), ("layer", False, False, False, None), ("layer", False, True, True, None),
    ("rms", True, False, True, torch.float32), ("layer", True, True, False, torch.float32)])
@pytest.mark.parametrize("width", [768, 4096, 16384])
def test_optional_tensors(kind, weight, bias, residual, wdtype, width):
    check(kind, 300, width, torch.bfloat16, weight, bias, residual, wdtype, device="cuda")


@pytest.mark.parametrize("reach", REACH)
@pytest.mark.parametrize("width", [1024, 4096, 65536])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_outputs_the_loss_reaches(kind, width, reach):
    """y only, residual_out only or both in the loss: no zero gradient materialized, every gradient checked."""
    check(kind, 300, width, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda", reach=REACH[reach])


@pytest.mark.parametrize("options", [
    dict(prefetch=False), dict(prefetch=True), dict(weight_in_registers=False), dict(blocks_per_sm=1),
    dict(warps_per_row=4, rows_per_block=2, cluster=2),
    dict(prefetch=False, stages=2), dict(prefetch=False, stages=4),
    dict(warps_per_row=4, rows_per_block=2, cluster=2, prefetch=False, stages=3),
])
@pytest.mark.parametrize("width", [4096, 6000])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_variants(kind, width, options):
    check(kind, 1000, width, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda", options=options)


# the pieces through shared memory (stage) at the widths the sweep tries them: forward, several blocks an SM, a
# cluster, one step, a ragged width; backward, a block's 8 warps, clusters of 2 and 8, 2 rows a block at a ragged
# width
STAGED = [("forward", 16384, dict(warps_per_row=16, rows_per_block=1, blocks_per_sm=2)),
          ("forward", 32768, dict(warps_per_row=16, rows_per_block=1, cluster=2, blocks_per_sm=2, persistent=False)),
          ("forward", 65536, dict(warps_per_row=16, rows_per_block=1, cluster=4, blocks_per_sm=2)),
          ("forward", 6000, dict(warps_per_row=4, rows_per_block=2, blocks_per_sm=3)),
          ("backward", 8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=2)),
          ("backward", 16384, dict(warps_per_row=8, rows_per_block=1, cluster=2, blocks_per_sm=2)),
          ("backward", 65536, dict(warps_per_row=8, rows_per_block=1, cluster=8, blocks_per_sm=2)),
          ("backward", 3000, dict(warps_per_row=2, rows_per_block=2, blocks_per_sm=4))]


@pytest.mark.parametrize("case", range(len(STAGED)))
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_pieces_in_shared_memory(kind, case):
    """One direction's kernel with `stage`, the other the policy's."""
    direction, width, split = STAGED[case]
    staged, policy = dict(split, stage=True), {}
    forward, backward = (staged, policy) if direction == "forward" else (policy, staged)
    check(kind, 300, width, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda", options=forward,
          backward_options=backward)


# the weight sums in shared memory (sums_in_shared) at the splits they open: 32 values a lane at 8192 over 8 warps
# (2 blocks an SM) and at 16384 over 16, the rows ahead through shared memory, the staged pieces, a ragged width
SUMS_IN_SHARED = [(8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=2, prefetch=False, stages=0,
                              weight_in_registers=False)),         # (with the residual: 13.0's fit, see test_norms)
                  (16384, dict(warps_per_row=16, rows_per_block=1, cluster=1, blocks_per_sm=1, prefetch=False,
                               stages=0, weight_in_registers=False)),
                  (4096, dict(warps_per_row=4, rows_per_block=2, blocks_per_sm=1, prefetch=False, stages=2)),
                  (8192, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=1, prefetch=False, stages=0,
                              stage=True, weight_in_registers=False)),
                  (6000, dict(warps_per_row=8, rows_per_block=1, blocks_per_sm=2, prefetch=False, stages=0))]


@pytest.mark.parametrize("case", range(len(SUMS_IN_SHARED)))
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_weight_sums_in_shared_memory(kind, case):
    width, split = SUMS_IN_SHARED[case]
    check(kind, 300, width, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda", options={},
          backward_options=dict(split, sums_in_shared=True))


@pytest.mark.parametrize("width,split", [(1024, {}), (4096, {}), (8192, {}), (16384, {}),
                                         (6000, dict(warps_per_row=4, rows_per_block=2, prefetch=True, stages=0))])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_statistics_a_row_ahead(kind, width, split):
    """stats_ahead over the tables' backward rows (and the register prefetch at a ragged width)."""
    check(kind, 1000, width, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda", options={},
          backward_options=dict(split, stats_ahead=True))


def test_the_benchmark_shape():
    for kind in ("rms", "layer"):
        check(kind, 16384, 4096, torch.bfloat16, bias=kind == "layer", residual=True, device="cuda")


def test_opcheck_on_cuda():
    x, r, w, b = (rand(*s, dtype=torch.bfloat16).requires_grad_() for s in ((33, 4096), (33, 4096), (4096,),
                                                                            (4096,)))
    torch.library.opcheck(torch.ops.tkpy.rms_norm.default, (x, [4096], w, r, 1e-6))
    torch.library.opcheck(torch.ops.tkpy.layer_norm.default, (x, [4096], w, b, r, 1e-5))


def test_compiled_matches_eager():
    def fn(x, r, w):
        y, h = rms_norm(x, (4096,), w, 1e-6, residual=r)
        return layer_norm(y, (4096,)).float().pow(2).sum() + h.float().sum()

    compiled_grads_match_eager(fn, [rand(*s, dtype=torch.bfloat16).requires_grad_()
                                    for s in ((64, 4096), (64, 4096), (4096,))])


@pytest.mark.parametrize("rows,width", [(3000, 4096), (40000, 1024), (500, 65536)])
def test_the_weight_gradient_is_the_same_every_run(rows, width):
    """The partial sums are added in a fixed order (no atomics): bit-identical weight and bias gradients run to run
    (a grid of thousands of partial rows)."""
    x, w, b = rand(rows, width, dtype=torch.bfloat16), rand(width, dtype=torch.bfloat16), rand(width,
                                                                                              dtype=torch.bfloat16)
    dy = rand(rows, width, dtype=torch.bfloat16)
    grads = []
    for _ in range(5):
        w_, b_ = w.clone().requires_grad_(), b.clone().requires_grad_()
        layer_norm(x, (width,), w_, b_).backward(dy)
        grads.append((w_.grad, b_.grad))
    assert all(torch.equal(a, b) for g in grads[1:] for a, b in zip(grads[0], g))


def test_the_backward_is_its_kernels_on_the_timeline():
    """On the GPU's timeline: the backward of layer norm with weight and bias is the backward kernel and one column
    sums of both gradients; no fill, no torch kernel."""
    x, w, b = (rand(*s, dtype=torch.bfloat16).requires_grad_() for s in ((4096, 4096), (4096,), (4096,)))
    r = rand(4096, 4096, dtype=torch.bfloat16).requires_grad_()
    y, h = layer_norm(x, (4096,), w, b, residual=r)
    dy = torch.randn_like(y)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.autograd.grad(y, (x, r, w, b), dy)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 2 and "layer_norm_bwd" in kernels[0], kernels
    assert "norm_column_sums_4096_bf16_t2_sliced" in kernels[1], kernels


@pytest.mark.parametrize("tensors", [1, 2])
@pytest.mark.parametrize("parts, width, slices", [(264, 4096, 17), (264, 4096, 1), (2112, 512, 32), (33, 65536, 1),
                                                  (100, 1000, 7)])
def test_column_sums_match_float64_in_slices(tensors, parts, width, slices):
    """As in the interpreter, at the backward's sizes; the same bits from two runs (the last block to finish
    differs, the order of the sums does not)."""
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        runs.append(check_column_sums(tensors, parts, width, slices, "cuda"))
    assert torch.equal(*runs)


def test_a_mean_far_from_zero():
    check_a_mean_far_from_zero(device="cuda")
