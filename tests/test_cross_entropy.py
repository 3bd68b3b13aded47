"""tkpy.kernels.cross_entropy in the CPU interpreter (TKPY_INTERPRET=1): the loss and the logits' gradient against
float64 torch on every element, for each dtype, reduction and label smoothing, odd vocabularies (rows read in place,
and not 16-byte rows, copied), ignore_index (a class id too; every row ignored), the loss gradient's factor of 1
(the backward touches nothing) and others, rows split over one warp, several, a cluster's blocks, with and without
the prefetch; opcheck of both operators, torch.compile(fullgraph=True), the errors; the policy's choices (a golden
record) and NVRTC compiles of its kernels without spills. The same checks on the GPU across vocabularies up to 256k:
tests/test_gpu_cross_entropy.py.

Tolerances (every element): the gradient |out - ref| <= ULP * (|ref| + rowmax|ref| / 4) + half a subnormal step (a
mean's gradient over thousands of rows lies among fp16's subnormals), ULP the output dtype's unit roundoff doubled
(bf16 2^-8, fp16 2^-10, fp32 2^-20): the kernels compute in fp32 from the exact inputs (the target's 1 - p[t] too,
without cancellation where p[t] is near 1), so the output's rounding dominates; twice that where the loss's gradient
is not 1, whose backward rounds the forward's rounded gradient again; the loss the same in its dtype plus 2^-20
(|lse| + |x[target]|) for the fp32 sums and the cancellation of lse - x[target]. With label smoothing the target's
gradient p[t] - (1 - eps) - eps / V cancels terms of size eps (times the row's share, its weight): 2^-22 of that.
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
from counted_calls import ALLOCATIONS_AND_VIEWS, Calls
from tkpy.kernels import cross_entropy
from tkpy.kernels import cross_entropy_kernel, cross_entropy_op as ce, cross_entropy_policy, row_split
from tkpy.kernels.cross_entropy_config import MAX_PARTIALS, PrologueConfig
from tkpy.kernels.tensor_layout import padded_like

ULP = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -10, torch.float32: 2 ** -20}
ROUNDING_FLOOR = {dtype: torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps / 2 for dtype in ULP}
GOLDEN = pathlib.Path(__file__).parent / "golden" / "cross_entropy_policy.json"


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def assert_close(out: torch.Tensor, ref: torch.Tensor, what: str, slack=0.0, roundings=1) -> None:
    """Every element of out (its dtype's ULP, and half its subnormals' step, times `roundings`, plus `slack`,
    absolute) against float64 ref; NaN fails."""
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    err = (out.double() - ref).abs()
    scale = ref.abs().amax(-1, keepdim=True) if ref.dim() else ref.abs()
    bound = (ULP[out.dtype] * (ref.abs() + scale / 4) + ROUNDING_FLOOR[out.dtype]) * roundings + slack
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {out.numel()} elements off, the worst by "
                           f"{(err / bound).nan_to_num(math.inf).max().item():.3g}x its bound")


def logits_and_targets(rows, classes, dtype, device="cpu", ignored=(1,), ignore_index=-100):
    """Logits of a spread that makes both large and tiny probabilities (N(0, 3^2)), random targets, `ignored` rows
    set to ignore_index."""
    x = (torch.randn(rows, classes, dtype=torch.float64, device=device) * 3).to(dtype)
    t = torch.randint(0, classes, (rows,), device=device)
    for r in ignored:
        if r < rows:
            t[r] = ignore_index
    return x, t


def check(rows, classes, dtype, reduction="mean", smoothing=0.0, grad_scale=1.0, device="cpu", options=None,
          ignored=(1,), ignore_index=-100, weight=None, prologue=None):
    """The loss and the logits' gradient on fresh random inputs against float64 torch, every element. grad_scale:
    the loss's gradient (a number for "mean"/"sum", "random" for a random one a row of "none"); weight: per-class
    weights of that dtype (random in [0.5, 2]); options / prologue: forced CrossEntropyConfig / PrologueConfig
    fields (the launches without autograd). (On CUDA a freed block of NaN is allocated first: the outputs reuse it,
    so an element no kernel writes shows up.)"""
    x, t = logits_and_targets(rows, classes, dtype, device, ignored, ignore_index)
    w = gpu_util.rand(classes, dtype=weight, low=0.5, high=2.0, device=device) if weight is not None else None
    if device == "cuda":
        for _ in range(3):
            gpu_util.poisoned(rows, classes, dtype=dtype)
    x64 = x.detach().double().requires_grad_()
    ref = F.cross_entropy(x64, t, w.double() if w is not None else None, ignore_index=ignore_index,
                          reduction=reduction, label_smoothing=smoothing)
    if grad_scale == "random":
        g = torch.randn(rows, device=device).to(dtype)
    else:
        g = torch.tensor(grad_scale, device=device).to(dtype)
    ref.backward(g.double().expand_as(ref) if reduction == "none" else g.double())
    if options is None and prologue is None:
        x = x.requires_grad_()
        loss = cross_entropy(x, t, w, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
        loss.backward(g.expand_as(loss) if reduction == "none" else g)
        dx = x.grad
    else:                                  # a forced kernel config: the launches, without autograd
        loss, _, dx = ce.forward(x, t, w, ignore_index, smoothing, reduction, True, options, prologue)
        ce.backward(dx, g.expand(rows).contiguous() if reduction == "none" else g)
    assert loss.dtype == dtype and loss.shape == ref.shape             # (torch's: the logits' dtype)
    slack = 2 ** -20 * (x64.detach().abs().amax() * 2 + 1).item() * (2 if weight is not None else 1)
    if reduction == "sum":
        slack *= rows
    assert_close(loss, ref.detach(), "loss", slack)
    # Smoothing's gradient at the target, p[t] - (1 - eps) - eps / V, cancels terms of eps: their fp32 roundings.
    counted = t != ignore_index
    share = 1.0 if reduction != "mean" else 1.0 / (w[t[counted]].double().sum().item() if w is not None
                                                   else counted.sum().item())
    grad_slack = 2 ** -22 * smoothing * share * g.double().abs().max().item() * (2 if weight is not None else 1)
    assert_close(dx, x64.grad, "dlogits", grad_slack, roundings=1 if grad_scale == 1.0 else 2)   # (the docstring)


DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_and_gradient_match_float64(dtype, reduction, smoothing):
    check(9, 1000, dtype, reduction, smoothing, grad_scale="random" if reduction == "none" else 0.37)


@pytest.mark.parametrize("classes", [1, 13, 777, 4104])     # one class; C not a multiple of 8 (copied rows); ragged
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_odd_vocabularies(classes, dtype):
    check(5, classes, dtype, "mean", 0.1, grad_scale=2.0)


@pytest.mark.parametrize("weight", [torch.float32, "same"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_per_class_weights(dtype, reduction, smoothing, weight):
    check(9, 1000, dtype, reduction, smoothing, grad_scale="random" if reduction == "none" else 0.8,
          weight=dtype if weight == "same" else weight, ignored=(1, 2))


@pytest.mark.parametrize("options", [dict(warps_per_row=2, rows_per_block=1, cluster=2, prefetch=True),
                                     dict(warps_per_row=2, rows_per_block=2, prefetch=False)], ids=["cluster", "rows"])
def test_per_class_weights_over_other_splits(options):
    check(7, 1500, torch.bfloat16, "mean", 0.1, grad_scale=0.5, options=options, weight=torch.float32,
          ignored=(1, 4))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_a_loss_gradient_of_one_leaves_the_forwards_gradient(reduction):
    """loss.backward() of a mean or sum (and a "none" loss's backward of ones): the backward kernel reads the factor
    and writes nothing; the gradient is the forward's."""
    check(6, 512, torch.bfloat16, reduction, 0.05, grad_scale=1.0)


def test_ignore_index_rows_and_a_class_id_as_ignore_index():
    check(8, 300, torch.bfloat16, "mean", 0.2, ignored=(0, 3, 7), ignore_index=3)
    check(8, 300, torch.float32, "none", 0.0, grad_scale="random", ignored=(2, 5))


def test_every_row_ignored():
    """mean over no rows is NaN, as torch's 0 / 0; the gradient zero; sum and none 0: over one block and, with the
    weights too, over several blocks of the prologue and of the forward."""
    x, t = torch.randn(4, 256).bfloat16().requires_grad_(), torch.full((4,), -100)
    loss = cross_entropy(x, t)
    loss.backward()
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(x.double(), t))
    assert torch.equal(x.grad, torch.zeros_like(x))
    assert cross_entropy(x, t, reduction="sum").item() == 0 and torch.equal(cross_entropy(x, t, reduction="none"),
                                                                            torch.zeros(4).bfloat16())
    x, t, w = torch.randn(13, 256).bfloat16(), torch.full((13,), 5), torch.rand(256) + 0.5
    for weight in (None, w):
        mean = ce.forward(x, t, weight, 5, 0.1, "mean", True, SEVERAL_BLOCKS, SEVERAL_PROLOGUE_BLOCKS)
        total = ce.forward(x, t, weight, 5, 0.1, "sum", False, SEVERAL_BLOCKS)
        assert torch.isnan(mean[0]) and torch.equal(mean[2], torch.zeros_like(x)) and total[0].item() == 0


