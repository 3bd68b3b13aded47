"""Device correctness on the CPU (issue 36): tensors on different devices are refused before any GPU work, by a
user kernel's launch and by every torch operator of tkpy.kernels, with a message naming the devices; the autotuner
times on its tensors' device. (The launch paths' context switching: tests/test_native_launch.py; the launches on
cuda:0 and cuda:1: tests/test_gpu_devices.py.)

On a CPU machine the two devices at hand are `cpu` and `meta`; under TKPY_INTERPRET=1 the operators take both, so
one argument on `meta` among `cpu` ones stands for a tensor on another GPU."""
from __future__ import annotations

import contextlib

import pytest
import torch

import tkpy as tk
import tkpy.runtime as runtime
from tkpy import f32
from tkpy.frontend import kernel as kernel_module
from tkpy.tune import timer

BF16, F32, FP8 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


def cpu(*shape, dtype=BF16):
    return torch.randn(*shape).to(dtype)


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def axpy_kernel():
    """A fresh kernel (its own caches): y += a x over 16-row tiles, one a block (also tests/test_gpu_devices.py's)."""
    @tk.kernel(warps=1)
    def axpy(x: tk.gl[f32, "N", 16], y: tk.gl[f32, "N", 16], a: float):
        t, u = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.load(u, y, (tk.block_idx.x, 0))
        tk.mul(t, t, a)
        tk.add(u, u, t)
        tk.store(y, u, (tk.block_idx.x, 0))
    return axpy


def test_a_kernel_refuses_tensors_on_two_devices(monkeypatch):
    """The launch names each tensor's device, the fix and the caller's line, before compiling anything."""
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    check = kernel_module.check_tensor
    monkeypatch.setattr(kernel_module, "check_tensor", lambda spec, t, need_cuda: check(spec, t, need_cuda=False))
    monkeypatch.setattr(runtime, "require_gpu", lambda: None)
    monkeypatch.setattr(runtime, "compile_cuda", lambda *a, **k: pytest.fail("compiled before the device check"))
    with pytest.raises(tk.ArgumentError) as e:
        axpy_kernel()[(1,)](torch.zeros(16, 16), meta(16, 16, dtype=F32), 2.0)            # the line named
    message = str(e.value)
    assert "x on cpu, y on meta" in message and "y.to(x.device)" in message
    assert e.value.loc is not None and e.value.loc.file == __file__


# Each call has one tensor argument on `meta`, the others on `cpu` (under TKPY_INTERPRET=1 both are taken).
MIXED = {
    "matmul b": lambda k: k.matmul(cpu(64, 64), meta(64, 64)),
    "matmul bias": lambda k: k.matmul(cpu(64, 64), cpu(64, 64), bias=meta(64)),
    "matmul out": lambda k: k.matmul(cpu(64, 64), cpu(64, 64), out=meta(64, 64)),
    "matmul_fp8 b": lambda k: k.matmul_fp8(cpu(64, 64, dtype=FP8), meta(64, 64, dtype=FP8).T, cpu(1, dtype=F32),
                                           cpu(1, dtype=F32)),
    "matmul_fp8 scale": lambda k: k.matmul_fp8(cpu(64, 64, dtype=FP8), cpu(64, 64, dtype=FP8).T, cpu(1, dtype=F32),
                                               meta(1, dtype=F32)),
    "matmul_fp8 out": lambda k: k.matmul_fp8(cpu(64, 64, dtype=FP8), cpu(64, 64, dtype=FP8).T, cpu(1, dtype=F32),
                                             cpu(1, dtype=F32), out=meta(64, 64)),
    "softmax_backward": lambda k: torch.ops.tkpy.softmax_backward(cpu(64, 64), meta(64, 64)),
    "rms_norm weight": lambda k: k.rms_norm(cpu(16, 256), (256,), meta(256)),
    "rms_norm residual": lambda k: k.rms_norm(cpu(16, 256), (256,), cpu(256), residual=meta(16, 256)),
    "layer_norm bias": lambda k: k.layer_norm(cpu(16, 256), (256,), cpu(256), meta(256)),
    "rms_norm_backward grad": lambda k: torch.ops.tkpy.rms_norm_backward(
        meta(16, 256), None, cpu(16, 256), cpu(256), cpu(16, dtype=F32), [256]),
    "rms_norm_backward residual grad": lambda k: torch.ops.tkpy.rms_norm_backward(
        cpu(16, 256), meta(16, 256), cpu(16, 256), cpu(256), cpu(16, dtype=F32), [256]),
    "rms_norm_backward rstd": lambda k: torch.ops.tkpy.rms_norm_backward(
        cpu(16, 256), None, cpu(16, 256), cpu(256), meta(16, dtype=F32), [256]),
    "layer_norm_backward mean": lambda k: torch.ops.tkpy.layer_norm_backward(
        cpu(16, 256), None, cpu(16, 256), cpu(256), meta(16, dtype=F32), cpu(16, dtype=F32), [256], True),
    "swiglu up": lambda k: k.swiglu(cpu(64, 64), meta(64, 64)),
    "glu_backward grad": lambda k: torch.ops.tkpy.glu_backward(meta(64, 64), cpu(64, 64), cpu(64, 64), "silu"),
    "rotary k": lambda k: k.rotary(cpu(1, 16, 2, 64), meta(1, 16, 2, 64), cpu(16, 32, dtype=F32),
                                   cpu(16, 32, dtype=F32)),
    "rotary cos": lambda k: k.rotary(cpu(1, 16, 2, 64), cpu(1, 16, 2, 64), meta(16, 32, dtype=F32),
                                     cpu(16, 32, dtype=F32)),
    "attention k": lambda k: k.attention(cpu(1, 1, 16, 64), meta(1, 1, 16, 64), cpu(1, 1, 16, 64)),
    "attention_backward out": lambda k: torch.ops.tkpy.attention_backward(
        *(cpu(1, 1, 16, 64) for _ in range(4)), meta(1, 1, 16, 64), cpu(1, 1, 16, dtype=F32)),
    "attention_backward lse": lambda k: torch.ops.tkpy.attention_backward(
        *(cpu(1, 1, 16, 64) for _ in range(5)), meta(1, 1, 16, dtype=F32)),
}


