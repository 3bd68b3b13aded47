"""Helpers for GPU tests: the skip marker, poisoned outputs and error norms."""
from __future__ import annotations

import math
import threading

import pytest
import torch

from tkpy.runtime import gpu_available

requires_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA Hopper (sm_90) GPU with torch CUDA"),
]


def on_gpu(test):
    """requires_gpu's marks on one test (of a module whose other tests run without a GPU)."""
    for mark in requires_gpu:
        test = mark(test)
    return test


def on_gpus(count: int):
    """The marks of a test that needs `count` Hopper GPUs of one host (skipped with fewer)."""
    def mark(test):
        test = on_gpu(test)
        return pytest.mark.skipif(not gpu_available() or torch.cuda.device_count() < count,
                                  reason=f"needs {count} Hopper GPUs")(test)
    return mark


TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}


def poisoned(*shape, dtype, device="cuda") -> torch.Tensor:
    """An output buffer full of NaN, so that any element the kernel fails to write shows up."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def rand(*shape, dtype, low=-2.0, high=2.0, device="cuda") -> torch.Tensor:
    return (torch.rand(*shape, dtype=torch.float64, device=device) * (high - low) + low).to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere in out fails."""
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "output has NaN: some elements were not written"
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def attention_reference(q, k, v, causal=False, scale=None):
    """Explicit softmax(q k^T * scale, masked) v in float64, key/value heads repeated for GQA; causal is False,
    True / "top_left" or "bottom_right"; rows that see no key give 0 and a log-sum-exp of -inf."""
    n, nk, d = q.shape[2], k.shape[2], q.shape[3]
    rep = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(rep, dim=1) for x in (k, v))
    s = q.double() @ k.transpose(-1, -2) * (1 / math.sqrt(d) if scale is None else scale)
    if causal:
        offset = nk - n if causal == "bottom_right" else 0
        keys, queries = torch.arange(nk, device=q.device), torch.arange(n, device=q.device)
        s = s.masked_fill(keys[None] > queries[:, None] + offset, -math.inf)
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, torch.logsumexp(s, -1)


def attention_grads_reference(q, k, v, grad_out, causal=False, scale=None, grad_lse=None, absolute=False):
    """float64 (dq, dk, dv) of attention_reference's output (and log-sum-exp) by the explicit formulas: P as
    attention_reference's (0 in rows that see no key), dV = P^T dO, dS = P * (dO V^T - D) with D = rowsum(dO * O) -
    dlse, dQ = dS K * scale, dK = dS^T Q * scale; dk and dv summed over each key/value head's query heads (GQA).
    absolute=True: the same sums of the terms' absolute values (dS = P * (|dO| |V|^T + sum |dO| |O|)), the scale of
    their rounding errors (where the gradient itself cancels to about 0)."""
    n, nk, d = q.shape[2], k.shape[2], q.shape[3]
    rep = q.shape[1] // k.shape[1]
    q64, do64 = q.detach().double(), grad_out.detach().double()
    k64, v64 = (x.detach().double().repeat_interleave(rep, dim=1) for x in (k, v))
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = q64 @ k64.transpose(-1, -2) * scale
    if causal:
        offset = nk - n if causal == "bottom_right" else 0
        keys, queries = torch.arange(nk, device=q.device), torch.arange(n, device=q.device)
        s = s.masked_fill(keys[None] > queries[:, None] + offset, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    delta = (do64 * (p @ v64)).sum(-1, keepdim=True)
    if grad_lse is not None:
        delta = delta - grad_lse.detach().double()[..., None]
    if absolute:
        delta = (do64.abs() * (p @ v64).abs()).sum(-1, keepdim=True)
        q64, k64, v64, do64, scale = q64.abs(), k64.abs(), v64.abs(), do64.abs(), abs(scale)
        ds = p * (do64 @ v64.transpose(-1, -2) + delta)
    else:
        ds = p * (do64 @ v64.transpose(-1, -2) - delta)
    b, h = q.shape[:2]
    per_kv_head = lambda x: x.view(b, h // rep, rep, *x.shape[2:]).sum(2)     # noqa: E731
    return ds @ k64 * scale, per_kv_head(ds.transpose(-1, -2) @ q64 * scale), per_kv_head(p.transpose(-1, -2) @ do64)


def compiled_grads_match_eager(fn, inputs) -> None:
    """torch.compile(fn, fullgraph=True)'s gradients of its (scalar) output for `inputs` (tensors that require grad)
    equal eager fn's, each within torch.testing.assert_close's tolerance."""
    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True)(*inputs).backward()
    eager = [t.detach().clone().requires_grad_() for t in inputs]
    fn(*eager).backward()
    for a, b in zip(inputs, eager):
        torch.testing.assert_close(a.grad, b.grad)
    torch._dynamo.reset()


def in_fresh_thread(fn) -> None:
    """fn() on a new thread, which has no current CUDA context yet; what it raises is raised here."""
    errors: list[BaseException] = []

    def work():
        try:
            fn()
        except BaseException as e:      # pragma: no cover - re-raised below
            errors.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
