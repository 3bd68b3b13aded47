"""tkpy.kernels.softmax as a torch operator, in the CPU interpreter (TKPY_INTERPRET=1): the forward and backward
kernels against float64 torch on every element over widths of the tile kernels (16 rows a warp) and of the split
ones (a warp, several warps, clusters of blocks a row; y through shared memory), odd widths (padded rows), the three
dtypes; strided inputs, torch.library's opcheck of both operators, torch.compile, the errors, the policy's choices
(a golden record) and NVRTC compiles of its kernels without spills. The same checks on the GPU up to 262144-wide
rows: tests/test_gpu_softmax.py.

Tolerances (every element): forward |y - ref| <= U |ref| (+ fp16's subnormal step), U twice the output's unit
roundoff (bf16 2^-7, fp16 2^-10) or, for fp32, 2^-18: x log2 e - shift rounded in fp32 where |x| ~ 10, then
ex2.approx; backward |dx - ref| <= U (|ref| + y (|dy| + |s| + rowsum |dy y|)) (+ fp16's subnormal steps): dx = y (dy
- s), s = rowsum(dy y), from the rounded y cancels to about 0 where dy ~ s.
"""
from __future__ import annotations

import json
import os
import pathlib
from dataclasses import replace

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs

import gpu_util
from tkpy import bf16, f32, fp16
from tkpy.kernels import row_split, softmax_kernel, softmax_op, softmax_policy
from tkpy.kernels.row_softmax import softmax_backward_rows_factory, softmax_rows_factory
from tkpy.kernels.softmax_op import softmax, softmax_backward

rand = gpu_util.rand
U = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 2 ** -18}
TINY = {torch.bfloat16: 1e-38, torch.float16: 2 ** -25, torch.float32: 1e-38}
DTYPES = pytest.mark.parametrize("dtype", list(U), ids=["bf16", "fp16", "f32"])
GOLDEN = pathlib.Path(__file__).parent / "golden" / "softmax_policy.json"


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def assert_within(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    """Every element of out within `bound` of float64 ref (NaN, e.g. an element no kernel wrote, fails)."""
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    err = (out.double() - ref).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {out.numel()} elements off, the worst by "
                           f"{(err / bound).nan_to_num(float('inf')).max().item():.3g}x its bound")


def reference(x: torch.Tensor, dy: torch.Tensor):
    """float64 (y, dx, dx's bound) of softmax over the last dim. The bound: U (|dx| + y (|dy| + |s| + rowsum |dy y|)),
    the scale of the roundings of dx, of y (times dy - s) and of the sum s of dy y, and fp16's subnormal steps (of
    dx and y, and of the y in the sum)."""
    y = torch.softmax(x.detach().double(), -1)
    dy = dy.double()
    s = (dy * y).sum(-1, keepdim=True)
    dx = y * (dy - s)
    u, tiny = U[x.dtype], TINY[x.dtype]
    bound = u * (dx.abs() + y * (dy.abs() + s.abs() + (dy * y).abs().sum(-1, keepdim=True)))
    return y, dx, bound + tiny * (1 + dy.abs() + s.abs() + y * dy.abs().sum(-1, keepdim=True))


def check(shape, dtype, device="cpu", forward_options=None, backward_options=None) -> None:
    """softmax and its backward on fresh random inputs (|x| up to 6: exponentials over 5 orders of magnitude)
    against float64 torch, every element; through autograd, or the launches with forced configs where options are
    given. (On CUDA a freed block of NaN is allocated first: the output reuses it, so an element no kernel writes
    shows up.)"""
    x = rand(*shape, dtype=dtype, low=-6, high=6, device=device).requires_grad_()
    dy = rand(*shape, dtype=dtype, device=device)
    if device == "cuda":
        for _ in range(3):
            gpu_util.poisoned(*shape, dtype=dtype)
    if forward_options is None and backward_options is None:
        y = softmax(x)
        y.backward(dy)
        y, dx = y.detach(), x.grad
        assert y.is_contiguous() and y.dtype == dtype
    else:
        y = softmax_op.forward(x.detach(), forward_options)
        dx = softmax_op.backward(dy, y, backward_options)
    y_ref, dx_ref, bound = reference(x, dy)
    assert_within(y, y_ref, U[dtype] * y_ref + TINY[dtype], "y")
    assert_within(dx, dx_ref, bound, "dx")


