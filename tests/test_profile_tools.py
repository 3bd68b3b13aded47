"""The profiling scripts' CPU parts: ncu_memory's case syntax and profile_cases' compiled peers (the functions
torch.compile compiles, here run eagerly), which must take the arguments memory_case gives tkpy's ops."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks import profile_cases
from benchmarks.ncu_memory import case_of, gap_cases


def test_a_case_names_its_op_direction_shape_and_implementation():
    assert case_of("rms:fwd", 16384, 4096) == ("rms", "fwd", 16384, 4096, "tkpy")
    assert case_of("softmax_f32:bwd:32768x2048", 16384, 4096) == ("softmax_f32", "bwd", 32768, 2048, "tkpy")
    assert case_of("layer+residual:bwd:4096x16384:compile", 1, 1) == ("layer+residual", "bwd", 4096, 16384, "compile")
    assert case_of("swiglu:fwd:compile", 8, 512) == ("swiglu", "fwd", 8, 512, "compile")


def test_the_gaps_are_the_cases_below_the_copy_or_behind_compile():
    rows = [dict(op="rms", direction="forward", rows=65536, width=1024, tkpy=3.9, copy=4.1, compile=4.0),
            dict(op="softmax f32", direction="backward", rows=8, width=512, tkpy=3.0, copy=4.0, compile=2.0),
            dict(op="layer", direction="backward", rows=8, width=512, tkpy=3.8, copy=4.0, compile=3.0),
            dict(op="cross_entropy", direction="forward+backward", rows=4, width=64, tkpy=3.8, copy=4.0, compile=3.9),
            dict(op="rotary", direction="backward", rows=8, width=2048, tkpy=3.0, copy=4.0, compile=None)]
    assert gap_cases(rows) == ["rms:fwd:65536x1024", "rms:fwd:65536x1024:compile", "softmax_f32:bwd:8x512",
                               "cross_entropy:f+b:4x64", "cross_entropy:f+b:4x64:compile", "rotary:bwd"]
    assert [case_of(c, 1, 1)[:4] for c in gap_cases(rows)[:1]] == [("rms", "fwd", 65536, 1024)]


def test_the_compiled_peers_compute_torchs_functions(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic=False: fn)
    ops = profile_cases.compiled_peers()
    x, r, w, b = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), torch.randn(64)
    y, h = ops.rms_norm(x, (64,), w, 1e-6, residual=r)
    assert torch.equal(h, x + r) and torch.allclose(y, F.rms_norm(x + r, (64,), w, 1e-6))
    assert torch.allclose(ops.layer_norm(x, (64,), w, b, 1e-5), F.layer_norm(x, (64,), w, b, 1e-5))
    assert torch.allclose(ops.swiglu(x, r), F.silu(x) * r) and torch.allclose(ops.softmax(x), x.softmax(-1))
    t = torch.randint(0, 64, (4,))
    assert torch.allclose(ops.cross_entropy(x, t), F.cross_entropy(x, t))


@pytest.mark.parametrize("op", ["copy", "rotary"])
def test_ops_without_a_compiled_peer_say_so(op):
    with pytest.raises(SystemExit, match="no compiled peer"):
        profile_cases.memory_case(op, "fwd", "16", "64", "compile")
