"""tkpy.kernels.rms_norm and layer_norm in the CPU interpreter (TKPY_INTERPRET=1): forward and backward (the input's,
weight's, bias's and residual's gradients) against float64 torch on every element, with and without weight, bias and
the fused residual, both dtypes, rows split over one warp, several warps and (wider rows) a cluster's blocks; opcheck
of the four operators, torch.compile, the errors; the policy's choices (a golden record) and NVRTC compiles of its
kernels without spills. The same checks on the GPU across widths 256..65536: tests/test_gpu_norms.py.

Tolerances (every element): |out - ref| <= ULP * (|ref| + rowmax|ref| / 4), ULP the output dtype's unit roundoff
doubled (bf16 2^-8, fp16 2^-10; an fp32 weight's gradient 2^-16: fp32 sums of the rows in another order): the
kernels compute in fp32 from the exact 16-bit inputs, so the output's rounding dominates; the rowmax term covers
elements that cancel to near 0 (dx = rstd (g - xhat a - s)).
"""
from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import AotEagerAndRecordGraphs

import gpu_util
from counted_calls import Calls
from tkpy.kernels import layer_norm, rms_norm
from tkpy.kernels import norm_kernel, norm_launch, norm_policy
from tkpy.kernels.norm_config import NormConfig
from tkpy.kernels.row_split import placeholder_tensor