SEVERAL_BLOCKS = dict(warps_per_row=1, rows_per_block=1, blocks_per_sm=4)   # 8 blocks in the interpreter
SEVERAL_PROLOGUE_BLOCKS = dict(warps=2, unroll=2)                           # 4 rows a block


@pytest.fixture
def poisoned_allocations(monkeypatch):
    """Tensor.new_empty filled with NaN (-1 for ints): the op's outputs, its gradient and its workspace, so that an
    element no kernel writes shows up, and a ticket the prologue did not zero (NaN's bits) loses the loss."""
    new_empty = torch.Tensor.new_empty

    def poisoned(self, *args, **kwargs):
        t = new_empty(self, *args, **kwargs)
        return t.fill_(math.nan if t.is_floating_point() else -1)
    monkeypatch.setattr(torch.Tensor, "new_empty", poisoned)


@pytest.mark.parametrize("weight", [None, torch.float32])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reductions_over_several_blocks(poisoned_allocations, reduction, smoothing, weight):
    """The loss summed over blocks: 37 rows (a multiple of nothing) over 8 forward blocks, each writing its
    partial, the last one to finish adding them (the ticket); the mean's divisor over 10 prologue blocks (4 rows
    each, the last one cut short), every forward warp adding their partials."""
    rows = 37
    c = cross_entropy_policy.forward_config(300, "bf16", reduction, True, bool(smoothing), **SEVERAL_BLOCKS)
    assert row_split.grid_for(c, rows, row_split.INTERPRETER_SMS * c.blocks_per_sm) == 8
    assert cross_entropy_policy.prologue_config("mean", None, **SEVERAL_PROLOGUE_BLOCKS).grid(rows) == (10, 4)
    check(rows, 300, torch.bfloat16, reduction, smoothing, grad_scale=0.5, options=SEVERAL_BLOCKS,
          prologue=SEVERAL_PROLOGUE_BLOCKS if reduction == "mean" else None, weight=weight, ignored=(0, 4, 5, 36))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_one_row(reduction):
    check(1, 300, torch.float16, reduction, 0.1, grad_scale="random" if reduction == "none" else 1.5, ignored=())


