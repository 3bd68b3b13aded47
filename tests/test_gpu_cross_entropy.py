"""tkpy.kernels.cross_entropy on the GPU (tests/test_cross_entropy.py's checks): the loss and the logits' gradient
against float64 torch on every element, outputs poisoned, across vocabularies of 10 to 262144 classes (a warp a row,
several, a block's 16, clusters of 2-8 blocks; odd ones, whose rows are copied), the three dtypes and reductions,
label smoothing, per-class weights, ignore_index, loss gradients of 1 and others; few and many rows (the persistent
grid's loop), millions of rows (the prologue's divisor over its most blocks, several steps each); the split variants;
targets outside the classes (NaN); the same bits every run; calls back to back and on two streams at once (each its
own ticket); the forward of a mean as two kernels and nothing else; opcheck and torch.compile on CUDA tensors; the
benchmark's shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpu_util import requires_gpu
from test_cross_entropy import assert_close, check, logits_and_targets
from tkpy.kernels import cross_entropy
from tkpy.kernels.cross_entropy_config import MAX_PARTIALS

pytestmark = requires_gpu

WIDTHS = [10, 256, 1000, 4096, 8192, 16384, 32000, 50257, 65536, 128256, 131072, 151936, 262144]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("width", WIDTHS)
def test_loss_and_gradient_across_vocabularies(width, dtype):
    rows = max(3, min(2000, 2 ** 22 // width))             # a few MB: several rows a block (cluster) of the grid
    check(rows, width, dtype, "mean", 0.0, grad_scale=1.0, device="cuda", ignored=(1, rows - 1))
    check(rows, width, dtype, "sum", 0.1, grad_scale=0.25, device="cuda")


@pytest.mark.parametrize("reduction,grad_scale", [("mean", 3.0), ("sum", 1.0), ("none", "random"), ("none", 1.0)])
@pytest.mark.parametrize("width", [512, 4096, 65536, 262144])
def test_reductions_and_loss_gradients(width, reduction, grad_scale):
    check(max(3, min(1000, 2 ** 22 // width)), width, torch.bfloat16, reduction, 0.05, grad_scale, device="cuda")


@pytest.mark.parametrize("weight", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("width", [10, 1000, 8192, 50257, 131072, 262144])
def test_per_class_weights(width, weight):
    rows = max(3, min(1000, 2 ** 22 // width))
    check(rows, width, torch.bfloat16, "mean", 0.1 if width <= 131072 else 0.0, grad_scale=1.0, device="cuda",
          weight=weight, ignored=(0, 2))
    check(rows, width, torch.bfloat16, "none", 0.0, grad_scale="random", device="cuda", weight=weight)


@pytest.mark.parametrize("rows", [1, 7, 133, 5000])
@pytest.mark.parametrize("width", [1024, 4096, 131072])
def test_row_counts(rows, width):
    if rows * width > 2 ** 28:
        pytest.skip("the float64 reference of that many logits")
    ignored = tuple(i for i in (0, 5, 100) if i < rows - 1)       # (a row always counts: no mean of nothing)
    check(rows, width, torch.bfloat16, "mean", 0.1, grad_scale=0.5, device="cuda", ignored=ignored)


VARIANT_OPTIONS = [dict(prefetch=False), dict(prefetch=True), dict(blocks_per_sm=1),
                   dict(warps_per_row=4, rows_per_block=1, cluster=2), dict(warps_per_row=2, rows_per_block=4),
                   dict(prefetch=False, stages=2), dict(prefetch=False, stages=4, blocks_per_sm=1),
                   dict(warps_per_row=4, rows_per_block=1, cluster=2, prefetch=False, stages=3)]
LANE_LIMIT = 64 * 32          # elements a warp's piece holds at most (CrossEntropyConfig: 64 values a lane)


@pytest.mark.parametrize("width,options", [
    (width, options) for width in (4096, 6000, 32768) for options in VARIANT_OPTIONS
    if "warps_per_row" not in options or width <= options["warps_per_row"] * options.get("cluster", 1) * LANE_LIMIT])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_variants(width, options, smoothing):
    check(1000, width, torch.bfloat16, "mean", smoothing, grad_scale=0.7, device="cuda", options=options,
          ignored=(3, 4, 999))


def test_ignore_index_as_a_class_and_every_row_ignored():
    check(300, 50304, torch.bfloat16, "mean", 0.0, device="cuda", ignored=(0, 1, 2, 299), ignore_index=7)
    x = torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    loss = cross_entropy(x, torch.full((64,), -100, device="cuda"))
    loss.backward()
    assert torch.isnan(loss) and torch.equal(x.grad, torch.zeros_like(x))


def test_targets_outside_the_classes_give_nan():
    """No device-to-host check: such a row's loss and gradient are NaN, the others right."""
    x, t = logits_and_targets(8, 4096, torch.bfloat16, device="cuda", ignored=())
    t[3], t[5] = 4096, -7
    x.requires_grad_()
    loss = cross_entropy(x, t, reduction="none")
    loss.sum().backward()
    bad = torch.tensor([False, False, False, True, False, True, False, False], device="cuda")
    assert loss.isnan().eq(bad).all() and x.grad[bad].isnan().all() and not x.grad[~bad].isnan().any()
    good = ~bad
    torch.testing.assert_close(loss[good].double(), F.cross_entropy(x[good].double(), t[good], reduction="none"),
                               rtol=1e-2, atol=1e-2)


