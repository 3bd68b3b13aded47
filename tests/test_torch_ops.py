"""tkpy.kernels as torch operators on CPU tensors in the interpreter (TKPY_INTERPRET=1), and the same on CUDA tensors
on the GPU: torch.library.opcheck of every operator (schema, fake tensors, autograd registration, AOT dispatch),
matmul's gradients against float64 autograd (every element, every epilogue, both weight layouts), the eager fast
path against the dispatcher, refusals of what has no backward, aliasing, the SDPA drop-in."""
from __future__ import annotations

import math

import pytest
import torch

import gpu_util
from gpu_util import rel_err
from tkpy.kernels import attention, matmul, matmul_fp8, scaled_dot_product_attention
from tkpy.kernels import gemm
from tkpy.kernels.op_support import direct_call_ok, may_overlap

BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
TOL = {BF16: 1e-2, FP16: 2e-3, F32: 1e-5}
DEVICES = ["cpu", pytest.param("cuda", marks=gpu_util.requires_gpu)]


@pytest.fixture(autouse=True)
def interpret(monkeypatch, request):
    """The interpreter for CPU tensors; CUDA cases run the GPU."""
    if request.node.get_closest_marker("gpu") is None:      # (the CUDA cases carry the gpu mark)
        monkeypatch.setenv("TKPY_INTERPRET", "1")


def rand(*shape, dtype=BF16, device="cpu", grad=False):
    x = gpu_util.rand(*shape, dtype=dtype, device=device)
    return x.requires_grad_() if grad else x


def reference(a, b, bias=None, activation=None, scale=None):
    """float64 autograd of the epilogue's torch form."""
    return gemm._epilogue(a.double() @ b.double(), None if bias is None else bias.double(), activation, scale)


# -- opcheck ------------------------------------------------------------------------------------------------------

MATMUL_CASES = {  # name -> (m, n, k, transposed weight, kwargs)
    "plain": (40, 48, 32, False, {}),
    "nt_bias_gelu_scale": (40, 48, 32, True, dict(bias=True, activation="gelu", scale=0.5)),
    "relu_f32_out": (33, 20, 24, False, dict(activation="relu", out_dtype=F32)),
    "silu_fp16": (16, 64, 48, True, dict(activation="silu", dtype=FP16, bias=True)),
}


