"""tk.autotune on the CPU: keys, configurations and their errors, pruning, the in-memory and disk caches of winners (a
new process runs the winner without timing), TKPY_AUTOTUNE, the interpreter's first configuration, threads, and the
tensors restored or zeroed around timings. The timing is a stand-in injected as `timer` (autotune_kernels.FakeTimer:
the configurations' milliseconds given, each launch run once on the interpreter); the compiles are NVRTC's, into a
temporary cache directory. tests/test_autotune_gpu.py times on the GPU."""
from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.tune import autotuner

from autotune_kernels import CONFIGS, FakeTimer, grid, run_in_a_process, tuned_twice
from test_examples import load as load_example

@pytest.fixture(autouse=True)
def interpreted(monkeypatch, tmp_path):
    """Launches on the CPU interpreter, compiles into a fresh cache directory, the default TKPY_AUTOTUNE."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKPY_AUTOTUNE", raising=False)


def tensors(rows=64, cols=64):
    x = torch.randn(rows, cols)
    return x, torch.zeros_like(x)


def test_tunes_once_per_key_and_runs_the_winner(capsys):
    timer = FakeTimer(ms=[3.0, 1.0, 2.0, 4.0])
    twice = tuned_twice(timer)
    x, y = tensors()
    twice[grid](x, y)
    assert timer.calls == 4 and twice.best_config == CONFIGS[1]
    assert torch.equal(y, 2 * x)
    report = capsys.readouterr().err
    assert "twice for R=64, C=64, torch.float32, torch.float32 on Fake GPU (4 SMs)" in report
    assert "* tk.Config(W=32, warps=1): 1.0000 ms" in report
    assert "pin it: @tk.autotune(configs=[tk.Config(W=32, warps=1)], key=['R', 'C'])" in report
    twice[grid](x, y)                                     # the same key: in memory, nothing timed
    assert timer.calls == 4
    x2, y2 = tensors(128, 64)                             # a new key: tuned
    twice[lambda m: (128 // (16 * m["warps"]), 64 // m["W"])](x2, y2)
    assert timer.calls == 8 and torch.equal(y2, 2 * x2)


def test_the_key_reads_dims_shapes_and_values_and_every_dtype():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", "C"], y: tk.gl[bf16, "R", 32], n: int, D: tk.constexpr):
        pass
    tuner = tk.autotune(configs=[tk.Config(D=16)], key=["C", "y", "n"])(k)
    x, y = torch.zeros(16, 48), torch.zeros(16, 32, dtype=torch.bfloat16)
    assert tuner._shape_of().key((x, y, 7)) == (48, (16, 32), 7, torch.float32, torch.bfloat16, x.device)


def raised_at(error, line: int) -> str:
    """The error's message, checked to name this file and `line` as its place."""
    text = str(error.value)
    assert text.startswith(f"{__file__}:{line}: "), text
    return text