def test_the_benchmark_shapes():
    check(16384, 4096, torch.bfloat16, "mean", 0.0, grad_scale=1.0, device="cuda", ignored=(0, 9, 16383))
    check(64, 262144, torch.bfloat16, "mean", 0.1, grad_scale=1.0, device="cuda")


def test_opcheck_on_cuda():
    x, t = logits_and_targets(33, 4096, torch.bfloat16, device="cuda")
    x.requires_grad_()
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    torch.library.opcheck(torch.ops.tkpy.cross_entropy.default, (x, t, w, -100, 0.1, "mean", True),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    _, _, dx = torch.ops.tkpy.cross_entropy(x.detach(), t, None, -100, 0.0, "mean", True)
    torch.library.opcheck(torch.ops.tkpy.cross_entropy_backward_.default, (dx, torch.tensor(0.5, device="cuda")))


def test_compiled_matches_eager():
    """torch.compile (inductor, which runs the in-place backward without a copy) of an LM head's loss."""
    def fn(h, w, t):
        return cross_entropy(h @ w, t, label_smoothing=0.1)

    h = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(512, 32000, device="cuda", dtype=torch.bfloat16) * 0.05).requires_grad_()
    t = torch.randint(0, 32000, (256,), device="cuda")
    t[:7] = -100
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)(h, w, t)
    compiled.backward()
    grads = [h.grad, w.grad]
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    eager = fn(h2, w2, t)
    eager.backward()
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(grads, (h2.grad, w2.grad)):
        torch.testing.assert_close(a, b)
    torch._dynamo.reset()


@pytest.mark.parametrize("rows,classes", [(2_000_000, 10), (300_000, 100)])
@pytest.mark.parametrize("weighted", [False, True])
def test_millions_of_rows(rows, classes, weighted):
    """The prologue over its MAX_PARTIALS blocks, each counting several steps of rows (2M: 2048 rows a block), the
    forward's blocks many rows each."""
    assert rows > MAX_PARTIALS * 128
    check(rows, classes, torch.bfloat16, "mean", 0.0, grad_scale=1.0, device="cuda", ignored=(0, 7, rows - 1),
          weight=torch.float32 if weighted else None)


@pytest.mark.parametrize("reduction,weighted,rows", [("mean", False, 3000), ("mean", True, 3000), ("sum", False, 3000),
                                                     ("mean", True, 400_000), ("sum", False, 400_000)])
def test_the_loss_is_the_same_every_run(reduction, weighted, rows):
    """Bitwise: the blocks' partials (and the divisor's) are added in one order, whichever block finishes last."""
    classes = 32000 if rows < 10_000 else 256
    x, t = logits_and_targets(rows, classes, torch.bfloat16, device="cuda")
    w = torch.rand(classes, device="cuda") + 0.5 if weighted else None
    runs = [cross_entropy(x, t, w, reduction=reduction) for _ in range(5)]
    assert all(torch.equal(runs[0], r) for r in runs[1:]) and not runs[0].isnan()


def test_calls_back_to_back_and_on_two_streams():
    """Calls queued without a synchronization between them, on one stream and on two at once: each right (each
    call's prologue zeroes its own ticket; the allocator gives a stream's workspace to that stream only)."""
    inputs = [logits_and_targets(4096, 8192, torch.bfloat16, device="cuda", ignored=(i,)) for i in range(4)]
    want = [F.cross_entropy(x.double(), t) for x, t in inputs]
    got = [cross_entropy(x, t) for x, t in inputs]
    streams = [torch.cuda.Stream() for _ in range(2)]
    torch.cuda.synchronize()
    on_streams = []
    for i, (x, t) in enumerate(inputs * 2):
        with torch.cuda.stream(streams[i % 2]):
            on_streams.append(cross_entropy(x, t, reduction="sum" if i >= 4 else "mean"))
    torch.cuda.synchronize()
    for loss, ref in zip(got + on_streams[:4], want * 2):
        assert_close(loss, ref, "loss", 2 ** -16)
    for loss, (x, t) in zip(on_streams[4:], inputs):
        assert_close(loss, F.cross_entropy(x.double(), t, reduction="sum"), "loss", 2 ** -10)


def test_the_forward_of_a_mean_is_two_kernels():
    """On the GPU's timeline: the prologue and the forward kernel, no torch reduction, conversion or fill."""
    x, t = logits_and_targets(4096, 4096, torch.bfloat16, device="cuda")
    cross_entropy(x, t)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        cross_entropy(x, t)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 2 and "cross_entropy_prologue_count" in kernels[0] and "cross_entropy_fwd" in kernels[1], \
        kernels
