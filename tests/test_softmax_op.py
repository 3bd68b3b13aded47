"""tkpy.kernels.softmax as a torch operator, in the CPU interpreter (TKPY_INTERPRET=1): the forward and backward
kernels against float64 torch on every element for several shapes and both dtypes, strided inputs, torch.library's
opcheck of both operators, torch.compile, the errors, and NVRTC compiles of the widest rows without spills. The same
checks on the GPU: tests/test_gpu_kernels.py."""
from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs

import gpu_util
from tkpy import bf16, fp16
from tkpy.kernels.row_softmax import (_readable, softmax, softmax_backward, softmax_backward_rows_factory,
                                  softmax_rows_factory)

rand = functools.partial(gpu_util.rand, device="cpu")
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
DTYPES = pytest.mark.parametrize("dtype", TOL)
# A 3-D input, rows not a multiple of 64 (one block's), rows of 1, 5, 16, 100 and 256 elements.
SHAPES = pytest.mark.parametrize("shape", [(2, 3, 40), (70, 1), (33, 5), (64, 16), (5, 100), (3, 256)])


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    """out has ref's shape and `dtype`, and every element lies within TOL[dtype] of float64 ref, relative to ref's
    largest magnitude (NaN, e.g. an element no kernel wrote, fails)."""
    assert out.shape == ref.shape and out.dtype == dtype
    err, scale = (out.double() - ref).abs().max().item(), ref.abs().max().item()
    assert err <= TOL[dtype] * scale, f"max error {err:.3g} against largest {scale:.3g}"


