"""tk.autotune on the GPU (skipped without one): a kernel of four configurations tunes once, timed by the GPU timer
(the median of CUDA-graph replays), prints its winner and the line that pins it, and runs it; a new process reads
the winner from the disk cache and times nothing."""
from __future__ import annotations

import torch

import gpu_util
from autotune_kernels import CONFIGS, CountingTimer, grid, run_in_a_process, tuned_twice

pytestmark = gpu_util.requires_gpu


def test_tunes_once_then_a_new_process_reuses_the_winner(tmp_path):
    env = {"TKPY_CACHE_DIR": str(tmp_path / "cache"), "TKPY_INTERPRET": "0", "TKPY_AUTOTUNE": "1"}
    first = run_in_a_process("cuda", env)
    assert first.stdout.startswith("timed=4 best=tk.Config(") and first.stdout.strip().endswith("error=0.0")
    assert f"on {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).multi_processor_count} SMs)" \
        in first.stderr and "pin it: @tk.autotune(configs=[tk.Config(" in first.stderr
    second = run_in_a_process("cuda", env)
    assert second.stdout.replace("timed=0", "timed=4") == first.stdout and "pin it" not in second.stderr


def test_tuning_in_this_process_times_each_configuration_and_keeps_the_inputs(monkeypatch, tmp_path):
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKPY_AUTOTUNE", raising=False)
    timer = CountingTimer()
    twice = tuned_twice(timer)
    x = torch.randn(64, 64, device="cuda")
    y = gpu_util.poisoned(64, 64, dtype=torch.float32)
    twice[grid](x, y)
    torch.cuda.synchronize()
    assert timer.calls == len(CONFIGS) and twice.best_config in CONFIGS
    assert torch.equal(y, 2 * x)
    twice[grid](x, y)
    assert timer.calls == len(CONFIGS)
