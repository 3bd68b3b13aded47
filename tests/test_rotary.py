"""tkpy.kernels.rotary in the CPU interpreter (TKPY_INTERPRET=1): q and k (GQA head counts) rotated, half-split
(GPT-NeoX) and interleaved (GPT-J), partial rotary dims, position offsets, fp32 and 16-bit tables, against float64 on
every element with outputs poisoned (the launch on NaN-filled outputs), and the gradients (the rotation by -theta);
opcheck, torch.compile(fullgraph), the errors. On the GPU: tests/test_gpu_rotary.py. Tolerances: tests/test_norms.py's
assert_close."""
from __future__ import annotations

import pytest
import torch

import gpu_util
from test_norms import assert_close
from tkpy.kernels import rotary
from tkpy.kernels import rotary_op as rotary_module


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def tables(max_seq, rotary_dim, dtype=torch.float32, device="cpu"):
    inv = 1.0 / 10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv[None]
    return angles.cos().to(dtype).to(device), angles.sin().to(dtype).to(device)


def reference(x, cos, sin, interleaved, offset, inverse=False):
    """float64 rotation of x (batch, seq, heads, head_dim) by the tables' rows offset.. (their values as given)."""
    x = x.double()
    seq, r = x.shape[1], 2 * cos.shape[1]
    c, s = cos.double()[offset:offset + seq, None, :], sin.double()[offset:offset + seq, None, :]
    s = -s if inverse else s
    rot = x[..., :r]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * c - b * s, b * c + a * s), -1).flatten(-2)
    else:
        a, b = rot[..., :r // 2], rot[..., r // 2:]
        out = torch.cat((a * c - b * s, b * c + a * s), -1)
    return torch.cat((out, x[..., r:]), -1)


def check(batch, seq, heads_q, heads_k, head_dim, rotary_dim, dtype=torch.bfloat16, interleaved=False, offset=0,
          table=torch.float32, device="cpu"):
    cos, sin = tables(offset + seq + 3, rotary_dim, table, device)
    q = gpu_util.rand(batch, seq, heads_q, head_dim, dtype=dtype, device=device).requires_grad_()
    k = gpu_util.rand(batch, seq, heads_k, head_dim, dtype=dtype, device=device).requires_grad_()
    q_out, k_out = rotary(q, k, cos, sin, interleaved, offset)
    assert_close(q_out.detach(), reference(q, cos, sin, interleaved, offset), "q_out")
    assert_close(k_out.detach(), reference(k, cos, sin, interleaved, offset), "k_out")
    dq, dk = gpu_util.rand(*q.shape, dtype=dtype, device=device), gpu_util.rand(*k.shape, dtype=dtype, device=device)
    torch.autograd.backward([q_out, k_out], [dq, dk])
    assert_close(q.grad, reference(dq, cos, sin, interleaved, offset, inverse=True), "dq")
    assert_close(k.grad, reference(dk, cos, sin, interleaved, offset, inverse=True), "dk")
    outs = [gpu_util.poisoned(*t.shape, dtype=dtype, device=device) for t in (q, k)]
    rotary_module.launch(q.detach(), k.detach(), cos, sin, interleaved, offset, False, *outs)
    assert_close(outs[0], reference(q, cos, sin, interleaved, offset), "q_out (poisoned)")
    assert_close(outs[1], reference(k, cos, sin, interleaved, offset), "k_out (poisoned)")


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotation_and_gradients_match_float64(interleaved, dtype):
    check(2, 19, 4, 2, 64, 64, dtype, interleaved)              # GQA, a ragged last block of positions


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
def test_partial_rotary_dim_offset_and_16_bit_tables(interleaved):
    check(1, 3, 3, 1, 96, 32, interleaved=interleaved, offset=37, table=torch.bfloat16)   # decoding-like


def test_opcheck_and_compile():
    cos, sin = tables(40, 32)
    q, k = (gpu_util.rand(2, 17, h, 32, dtype=torch.bfloat16, device="cpu").requires_grad_() for h in (2, 1))
    torch.library.opcheck(torch.ops.tkpy.rotary.default, (q, k, cos, sin, False, 5, False))
    torch.library.opcheck(torch.ops.tkpy.rotary.default, (q, k, cos, sin, True, 0, True))

    def fn(q, k):
        a, b = rotary(q, k, cos, sin, position_offset=3)
        return a.float().pow(2).sum() + b.float().sum()
    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k).backward()
    compiled = [q.grad, k.grad]
    eager = [t.detach().clone().requires_grad_() for t in (q, k)]
    fn(*eager).backward()
    assert all(torch.equal(a, b.grad) for a, b in zip(compiled, eager))
    torch._dynamo.reset()


def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("args,match", [
    ((torch.zeros(1, 4, 2, 64), torch.zeros(1, 4, 2, 64), *tables(8, 64)), "bf16 or fp16"),
    ((_bf16(4, 2, 64), _bf16(4, 2, 64), *tables(8, 64)), r"\(batch, seq, heads, head_dim\)"),
    ((_bf16(1, 4, 2, 64), _bf16(1, 5, 2, 64), *tables(8, 64)), "k must have q's batch, seq"),
    ((_bf16(1, 4, 2, 64), _bf16(1, 4, 2, 64), *tables(8, 128)), "rotary_dim must be a multiple of 16 up to head_dim"),
    ((_bf16(1, 4, 2, 64), _bf16(1, 4, 2, 64), *tables(8, 40)), "rotary_dim must be a multiple of 16"),
    ((_bf16(1, 4, 2, 40), _bf16(1, 4, 2, 40), *tables(8, 32)), "head_dim must be a multiple of 16"),
    ((_bf16(1, 4, 2, 64), _bf16(1, 4, 2, 64), *tables(4, 64, torch.float16)), "float32 or q's dtype"),
])
def test_bad_inputs_are_explained_before_any_kernel_runs(args, match):
    with pytest.raises(ValueError, match=match):
        rotary(*args)


def test_positions_past_the_tables_are_refused():
    with pytest.raises(ValueError, match=r"positions 6..9 .* must lie in cos and sin's 8 rows"):
        rotary(_bf16(1, 4, 2, 64), _bf16(1, 4, 1, 64), *tables(8, 64), position_offset=6)