def test_the_prologues_partials_are_the_divisor():
    """The mean's divisor as the prologue leaves it: its partials (10 blocks) add up to the count of rows not
    ignored, or to the sum of their targets' weights (fp32, one order); the ticket zeroed."""
    x, t = logits_and_targets(37, 64, torch.bfloat16, ignored=(0, 9, 36))
    w = torch.rand(64) + 0.5
    for weight, expected in ((None, 34.0), (w, w.double()[t[t != -100]].sum().item())):
        divisor, partials, ticket = ce._prologue(t, weight, -100, "mean", 3, SEVERAL_PROLOGUE_BLOCKS)
        assert divisor.shape == (10,) and partials.shape == (3,) and ticket.item() == 0
        assert abs(divisor.double().sum().item() - expected) <= 2 ** -20 * expected
    divisor, partials, ticket = ce._prologue(t, None, -100, "sum", 5, None)     # the ticket only
    assert divisor.numel() == 4 and partials.shape == (5,) and ticket.item() == 0


@pytest.mark.parametrize("rows", [1, 2, 127, 128, 129, 16384, 131072, 131073, 1_000_003, 10_000_000, 2 ** 31 - 1])
def test_the_prologues_grid_covers_the_rows_once(rows):
    """Blocks of whole steps (span a multiple of warps x unroll), every row in one block, no block past the rows, at
    most MAX_PARTIALS blocks (10M rows: 1015 blocks of 9856 rows)."""
    c = cross_entropy_policy.prologue_config("mean")
    blocks, span = c.grid(rows)
    assert 1 <= blocks <= MAX_PARTIALS and span % c.rows_a_step == 0
    assert (blocks - 1) * span < rows <= blocks * span