# (rows, width): tile kernels (1, 5, 40: odd and padded, 128: the widest), then the split ones: a warp a row (200,
# 512), several warps (1000: its last pieces past the row's end; 4100: 8 warps, 4 of them idle), a row not a
# multiple of 8 (1001: padded rows; fp32 1002), a 3-D input
SHAPES = [(70, 1), (33, 5), (2, 3, 40), (5, 128), (9, 200), (7, 512), (5, 1000), (3, 4100), (4, 1001), (3, 1002)]


@DTYPES
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_and_backward_match_float64_torch(shape, dtype):
    check(shape, dtype)


# forced splits: a row over 2 and over 4 blocks of a cluster, several rows a block of several warps, the prefetch
# on and off, x and y staged through shared memory (in a cluster too)
SPLITS = {
    "cluster2": (dict(warps_per_row=2, rows_per_block=2, cluster=2), None),
    "cluster4": (dict(warps_per_row=1, rows_per_block=3, cluster=4, prefetch=True), None),
    "rows3": (dict(warps_per_row=2, rows_per_block=3, prefetch=False), dict(warps_per_row=2, rows_per_block=3,
                                                                             prefetch=True)),
    "stage": (dict(warps_per_row=2, rows_per_block=2, stage=True), dict(warps_per_row=2, rows_per_block=2,
                                                                         stage=True, prefetch=False)),
    "stage-cluster2": (dict(warps_per_row=1, rows_per_block=1, cluster=2, stage=True, persistent=False),
                       dict(warps_per_row=1, rows_per_block=2, cluster=2, stage=True, prefetch=False)),
    "stage-dy": (None, dict(warps_per_row=2, rows_per_block=2, stage=True, stage_dy=True, prefetch=False)),
    "stage-dy-cluster2": (None, dict(warps_per_row=1, rows_per_block=1, cluster=2, stage=True, stage_dy=True,
                                     persistent=False)),
    "stages2": (dict(warps_per_row=2, rows_per_block=2, stages=2), None),          # the next rows through shared
    "stages3-cluster2": (dict(warps_per_row=1, rows_per_block=1, cluster=2, stages=3), None),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("split", SPLITS)
def test_cluster_and_other_splits(split, dtype):
    forward_options, backward_options = SPLITS[split]
    forward_options = {**dict(tile=False, warps_per_row=1, rows_per_block=4), **(forward_options or {})}
    backward_options = {**dict(tile=False, warps_per_row=1, rows_per_block=4), **(backward_options or {})}
    check((7, 1500), dtype, forward_options=forward_options, backward_options=backward_options)


# (width, rows a warp's piece, rows): rows of 8 to 128 packed several to a piece; the rows fill 7 kernel rows (the
# last group of the 2-row blocks ragged), or not (a row short: the tile kernels take them)
PACKED = [(128, 2, 14), (128, 4, 28), (64, 8, 56), (32, 8, 56), (16, 16, 112), (8, 32, 224), (128, 4, 27)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("width,packed,rows", PACKED, ids=lambda v: str(v))
def test_packed_rows(width, packed, rows, prefetch, dtype):
    options = dict(tile=False, warps_per_row=1, rows_per_block=2, blocks_per_sm=1, packed=packed, prefetch=prefetch)
    check((rows, width), dtype, forward_options=options, backward_options=options)


def test_packed_rows_of_minus_infinity_give_nan():
    x = rand(8, 64, dtype=torch.float32, device="cpu")
    x[3] = -float("inf")
    x[5, :7] = -float("inf")
    y = softmax_op.forward(x, dict(tile=False, warps_per_row=1, rows_per_block=2, packed=4))
    assert y[3].isnan().all() and not y[torch.arange(8) != 3].isnan().any()
    torch.testing.assert_close(y, torch.softmax(x.double(), -1).float(), equal_nan=True)


def test_rows_of_minus_infinity_give_nan_as_torch():
    """-inf elements (masked scores) give 0; a row of -inf only gives NaN, as torch (0 / 0), in either kernel."""
    for width in (40, 1000):
        x = rand(4, width, dtype=torch.float32, device="cpu")
        x[1, ::3] = -float("inf")
        x[2] = -float("inf")
        y, ref = softmax(x), torch.softmax(x.double(), -1)
        assert y[2].isnan().all() and ref[2].isnan().all()
        assert (y[1, ::3] == 0).all()
        keep = torch.tensor([0, 1, 3])
        assert_within(y[keep], ref[keep], U[torch.float32] * ref[keep] + 1e-38, "y")


def strided(kind: str, width: int) -> torch.Tensor:
    """A (70, width) bf16 view of another layout."""
    if kind == "aligned slice":          # rows 8 elements (16 bytes) wider: read in place
        return rand(70, width + 8, dtype=torch.bfloat16, device="cpu")[:, :width]
    if kind == "unaligned slice":        # a pointer 2 bytes past 16-byte alignment
        return rand(70, width + 1, dtype=torch.bfloat16, device="cpu")[:, 1:]
    if kind == "transposed":             # columns not contiguous
        return rand(width, 70, dtype=torch.bfloat16, device="cpu").T
    return rand(1, width, dtype=torch.bfloat16, device="cpu").expand(70, width)        # one row repeated (stride 0)


@pytest.mark.parametrize("width", [40, 600])             # the tile kernel and the split one
@pytest.mark.parametrize("kind", ["aligned slice", "unaligned slice", "transposed", "expanded"])
def test_strided_inputs_are_read_in_place_where_aligned_else_copied(kind, width):
    x = strided(kind, width)
    assert (softmax_op._readable(x) is x) == (kind == "aligned slice")
    x.requires_grad_()
    w = rand(width, dtype=torch.bfloat16, device="cpu")
    y = softmax(x)
    y.backward(w.expand(70, width))                    # dy repeats one row: copied
    y_ref, dx_ref, bound = reference(x, w.expand(70, width))
    assert y.is_contiguous()
    assert_within(y.detach(), y_ref, U[torch.bfloat16] * y_ref, "y")
    assert_within(x.grad, dx_ref, bound, "dx")


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 7), (0, 3000)])
def test_empty_inputs_launch_nothing(shape):
    """(No launch: a grid of zero blocks would be refused.)"""
    x = torch.empty(shape, dtype=torch.float16, requires_grad=True)
    y = softmax(x)
    assert y.shape == shape and y.dtype == torch.float16
    y.backward(torch.empty(shape, dtype=torch.float16))
    assert x.grad.shape == shape


