"""tk.QuickFirstCall and runtime.background: a first call on a cold cache runs the quick plan while the tuned one
compiles on a background thread, and the tuned plan once it has; the cases where the first call waits instead.
NVRTC runs here (no GPU needed): the plans are real kernels' compiles."""
from __future__ import annotations

import threading

import pytest
import torch

import tkpy as tk
from tkpy.frontend.kernel import compile_only
from tkpy.runtime import background, clear_memo, nvrtc

from gpu_util import on_gpu


def plus(value: float, name: str):
    """A small kernel of its own name (its own cache entry): y = x + value over 16 x 64 fp32 tiles a warp."""
    @tk.kernel(warps=1, name=name)
    def add(x: tk.gl[tk.f32, "R", 64], y: tk.gl[tk.f32, "R", 64]):
        t = tk.rt(tk.f32, 16, 64)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.add(t, t, value)
        tk.store(y, t, (tk.block_idx.x, 0))
    return add


@pytest.fixture
def cold(monkeypatch, tmp_path):
    """An empty disk cache and memo; NVRTC's runs recorded as (kernel name, thread name)."""
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKPY_QUICK_FIRST_CALL", raising=False)
    clear_memo()
    runs = []
    real = nvrtc._run_nvrtc

    def recorded(source, name, opts, arch):
        runs.append((name, threading.current_thread().name))
        return real(source, name, opts, arch)
    monkeypatch.setattr(nvrtc, "_run_nvrtc", recorded)
    yield runs
    background.wait()
    clear_memo()


def plans(tag: str):
    """(tuned, quick): functions compiling kernels tuned_TAG / quick_TAG for a 64 x 64 input and returning names."""
    x = torch.empty(64, 64)
    tuned_kernel, quick_kernel = plus(1.0, f"tuned_{tag}"), plus(2.0, f"quick_{tag}")

    def tuned():
        tuned_kernel.compile(x, x)
        return "tuned"

    def quick():
        quick_kernel.compile(x, x)
        return "quick"
    return tuned, quick


def test_a_cold_first_call_runs_quick_while_the_tuned_plan_compiles_in_the_background(cold):
    first = tk.QuickFirstCall("test")
    tuned, quick = plans("cold")
    assert first.pick("key", tuned, quick) == ("quick", False)
    main = threading.current_thread().name
    assert ("quick_cold", main) in cold and ("tuned_cold", main) not in cold
    assert tk.wait_for_compiles(timeout=120)
    assert [name for name, thread in cold if thread != main] == ["tuned_cold"]
    assert first.pick("key", tuned, quick) == ("tuned", True)
    assert len(cold) == 2                       # the tuned plan's kernel found compiled: no NVRTC run again


@pytest.mark.parametrize("launch", [True, False], ids=["after the launch", "after the wait"])
def test_the_background_compile_starts_after_the_callers_launch(cold, monkeypatch, launch):
    """The tuned plan's compile waits for the caller's next launch (runtime.background.launched, which a kernel's
    first launch calls) so that its trace does not take the GIL from the quick plan's; without a launch it starts
    after LAUNCH_WAIT_S."""
    monkeypatch.setattr(background, "LAUNCH_WAIT_S", 60 if launch else 0.05)
    first = tk.QuickFirstCall("test")
    tuned, quick = plans(f"launch_{launch}")
    callers = []

    def watched():
        callers.append(threading.current_thread().name)
        return tuned()
    main = threading.current_thread().name
    assert first.pick("key", watched, quick) == ("quick", False) and callers == [main]   # (the probe)
    if launch:
        threading.Event().wait(0.2)
        assert callers == [main]                # not started: no launch yet
        background.launched()
    assert tk.wait_for_compiles(timeout=120)
    assert len(callers) == 2 and callers[1] != main


def test_a_warm_cache_runs_the_tuned_plan_at_once(cold):
    tuned, quick = plans("warm")
    tuned()                                     # (compiled: in the memo and the disk cache)
    cold.clear()
    assert tk.QuickFirstCall("test").pick("key", tuned, quick) == ("tuned", True)
    assert cold == []                           # neither compiled nor the quick plan made