@pytest.mark.parametrize("fields,match", [
    (dict(count=False), "without count .* one warp, unroll 1 and no weights"),
    (dict(warps=33), "warps must be an int from 1 to 32"),
    (dict(unroll=0), "unroll must be an int from 1 to 32"),
    (dict(weight="fp8"), "weight must be one of"),
])
def test_prologue_configs_check_themselves(fields, match):
    with pytest.raises(ValueError, match="PrologueConfig: " + match):
        PrologueConfig(**fields)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_forward_is_its_kernels_and_no_torch_work(monkeypatch, reduction, weighted):
    """The forward of a mean runs two tkpy launches (the prologue counting, the forward kernel) and no torch
    reduction, conversion or fill: torch only allocates its outputs and workspace and takes views (the sum's
    prologue zeroes the ticket only; "none" is one launch); so does the backward, one launch (the loss gradient read
    in its dtype, bf16 here). (The interpreter's check of the targets' values, which the GPU does not make, is left
    out.)"""
    monkeypatch.setattr(ce, "_check_targets", lambda *args: None)
    x, t = logits_and_targets(6, 512, torch.bfloat16)
    w = torch.rand(512) + 0.5 if weighted else None
    ce.forward(x, t, w, -100, 0.1, reduction, True)                # (the placeholders made, the kernels traced)
    with Calls(monkeypatch) as calls:
        loss, _, dx = ce.forward(x, t, w, -100, 0.1, reduction, True)
    kinds = {"mean": ["prologue", "fwd"], "sum": ["prologue", "fwd"], "none": ["fwd"]}[reduction]
    assert [name.split("_")[2] for name in calls.launches] == kinds, calls.launches
    assert ("count" in calls.launches[0]) == (reduction == "mean"), calls.launches
    assert set(calls.ops) <= ALLOCATIONS_AND_VIEWS, (calls.ops, calls.launches)
    assert loss.dtype == torch.bfloat16
    factor = torch.full_like(loss, 0.5)
    with Calls(monkeypatch) as calls:
        ce.backward(dx, factor)
    assert len(calls.launches) == 1 and set(calls.ops) <= ALLOCATIONS_AND_VIEWS, (calls.launches, calls.ops)