def reference(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 torch's softmax of x over the last dim and its input's gradient for dy."""
    x64 = x.detach().double().requires_grad_()
    y = torch.softmax(x64, -1)
    y.backward(dy.double())
    return y.detach(), x64.grad


def check_forward_and_backward(shape, dtype, device="cpu") -> None:
    """softmax and its backward on fresh random inputs against float64 torch, every element. (On CUDA a freed block
    of NaN is allocated first: the output reuses it, so an element no kernel writes shows up.)"""
    x = gpu_util.rand(*shape, dtype=dtype, low=-6, high=6, device=device).requires_grad_()
    dy = gpu_util.rand(*shape, dtype=dtype, device=device)
    if device == "cuda":
        gpu_util.poisoned(*shape, dtype=dtype)
    y = softmax(x)
    y.backward(dy)
    y_ref, dx_ref = reference(x, dy)
    assert y.is_contiguous()
    assert_close(y.detach(), y_ref, dtype)
    assert_close(x.grad, dx_ref, dtype)


@DTYPES
@SHAPES
def test_forward_and_backward_match_float64_torch(shape, dtype):
    check_forward_and_backward(shape, dtype)


def strided(kind: str) -> torch.Tensor:
    """A (70, 40) bf16 view of another layout."""
    if kind == "aligned slice":          # rows 48 elements (96 bytes) apart: read in place
        return rand(70, 48, dtype=torch.bfloat16)[:, :40]
    if kind == "unaligned slice":        # a pointer 2 bytes past 16-byte alignment
        return rand(70, 41, dtype=torch.bfloat16)[:, 1:]
    if kind == "transposed":             # columns not contiguous
        return rand(40, 70, dtype=torch.bfloat16).T
    return rand(1, 40, dtype=torch.bfloat16).expand(70, 40)        # one row repeated (stride 0)


@pytest.mark.parametrize("kind", ["aligned slice", "unaligned slice", "transposed", "expanded"])
def test_strided_inputs_are_read_in_place_where_aligned_else_copied(kind):
    x = strided(kind)
    assert (_readable(x) is x) == (kind == "aligned slice")
    x.requires_grad_()
    w = rand(40, dtype=torch.bfloat16)
    y = softmax(x)
    y.backward(w.expand(70, 40))                    # dy repeats one row: copied
    y_ref, dx_ref = reference(x, w.expand(70, 40))
    assert y.is_contiguous()
    assert_close(y.detach(), y_ref, torch.bfloat16)
    assert_close(x.grad, dx_ref, torch.bfloat16)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 7)])
def test_empty_inputs_launch_nothing(shape):
    """(No launch: a grid of zero blocks would be refused.)"""
    x = torch.empty(shape, dtype=torch.float16, requires_grad=True)
    y = softmax(x)
    assert y.shape == shape and y.dtype == torch.float16
    y.backward(torch.empty(shape, dtype=torch.float16))
    assert x.grad.shape == shape


def test_opcheck_softmax():
    x = rand(33, 40, dtype=torch.bfloat16).requires_grad_()
    torch.library.opcheck(torch.ops.tkpy.softmax.default, (x,))


def test_opcheck_softmax_backward():
    y = softmax(rand(33, 40, dtype=torch.bfloat16))
    torch.library.opcheck(torch.ops.tkpy.softmax_backward.default, (rand(33, 40, dtype=torch.bfloat16), y))


def test_double_backward_is_refused():
    """A backward that records its own graph (create_graph=True) is refused, not run without a gradient."""
    x = rand(33, 40, dtype=torch.bfloat16).requires_grad_()
    with pytest.raises(NotImplementedError, match="double backward of softmax is not implemented"):
        torch.autograd.grad(softmax(x), x, rand(33, 40, dtype=torch.bfloat16), create_graph=True)


@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd")     # (the recording backend's)
def test_compiled_matches_eager_forward_and_backward():
    """torch.compile(fullgraph=True) sees tkpy.softmax in the forward graph and tkpy.softmax_backward in the
    backward one, and both match eager."""
    def fn(x):
        return torch.tanh(3 * softmax(x))

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()
    x = rand(2, 35, 24, dtype=torch.float16).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    dy = rand(2, 35, 24, dtype=torch.float16)
    y = torch.compile(fn, fullgraph=True, backend=backend)(x)
    y.backward(dy)
    y_eager = fn(x_eager)
    y_eager.backward(dy)
    assert torch.equal(y, y_eager) and torch.equal(x.grad, x_eager.grad)
    targets = [{str(node.target) for node in g.graph.nodes} for g in backend.fw_graphs + backend.bw_graphs]
    assert "tkpy.softmax.default" in targets[0] and "tkpy.softmax_backward.default" in targets[1]
    torch._dynamo.reset()


@pytest.mark.parametrize("call,error,match", [
    (lambda: softmax(rand(4, 257, dtype=torch.bfloat16)), ValueError, "at most 256 elements"),
    (lambda: softmax(rand(4, 16, dtype=torch.bfloat16), dim=0), NotImplementedError, "only the last dim.*move it"),
    (lambda: softmax(rand(4, 16, dtype=torch.float32)), ValueError, "bf16 or fp16"),
    (lambda: softmax(rand(4, 16, dtype=torch.float32).requires_grad_()), ValueError, "bf16 or fp16"),  # (the op)
    (lambda: softmax_backward(rand(4, 8, dtype=torch.bfloat16), rand(4, 16, dtype=torch.bfloat16)), ValueError,
     "dy must have y's shape"),
])
def test_bad_inputs_are_explained(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("grad", [False, True])       # the direct call and the operator
def test_cpu_tensors_need_the_interpreter(monkeypatch, grad):
    monkeypatch.delenv("TKPY_INTERPRET")
    x = rand(4, 16, dtype=torch.bfloat16).requires_grad_(grad)
    with pytest.raises(ValueError, match="runs on CUDA tensors.*TKPY_INTERPRET=1"):
        softmax(x)


@pytest.mark.parametrize("dtype", [bf16, fp16])
def test_widest_rows_compile_without_spills(dtype):
    """NVRTC (no GPU needed) compiles both kernels for 256-element rows within the registers (the backward holds
    an fp32 and a 16-bit tile of 16 x 256: ~255 registers a thread)."""
    x = torch.empty(64, 256, dtype=dtype.torch)
    for kernel, args in ((softmax_rows_factory(dtype), (x, x, 256)),
                         (softmax_backward_rows_factory(dtype), (x, x, x, 256))):
        r = kernel.resources(*args)
        assert r.found and r.spill_stores == r.spill_loads == 0, (kernel.name, r.summary())