def matmul_args(case, device, grad):
    m, n, k, transposed, kw = MATMUL_CASES[case]
    kw = dict(kw)
    dtype = kw.pop("dtype", BF16)
    a = rand(m, k, dtype=dtype, device=device, grad=grad)
    w = rand(n, k, dtype=dtype, device=device, grad=grad)
    b = w.T if transposed else rand(k, n, dtype=dtype, device=device, grad=grad)
    if kw.pop("bias", False):
        kw["bias"] = rand(n, dtype=F32, device=device, grad=grad)
    return (a, b), kw


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", MATMUL_CASES)
def test_opcheck_matmul(case, device):
    args, kw = matmul_args(case, device, grad=True)
    if args[1].grad_fn is not None:                      # (w.T: opcheck wants leaf inputs)
        args = (args[0], args[1].detach().requires_grad_())
    torch.library.opcheck(torch.ops.tkpy.matmul.default, args, kw)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_matmul_out_and_fp8(device):
    (a, b), kw = matmul_args("nt_bias_gelu_scale", device, grad=False)
    out = torch.empty(a.shape[0], b.shape[1], dtype=BF16, device=device)
    torch.library.opcheck(torch.ops.tkpy.matmul_out.default, (a, b, out), kw)
    a8 = rand(48, 64, device=device).to(torch.float8_e4m3fn)
    w8 = rand(32, 64, device=device).to(torch.float8_e4m3fn)
    scales = (torch.tensor([0.5], device=device), torch.rand(32, device=device))
    out = torch.empty(48, 32, dtype=F32, device=device)
    # opcheck's schema test compares inputs with allclose, which torch has no fp8 kernel for: the same check (no
    # input changed, an output of its own) on the fp8 bytes instead.
    without_schema = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args in ((torch.ops.tkpy.matmul_fp8.default, (a8, w8.T, *scales, BF16)),
                     (torch.ops.tkpy.matmul_fp8_out.default, (a8, w8.T, *scales, out, F32))):
        torch.library.opcheck(op, args, test_utils=without_schema)
        before = [x.clone() for x in (a8, w8, *scales)]
        result = op(*args)
        assert all(torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x, y.view(torch.uint8)
                               if y.element_size() == 1 else y) for x, y in zip(before, (a8, w8, *scales)))
        assert result is None or not may_overlap(result, a8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal,return_lse", [(None, False), ("top_left", True), ("bottom_right", True)])
def test_opcheck_attention(causal, return_lse, device):
    q, k, v = (rand(1, h, n, 64, device=device, grad=True) for h, n in ((4, 40), (2, 56), (2, 56)))
    torch.library.opcheck(torch.ops.tkpy.attention.default, (q, k, v), dict(causal=causal, return_lse=return_lse))


# -- autograd -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("transposed", [False, True])
def test_matmul_gradients(activation, transposed, device):
    """dA, dB and dbias against float64 autograd at an odd shape (padded operands), with scale and bias."""
    m, n, k = 70, 90, 40
    a = rand(m, k, device=device, grad=True)
    w = rand(n, k, device=device, grad=True) if transposed else rand(k, n, device=device, grad=True)
    bias = rand(n, dtype=F32, device=device, grad=True)
    c = matmul(a, w.T if transposed else w, bias=bias, activation=activation, scale=0.3)
    g = rand(m, n, device=device)
    c.backward(g)
    a64, w64, bias64 = (x.detach().double().requires_grad_() for x in (a, w, bias))
    reference(a64, w64.T if transposed else w64, bias64, activation, 0.3).backward(g.double())
    assert c.dtype == BF16 and rel_err(c, reference(a, w.T if transposed else w, bias, activation, 0.3)) < TOL[BF16]
    for x, x64 in ((a, a64), (w, w64), (bias, bias64)):
        assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
        assert rel_err(x.grad, x64.grad) < 2e-2, (x.shape, rel_err(x.grad, x64.grad))
    assert w.grad.stride() == w.stride()            # the weight's layout (dW of w.T computed as dZ^T A)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_operator_called_directly_recomputes_the_pre_activation(activation, device):
    """torch.ops.tkpy.matmul with a fused GELU / SiLU differentiates too (Z recomputed in the backward)."""
    a, w = rand(40, 32, device=device, grad=True), rand(32, 48, device=device, grad=True)
    c = torch.ops.tkpy.matmul(a, w, activation=activation, out_dtype=F32)
    g = rand(40, 48, dtype=F32, device=device)
    c.backward(g)
    a64, w64 = (x.detach().double().requires_grad_() for x in (a, w))
    reference(a64, w64, None, activation).backward(g.double())
    assert rel_err(a.grad, a64.grad) < 2e-2 and rel_err(w.grad, w64.grad) < 2e-2


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_one_input_only(device):
    """Only dB asked for (frozen activations): dA is not computed, dB is right."""
    a, w = rand(24, 32, device=device), rand(32, 40, device=device, grad=True)
    matmul(a, w).sum().backward()
    assert a.grad is None
    assert rel_err(w.grad, a.double().T @ torch.ones(24, 40, dtype=torch.float64, device=device)) < 2e-2


@pytest.mark.parametrize("name", ["matmul_fp8", "matmul out="])
def test_what_has_no_backward_refuses_grad_with_the_reason(name):
    a8 = rand(32, 32).to(torch.float8_e4m3fn)
    calls = {
        "matmul_fp8": (lambda: matmul_fp8(a8, a8.T, torch.ones(1, requires_grad=True), torch.ones(1)),
                       "fp8 training needs a scaling recipe"),
        "matmul out=": (lambda: matmul(rand(32, 32, grad=True), rand(32, 32), out=torch.empty(32, 32, dtype=BF16)),
                        "out= arguments do not support automatic differentiation")}
    call, reason = calls[name]
    with pytest.raises(NotImplementedError, match=reason):
        call()
    with torch.no_grad():                                # the same call runs without grad mode
        call()


# -- the eager fast path ------------------------------------------------------------------------------------------

def test_direct_path_and_dispatcher_agree_and_the_direct_path_is_taken_only_when_nothing_intercepts():
    a, b = rand(40, 32), rand(32, 48)
    assert direct_call_ok((a, b))
    assert torch.equal(matmul(a, b), torch.ops.tkpy.matmul(a, b))
    assert not direct_call_ok((a, b.requires_grad_()))
    with torch.no_grad():
        assert direct_call_ok((a, b))
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode, plain_b = FakeTensorMode(), b.detach()
    with mode:                                           # a dispatch mode: the operator's fake implementation
        fake = mode.from_tensor(a), mode.from_tensor(plain_b)
        assert not direct_call_ok(fake)
        out = matmul(*fake, activation="relu")
        assert out.shape == (40, 48) and out.dtype == BF16
    with torch.profiler.profile() as prof:               # profiled: the operator's own name in the trace
        matmul(a, b.detach())
    assert any(e.name == "tkpy::matmul" for e in prof.events())


def test_fake_implementation_checks_arguments_as_the_kernel():
    """Shapes the kernel refuses are refused under fake tensors too (torch.compile's trace errors early)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode, pytest.raises(ValueError, match=r"expects a \(M, K\) @ b \(K, N\)"):
        matmul(mode.from_tensor(rand(40, 32)), mode.from_tensor(rand(40, 32)))


# -- aliasing -----------------------------------------------------------------------------------------------------

def test_out_that_aliases_an_input_is_refused():
    a = rand(64, 64)
    with pytest.raises(ValueError, match="out shares memory with a"):
        matmul(a, rand(64, 64), out=a)
    buf = rand(64, 128)
    with pytest.raises(ValueError, match="out shares memory with b"):
        matmul(rand(64, 64), buf[:, :64], out=buf[:, 32:96])
    c = matmul(rand(64, 64), buf[:, :64], out=buf[:, 64:])      # side by side in one buffer: no overlap
    assert c.data_ptr() == buf[:, 64:].data_ptr()


def test_may_overlap():
    buf = torch.zeros(8, 16)
    assert may_overlap(buf, buf[2:])
    assert not may_overlap(buf[:, :8], buf[:, 8:])
    assert may_overlap(buf[:, :9], buf[:, 8:])
    assert not may_overlap(buf[:4], buf[4:])
    assert may_overlap(buf.T, buf)
    assert not may_overlap(buf, torch.zeros(8, 16))


# -- device errors ------------------------------------------------------------------------------------------------

def test_cpu_tensors_without_the_interpreter_say_how(monkeypatch):
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    for call in (matmul, torch.ops.tkpy.matmul):         # the eager fast path and the dispatcher
        with pytest.raises(ValueError, match="matmul runs on CUDA tensors .* TKPY_INTERPRET=1"):
            call(rand(32, 32), rand(32, 32))
    with pytest.raises(ValueError, match="attention runs on CUDA tensors"):
        attention(rand(1, 1, 16, 16), rand(1, 1, 16, 16), rand(1, 1, 16, 16))


# -- the SDPA drop-in ---------------------------------------------------------------------------------------------

SDPA_SHAPES = [  # query, key shapes (value as key), enable_gqa, is_causal
    ((2, 4, 40, 64), (2, 4, 40, 64), False, False),
    ((1, 4, 33, 64), (1, 2, 50, 64), True, True),
    ((4, 24, 32), (4, 24, 32), False, True),                   # 3-D: (heads, seq, dim)
    ((2, 2, 2, 16, 16), (2, 2, 1, 24, 16), True, False),       # 5-D: leading dims flattened
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("qs,ks,gqa,causal", SDPA_SHAPES)
def test_sdpa_drop_in_matches_torch(qs, ks, gqa, causal, device):
    q, k, v = rand(*qs, device=device), rand(*ks, device=device), rand(*ks, device=device)
    out = scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.2, enable_gqa=gqa)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal,
                                                           scale=0.2, enable_gqa=gqa)
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert rel_err(out, ref) < TOL[BF16]


REFUSED = {  # what the drop-in does not take -> (the call's changes, the message)
    "mask": (dict(attn_mask=torch.ones(32, 32, dtype=torch.bool)), "attn_mask"),
    "dropout": (dict(dropout_p=0.1), "dropout"),
    "float32": (dict(dtype=F32), "bf16 or fp16"),
    "head dim 40": (dict(d=40), "head dim 40"),
    "batch broadcast": (dict(kv_batch=1), "no broadcasting"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_sdpa_drop_in_says_what_it_cannot_take_or_falls_back_to_torch(name):
    change, message = REFUSED[name]
    change = dict(change)
    d, dtype, kv_batch = (change.pop(key, default) for key, default in (("d", 64), ("dtype", BF16), ("kv_batch", 2)))
    q = rand(2, 2, 32, d, dtype=dtype)
    k, v = rand(kv_batch, 2, 32, d, dtype=dtype), rand(kv_batch, 2, 32, d, dtype=dtype)
    with pytest.raises(NotImplementedError, match=message):
        scaled_dot_product_attention(q, k, v, **change)
    torch.manual_seed(0)
    out = scaled_dot_product_attention(q, k, v, **change, fallback=True)
    torch.manual_seed(0)
    assert torch.equal(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, **change))


def test_sdpa_drop_in_heads_as_torch():
    """Fewer key/value heads need enable_gqa (torch refuses them too: the fallback raises torch's error), but one
    key/value head broadcasts as in torch."""
    q, k2, k1 = rand(1, 4, 32, 64), rand(1, 2, 32, 64), rand(1, 1, 32, 64)
    with pytest.raises(NotImplementedError, match="enable_gqa=True"):
        scaled_dot_product_attention(q, k2, k2)
    with pytest.raises(RuntimeError):
        scaled_dot_product_attention(q, k2, k2, fallback=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k1.double(), k1.double())
    assert rel_err(scaled_dot_product_attention(q, k1, k1), ref) < TOL[BF16]


def test_default_scale_is_one_over_root_d():
    q, k, v = rand(1, 2, 32, 32), rand(1, 2, 32, 32), rand(1, 2, 32, 32)
    assert rel_err(scaled_dot_product_attention(q, k, v), attention(q, k, v, scale=1 / math.sqrt(32))) < 1e-6


# -- decisions made once per signature --------------------------------------------------------------------------

def test_a_signature_decided_once_still_checks_each_calls_pointers_and_scale():
    """matmul and attention decide per signature of arguments (shapes, strides, dtypes, options) on the first call;
    a later call of that signature with other data, another scale of the same sign and views whose pointers are not
    16-byte aligned (the same strides) computes its own result (the misaligned operands copied)."""
    buf = rand(64, 80)
    for offset in (0, 1):                                # 16-byte aligned, then 2 bytes off: same strides
        a, b = buf[:, offset:offset + 32], rand(32, 48)
        assert rel_err(matmul(a, b, scale=0.5 + offset), (0.5 + offset) * (a.double() @ b.double())) < TOL[BF16]
    qbuf = rand(1, 2, 40, 72)
    for offset, scale in ((0, 0.3), (1, 0.7), (0, -0.2), (1, -0.9)):
        q, k, v = qbuf[..., offset:offset + 64], rand(1, 2, 40, 64), rand(1, 2, 40, 64)
        o, lse = attention(q, k, v, causal=True, scale=scale, return_lse=True)
        ref, ref_lse = gpu_util.attention_reference(q, k, v, True, scale)
        assert rel_err(o, ref) < TOL[BF16] and rel_err(lse, ref_lse) < TOL[BF16]


@pytest.mark.parametrize("kwargs,error", [
    (dict(split_k=True), "split_k must be None or a positive int"),
    (dict(scale="2"), "scale must be a number"),
])
def test_matmul_refuses_options_of_the_wrong_type(kwargs, error):
    a, b = rand(32, 32), rand(32, 32)
    matmul(a, b, scale=1.0)                              # (the signature with a float scale decided first)
    with pytest.raises((ValueError, TypeError), match=error):
        matmul(a, b, **kwargs)


def test_matmul_checks_arguments_before_the_early_returns():
    """Empty products still check their arguments (the kernel is never needed, the errors are)."""
    with pytest.raises(ValueError, match="bias must be a"):
        matmul(rand(0, 32), rand(32, 16), bias=rand(7))
    with pytest.raises(ValueError, match="activation must be one of"):
        matmul(rand(16, 0), rand(0, 16), activation="tanh")