def test_two_calls_give_the_same_bits_and_leave_the_ticket_at_zero(monkeypatch, poisoned_allocations):
    """Back to back, each call's own workspace: the same loss to the bit (one order of additions), the ticket
    back at 0 after the forward's last block (here over 8 blocks)."""
    tickets = []
    prologue = ce._prologue

    def kept(*args):
        out = prologue(*args)
        tickets.append(out[2])
        return out
    monkeypatch.setattr(ce, "_prologue", kept)
    x, t = logits_and_targets(37, 300, torch.float32, ignored=(3,))
    runs = [ce.forward(x, t, None, -100, 0.0, "mean", False, SEVERAL_BLOCKS, SEVERAL_PROLOGUE_BLOCKS)[0]
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1]) and [int(k) for k in tickets] == [0, 0]


@pytest.mark.parametrize("options", [
    dict(warps_per_row=2, rows_per_block=1, cluster=2, prefetch=True),   # a row over a cluster of 2 blocks
    dict(warps_per_row=1, rows_per_block=1, cluster=4, prefetch=False),  # 4 blocks of one warp a row
    dict(warps_per_row=4, rows_per_block=1, prefetch=False),
    dict(warps_per_row=2, rows_per_block=3, prefetch=True),              # 3 rows a block of 2 warps each
    dict(warps_per_row=2, rows_per_block=2, prefetch=False, stages=2),   # the next rows through shared memory
    dict(warps_per_row=1, rows_per_block=1, cluster=2, prefetch=False, stages=3),
], ids=["cluster2-prefetch", "cluster4", "block-no-prefetch", "rows-prefetch", "stages2", "cluster2-stages3"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cluster_and_other_splits(options, smoothing):
    check(11, 1500, torch.bfloat16, "mean", smoothing, grad_scale=0.5, options=options, ignored=(1, 4, 5))


@pytest.mark.parametrize("factor_dtype", DTYPES)
def test_backward_factors_one_a_row(factor_dtype):
    """reduction "none": each row scaled by its own factor, read in its dtype (the loss's), rows of factor 1
    untouched (GradScaleConfig's per-row kernel), pieces of a row over several tasks."""
    x, t = logits_and_targets(7, 700, torch.float16)
    _, _, dx = ce.forward(x, t, None, -100, 0.0, "none", True)
    before = dx.clone()
    factor = torch.tensor([1.0, 2.0, 1.0, -0.5, 0.0, 1.0, 3.0], dtype=factor_dtype)
    ce.backward(dx, factor, dict(chunks=1, warps=2))
    torch.testing.assert_close(dx.double(), (before.float() * factor[:, None]).half().double(), rtol=0, atol=0)


@pytest.mark.parametrize("factor_dtype", DTYPES)
def test_backward_reads_one_factor_in_its_dtype(monkeypatch, factor_dtype):
    """A 0-d factor of each dtype, and one expanded over the rows (the gradient of loss.sum() of a "none" loss):
    one factor for every row (the kernel without "_rows"), 1 leaving the gradient as it was."""
    x, t = logits_and_targets(5, 300, torch.bfloat16)
    _, _, dx = ce.forward(x, t, None, -100, 0.0, "none", True)
    before = dx.clone()
    value = torch.tensor(-1.75, dtype=factor_dtype)
    names = []
    config = ce.backward_config
    monkeypatch.setattr(ce, "backward_config", lambda *a, **k: names.append(config(*a, **k).name) or config(*a, **k))
    ce.backward(dx, value)
    torch.testing.assert_close(dx.double(), (before.float() * -1.75).bfloat16().double(), rtol=0, atol=0)
    ce.backward(dx, torch.ones((), dtype=factor_dtype).expand(5))
    ce.backward(dx, torch.tensor(1.0, dtype=factor_dtype))
    torch.testing.assert_close(dx.double(), (before.float() * -1.75).bfloat16().double(), rtol=0, atol=0)
    assert not any("_rows" in name for name in names)
    assert all(("_f" in name) == (factor_dtype != torch.bfloat16) for name in names), names


def test_unbatched_and_empty_inputs():
    x, t = torch.randn(300).bfloat16(), torch.tensor(7)
    for reduction in ("mean", "sum", "none"):
        got, want = cross_entropy(x, t, reduction=reduction), F.cross_entropy(x.double(), t, reduction=reduction)
        assert got.shape == want.shape == () and abs(got.item() - want.item()) < 0.05
    empty = torch.empty(0, 256, dtype=torch.bfloat16, requires_grad=True)
    loss = cross_entropy(empty, torch.empty(0, dtype=torch.int64), reduction="sum")
    loss.backward()
    assert loss.item() == 0 and empty.grad.shape == (0, 256)
    assert torch.isnan(cross_entropy(empty, torch.empty(0, dtype=torch.int64)))


def test_strided_logits_and_targets():
    """A view of the logits (rows 16-byte aligned: read in place) and an unaligned view of the targets (copied)."""
    wide, labels = logits_and_targets(6, 1024 + 64, torch.bfloat16)[0], torch.randint(0, 1024, (7,))
    x, t = wide[:, 64:], labels[1:]
    got = cross_entropy(x, t, reduction="none")
    assert_close(got, F.cross_entropy(x.double(), t, reduction="none"), "loss", 2 ** -16)


def test_no_gradient_is_written_without_autograd():
    x, t = logits_and_targets(4, 512, torch.bfloat16)
    loss, lse, dx = torch.ops.tkpy.cross_entropy(x, t, None, -100, 0.0, "none", False)
    assert dx.numel() == 0
    torch.testing.assert_close(lse.double()[t != -100], torch.logsumexp(x.double(), 1)[t != -100], rtol=2e-6,
                               atol=1e-5)
    assert (lse[t == -100] == 0).all()


def test_opcheck_of_both_operators():
    """Both operators, every check; but for the forward with the gradient, AOTAutograd's of a function returning all
    its outputs: the gradient output is the backward's buffer, scaled in place, which torch's partitioner refuses to
    see returned too ("was invalid, but is output"); tkpy.kernels.cross_entropy never returns it, and the compiled
    test below runs that path."""
    x, t = logits_and_targets(5, 777, torch.bfloat16)
    x.requires_grad_()
    w = torch.rand(777, dtype=torch.bfloat16) + 0.5
    for reduction in ("mean", "none"):
        torch.library.opcheck(torch.ops.tkpy.cross_entropy.default, (x, t, w, -100, 0.1, reduction, True),
                              test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    torch.library.opcheck(torch.ops.tkpy.cross_entropy.default, (x.detach(), t.where(t != -100, 3), None, 3, 0.0,
                                                                  "sum", False))
    _, _, dx = torch.ops.tkpy.cross_entropy(x.detach(), t, None, -100, 0.0, "mean", True)
    torch.library.opcheck(torch.ops.tkpy.cross_entropy_backward_.default, (dx, torch.tensor(0.5)))
    torch.library.opcheck(torch.ops.tkpy.cross_entropy_backward_.default, (dx, torch.randn(5)))


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd")     # (the recording backend's)
def test_compiled_loss_matches_eager_with_the_operators_in_both_graphs():
    """torch.compile(fullgraph=True) of an LM head's loss: the forward graph holds tkpy.cross_entropy, the backward
    one its in-place backward; values and gradients equal eager's."""
    def fn(h, w, t):
        return cross_entropy((h @ w).float(), t, label_smoothing=0.1) * 3.0

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    h, w = torch.randn(9, 64).requires_grad_(), (torch.randn(64, 500) * 0.3).requires_grad_()
    t = torch.randint(0, 500, (9,))
    t[2] = -100
    compiled = torch.compile(fn, fullgraph=True, backend=backend)(h, w, t)
    compiled.backward()
    grads = [h.grad, w.grad]
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    eager = fn(h2, w2, t)
    eager.backward()
    assert torch.equal(compiled, eager) and torch.equal(grads[0], h2.grad) and torch.equal(grads[1], w2.grad)
    graphs = [{f"{node.target} {node.args}" for node in g.graph.nodes} for g in backend.fw_graphs + backend.bw_graphs]
    assert any(name.startswith("tkpy.cross_entropy.default") for name in graphs[0])
    assert any("tkpy.cross_entropy_backward_" in name for name in graphs[1])   # (auto-functionalized)
    torch._dynamo.reset()


def test_one_backward_a_graph_and_no_double_backward():
    x, t = logits_and_targets(4, 256, torch.bfloat16)
    x.requires_grad_()
    loss = cross_entropy(x, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second backward through the same graph"):
        loss.backward()
    with pytest.raises(NotImplementedError, match="double backward of cross_entropy is not implemented"):
        torch.autograd.grad(cross_entropy(x, t), x, create_graph=True)


def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


def _targets(*shape):
    return torch.zeros(*shape, dtype=torch.int64)


@pytest.mark.parametrize("call,error,match", [
    (lambda: cross_entropy(torch.zeros(4, 8, dtype=torch.float64), _targets(4)), ValueError,
     "bf16, fp16 or fp32 logits"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4).int()), ValueError, "int64 class indices.*long"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(5)), ValueError, r"target must have shape \(N,\)"),
    (lambda: cross_entropy(_bf16(4, 8, 2), _targets(4, 2)), ValueError, "move them last and flatten"),
    (lambda: cross_entropy(_bf16(2, 262145), _targets(2)), ValueError, "1 to 262144 classes"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), torch.ones(7)), ValueError, r"weight must be of shape \(8,\)"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), torch.ones(8, dtype=torch.float16)), ValueError,
     "in the logits' dtype or float32"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), torch.ones(8).requires_grad_()), NotImplementedError,
     "no gradient for the per-class weights"),
    (lambda: cross_entropy(_bf16(2, 131080), _targets(2), torch.ones(131080), label_smoothing=0.1),
     NotImplementedError, "per-class weights with label smoothing over more than 131072 classes"),
    (lambda: cross_entropy(_bf16(4, 8), _bf16(4, 8)), NotImplementedError, "class-probability targets"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), reduction="avg"), ValueError, "reduction must be one of"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), label_smoothing=1.5), ValueError, r"label_smoothing must be"),
    (lambda: cross_entropy(_bf16(4, 8), _targets(4), ignore_index=2 ** 40), ValueError, "int32's range"),
    (lambda: cross_entropy(_bf16(4, 8), torch.tensor([0, 1, 8, 2])), ValueError, "target 8 of row 2 is not a class"),
])
def test_bad_inputs_are_explained_before_any_kernel_runs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_forward_is_persistent_only():
    """The loss's partials are one a block of the persistent grid (at most MAX_PARTIALS): no grid of every row
    group."""
    with pytest.raises(ValueError, match="persistent only"):
        cross_entropy_policy.forward_config(4096, "bf16", "mean", True, False, persistent=False)