@pytest.mark.parametrize("width", [40, 600])
def test_opcheck_softmax_and_its_backward(width):
    x = rand(33, width, dtype=torch.bfloat16, device="cpu").requires_grad_()
    torch.library.opcheck(torch.ops.tkpy.softmax.default, (x,))
    y = softmax(x.detach())
    torch.library.opcheck(torch.ops.tkpy.softmax_backward.default,
                          (rand(33, width, dtype=torch.bfloat16, device="cpu"), y))


def test_double_backward_is_refused():
    """A backward that records its own graph (create_graph=True) is refused, not run without a gradient."""
    x = rand(33, 40, dtype=torch.bfloat16, device="cpu").requires_grad_()
    with pytest.raises(NotImplementedError, match="double backward of softmax is not implemented"):
        torch.autograd.grad(softmax(x), x, rand(33, 40, dtype=torch.bfloat16, device="cpu"), create_graph=True)


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd")     # (the recording backend's)
def test_compiled_matches_eager_forward_and_backward():
    """torch.compile(fullgraph=True) sees tkpy.softmax in the forward graph and tkpy.softmax_backward in the
    backward one (of narrow and of split rows), and both match eager."""
    def fn(x, z):
        return torch.tanh(3 * softmax(x)).sum() + softmax(z).float().pow(2).sum()

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    inputs = [rand(2, 35, 24, dtype=torch.float16, device="cpu").requires_grad_(),
              rand(5, 700, dtype=torch.float32, device="cpu").requires_grad_()]
    eager = [t.detach().clone().requires_grad_() for t in inputs]
    torch.compile(fn, fullgraph=True, backend=backend)(*inputs).backward()
    fn(*eager).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(inputs, eager))
    targets = [{str(node.target) for node in g.graph.nodes} for g in backend.fw_graphs + backend.bw_graphs]
    assert "tkpy.softmax.default" in targets[0] and "tkpy.softmax_backward.default" in targets[1]
    torch._dynamo.reset()