ULP = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -10, torch.float32: 2 ** -16}
GOLDEN = pathlib.Path(__file__).parent / "golden" / "norm_policy.json"


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def assert_close(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Every element of out (its dtype's ULP) against float64 ref; NaN (an element never written) fails."""
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    err = (out.double() - ref).abs()
    scale = ref.abs().amax(-1, keepdim=True) if ref.dim() else ref.abs()
    bound = ULP[out.dtype] * (ref.abs() + scale / 4) + 1e-30
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {out.numel()} elements off, the worst by "
                           f"{(err / bound).nan_to_num(math.inf).max().item():.3g}x its bound")


def reference(kind, x, weight, bias, residual, eps, dy, dh):
    """float64 (y, h, dx, dweight, dbias, dresidual) of the norm of h = x + residual (rounded to the dtype, as
    torch's own addition rounds), the gradients for dy (and dh, residual_out's) with the rounding passed through; dy
    None (y out of the loss): h's gradient is dh and the weight and bias get none, as in torch's graph."""
    h = (x + residual if residual is not None else x).detach()
    h64 = h.double().requires_grad_()
    w64 = weight.detach().double().requires_grad_() if weight is not None else None
    b64 = bias.detach().double().requires_grad_() if bias is not None else None
    shape = h.shape[-1:]
    y = F.rms_norm(h64, shape, w64, eps) if kind == "rms" else F.layer_norm(h64, shape, w64, b64, eps)
    if dy is not None:
        y.backward(dy.double())
    dx = (h64.grad if dy is not None else 0) + (dh.double() if dh is not None else 0)
    return (y.detach(), h, dx, w64.grad if w64 is not None else None, b64.grad if b64 is not None else None,
            dx if residual is not None else None)


def check(kind, rows, width, dtype, weight=True, bias=False, residual=False, wdtype=None, device="cpu",
          options=None, reach=("y", "residual_out"), backward_options=None):
    """The norm and its gradients on fresh random inputs against reference(), every element; `reach`: the outputs
    the loss uses (with `residual`; the gradients of the others are None, not zeros); `options` forced configs of
    both kernels (`backward_options` the backward's where they differ). (On CUDA a freed block of NaN is
    allocated first: the outputs reuse it, so an element no kernel writes shows up.)"""
    rand = lambda *s, dtype=dtype, low=-2, high=2: gpu_util.rand(*s, dtype=dtype, low=low, high=high,  # noqa: E731
                                                                 device=device)
    x = (rand(rows, width) + 0.5).requires_grad_()
    w = rand(width, dtype=wdtype or dtype, low=0.5, high=1.5).requires_grad_() if weight else None
    b = rand(width, dtype=wdtype or dtype).requires_grad_() if bias else None
    r = rand(rows, width).requires_grad_() if residual else None
    dy = rand(rows, width) if "y" in reach or not residual else None
    dh = rand(rows, width) if residual and "residual_out" in reach else None
    eps = 1e-5
    if device == "cuda":
        for _ in range(3):
            gpu_util.poisoned(rows, width, dtype=dtype)
    if options is None:
        out = (rms_norm(x, (width,), w, eps, residual=r) if kind == "rms"
               else layer_norm(x, (width,), w, b, eps, residual=r))
        y, h = out if residual else (out, None)
        used = [(t, g) for t, g in ((y, dy), (h, dh)) if g is not None]
        torch.autograd.backward([t for t, _ in used], [g for _, g in used])
        grads = [x.grad, w.grad if w is not None else None, b.grad if b is not None else None,
                 r.grad if r is not None else None]
    else:                                  # a forced kernel config: the launches, without autograd
        plain = [t.detach() if t is not None else None for t in (x, w, b, r)]
        y, h, mean, rstd = norm_launch.forward(kind, *plain[:1], [width], *plain[1:], eps, options)
        dx, dw, db = norm_launch.backward(kind, dy, dh, h if residual else plain[0], plain[1], mean, rstd, [width],
                                          bias, options if backward_options is None else backward_options)
        grads = [dx, dw if weight else None, db if bias else None, dx if residual else None]
    y_ref, h_ref, *grad_refs = reference(kind, x, w, b, r, eps, dy, dh)
    assert_close(y.detach(), y_ref, "y")
    if residual:
        assert torch.equal(h.detach(), h_ref), "residual_out is not x + residual in the input's dtype"
    for name, got, want in zip(("dx", "dweight", "dbias", "dresidual"), grads, grad_refs):
        if want is None:
            assert got is None, f"{name}: a gradient where the loss has none"
        else:
            assert_close(got, want, name)


# (rows, width): one warp a row, several warps a row, pieces past the row's end (1000: ragged), many rows a block
CASES = [(37, 256), (13, 1000), (5, 2048)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}")
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_forward_and_backward_match_float64(kind, case, dtype):
    check(kind, *case, dtype, weight=True, bias=kind == "layer", residual=True)


@pytest.mark.parametrize("kind,weight,bias,residual,wdtype", [
    ("rms", False, False, False, None), ("layer", False, False, False, None), ("layer", True, False, False, None),
    ("layer", False, True, False, None), ("rms", True, False, False, torch.float32),
    ("layer", True, True, True, torch.float32)])
def test_optional_weight_bias_and_residual(kind, weight, bias, residual, wdtype):
    check(kind, 9, 512, torch.bfloat16, weight, bias, residual, wdtype)


REACH = {"y": ("y",), "residual_out": ("residual_out",), "both": ("y", "residual_out")}


@pytest.mark.parametrize("reach", REACH)
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_outputs_the_loss_reaches(kind, reach):
    """The fused residual variant with y only, residual_out only, or both in the loss: every gradient against
    float64, and None (not zeros) for the weight and bias where y is out of the loss."""
    check(kind, 9, 512, torch.bfloat16, weight=True, bias=kind == "layer", residual=True, reach=REACH[reach])


@pytest.mark.parametrize("reach", REACH)
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_backward_is_its_kernels_and_no_fill(monkeypatch, kind, reach):
    """No zero gradient is materialized (autograd's fill of the statistics' and residual_out's gradients, rows x width,
    where the loss leaves them out): torch.autograd.grad of the residual variant runs the backward operator and
    nothing else of torch's (a detach), and the operator its kernels: the backward kernel, with the residual's term
    only where residual_out is in the loss, and one column sums of the weight's (and bias's) gradient; with y out of
    the loss, nothing."""
    x, r = (gpu_util.rand(6, 512, dtype=torch.bfloat16, device="cpu").requires_grad_() for _ in range(2))
    w, b = (gpu_util.rand(512, dtype=torch.bfloat16, device="cpu").requires_grad_() for _ in range(2))
    out = rms_norm(x, 512, w, residual=r) if kind == "rms" else layer_norm(x, 512, w, b, residual=r)
    outputs = [t for t, name in zip(out, ("y", "residual_out")) if name in REACH[reach]]
    grads = [torch.randn_like(t) for t in outputs]
    with Calls(monkeypatch) as calls:
        got = torch.autograd.grad(outputs, (x, r, w, b) if kind == "layer" else (x, r, w), grads, allow_unused=True)
    op = f"{kind}_norm_backward"
    assert calls.ops == (["detach", op] if "y" in REACH[reach] else ["detach"]), calls.ops
    if "y" not in REACH[reach]:
        assert calls.launches == [] and got[0] is got[1] is grads[0] and all(g is None for g in got[2:])
        return
    backward, *sums = calls.launches
    assert backward.startswith(f"{kind}_norm_bwd") and ("residual" in backward) == (reach == "both"), backward
    assert len(sums) == 1 and sums[0].startswith(f"norm_column_sums_512_bf16_t{2 if kind == 'layer' else 1}"), sums


def check_column_sums(tensors: int, parts: int, width: int, slices: int, device: str) -> torch.Tensor:
    """norm_launch.column_sums of random fp32 partials against float64 sums on every element (the outputs and the
    second level's workspace poisoned, the ticket's counters zeroed as the backward leaves them); the gradients
    concatenated."""
    partials = torch.randn(tensors, parts, width, device=device) * 3 + 1
    outs = tuple(torch.full((width,), float("nan"), device=device, dtype=torch.bfloat16) for _ in range(tensors))
    ticket = torch.zeros(tensors * -(-width // 256), dtype=torch.int32, device=device)
    norm_launch.column_sums(partials, outs, slices, ticket)
    want = partials.double().sum(1)
    got = torch.stack([o.double() for o in outs])
    bound = 2 ** -8 * want.abs() + 1e-5 * partials.double().abs().sum(1)   # (bf16's rounding, fp32's sums)
    assert ((got - want).abs() <= bound).all(), ((got - want).abs() - bound).max()
    if slices > 1:
        assert (ticket == 0).all()                                          # (the last blocks set them back)
    return got


@pytest.mark.parametrize("tensors", [1, 2])
@pytest.mark.parametrize("parts, width, slices", [(37, 512, 1), (37, 512, 3), (64, 1000, 5), (5, 256, 8)])
def test_column_sums_match_float64_in_slices(tensors, parts, width, slices):
    """The weight's and bias's gradients from the backward's partials in one launch, the rows read in slices whose
    sums the last block of each column chunk adds (more slices than rows too)."""
    check_column_sums(tensors, parts, width, slices, "cpu")


@pytest.mark.parametrize("options", [
    dict(warps_per_row=2, rows_per_block=2, cluster=2),        # a row over a cluster of 2 blocks, 2 rows a block
    dict(warps_per_row=1, rows_per_block=2, cluster=4),        # 4 blocks of one warp a row
    dict(warps_per_row=4, rows_per_block=1, prefetch=False, weight_in_registers=False),
    dict(warps_per_row=2, rows_per_block=3, prefetch=True),
    dict(warps_per_row=2, rows_per_block=2, prefetch=False, stages=2),
    dict(warps_per_row=1, rows_per_block=2, cluster=2, prefetch=False, stages=3),
], ids=["cluster2", "cluster4", "no-prefetch-weight-from-l2", "prefetch", "stages2", "cluster2-stages3"])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_cluster_and_other_splits(kind, options):
    check(kind, 7, 1000, torch.bfloat16, weight=True, bias=kind == "layer", residual=True, options=options)


@pytest.mark.parametrize("options", [
    dict(warps_per_row=2, rows_per_block=2, stage=True),                     # 2 rows a block, a ragged last piece
    dict(warps_per_row=1, rows_per_block=1, cluster=2, stage=True, persistent=False),   # a cluster, one step
    dict(warps_per_row=1, rows_per_block=3, stage=True),                     # a warp a row: no exchange
], ids=["stage", "cluster2-stage-onestep", "warp-a-row-stage"])
@pytest.mark.parametrize("kind,weight,residual", [("rms", True, True), ("layer", True, True), ("layer", True, False),
                                                  ("rms", False, False)])
def test_the_forward_with_the_pieces_in_shared_memory(kind, weight, residual, options):
    """The forward's `stage` (x and the residual through shared memory, a chunk at a time): every norm form, the
    backward the policy's."""
    check(kind, 7, 1000, torch.bfloat16, weight=weight, bias=kind == "layer" and weight, residual=residual,
          options=options, backward_options={})


STAGED_BACKWARDS = [dict(warps_per_row=2, rows_per_block=2, stage=True),     # 2 rows a block, a ragged last piece
                    dict(warps_per_row=1, rows_per_block=1, cluster=2, stage=True),   # a row over a cluster
                    dict(warps_per_row=1, rows_per_block=3, stage=True)]      # a warp a row: no exchange


@pytest.mark.parametrize("options", STAGED_BACKWARDS, ids=["stage", "cluster2-stage", "warp-a-row-stage"])
@pytest.mark.parametrize("kind,weight,residual", [("rms", True, True), ("layer", True, True), ("layer", True, False),
                                                  ("rms", False, False)])
def test_the_backward_with_the_pieces_in_shared_memory(kind, weight, residual, options):
    """The backward's `stage` (x, dy and residual_out's gradient through shared memory, two passes a chunk at a
    time, each chunk's weight and bias partial sums its own): every norm form, the forward the policy's."""
    check(kind, 7, 1000, torch.bfloat16, weight=weight, bias=kind == "layer" and weight, residual=residual,
          options={}, backward_options=options)


SUMS_IN_SHARED = [dict(warps_per_row=2, rows_per_block=2, sums_in_shared=True),      # 2 row groups a block
                  dict(warps_per_row=1, rows_per_block=2, cluster=2, prefetch=False, stages=2, sums_in_shared=True),
                  dict(warps_per_row=2, rows_per_block=2, stage=True, sums_in_shared=True)]   # a chunk's sums each


@pytest.mark.parametrize("options", SUMS_IN_SHARED, ids=["ssum", "cluster2-stages2-ssum", "stage-ssum"])
@pytest.mark.parametrize("kind,bias,residual", [("rms", False, True), ("layer", True, True), ("layer", True, False),
                                                ("layer", False, False)])
def test_the_backward_with_the_weight_sums_in_shared_memory(kind, bias, residual, options):
    """`sums_in_shared`: each warp's partial sums of the weight's (bias's) gradient in shared memory, over 7 rows of
    1000 (a ragged last piece), in the backward from registers, from the rows ahead, and from the staged pieces."""
    check(kind, 7, 1000, torch.bfloat16, weight=True, bias=bias, residual=residual, options={},
          backward_options=options)


@pytest.mark.parametrize("residual", [False, True])
def test_the_weight_sums_in_shared_memory_free_the_registers_of_32_values_a_lane(residual):
    """NVRTC (no GPU): layer norm's backward with weight and bias at 8192 over 8 warps, 2 blocks an SM (the
    128-register cap), 32 values a lane: with the sums in shared memory, no spills under NVRTC 13.0 and 13.5 (in
    registers both spill hundreds of bytes); with the residual's gradient too, the weight read from L1/L2 a row
    (held in registers beside it, NVRTC 13.0 spills 16 bytes)."""
    c = norm_policy.config_for("layer", "backward", 8192, "bf16", "bf16", True, residual, warps_per_row=8,
                               rows_per_block=1, blocks_per_sm=2, prefetch=False, stages=0, sums_in_shared=True,
                               weight_in_registers=not residual)
    x, st, w, part = (torch.empty(64, 8192, dtype=torch.bfloat16), torch.empty(64),
                      torch.empty(8192, dtype=torch.bfloat16), torch.empty(8, 8192))
    res = x if residual else placeholder_tensor(torch.bfloat16, "cpu")
    r = norm_kernel.backward_kernel(c).resources(x, res, x, w, st, st, x, part, part,
                                                 torch.empty(8, dtype=torch.int32))
    assert c.values_per_lane == 32 and r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())


@pytest.mark.parametrize("options", [dict(warps_per_row=2, rows_per_block=2, prefetch=True, stages=0),
                                     dict(warps_per_row=1, rows_per_block=2, cluster=2, prefetch=False, stages=2),
                                     dict(warps_per_row=2, rows_per_block=2, stage=True),
                                     dict(warps_per_row=2, rows_per_block=2, prefetch=False, stages=3,
                                          sums_in_shared=True)],
                         ids=["prefetch", "cluster2-stages2", "stage", "stages3-ssum"])
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_the_backward_with_the_statistics_a_row_ahead(kind, options):
    """`stats_ahead`: the next row's rstd (and mean) loaded a step ahead, over 37 rows of 1000 (several steps a
    block of the interpreter's few; rows past the last read as 0)."""
    check(kind, 37, 1000, torch.bfloat16, weight=True, bias=kind == "layer", residual=True, options={},
          backward_options=dict(options, stats_ahead=True))


def test_the_weight_sums_in_shared_memory_are_the_backwards_with_a_weight():
    with pytest.raises(ValueError, match="sums_in_shared"):
        NormConfig("rms", "forward", 4096, warps_per_row=4, sums_in_shared=True)
    with pytest.raises(ValueError, match="without a weight"):
        NormConfig("rms", "backward", 4096, weight=None, warps_per_row=4, sums_in_shared=True)
    with pytest.raises(ValueError, match="stats_ahead"):
        NormConfig("rms", "forward", 4096, warps_per_row=4, stats_ahead=True)


def check_a_mean_far_from_zero(device="cpu"):
    """Rows of mean 300 and deviation ~1 over several warps (a ragged last piece; with 8 warps, 4 of them past the
    row's end, of count 0): the variance merged from each warp's centred sum (Chan's) keeps its digits where the sum
    of squares minus the squared sum would lose them."""
    x = (gpu_util.rand(9, 1000, dtype=torch.float32, device=device) + 300).to(torch.float16)
    for options in (dict(warps_per_row=4, rows_per_block=1), dict(warps_per_row=8, rows_per_block=1),
                    dict(warps_per_row=2, rows_per_block=1, cluster=2),
                    dict(warps_per_row=4, rows_per_block=1, stage=True)):
        y, _, mean, rstd = norm_launch.forward("layer", x, [1000], None, None, None, 1e-5, options)
        x64 = x.double()
        assert_close(mean, x64.mean(1), "mean")
        assert_close(rstd, 1 / (x64.var(1, unbiased=False) + 1e-5).sqrt(), "rstd")
        assert_close(y, F.layer_norm(x64, (1000,), eps=1e-5), "y")


def test_a_mean_far_from_zero():
    check_a_mean_far_from_zero()


def test_rows_in_several_dims_and_strided_inputs():
    """normalized_shape of two dims (rows of their product), leading dims kept in the statistics, and an input whose
    rows are not 16-byte aligned (copied first)."""
    x = gpu_util.rand(3, 5, 4, 128, dtype=torch.bfloat16, device="cpu")
    w = gpu_util.rand(4, 128, dtype=torch.bfloat16, device="cpu")
    y = rms_norm(x, (4, 128), w, 1e-6)
    assert_close(y, F.rms_norm(x.double(), (4, 128), w.double(), 1e-6), "y")
    wide = gpu_util.rand(6, 520, dtype=torch.bfloat16, device="cpu")[:, 4:516]       # rows 8 bytes past alignment
    assert_close(layer_norm(wide, (512,)), F.layer_norm(wide.double(), (512,)), "y of a strided view")


def test_rms_eps_defaults_to_the_dtypes_as_torch():
    x = gpu_util.rand(4, 256, dtype=torch.float16, device="cpu") * 0.01
    assert_close(rms_norm(x, 256), F.rms_norm(x.double(), (256,), eps=torch.finfo(torch.float16).eps), "y")


def test_empty_inputs_launch_nothing():
    x = torch.empty(0, 512, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(512, dtype=torch.bfloat16, requires_grad=True)
    y = layer_norm(x, (512,), w)
    y.backward(torch.empty_like(y))
    assert y.shape == (0, 512) and x.grad.shape == (0, 512) and torch.equal(w.grad, torch.zeros(512).bfloat16())


def test_opcheck_of_the_four_operators():
    rand = lambda *s: gpu_util.rand(*s, dtype=torch.bfloat16, device="cpu")  # noqa: E731
    x, r, w, b = rand(9, 512), rand(9, 512), rand(512), rand(512)
    for t in (x, r, w, b):
        t.requires_grad_()
    torch.library.opcheck(torch.ops.tkpy.rms_norm.default, (x, [512], w, r, 1e-6))
    torch.library.opcheck(torch.ops.tkpy.rms_norm.default, (x, [512], None, None, 1e-6))
    torch.library.opcheck(torch.ops.tkpy.layer_norm.default, (x, [512], w, b, r, 1e-5))
    h = x.detach()
    _, _, rstd = torch.ops.tkpy.rms_norm(h, [512], w.detach(), None, 1e-6)
    torch.library.opcheck(torch.ops.tkpy.rms_norm_backward.default, (rand(9, 512), None, h, w.detach(), rstd, [512]))
    _, _, mean, rstd = torch.ops.tkpy.layer_norm(h, [512], w.detach(), b.detach(), None, 1e-5)
    torch.library.opcheck(torch.ops.tkpy.layer_norm_backward.default,
                          (rand(9, 512), rand(9, 512), h, w.detach(), mean, rstd, [512], True))


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd")     # (the recording backend's)
def test_compiled_block_matches_eager_with_the_operators_in_both_graphs():
    """torch.compile(fullgraph=True) of a pre-norm block's pieces: the forward graph holds tkpy.layer_norm and
    tkpy.rms_norm, the backward one their backward operators; values and gradients equal eager's."""
    n = 512

    def fn(x, r, w, b):
        y, h = layer_norm(x, (n,), w, b, residual=r)
        return rms_norm(torch.tanh(y), (n,), w).float().sum() + h.float().pow(2).sum()

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    inputs = [gpu_util.rand(*s, dtype=torch.bfloat16, device="cpu").requires_grad_() for s in ((9, n), (9, n), (n,),
                                                                                             (n,))]
    torch.compile(fn, fullgraph=True, backend=backend)(*inputs).backward()
    compiled = [t.grad for t in inputs]
    eager = [t.detach().clone().requires_grad_() for t in inputs]
    fn(*eager).backward()
    assert all(torch.equal(a, b.grad) for a, b in zip(compiled, eager))
    graphs = [{str(node.target) for node in g.graph.nodes} for g in backend.fw_graphs + backend.bw_graphs]
    assert {"tkpy.layer_norm.default", "tkpy.rms_norm.default"} <= graphs[0]
    assert {"tkpy.layer_norm_backward.default", "tkpy.rms_norm_backward.default"} <= graphs[1]
    torch._dynamo.reset()


def test_statistics_are_not_differentiable_and_double_backward_is_refused():
    x = gpu_util.rand(4, 256, dtype=torch.bfloat16, device="cpu").requires_grad_()
    _, _, rstd = torch.ops.tkpy.rms_norm(x, [256], None, None, 1e-6)
    assert not rstd.requires_grad
    with pytest.raises(NotImplementedError, match="double backward of rms_norm is not implemented"):
        torch.autograd.grad(rms_norm(x, 256), x, torch.ones(4, 256, dtype=torch.bfloat16), create_graph=True)


def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("call,error,match", [
    (lambda: rms_norm(torch.zeros(4, 256), 256), ValueError, "bf16 or fp16 inputs"),
    (lambda: rms_norm(_bf16(4, 255), 255), ValueError, "rows of 256 to 65536 elements, a multiple of 8"),
    (lambda: rms_norm(_bf16(2, 65544), 65544), ValueError, "rows of 256 to 65536"),
    (lambda: rms_norm(_bf16(2, 260), 260), ValueError, "a multiple of 8"),
    (lambda: rms_norm(_bf16(4, 256), 128), ValueError, "must be the last dims of the input"),
    (lambda: rms_norm(_bf16(4, 256), 256, _bf16(128)), ValueError, "weight must have shape"),
    (lambda: rms_norm(_bf16(4, 256), 256, torch.zeros(256, dtype=torch.float16)), ValueError,
     "weight must be the input's dtype"),
    (lambda: layer_norm(_bf16(4, 256), 256, torch.zeros(256), _bf16(256)), ValueError, "weight and bias must have one"),
    (lambda: rms_norm(_bf16(4, 256), 256, residual=_bf16(4, 512)), ValueError, "residual must have the input's"),
    (lambda: rms_norm(_bf16(4, 256), "256"), TypeError, "normalized_shape must be an int or a sequence"),
])
def test_bad_inputs_are_explained_before_any_kernel_runs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_grid_of_every_row_group_is_the_forwards_only():
    """persistent=False (a block a row group) over the table's rows ahead; the backward's column sums take a
    workspace row a row group of the persistent grid, so it refuses."""
    c = norm_policy.config_for("layer", "forward", 4096, "bf16", "bf16", True, True, persistent=False)
    assert (c.persistent, c.prefetch, c.stages) == (False, False, 0) and "_onestep" in c.name
    with pytest.raises(ValueError, match="persistent only"):
        norm_policy.config_for("rms", "backward", 4096, "bf16", "bf16", False, False, persistent=False)


@pytest.mark.parametrize("grad", [False, True])       # the direct call and the operator
def test_cpu_tensors_need_the_interpreter(monkeypatch, grad):
    monkeypatch.delenv("TKPY_INTERPRET")
    with pytest.raises(ValueError, match="runs on CUDA tensors.*TKPY_INTERPRET=1"):
        layer_norm(_bf16(4, 256).requires_grad_(grad), 256)


# -- the policy ---------------------------------------------------------------------------------------------------

WIDTHS = (256, 512, 768, 1000, 1024, 2048, 3072, 4096, 5120, 8192, 12288, 16384, 32768, 65536)


def choices() -> dict:
    fullest = {f"{direction} {n}": norm_policy.config_for("layer", direction, n, "bf16", "bf16", True, True).name
               for direction in ("forward", "backward") for n in WIDTHS}
    own = {f"{direction} {kind}{'+residual' * residual} {n}":
           norm_policy.config_for(kind, direction, n, "bf16", "bf16", kind == "layer", residual).name
           for direction, kind, residual, n in norm_policy.BY_NORM}      # (the norms' own rows)
    return {**fullest, **own}


def test_policy_choices_match_the_golden_record(monkeypatch):
    """What each width runs (tests/golden/norm_policy.json; TKPY_REGEN_GOLDEN=1 rewrites it after a deliberate
    change of the tables)."""
    import os

    if os.environ.get("TKPY_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(choices(), indent=1) + "\n")
    assert choices() == json.loads(GOLDEN.read_text())


POLICY_KERNELS = sorted({(direction, kind, residual, width)
                         for direction, table in (("forward", norm_policy.FORWARD), ("backward", norm_policy.BACKWARD))
                         for width, _ in table for kind in ("rms", "layer") for residual in (False, True)}
                        | set(norm_policy.BY_NORM))


@pytest.mark.parametrize("direction,kind,residual,width", POLICY_KERNELS)
def test_the_policys_kernels_compile_without_spills(direction, kind, residual, width):
    """NVRTC (no GPU needed): every table row's kernels, each norm with its weight (and layer norm's bias), with the
    residual and without, at their register caps: no spills. (The compiler's allocation moves between NVRTC
    versions: run it under the GPU's too, docs/contributing.md.)"""
    layer = kind == "layer"
    c = norm_policy.config_for(kind, direction, width, "bf16", "bf16", layer, residual)
    x, st = torch.empty(64, width, dtype=torch.bfloat16), torch.empty(64)
    w, part = torch.empty(width, dtype=torch.bfloat16), torch.empty(8, width)
    ticket = torch.empty(8, dtype=torch.int32)
    res = x if residual else placeholder_tensor(torch.bfloat16, "cpu")
    mean, bias = (st, part) if layer else (placeholder_tensor(torch.float32, "cpu"),) * 2
    kernel = norm_kernel.backward_kernel(c) if direction == "backward" else norm_kernel.forward_kernel(c)
    args = (x, res, x, w, mean, st, x, part, bias, ticket) if direction == "backward" else \
        (x, res, w, w if layer else placeholder_tensor(torch.bfloat16, "cpu"), x, res, mean, st, 1e-5)
    r = kernel.resources(*args)
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())


@pytest.mark.parametrize("width,split", [(16384, dict(warps_per_row=16, blocks_per_sm=2)),
                                         (32768, dict(warps_per_row=16, cluster=2, blocks_per_sm=2)),
                                         (65536, dict(warps_per_row=16, cluster=4, blocks_per_sm=2)),
                                         (8192, dict(warps_per_row=8, blocks_per_sm=3))])
def test_the_staged_forwards_fit(width, split):
    """NVRTC: the fullest forward (layer norm, weight, bias, residual) with its pieces in shared memory (stage), as
    the sweep tries it: no spills at several blocks an SM, x's and the residual's pieces within an SM's shared
    memory for them all."""
    c = norm_policy.config_for("layer", "forward", width, "bf16", "bf16", True, True, rows_per_block=1, stage=True,
                               **split)
    x, st, w = torch.empty(64, width, dtype=torch.bfloat16), torch.empty(64), torch.empty(width, dtype=torch.bfloat16)
    r = norm_kernel.forward_kernel(c).resources(x, x, w, w, x, x, st, st, 1e-5)
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())
    assert 2 * c.piece * c.warps * 2 * c.blocks_per_sm <= 227 * 1024


def test_the_benchmarks_functions_agree_and_count_the_bytes_once():
    """benchmarks/bench_memory_bound.py: its tkpy and torch functions compute the same (here in the interpreter),
    and its byte counts are each tensor once (16384 x 4096 bf16 rms forward: x in, y out, w, rstd)."""
    from benchmarks import bench_memory_bound as bench

    assert bench.bytes_of("rms", "forward", 16384, 4096) == 2 * 16384 * 4096 * 2 + 4096 * 2 + 16384 * 4
    assert bench.bytes_of("layer+residual", "backward", 16384, 4096) == \
        4 * 16384 * 4096 * 2 + 2 * 16384 * 4 + 3 * 4096 * 2
    rand = lambda *s: gpu_util.rand(*s, dtype=torch.bfloat16, device="cpu")  # noqa: E731
    x, r, w, b = rand(6, 512), rand(6, 512), rand(512), rand(512)
    for op in bench.OPS:
        args = (x, r if "residual" in op else None, w, b)
        for ours, theirs in zip(bench.tkpy_function(op, 512)(*args), bench.torch_function(op, 512)(*args)):
            assert_close(ours, theirs.double() if ours.dtype == theirs.dtype else theirs, op)