@pytest.mark.parametrize("grad", [False, True])       # the direct call and the operator
def test_cpu_tensors_need_the_interpreter(monkeypatch, grad):
    monkeypatch.delenv("TKPY_INTERPRET")
    with pytest.raises(ValueError, match="runs on CUDA tensors.*TKPY_INTERPRET=1"):
        cross_entropy(_bf16(4, 256).requires_grad_(grad), _targets(4))


# -- the policy ---------------------------------------------------------------------------------------------------

WIDTHS = (10, 256, 1000, 4096, 8192, 16384, 32000, 50304, 65536, 128256, 131072, 151936, 262144)


def choices() -> dict:
    weighted = lambda n, dtype: (cross_entropy_policy.forward_config(n, dtype, "mean", True, True, "f32").name  # noqa
                                 if n <= ce.WEIGHTED_SMOOTHING_CLASSES else None)
    return {f"{dtype} {n}": (cross_entropy_policy.forward_config(n, dtype, "mean", True, True).name, weighted(n, dtype),
                             cross_entropy_policy.backward_config(n, dtype, False).name)
            for dtype in ("bf16", "f32") for n in WIDTHS}


def test_policy_choices_match_the_golden_record():
    """What each vocabulary runs (tests/golden/cross_entropy_policy.json; TKPY_REGEN_GOLDEN=1 rewrites it after a
    deliberate change of the tables)."""
    import os

    if os.environ.get("TKPY_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(choices(), indent=1) + "\n")
    assert choices() == {k: tuple(v) for k, v in json.loads(GOLDEN.read_text()).items()}
    tables = [row for table in cross_entropy_policy.FORWARD.values() for _, row in table]
    assert all(row.evidence for row in tables + [cross_entropy_policy.BACKWARD, cross_entropy_policy.PROLOGUE])


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("width", [512, 8192, 50257, 128256, 262144])    # a warp a row; a block; clusters (ragged)
def test_the_policys_kernels_compile_without_spills(width, dtype):
    """NVRTC (no GPU needed): the forward with the gradient, with and without smoothing and fp32 weights (these up to
    131072 classes), and the backward, at the register cap of the table's blocks an SM: no spills (at 128k and 256k
    classes the fit is tight enough that a smaller variant can spill where the fullest does not: each is checked)."""
    torch_dtype = gpu_util.TORCH[dtype]
    x = padded_like(torch.empty(64, width, dtype=torch_dtype))          # (rows 16-byte aligned, as the op's)
    t, st, ticket = torch.empty(64, dtype=torch.int64), torch.empty(64), torch.empty(1, dtype=torch.int32)
    for weighted in (False, True) if width <= ce.WEIGHTED_SMOOTHING_CLASSES else (False,):
        for smoothing in (False, True):
            c = cross_entropy_policy.forward_config(width, dtype, "mean", True, smoothing, "f32" if weighted else None)
            w = torch.empty(width) if weighted else torch.empty(4)
            r = cross_entropy_kernel.forward_kernel(c).resources(x, t, w, st, torch.empty(1, dtype=torch_dtype), st,
                                                                 x, st, ticket, -100, 0.1)
            assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())
    b = cross_entropy_policy.backward_config(width, dtype, True)
    r = cross_entropy_kernel.backward_kernel(b).resources(x, st.to(torch_dtype))
    assert r.found and r.spill_stores == r.spill_loads == 0, (b.name, r.summary())