def test_misuse_names_the_users_line():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", "C"], D: tk.constexpr):
        pass
    with pytest.raises(tk.ArgumentError) as e:
        line = sys._getframe().f_lineno + 1
        tk.autotune(configs=[tk.Config(D=16)], key=["Q"])(k)
    assert "key 'Q' is neither a parameter of kernel k (x) nor one of its dims (R, C)" in raised_at(e, line)
    with pytest.raises(tk.ArgumentError) as e:
        line = sys._getframe().f_lineno + 1
        tk.autotune(configs=[tk.Config(D=16)], key=["D"])(k)
    assert "key 'D' is set by the configurations" in raised_at(e, line)
    line = sys._getframe().f_lineno + 1
    bad = tk.Config(E=16, stages=2)
    with pytest.raises(tk.ArgumentError) as e:
        tk.autotune(configs=[bad], key=[])(k)
    assert ("tk.Config(E=16, stages=2): kernel k has no constexpr parameter or option 'E', 'stages' (constexprs: D; "
            "options: warps, cluster, blocks_per_sm, fast_division)") in raised_at(e, line)
    with pytest.raises(tk.ArgumentError, match=r"takes the configurations and the key: @tk.autotune\(configs="):
        tk.autotune(k)
    with pytest.raises(tk.ArgumentError, match="values are ints"):
        tk.Config(D=[16])
    with pytest.raises(tk.ArgumentError, match="must set the same arguments"):
        tk.autotune(configs=[tk.Config(D=16), tk.Config(warps=2)], key=[])(k)
    with pytest.raises(tk.ArgumentError, match="listed twice"):
        tk.autotune(configs=[tk.Config(D=16), tk.Config(D=16)], key=[])(k)
    with pytest.raises(tk.ArgumentError, match="restore_value names 'y', not a tensor parameter of kernel k"):
        tk.autotune(configs=[tk.Config(D=16)], key=[], restore_value=["y"])(k)
    with pytest.raises(tk.ArgumentError) as e:
        line = sys._getframe().f_lineno + 1
        tk.autotune(configs=[tk.Config(D=16, warps=64), tk.Config(D=32)], key=[], timer=FakeTimer())(k)[(1,)](
            torch.zeros(16, 16))
    assert "tk.Config(D=16, warps=64): warps must be an int in 1..32" in raised_at(e, line)
    with pytest.raises(tk.ArgumentError, match="perf_model is not supported"):
        tk.autotune(configs=[tk.Config(D=16)], key=[], prune_configs_by={"perf_model": len})(k)
    tuner = tk.autotune(configs=[tk.Config(D=16)], key=[])(k)
    with pytest.raises(tk.ArgumentError) as e:
        line = sys._getframe().f_lineno + 1
        tuner[(1,)](torch.zeros(16, 16), 16)
    assert "k takes 1 arguments (x; the configurations set D), got 2" in raised_at(e, line)
    with pytest.raises(tk.ArgumentError, match=r"needs a grid: k\[grid\]\(x\)"):
        tuner(torch.zeros(16, 16))


def test_a_configuration_whose_trace_fails_is_pruned_with_the_reason(capsys):
    """1024 shared-memory tiles fail the trace-time check: left out before NVRTC, the reason reported; a
    prune_configs_by hook leaves out another."""
    timer = FakeTimer(ms=[5.0, 1.0])

    @tk.autotune(configs=[tk.Config(N=1), tk.Config(N=2), tk.Config(N=4), tk.Config(N=1024)], key=[], timer=timer,
                 prune_configs_by=lambda configs, args: [c for c in configs if c.keywords["N"] != 4])
    @tk.kernel(warps=1)
    def staged(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"], N: tk.constexpr):
        s = tk.st(f32, 16, 16, count=N)
        t = tk.rt(f32, 16, 16)
        tk.load(s[0], x, (0, 0))
        tk.sync()
        tk.load(t, s[0])
        tk.store(y, t, (0, 0))
    x, y = tensors(16, 16)
    staged[(1,)](x, y)
    assert timer.calls == 2 and staged.best_config == tk.Config(N=2) and torch.equal(x, y)
    report = capsys.readouterr().err
    assert "tk.Config(N=4): pruned by prune_configs_by" in report
    assert "tk.Config(N=1024): pruned: TraceError: " in report and "shared memory over-subscribed" in report


def test_template_options_and_their_pruning(capsys):
    """A template's decorator options as configurations (examples/gemm.py's Matmul: 48 KB stages); stages that do
    not fit raise at the variant (the template's shared-memory check) and are pruned."""
    timer = FakeTimer(ms=[2.0, 1.0], run=False)
    matmul = tk.autotune(configs=[tk.Config(stages=2), tk.Config(stages=4), tk.Config(stages=5)], key=["M", "N", "K"],
                         timer=timer)(load_example("gemm").Matmul)
    a, b = torch.randn(128, 128).to(torch.bfloat16), torch.randn(128, 256).to(torch.bfloat16)
    c = torch.zeros(128, 256, dtype=torch.bfloat16)
    matmul(a, b, c)
    assert timer.calls == 2 and matmul.best_config == tk.Config(stages=4)
    assert matmul.variant(matmul.best_config).stages == 4
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2 ** -7, atol=1e-2)
    assert "tk.Config(stages=5): pruned: TraceError" in capsys.readouterr().err
    with pytest.raises(tk.ArgumentError, match="has no option 'BN'.*autotune a function that makes the template"):
        tk.autotune(configs=[tk.Config(BN=128)], key=[])(matmul.variant(tk.Config()))
    with pytest.raises(tk.ArgumentError, match=r"Matmul is a template: call it as Matmul\(\*tensors\)"):
        matmul[(1,)]


