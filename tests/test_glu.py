"""tkpy.kernels.swiglu and geglu (erf and tanh gelu) in the CPU interpreter (TKPY_INTERPRET=1): the output and both
gradients against float64 torch on every element, fresh random inputs, outputs poisoned with NaN (the launches
called with NaN-filled outputs), gate and up as two tensors and as the halves of one; opcheck of the operators,
torch.compile(fullgraph), the errors, the policy's kernels compiling without spills. On the GPU:
tests/test_gpu_glu.py. Tolerances: tests/test_norms.py's assert_close (the output dtype's ULP doubled, the row's
largest value / 4 for elements that cancel to near 0)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gpu_util
from test_norms import assert_close
from tkpy.kernels import geglu, swiglu
from tkpy.kernels import glu, glu_kernel, glu_policy

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def reference(activation, gate, up, dout):
    """float64 (out, dgate, dup)."""
    g, u = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    out = ACTIVATIONS[activation](g) * u
    out.backward(dout.double())
    return out.detach(), g.grad, u.grad


def call(activation, *tensors):
    if activation == "silu":
        return swiglu(*tensors)
    return geglu(*tensors, approximate="tanh" if activation == "gelu_tanh" else "none")


def check(activation, shape, dtype, packed=False, device="cpu", options=None):
    """The op and its gradients on fresh random inputs (gate in -4..4: both tails of the activations) against
    reference(), every element; then the launches on NaN-filled outputs (every element must be written)."""
    *lead, d = shape
    rand = lambda *s, low=-2, high=2: gpu_util.rand(*s, dtype=dtype, low=low, high=high, device=device)  # noqa
    if packed:
        x = torch.cat([rand(*lead, d, low=-4, high=4), rand(*lead, d)], -1).requires_grad_()
        gate, up = x[..., :d], x[..., d:]
        out = call(activation, x)
    else:
        gate, up = rand(*lead, d, low=-4, high=4).requires_grad_(), rand(*lead, d).requires_grad_()
        out = call(activation, gate, up)
    dout = rand(*lead, d)
    out.backward(dout)
    ref, dgate_ref, dup_ref = reference(activation, gate, up, dout)
    assert_close(out.detach(), ref, "out")
    if packed:
        assert_close(x.grad, torch.cat([dgate_ref, dup_ref], -1), "dx")
    else:
        assert_close(gate.grad, dgate_ref, "dgate")
        assert_close(up.grad, dup_ref, "dup")
    g, u = gate.detach(), up.detach()
    poisoned = [gpu_util.poisoned(*lead, d, dtype=dtype, device=device) for _ in range(3)]
    glu.forward(activation, g, u, poisoned[0], options)
    glu.backward(activation, dout, g, u, poisoned[1], poisoned[2], options)
    for got, want, what in zip(poisoned, (ref, dgate_ref, dup_ref), ("out", "dgate", "dup")):
        assert_close(got, want, f"{what} (poisoned)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_forward_and_backward_match_float64(activation, dtype):
    check(activation, (3, 5, 1000), dtype)           # ragged: 1000 = 1.95 pieces of 512


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_one_tensor_of_gate_and_up(activation):
    check(activation, (7, 256), torch.bfloat16, packed=True)


def test_narrow_rows_and_other_splits():
    check("silu", (9, 40), torch.float16)                                    # one masked chunk a row
    check("gelu", (4, 768), torch.bfloat16, options=dict(chunks=1, warps=3, blocks_per_sm=1))
    check("silu", (5, 1000), torch.bfloat16, options=dict(chunks=2, warps=2, persistent=False))   # a warp a task


def test_opcheck_of_the_operators():
    rand = lambda *s: gpu_util.rand(*s, dtype=torch.bfloat16, device="cpu").requires_grad_()  # noqa: E731
    g, u, x = rand(6, 256), rand(6, 256), rand(6, 512)
    torch.library.opcheck(torch.ops.tkpy.glu.default, (g, u, "silu"))
    torch.library.opcheck(torch.ops.tkpy.glu_packed.default, (x, "gelu_tanh"))
    torch.library.opcheck(torch.ops.tkpy.glu_backward.default, (rand(6, 256).detach(), g.detach(), u.detach(),
                                                             "gelu"))
    torch.library.opcheck(torch.ops.tkpy.glu_packed_backward.default, (rand(6, 256).detach(), x.detach(), "silu"))


def test_compiled_mlp_matches_eager():
    def fn(x, g, u):
        return swiglu(x).float().sum() + geglu(g, u, "tanh").float().pow(2).sum()

    torch._dynamo.reset()
    inputs = [gpu_util.rand(*s, dtype=torch.bfloat16, device="cpu").requires_grad_() for s in ((5, 512), (5, 256),
                                                                                             (5, 256))]
    torch.compile(fn, fullgraph=True, backend="aot_eager")(*inputs).backward()
    compiled = [t.grad for t in inputs]
    eager = [t.detach().clone().requires_grad_() for t in inputs]
    fn(*eager).backward()
    assert all(torch.equal(a, b.grad) for a, b in zip(compiled, eager))
    torch._dynamo.reset()


def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("call_,match", [
    (lambda: swiglu(torch.zeros(4, 256), torch.zeros(4, 256)), "bf16 or fp16"),
    (lambda: swiglu(_bf16(4, 256), _bf16(4, 128)), "up must have gate's shape"),
    (lambda: swiglu(_bf16(4, 20), _bf16(4, 20)), "a multiple of 8"),
    (lambda: swiglu(_bf16(4, 24)), r"a last dim of 2d, d a multiple of 8"),
    (lambda: geglu(_bf16(4, 256), _bf16(4, 256), approximate="fast"), "approximate must be 'none' or 'tanh'"),
])
def test_bad_inputs_are_explained_before_any_kernel_runs(call_, match):
    with pytest.raises(ValueError, match=match):
        call_()


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_the_policys_kernels_compile_without_spills(activation, direction):
    c = glu_policy.config_for(activation, direction, 4096, "bf16")
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    kernel = (glu_kernel.forward_kernel if direction == "forward" else glu_kernel.backward_kernel)(c)
    r = kernel.resources(*[x] * (3 if direction == "forward" else 5))
    assert r.found and r.spill_stores == r.spill_loads == 0, (c.name, r.summary())