@pytest.mark.parametrize("reduction,weight", [("mean", None), ("mean", "bf16"), ("mean", "f32"), ("sum", None)])
def test_the_prologues_compile_without_spills(reduction, weight):
    """NVRTC: the policy's prologues (16 targets, and their weights, in flight a warp) in registers."""
    c = cross_entropy_policy.prologue_config(reduction, weight)
    t, w = torch.empty(64, dtype=torch.int64), torch.empty(1000, dtype=gpu_util.TORCH[weight or "f32"])
    r = cross_entropy_kernel.prologue_kernel(c).resources(t if c.count else torch.empty(2, dtype=torch.int64),
                                                          w if weight else torch.empty(4),
                                                          torch.empty(8 if c.count else 4),
                                                          torch.empty(1, dtype=torch.int32), -100, 128)
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())


def test_the_benchmarks_functions_agree_and_count_the_bytes_once():
    """benchmarks/bench_memory_bound.py's cross-entropy rows: tkpy's and torch's functions compute the same (here in
    the interpreter), and the bytes are the logits in (and their gradient out) and the targets."""
    from benchmarks import bench_memory_bound as bench

    assert bench.cross_entropy_bytes("forward", 16384, 4096) == 16384 * 4096 * 2 + 16384 * 8
    assert bench.cross_entropy_bytes("forward+backward", 4096, 262144) == 2 * 4096 * 262144 * 2 + 4096 * 8
    x, t = logits_and_targets(6, 1000, torch.bfloat16, ignored=())
    ours, theirs = bench.cross_entropy_functions()
    assert_close(ours(x, t), theirs(x.double(), t), "loss", 2 ** -16)