def test_a_factory_makes_each_configuration():
    timer = FakeTimer(ms=[2.0, 1.0])

    @tk.autotune(configs=[tk.Config(width=16), tk.Config(width=32)], key=["C"], timer=timer)
    def make(width):
        @tk.kernel(warps=1, name=f"copy{width}")
        def copy(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"]):
            t = tk.rt(f32, 16, width)
            tk.load(t, x, (tk.block_idx.x, tk.block_idx.y))
            tk.store(y, t, (tk.block_idx.x, tk.block_idx.y))
        return copy
    x, y = tensors(32, 64)
    make[lambda meta: (2, 64 // meta["width"])](x, y)
    assert make.best_config == tk.Config(width=32) and torch.equal(x, y)
    assert make.variant(make.best_config).name == "copy32"
    with pytest.raises(tk.ArgumentError, match=r"make\(width\) cannot take it"):
        tk.autotune(configs=[tk.Config(height=16)], key=[])(make.target.fn)


def run_twice_in_a_process(env: dict) -> str:
    return run_in_a_process("cpu", env).stdout.strip()


def test_a_new_process_runs_the_winner_from_disk_without_timing(tmp_path):
    env = {"TKPY_INTERPRET": "1", "TKPY_CACHE_DIR": str(tmp_path / "shared-cache")}
    assert run_twice_in_a_process(env) == "timed=4 best=tk.Config(W=32, warps=1) error=0.0"
    assert run_twice_in_a_process(env) == "timed=0 best=tk.Config(W=32, warps=1) error=0.0"
    assert run_twice_in_a_process({**env, "TKPY_AUTOTUNE": "force"}).startswith("timed=4 ")
    assert run_twice_in_a_process({**env, "TKPY_AUTOTUNE": "0"}) == "timed=0 best=tk.Config(W=16, warps=1) error=0.0"
    (record,) = (tmp_path / "shared-cache").rglob("autotune/*/*.json")
    payload = json.loads(record.read_text())["payload"]
    assert payload["gpu"] == "Fake GPU" and payload["sms"] == 4 and payload["config"] == "tk.Config(W=32, warps=1)"


def test_only_records_tkpy_wrote_are_read(tmp_path):
    """A record edited by hand (its MAC no longer matches) or readable by other users is a miss: tuned again."""
    x, y = tensors()
    tuned_twice(FakeTimer())[grid](x, y)
    (record,) = Path(os.environ["TKPY_CACHE_DIR"]).rglob("autotune/*/*.json")
    data = json.loads(record.read_text())
    data["payload"]["winner"], data["payload"]["config"] = 0, repr(CONFIGS[0])
    record.write_text(json.dumps(data))
    timer = FakeTimer(ms=[1.0, 2.0, 3.0, 4.0])
    tuned_twice(timer)[grid](x, y)
    assert timer.calls == 4                     # the edited record was not believed
    os.chmod(record, 0o644)
    timer = FakeTimer()
    tuned_twice(timer)[grid](x, y)
    assert timer.calls == 0                     # (readable is fine: written by us, writable by no one else)
    os.chmod(record, 0o666)
    timer = FakeTimer()
    tuned_twice(timer)[grid](x, y)
    assert timer.calls == 4


def test_autotune_0_runs_the_first_configuration_and_force_retunes(monkeypatch):
    x, y = tensors()
    tuned_twice(FakeTimer())[grid](x, y)                    # a winner on disk: W=32
    monkeypatch.setenv("TKPY_AUTOTUNE", "0")
    timer = FakeTimer()
    twice = tuned_twice(timer)
    twice[grid](x, y)
    assert timer.calls == 0 and twice.best_config == CONFIGS[0] and torch.equal(y, 2 * x)
    monkeypatch.setenv("TKPY_AUTOTUNE", "force")
    timer = FakeTimer(ms=[1.0, 2.0, 3.0, 4.0])
    twice = tuned_twice(timer)
    twice[grid](x, y)
    assert timer.calls == 4 and twice.best_config == CONFIGS[0]
    monkeypatch.setenv("TKPY_AUTOTUNE", "sometimes")
    with pytest.raises(ValueError, match="TKPY_AUTOTUNE must be 1 .*, 0 .* or force"):
        tuned_twice(FakeTimer())[grid](x, y)


def test_without_a_gpu_the_first_configuration_runs_and_a_warning_says_so_once():
    """The default timer under TKPY_INTERPRET=1: nothing compiled or timed, one warning naming the call's line."""
    twice = tuned_twice(None)
    x, y = tensors()
    with pytest.warns(tk.AutotuneWarning, match=r"TKPY_INTERPRET=1 .*runs the first configuration "
                                                r"tk.Config\(W=16, warps=1\)") as caught:
        twice[grid](x, y)
        twice[lambda m: (2, 2)](*tensors(32, 32))
    assert len(caught) == 1 and caught[0].filename == __file__
    assert twice.best_config == CONFIGS[0] and torch.equal(y, 2 * x)
    assert tk.tune.GpuTimer().unavailable() is not None


def test_threads_tune_a_key_once():
    timer = FakeTimer(pause_s=0.05)
    twice = tuned_twice(timer)
    start, results = threading.Barrier(6), [None] * 6

    def call(i):
        x, y = tensors()
        start.wait()
        twice[grid](x, y)
        results[i] = (twice.best_config, torch.equal(y, 2 * x))
    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert timer.calls == 4 and results == [(CONFIGS[1], True)] * 6


def accumulating(timer, **options):
    @tk.autotune(configs=[tk.Config(warps=1), tk.Config(warps=2)], key=[], timer=timer, **options)
    @tk.kernel(warps=1)
    def accumulate(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"]):
        t, u = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        row = tk.block_idx.x * tk.num_warps() + tk.warp_id()
        tk.load(t, x, (row, 0))
        tk.load(u, y, (row, 0))
        tk.add(u, u, t)
        tk.store(y, u, (row, 0))
    return accumulate


@pytest.mark.parametrize("option", ["restore_value", "reset_to_zero", None])
def test_tensors_the_kernel_writes_are_restored_or_zeroed(option):
    """y += x: each timing runs it (once, here); restore_value gives the call y as it was, reset_to_zero zeros."""
    timer = FakeTimer(ms=[2.0, 1.0])
    accumulate = accumulating(timer, **({option: ["y"]} if option else {}))
    x, y0 = torch.randn(32, 16), torch.randn(32, 16)
    y = y0.clone()
    accumulate[lambda meta: (2 // meta["warps"],)](x, y)
    expected = {"restore_value": y0 + x, "reset_to_zero": x, None: y0 + 3 * x}[option]
    torch.testing.assert_close(y, expected)


def test_the_mode_switch_reads_the_environment(monkeypatch):
    for value, mode in (("1", "tune"), ("", "tune"), ("0", "first"), ("off", "first"), ("force", "force")):
        monkeypatch.setenv("TKPY_AUTOTUNE", value)
        assert autotuner.mode() == mode


def test_a_progress_bar_on_a_terminal_only(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        x, y = tensors()
        tuned_twice(FakeTimer(), cache=False)[grid](x, y)
        text = stream.getvalue()
        assert ("twice: compiling" in text and "twice: timing" in text) == shown and "pin it:" in text