@pytest.mark.parametrize("case", sorted(MIXED))
def test_operators_refuse_tensors_on_two_devices(monkeypatch, case):
    """Every operator (and its fake implementation, which torch runs when a meta tensor is among the arguments)
    refuses an argument on another device than the others, naming both devices."""
    import tkpy.kernels as kernels

    monkeypatch.setenv("TKPY_INTERPRET", "1")
    with pytest.raises(ValueError) as e:
        MIXED[case](kernels)
    assert "meta" in str(e.value) and "cpu" in str(e.value), str(e.value)


class _CudaLike:
    """What on_device_of reads of a tensor: on cuda:1."""
    is_cuda = True

    def get_device(self) -> int:
        return 1


def test_the_autotuner_times_on_its_tensors_device(monkeypatch):
    """Timing (a CUDA graph on torch's current stream) runs with the tensors' device current; without a CUDA
    tensor, as it is."""
    entered = []

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        yield

    monkeypatch.setattr(torch.cuda, "device", device)
    with timer.on_device_of([torch.zeros(1), _CudaLike()]):
        assert entered == [1]
    with timer.on_device_of([torch.zeros(1)]):
        pass
    assert entered == [1]


def test_a_pgls_other_ranks_may_live_on_other_gpus(monkeypatch):
    """Of a pgl only the local rank's tensor must share the launch's device (the others are peer memory, which one
    process driving several GPUs keeps on theirs); the launch runs there."""
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    check = kernel_module.check_tensor
    monkeypatch.setattr(kernel_module, "check_tensor", lambda spec, t, need_cuda: check(spec, t, need_cuda=False))
    monkeypatch.setattr(runtime, "require_gpu", lambda: None)

    class Compiled(Exception):
        pass

    def compiled(*args, **kwargs):
        raise Compiled

    monkeypatch.setattr(runtime, "compile_cuda", compiled)

    @tk.kernel(warps=1)
    def gather(x: tk.pgl[tk.gl[f32, 16, 16], 2], y: tk.gl[f32, 16, 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x[1], (0, 0))
        tk.store(y, t, (0, 0))

    xs = [torch.zeros(16, 16), meta(16, 16, dtype=F32)]
    with pytest.raises(Compiled):                                  # rank 0 on the CPU with y: on to the compile
        gather[(1,)](tk.PGL(xs, 0), torch.zeros(16, 16))
    with pytest.raises(tk.ArgumentError, match=r"x_1 on meta, y on cpu"):
        gather[(1,)](tk.PGL(xs, 1), torch.zeros(16, 16))           # rank 1's own tensor is elsewhere
