"""torch.compile and torch.export over tkpy's operators: a transformer block's pieces compile with fullgraph=True
(static and dynamic shapes) without graph breaks, match eager, and differentiate to float64 autograd's gradients;
on CPU tensors in the interpreter (TKPY_INTERPRET=1) and on CUDA tensors on the GPU, where mode="reduce-overhead"
(CUDA graphs) runs too."""
from __future__ import annotations

import pytest
import torch

import gpu_util
from gpu_util import rel_err
from tkpy.kernels import attention, gemm, matmul, softmax

BF16, F32 = torch.bfloat16, torch.float32
DEVICES = ["cpu", pytest.param("cuda", marks=gpu_util.requires_gpu)]


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch, request):
    """The interpreter for CPU tensors; each test compiles from scratch, without inductor's on-disk caches (their
    keys leave out a custom op's schema: a graph cached before tkpy::matmul lost an argument called the new op with
    it and failed)."""
    if request.node.get_closest_marker("gpu") is None:      # (the CUDA cases carry the gpu mark)
        monkeypatch.setenv("TKPY_INTERPRET", "1")
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


def rand(*shape, dtype=BF16, device="cpu", grad=False, scale=1.0):
    x = gpu_util.rand(*shape, dtype=torch.float64, device=device) * scale
    return x.to(dtype).requires_grad_(grad)


def mlp(x, up, up_bias, down, ops):
    """Linear + GELU + Linear with nn.Linear's weight layout (the kernels read w.T as is), then a softmax."""
    h = ops["matmul"](x, up.T, bias=up_bias, activation="gelu")
    return ops["softmax"](ops["matmul"](h, down.T, activation="relu", scale=0.5))


TKPY = {"matmul": matmul, "softmax": softmax}
FLOAT64 = {  # the same block in float64 torch: the reference
    "matmul": lambda a, b, bias=None, activation=None, scale=None: gemm._epilogue(
        a.double() @ b.double(), None if bias is None else bias.double(), activation, scale),
    "softmax": lambda x: torch.softmax(x, -1)}


class MLP(torch.nn.Module):
    def __init__(self, d: int, hidden: int, device: str):
        super().__init__()
        self.up = torch.nn.Parameter(rand(hidden, d, device=device, scale=0.3))
        self.up_bias = torch.nn.Parameter(rand(hidden, dtype=F32, device=device))
        self.down = torch.nn.Parameter(rand(d, hidden, device=device, scale=0.2))

    def forward(self, x):
        return mlp(x, self.up, self.up_bias, self.down, TKPY)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_mlp_matches_eager_and_float64_gradients(device):
    """The issue's check: torch.compile(fullgraph=True) (inductor) of matmul with bias and activation and softmax
    matches eager, and .backward() through it gives float64 autograd's gradients."""
    module, x = MLP(64, 96, device), rand(48, 64, device=device, grad=True)
    y = torch.compile(module, fullgraph=True)(x)
    assert torch.equal(y, module(x))
    g = rand(48, 64, device=device)
    y.backward(g)
    leaves = [x, *module.parameters()]
    leaves64 = [p.detach().double().requires_grad_() for p in leaves]
    y64 = mlp(*leaves64, FLOAT64)
    y64.backward(g.double())
    assert rel_err(y, y64) < 2e-2
    for p, p64 in zip(leaves, leaves64):
        assert p.grad is not None and rel_err(p.grad, p64.grad) < 3e-2, (p.shape, rel_err(p.grad, p64.grad))


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_shapes_compile_once_and_match_eager(device):
    """dynamic=True: one graph for several row counts (no recompilation), each matching eager."""
    module = MLP(64, 96, device)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, fullgraph=True, dynamic=True, backend=counter)
    for rows in (24, 40, 72):
        x = rand(rows, 64, device=device, grad=True)
        y = compiled(x)
        assert torch.equal(y, module(x))
        y.sum().backward()
    assert counter.frame_count == 1


def block(x, wqkv, wo, heads: int):
    """An attention sublayer: the projections with matmul, causal attention, a residual."""
    b, n, d = x.shape
    qkv = matmul(x.reshape(b * n, d), wqkv.T).view(b, n, 3, heads, d // heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    o = attention(q, k, v, causal=True).transpose(1, 2).reshape(b * n, d)
    return x + matmul(o, wo.T).view(b, n, d)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_attention_block_has_no_graph_breaks_and_matches_eager(dynamic, device):
    x = rand(2, 32, 64, device=device)
    wqkv, wo = rand(192, 64, device=device, scale=0.2), rand(64, 64, device=device, scale=0.2)
    explanation = torch._dynamo.explain(block)(x, wqkv, wo, 2)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = {str(node.target) for graph in explanation.graphs for node in graph.graph.nodes}
    assert {"tkpy.matmul.default", "tkpy.attention.default"} <= ops, ops
    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic, backend="aot_eager")
    with torch.inference_mode():
        assert torch.equal(compiled(x, wqkv, wo, 2), block(x, wqkv, wo, 2))


def test_export_sees_the_operators():
    """torch.export keeps tkpy's operators as nodes of the exported program (their fake implementations give the
    shapes)."""
    module = MLP(64, 96, "cpu")
    program = torch.export.export(module, (rand(16, 64),))
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    assert targets.count("tkpy.matmul.default") == 2 and "tkpy.softmax.default" in targets
    x = rand(16, 64)
    assert torch.equal(program.module()(x), module(x))


@gpu_util.on_gpu
def test_reduce_overhead_cuda_graphs_match_eager():
    """mode="reduce-overhead": the operators are captured into CUDA graphs and replayed on new inputs."""
    module = MLP(128, 256, "cuda")
    compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
    with torch.inference_mode():
        for _ in range(3):                               # warm-up, record, replay
            x = rand(256, 128, device="cuda")
            y = compiled(x)
            assert torch.equal(y, module(x))
