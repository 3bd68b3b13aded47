"""`python -m tkpy.warmup` on the CPU: specs parsed (and refused with the reason), the operators' kernels compiled
into a temporary cache directory on meta tensors with nothing launched, the entries the ones a call on real
tensors looks up, and a second warm-up finding them all cached; compile_only() itself."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy import warmup
from tkpy.frontend import kernel as kernel_module
from tkpy.frontend.kernel import compile_only
from tkpy.kernels.softmax_kernel import forward_kernel
from tkpy.kernels.softmax_policy import config_for
from tkpy.kernels.warmup import OPS
from tkpy.runtime import cache

ROOT = Path(__file__).resolve().parent.parent
SPECS = ["softmax:256x64:train", "matmul:256x512x128:wt:gelu", "attention:1x2x128x64:causal"]


def test_specs_parse_and_bad_ones_say_why():
    op, dims, flags = warmup.parse("attention:1x32x1x128:kv_heads=8:causal", OPS)
    assert op is OPS["attention"] and dims == [1, 32, 1, 128] and flags == {"kv_heads": "8", "causal": True}
    with pytest.raises(ValueError, match="no operator 'conv'"):
        warmup.parse("conv:3x3", OPS)
    with pytest.raises(ValueError, match=r"dims are MxNxK, e.g. matmul:64x64x64"):
        warmup.parse("matmul:big", OPS)
    with pytest.raises(ValueError, match="matmul has no flag 'causal'"):
        warmup.parse("matmul:64x64x64:causal", OPS)


def run(*args: str, cache_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tkpy.warmup", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "TKPY_CACHE_DIR": str(cache_dir),
                                         "TKPY_INTERPRET": "0"})


def test_warmup_compiles_the_operators_kernels_into_the_cache(tmp_path, monkeypatch):
    first = run(*SPECS, cache_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    head = first.stdout.splitlines()[0]
    assert head.startswith("tkpy warmup: ") and "0 already in" in head
    for name in ("softmax_fwd_bf16_64", "softmax_bwd_bf16_64", "matmul", "attention_fwd_d64"):
        assert f"\n  {name}" in first.stdout, first.stdout
    # The entry a launch on real tensors looks up is there (the meta tensors traced the same specialization).
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path))
    x = torch.empty(64, 256, dtype=torch.bfloat16)               # (256 rows of 64, packed 4 to a kernel row)
    softmax = forward_kernel(config_for("forward", 64, "bf16"))
    key = softmax.compile(x, x).module.key
    assert cache.load(key) is not None
    # ... and its specialization record: a deployment's first call neither traces nor lowers (a new kernel object,
    # as a new process has)
    traces = []
    trace = kernel_module.trace_kernel
    monkeypatch.setattr(kernel_module, "trace_kernel", lambda *a, **k: traces.append(a[1]) or trace(*a, **k))
    assert softmax.variant().compile(x, x).module.key == key and traces == []
    again = run("--file", str(_spec_file(tmp_path)), cache_dir=tmp_path)
    assert again.returncode == 0 and " 0 compiled " in again.stdout.splitlines()[0], again.stdout


def test_warmup_builds_the_native_launcher(tmp_path):
    """The native launcher, built once per machine, lands in the cache with the kernels (a MAC beside it), so that no
    first launch of the deployment starts its build; a second warm-up finds it there."""
    from test_native_launch import native_build_problem

    problem = native_build_problem()
    if problem:
        pytest.skip(f"cannot build the native launcher: {problem}")
    first = run("softmax:256x64", cache_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    (line,) = [x for x in first.stdout.splitlines() if x.startswith("  native launcher: ")]
    path = Path(line.split(": ", 1)[1])
    assert path.parent == tmp_path / "native" and path.is_file() and path.with_name(path.name + ".mac").is_file()
    built = path.stat().st_mtime_ns
    again = run("softmax:256x64", cache_dir=tmp_path)
    assert f"  native launcher: {path}\n" in again.stdout and path.stat().st_mtime_ns == built


def _spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.txt"
    path.write_text("# the same specs, from a file\n" + "\n".join(f"{s}   # a comment" for s in SPECS) + "\n\n")
    return path


def test_the_command_refuses_bad_input(tmp_path):
    done = run("matmul:64x64", cache_dir=tmp_path)
    assert done.returncode != 0 and "matmul:64x64" in done.stderr
    listed = run("--list", cache_dir=tmp_path)
    assert listed.returncode == 0 and "attention:BxHxNxD" in listed.stdout and ":kv_heads" in listed.stdout


def test_compile_only_compiles_launches_instead_of_running_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path))

    @tk.kernel(warps=1)
    def copy(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.store(y, t, (tk.block_idx.x, 0))
    x = torch.empty(64, 16, device="meta")
    with compile_only() as made:
        copy[(4,)](x, x)
        with pytest.raises(RuntimeError, match="do not nest"):
            with compile_only():
                pass
    assert [c.module.kernel_name for c in made] == ["copy"] and cache.load(made[0].module.key) is not None
    with pytest.raises(tk.TkpyError):        # outside the block a launch runs again (no GPU here, no meta tensors)
        copy[(4,)](x, x)