def test_calls_while_the_tuned_plan_compiles_share_one_background_compile(cold):
    first = tk.QuickFirstCall("test")
    tuned, quick = plans("shared")
    picks = []
    threads = [threading.Thread(target=lambda: picks.append(first.pick("key", tuned, quick))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    background.wait()
    assert sorted({name for name, _ in cold}) == ["quick_shared", "tuned_shared"]
    assert [name for name, _ in cold].count("tuned_shared") == 1
    assert all(p in (("quick", False), ("tuned", True)) for p in picks)


@pytest.mark.parametrize("why", ["environment", "deterministic", "compile_only", "no quick plan"])
def test_the_first_call_waits_for_the_tuned_plan(cold, monkeypatch, why):
    tuned, quick = plans(f"wait_{why.replace(' ', '_')}")
    first = tk.QuickFirstCall("test")
    if why == "environment":
        monkeypatch.setenv("TKPY_QUICK_FIRST_CALL", "0")
    if why == "deterministic":
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    if why == "compile_only":
        with compile_only():
            assert first.pick("key", tuned, quick) == ("tuned", True)
    else:
        assert first.pick("key", tuned, None if why == "no quick plan" else quick) == ("tuned", True)
    main = threading.current_thread().name
    assert [thread for _, thread in cold] == [main]         # compiled here, the quick plan never made


def test_a_call_that_may_not_take_the_quick_plan_joins_the_background_compile(cold, monkeypatch):
    first = tk.QuickFirstCall("test")
    tuned, quick = plans("join")
    assert first.pick("key", tuned, quick) == ("quick", False)
    monkeypatch.setenv("TKPY_QUICK_FIRST_CALL", "0")        # e.g. a CUDA graph captured now
    assert first.pick("key", tuned, quick) == ("tuned", True)
    assert [name for name, _ in cold].count("tuned_join") == 1


def test_a_tuned_plan_that_fails_raises_on_the_callers_thread(cold):
    first = tk.QuickFirstCall("test")
    _, quick = plans("fails")
    broken = plus(1.0, "broken_tuned")

    def tuned():
        broken.compile(torch.empty(64, 64), torch.empty(64, 64))
        raise RuntimeError("the tuned plan's own error")
    assert first.pick("key", tuned, quick) == ("quick", False)
    background.wait()
    with pytest.raises(RuntimeError, match="the tuned plan's own error"):
        first.pick("key", tuned, quick)


def test_refusing_waits_raises_on_a_miss_and_returns_a_hit(cold):
    kernel, x = plus(3.0, "refusing"), torch.empty(64, 64)
    with background.refusing_waits():
        with pytest.raises(tk.CompilePending, match="refusing"):
            kernel.compile(x, x)
    assert cold == []
    kernel.compile(x, x)
    with background.refusing_waits():
        kernel.compile(x, x)                    # a hit: no error, no NVRTC run
    assert len(cold) == 1
    assert not background.waits_refused()


# -- on the GPU: attention() and matmul() in a new process with an empty cache --------------------------------------

FIRST_CALLS_SCRIPT = r'''
import json, sys
import torch
import tkpy as tk
import tkpy.kernels as kernels
from tkpy.kernels import attention_forward, gemm

torch.manual_seed(0)
out = {}
q, k, v = (torch.randn(2, 16, 1024, int(sys.argv[1]), dtype=torch.bfloat16, device="cuda") for _ in range(3))
ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
a, b = torch.randn(2048, 1024, dtype=torch.bfloat16, device="cuda"), torch.randn(1024, 2048, dtype=torch.bfloat16, device="cuda")
ref_mm = a.double() @ b.double()
for name, call, reference, plans in (
        ("attention", lambda: kernels.attention(q, k, v, causal=True), ref, attention_forward._FORWARD_PLANS),
        ("matmul", lambda: kernels.matmul(a, b), ref_mm, gemm._CALLS)):
    errors = [(call().double() - reference).abs().max().item()]
    (plan,) = plans.values()
    tuned = getattr(plan, "chosen", None) or getattr(plan, "launch", None)
    out[name] = {"first_tuned": tuned is not None}
    tk.wait_for_compiles()
    errors.append((call().double() - reference).abs().max().item())
    out[name]["then_tuned"] = (getattr(plan, "chosen", None) or getattr(plan, "launch", None)) is not None
    out[name]["errors"] = errors
torch.cuda.synchronize()
print(json.dumps(out))
'''


@pytest.mark.parametrize("d", [64, 128])
@on_gpu
def test_gpu_cold_first_calls_run_quick_kernels_then_the_tuned_ones(tmp_path, d):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TKPY_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TKPY_QUICK_FIRST_CALL", None)
    done = subprocess.run([sys.executable, "-c", FIRST_CALLS_SCRIPT, str(d)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name, bound in (("attention", 0.02), ("matmul", 0.5)):      # bf16 outputs (matmul: K = 1024 sums)
        assert out[name]["first_tuned"] is False, out       # a cold cache: the quick kernel ran first
        assert out[name]["then_tuned"] is True, out
        assert max(out[name]["errors"]) < bound, out


@on_gpu
@pytest.mark.parametrize("d", [64, 80, 128, 256])
@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
@pytest.mark.parametrize("n, nk", [(1024, 1024), (333, 517)])
def test_gpu_the_quick_attention_kernels_match_the_reference(d, causal, n, nk):
    """attention()'s quick first-call kernels (QUICK_FIRST_CALL's options), on poisoned outputs, with the log-sum-exp
    and without."""
    from gpu_util import poisoned
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels.attention_policy import lse_rows, quick_first_call_options
    torch.manual_seed(d + n)
    q = torch.randn(2, 8, n, d, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(2, 4, nk, d, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    groups = max(2, att.consumer_warpgroups_for(2, 8, n, d, torch.cuda.get_device_properties(0).multi_processor_count,
                                                causal is not False))       # (one warpgroup: no quick kernel)
    mask = None
    if causal:
        offset = 0 if causal == "top_left" else nk - n
        mask = torch.arange(nk, device="cuda")[None, :] <= torch.arange(n, device="cuda")[:, None] + offset
    kk, vv = (x.double().repeat_interleave(2, dim=1) for x in (k, v))
    scores = q.double() @ kk.transpose(-1, -2) / d ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    seen = torch.isfinite(scores).any(-1, keepdim=True)
    ref = torch.where(seen, torch.softmax(scores, -1).nan_to_num(0.0) @ vv, 0.0)
    for with_lse in (False, True):
        o = poisoned(2, 8, n, d, dtype=torch.bfloat16)
        lse = poisoned(2, 8, lse_rows(n, groups), dtype=torch.float32) if with_lse else None
        att._launch(q, k, v, o, lse, causal or False, None, consumer_warpgroups=groups,
                    **quick_first_call_options(d, groups, 1))
        assert (o.double() - ref).abs().max().item() < 2e-2
        if with_lse:
            ref_lse = torch.logsumexp(scores, -1)
            got = lse[..., :n].double()
            assert torch.equal(torch.isinf(got), torch.isinf(ref_lse))
            finite = torch.isfinite(ref_lse)
            assert (got[finite] - ref_lse[finite]).abs().max().item() < 1e-3


def test_importing_tkpy_loads_nvrtc_on_a_background_thread_once():
    """`import tkpy` starts the NVRTC library's load on a daemon thread (nvrtc.preload), which the first compile then
    finds done; a second preload starts nothing."""
    if tk.interpret_requested():
        pytest.skip("TKPY_INTERPRET=1: tkpy's import loads no NVRTC")
    thread = nvrtc._preloading
    assert thread is not None and thread.daemon and thread.name == "tkpy-nvrtc-load"
    thread.join(60)
    assert nvrtc._versions.get("loaded") == nvrtc.loaded_version()
    nvrtc.preload()
    assert nvrtc._preloading is thread
