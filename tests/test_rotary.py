"""tkpy.kernels.rotary in the CPU interpreter (TKPY_INTERPRET=1): q and k (GQA head counts) rotated, half-split
(GPT-NeoX) and interleaved (GPT-J), partial rotary dims, position offsets, fp32 and 16-bit tables, head dims that
divide 256 (rows in pieces) and that do not (groups of heads), strided and transposed inputs, against float64 on
every element with outputs poisoned (the launch on NaN-filled outputs), and the gradients (the rotation by -theta);
opcheck, torch.compile(fullgraph), the errors; the policy's choices and its kernels compiling without spills (NVRTC).
On the GPU: tests/test_gpu_rotary.py. Tolerances: tests/test_norms.py's assert_close."""
from __future__ import annotations

import pytest
import torch

import gpu_util
from test_norms import assert_close
from tkpy.kernels import rotary, rotary_kernel, rotary_policy
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
          table=torch.float32, device="cpu", layout=None):
    """The rotation, its gradients and a launch on poisoned outputs against float64. `layout`: q and k as views of
    other tensors: "fused" (slices of one (batch, seq, heads_q + 2 heads_k, head_dim) projection: strided rows, read
    in place) or "heads_first" ((batch, heads, seq, head_dim) tensors transposed: copied)."""
    cos, sin = tables(offset + seq + 3, rotary_dim, table, device)
    q, k = (_input(batch, seq, h, head_dim, dtype, device, layout) for h in (heads_q, heads_k))
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


def _input(batch, seq, heads, head_dim, dtype, device, layout):
    if layout == "fused":
        return gpu_util.rand(batch, seq, heads + 3, head_dim, dtype=dtype, device=device)[:, :, 1:heads + 1] \
            .requires_grad_()
    if layout == "heads_first":
        return gpu_util.rand(batch, heads, seq, head_dim, dtype=dtype, device=device).transpose(1, 2) \
            .requires_grad_()
    return gpu_util.rand(batch, seq, heads, head_dim, dtype=dtype, device=device).requires_grad_()


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotation_and_gradients_match_float64(interleaved, dtype):
    check(3, 7, 4, 2, 64, 64, dtype, interleaved)   # GQA, two positions a warp and a last one alone


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
def test_partial_rotary_dim_offset_and_16_bit_tables(interleaved):
    check(1, 3, 3, 1, 96, 32, interleaved=interleaved, offset=37, table=torch.bfloat16)   # decoding-like


@pytest.mark.parametrize("case", [
    (1, 3, 12, 4, 128, 64, torch.float16, False, 2, torch.float16),   # pieces of 2 chunks, 2 at once, the last alone
    (2, 2, 5, 5, 128, 128, torch.bfloat16, True, 0, torch.float32),   # a row of 2.5 chunks in one masked piece
    (1, 3, 6, 2, 80, 48, torch.bfloat16, False, 1, torch.float32),    # groups of 3 and of 2 heads of 80 a chunk
    (2, 2, 4, 2, 96, 96, torch.bfloat16, True, 0, torch.bfloat16),    # groups of 2 heads of 96
    (1, 2, 2, 1, 256, 128, torch.bfloat16, False, 0, torch.float32),  # a head of a chunk, half rotated
    (2, 3, 4, 1, 16, 16, torch.float16, True, 5, torch.float32),      # 16 heads a chunk, a narrow row
], ids=lambda c: f"d{c[4]}r{c[5]}h{c[2]}k{c[3]}")
def test_head_dims_pieces_and_groups(case):
    check(*case)


@pytest.mark.parametrize("layout", ["fused", "heads_first"])
def test_strided_and_transposed_inputs(layout):
    check(2, 3, 4, 2, 64, 32, layout=layout)


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


# The policy's choices: (head_dim, rotary_dim, heads_q, heads_k) -> the kernel's name (bf16, fp32 tables, neox)
POLICY = {
    (128, 128, 32, 8): "rotary_neox_bf16_tf32_d128r128_h32k8_c4p1w8b4_onestep",  # the benchmark's: pieces of 4 chunks
    (64, 64, 32, 8): "rotary_neox_bf16_tf32_d64r64_h32k8_c4p1w8b4_onestep",  # pieces of 2 (k's row), 2 at once
    (128, 64, 32, 1): "rotary_neox_bf16_tf32_d128r64_h32k1_c4p1w8b4_onestep",  # pieces of a chunk, 4 at once
    (256, 256, 16, 16): "rotary_neox_bf16_tf32_d256r256_h16k16_c4p1w8b4_onestep",
    (64, 64, 4, 1): "rotary_neox_bf16_tf32_d64r64_h4k1_c1p2w8b4",  # a chunk a row: 2 positions at once
    (128, 128, 4, 1): "rotary_neox_bf16_tf32_d128r128_h4k1_c2p1w8b4",
    (96, 96, 32, 8): "rotary_neox_bf16_tf32_d96r96_h32k8_c4p1w8b4_onestep",  # groups of 2 heads, 4 at once
    (80, 32, 32, 32): "rotary_neox_bf16_tf32_d80r32_h32k32_c4p1w8b4_onestep",
}


def check_one_step_grid(device="cpu"):
    """persistent=False (a warp for every group of positions, no loop), both ways, on poisoned outputs."""
    cos, sin = tables(40, 64, device=device)
    q, k = (gpu_util.rand(2, 37, h, 128, dtype=torch.bfloat16, device=device) for h in (4, 2))
    for positions in (1, 2):
        for inverse in (False, True):
            outs = [gpu_util.poisoned(*t.shape, dtype=torch.bfloat16, device=device) for t in (q, k)]
            rotary_module.launch(q, k, cos, sin, False, 1, inverse, *outs,
                                 options=dict(persistent=False, positions=positions))
            for x, out in zip((q, k), outs):
                assert_close(out, reference(x, cos, sin, False, 1, inverse=inverse), "one step")


def test_a_warp_for_every_group_of_positions():
    check_one_step_grid()


def test_the_policys_choices_and_their_kernels():
    """The choices are the record's; each compiles (NVRTC) without spills under its register cap."""
    for (d, r, hq, hk), name in POLICY.items():
        c = rotary_policy.config_for(d, r, hq, hk, "bf16", "f32", False)
        assert c.name == name
        q, k = (torch.empty(8 * h // c.group(h), c.width(h), dtype=torch.bfloat16) for h in (hq, hk))
        cos = torch.empty(8, r // 2)
        res = rotary_kernel.rotary_kernel(c).resources(q, k, cos, cos, q, k)
        assert res.found and res.spill_stores == res.spill_loads == 0, (name, res.summary())
    assert all(row.evidence for _, row in rotary_policy.TABLE)