@pytest.mark.parametrize("call,error,match", [
    (lambda: softmax(torch.zeros(2, 262145, dtype=torch.bfloat16)), ValueError, "at most 262144 elements"),
    (lambda: softmax(torch.zeros(4, 16, dtype=torch.bfloat16), dim=0), NotImplementedError,
     "only the last dim.*move it"),
    (lambda: softmax(torch.zeros(4, 16, dtype=torch.float64)), ValueError, "bf16, fp16 or fp32"),
    (lambda: softmax(torch.zeros(4, 16, dtype=torch.float64).requires_grad_()), ValueError, "bf16, fp16 or fp32"),
    (lambda: softmax(torch.tensor(1.0)), ValueError, "at least one dim"),
    (lambda: softmax_backward(torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16)),
     ValueError, "dy must have y's shape"),
])
def test_bad_inputs_are_explained(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("grad", [False, True])       # the direct call and the operator
def test_cpu_tensors_need_the_interpreter(monkeypatch, grad):
    monkeypatch.delenv("TKPY_INTERPRET")
    x = rand(4, 16, dtype=torch.bfloat16, device="cpu").requires_grad_(grad)
    with pytest.raises(ValueError, match="runs on CUDA tensors.*TKPY_INTERPRET=1"):
        softmax(x)


@pytest.mark.parametrize("options,match", [
    (dict(direction="sideways"), "direction must be one of"),
    (dict(width=262145), "width must be an int from 1 to 262144"),
    (dict(dtype="f64"), "dtype must be one of"),
    (dict(stage=True, prefetch=True), "stage .* is without prefetch or stages"),
    (dict(stage=True, direction="forward", stages=2), "stage .* is without prefetch or stages"),
    (dict(stage=True, stage_dy=True, direction="forward"), "stage_dy .* is the backward's, with stage"),
    (dict(stage_dy=True), "stage_dy .* is the backward's, with stage"),
    (dict(tile=True, cluster=2, rows_per_block=64), "a tile kernel takes whole rows in one warp"),
    (dict(tile=True, width=512, rows_per_block=64), "rows of up to 256"),
    (dict(tile=True, width=200, dtype="f32", direction="backward", rows_per_block=64), "rows of up to 128"),
    (dict(width=65536, warps_per_row=4, cluster=2), "values a lane, more than 64"),
    (dict(cluster=3), "cluster must be one of"),
    (dict(warps_per_row=8, persistent=False, prefetch=True), "the persistent loop's"),
    (dict(warps_per_row=8, persistent=1), "persistent must be a bool"),
    (dict(width=100, packed=2), "packed rows are"),
    (dict(width=64, packed=2), "fill whole 256-element chunks"),
    (dict(width=128, packed=2, warps_per_row=2), "packed rows are a warp's"),
    (dict(width=128, packed=True), "packed .* must be an int of at least 2"),
])
def test_configs_check_themselves(options, match):
    fields = {**dict(direction="backward", width=4096), **options}
    with pytest.raises(ValueError, match=match):
        softmax_policy.SoftmaxConfig(**fields)


def test_a_grid_of_every_row_group_and_forcing_rows_ahead():
    """persistent=False: a block (cluster) a row group, past what runs at once; forcing the prefetch over such a
    table row takes the persistent loop back (its rows ahead need it)."""
    c = softmax_policy.config_for("backward", 4096, "bf16")
    assert not c.persistent and "_onestep" in c.name
    assert row_split.grid_for(c, 1001, resident=8) == -(-1001 // c.rows_per_block)
    persistent = softmax_policy.config_for("backward", 4096, "bf16", prefetch=True)
    assert persistent.persistent and row_split.grid_for(persistent, 1001, resident=8) == 8
    clustered = replace(c, warps_per_row=1, cluster=2, rows_per_block=2)
    assert row_split.grid_for(clustered, 7, resident=4) == 8          # (4 row groups, a cluster of 2 each)


def test_a_grid_of_every_row_group_asks_no_occupancy(monkeypatch):
    """row_split.grid: persistent=False needs no occupancy query (what runs at once does not size its grid)."""
    def refuse(*args):
        raise AssertionError("asked the occupancy")

    monkeypatch.setattr(row_split, "resident_blocks", refuse)
    c = softmax_policy.config_for("backward", 4096, "bf16")
    assert not c.persistent and row_split.grid(None, c, 1001, []) == -(-1001 // c.rows_per_block)
    with pytest.raises(AssertionError, match="asked the occupancy"):
        row_split.grid(None, softmax_policy.config_for("backward", 4096, "bf16", prefetch=True), 1001, [])


# -- the policy ---------------------------------------------------------------------------------------------------

WIDTHS = (1, 100, 128, 129, 256, 512, 1000, 1024, 2048, 4096, 5000, 8192, 16384, 32768, 50257, 65536, 131072, 200000,
          262144)


def choices() -> dict:
    return {f"{direction} {dtype} {n}": softmax_policy.config_for(direction, n, dtype).name
            for direction in ("forward", "backward") for dtype in ("bf16", "f32") for n in WIDTHS}


def test_policy_choices_match_the_golden_record():
    """What each width runs (tests/golden/softmax_policy.json; TKPY_REGEN_GOLDEN=1 rewrites it after a deliberate
    change of the tables)."""
    if os.environ.get("TKPY_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(choices(), indent=1) + "\n")
    assert choices() == json.loads(GOLDEN.read_text())
    assert all(row.evidence for table in softmax_policy.SPLIT.values() for _, row in table)


# A width of each register regime of the tables (the rows between hold as many values a lane at the same register
# cap, over fewer warps): 264 (a warp a row, its second chunk partly past the row's end: copies element by element),
# 1024 and 4096 (16 values a lane, 64 registers), 8192 (16 warps), 16384 (32 values, the next row's too), 131072 (a
# cluster of 8), 262144 (64 values; the backward's y staged). fp16 for the 16-bit tables: its conversions take more
# registers than bf16's.
REGIMES = (264, 1024, 4096, 8192, 16384, 131072, 262144)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", ["fp16", "f32"])
@pytest.mark.parametrize("width", REGIMES)
def test_the_policys_kernels_compile_without_spills(direction, dtype, width):
    """NVRTC (no GPU needed): the split kernels the tables choose, at the register cap of their blocks an SM."""
    c = softmax_policy.config_for(direction, width, dtype)
    x = torch.empty(64, width, dtype=gpu_util.TORCH[dtype])
    kernel = (softmax_kernel.forward_kernel if direction == "forward" else softmax_kernel.backward_kernel)(c)
    r = kernel.resources(*([x] * (2 if direction == "forward" else 3)))
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())


@pytest.mark.parametrize("direction,dtype,width,split", [
    ("forward", "fp16", 262144, dict(warps_per_row=16, cluster=8, blocks_per_sm=2)),
    ("forward", "fp16", 131072, dict(warps_per_row=8, cluster=8, blocks_per_sm=4)),
    ("forward", "f32", 262144, dict(warps_per_row=16, cluster=8, blocks_per_sm=1)),
    ("forward", "f32", 65536, dict(warps_per_row=8, cluster=4, blocks_per_sm=2)),
    ("backward", "fp16", 262144, dict(warps_per_row=16, cluster=8, blocks_per_sm=1)),
    ("backward", "fp16", 131072, dict(warps_per_row=8, cluster=8, blocks_per_sm=2)),
    ("backward", "f32", 131072, dict(warps_per_row=16, cluster=8, blocks_per_sm=1)),
    ("backward", "f32", 65536, dict(warps_per_row=8, cluster=8, blocks_per_sm=3)),
    ("backward", "f32", 4096, dict(warps_per_row=4, blocks_per_sm=6)),         # (narrower rows, more blocks an SM)
    ("backward", "bf16", 8192, dict(warps_per_row=8, blocks_per_sm=4)),
    ("forward", "f32", 16384, dict(warps_per_row=8, blocks_per_sm=3)),
])
def test_the_staged_kernels_fit(direction, dtype, width, split):
    """NVRTC: the forward with x's piece in shared memory (stage), the backward with y's and dy's (stage_dy), as the
    sweep tries them at the widest rows: no spills at several blocks an SM (a chunk in registers), the pieces' shared
    memory within an SM's for them all."""
    tensors = 1 if direction == "forward" else 2
    staged = dict(stage=True, stage_dy=True) if direction == "backward" else dict(stage=True)
    c = softmax_policy.config_for(direction, width, dtype, tile=False, rows_per_block=1, **staged, **split)
    x = torch.empty(64, width, dtype=gpu_util.TORCH[dtype])
    kernel = (softmax_kernel.forward_kernel if direction == "forward" else softmax_kernel.backward_kernel)(c)
    r = kernel.resources(*[x] * (1 + tensors))
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())
    assert tensors * c.piece * c.warps * gpu_util.TORCH[dtype].itemsize * c.blocks_per_sm <= 227 * 1024


@pytest.mark.parametrize("dtype,width", [(bf16, 256), (fp16, 256), (f32, 256)])
def test_widest_tile_rows_compile_without_spills(dtype, width):
    """The tile kernels at their widest rows (fp32's backward: 128) within the registers (the 16-bit backward holds
    an fp32 and a 16-bit tile of 16 x 256: ~255 registers a thread)."""
    x = torch.empty(64, width, dtype=dtype.torch)
    backward_width = 128 if dtype == f32 else width
    for kernel, args in ((softmax_rows_factory(dtype), (x, x, width)),
                         (softmax_backward_rows_factory(dtype), (x, x, x, backward_width))):
        r = kernel.resources(*args)
        assert r.found and r.spill_stores == r.spill_loads == 0, (kernel.name, r.summary())


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", ["fp16", "f32"])
def test_the_benchmarks_packed_kernels_compile_without_spills(direction, dtype):
    """NVRTC: bench_memory_bound.py's packed variants of 128-element rows (4 a piece: 16 values a lane, the next
    piece's in flight) at their register caps."""
    from benchmarks import bench_memory_bound as bench

    for name, options in bench.SOFTMAX_TILE_VARIANTS.items():
        if options.get("packed"):
            c = softmax_policy.config_for(direction, 128, dtype, **options)
            x = torch.empty(64, c.packed_width, dtype=gpu_util.TORCH[dtype])
            kernel = (softmax_kernel.forward_kernel if direction == "forward" else softmax_kernel.backward_kernel)(c)
            r = kernel.resources(*([x] * (2 if direction == "forward" else 3)))
            assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())


def test_the_benchmarks_bytes_and_variants():
    """benchmarks/bench_memory_bound.py's softmax rows: the bytes each tensor once, and every variant --variants
    times a config the kernels take (forcing the prefetch takes a staged row's stage away)."""
    from benchmarks import bench_memory_bound as bench

    assert bench.softmax_bytes("forward", 16384, 4096, 2) == 2 * 16384 * 4096 * 2
    assert bench.softmax_bytes("backward", 256, 262144, 4) == 3 * 256 * 262144 * 4
    for dtype in ("bf16", "f32"):
        for direction in ("forward", "backward"):
            for width in bench.SOFTMAX_SWEEP:
                for name, options in bench.softmax_variants(direction, width, dtype).items():
                    c = softmax_policy.config_for(direction, width, dtype, **options)
                    assert not (c.prefetch and c.stage), (direction, width, dtype, name)
