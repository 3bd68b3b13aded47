"""GPU tests of tkpy.runtime.driver (need a Hopper GPU; skipped cleanly otherwise)."""

from __future__ import annotations

import pytest

from tkpy.runtime import (
    DriverError,
    Launcher,
    ParamBuffer,
    compile_cuda,
    current_stream_handle,
    gpu_available,
    launch,
    load_function,
    load_kernel,
    max_shared_per_block_optin,
    sm_count,
)

from gpu_util import in_fresh_thread

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA Hopper (sm_90) GPU with torch CUDA"),
]

ADD1 = 'extern "C" __global__ void add1(float* x, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i]+=1.f;}\n'

# Uses every byte of a large dynamic smem allocation so a wrong opt-in faults.
BIG_SMEM = r"""
extern "C" __global__ void big_smem(float* out, int nfloats) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < nfloats; i += blockDim.x) buf[i] = (float)i;
  __syncthreads();
  float acc = 0.f;
  for (int i = threadIdx.x; i < nfloats; i += blockDim.x) acc += buf[nfloats - 1 - i];
  atomicAdd(out, acc);
}
"""

CLUSTER = r"""
extern "C" __global__ void cluster_ids(int* out) {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  if (threadIdx.x == 0) out[blockIdx.x] = (int)r;
}
"""


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@pytest.fixture(scope="module")
def add1_mod():
    return compile_cuda(ADD1, "add1")


def _add1(lk, x, stream_handle):
    n = x.numel()
    pb = ParamBuffer(["ptr", "i32"])
    pb.pack(x.data_ptr(), n)
    launch(lk, ((n + 127) // 128, 1, 1), (128, 1, 1), 0, stream_handle, pb)


def test_device_attributes(torch):
    dev = torch.cuda.current_device()
    assert sm_count(dev) == torch.cuda.get_device_properties(dev).multi_processor_count
    assert max_shared_per_block_optin(dev) >= 227 * 1024


def test_load_and_launch_add1(torch, add1_mod):
    dev = torch.cuda.current_device()
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    lk = load_kernel(add1_mod, dev)
    assert lk.num_regs > 0 and lk.static_smem == 0
    assert load_kernel(add1_mod, dev) is lk  # cached per (key, device)
    assert load_function(add1_mod, dev) is lk.function
    _add1(lk, x, current_stream_handle(dev))
    torch.cuda.synchronize()
    assert torch.equal(x, torch.arange(1000, device="cuda", dtype=torch.float32) + 1)


def test_launcher_reuses_config_and_params(torch, add1_mod):
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    lr = lk.launcher((128, 1, 1))
    x = torch.zeros(4096, device="cuda")
    pb = ParamBuffer(["ptr", "i32"])
    s = current_stream_handle(dev)
    for _ in range(10):
        pb.pack(x.data_ptr(), x.numel())  # refilled right after each launch
        lr((32, 1, 1), s, pb)
    torch.cuda.synchronize()
    assert torch.all(x == 10)
    assert len(lr._configs) == 1


def test_prepared_launch(torch, add1_mod):
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    lr = lk.launcher((128, 1, 1))
    x = torch.zeros(512, device="cuda")
    pb = ParamBuffer(["ptr", "i32"])
    s = current_stream_handle(dev)
    go = lr.prepare((4, 1, 1), s, pb)
    for _ in range(3):
        pb.pack(x.data_ptr(), x.numel())
        assert not go()[0]
    torch.cuda.synchronize()
    assert torch.all(x == 3)


def test_large_dynamic_shared_memory(torch):
    dev = torch.cuda.current_device()
    mod = compile_cuda(BIG_SMEM, "big_smem")
    smem = 200 * 1024
    nfloats = smem // 4
    lk = load_kernel(mod, dev, dynamic_smem=smem)
    assert lk.dynamic_smem_configured >= smem
    out = torch.zeros(1, device="cuda")
    pb = ParamBuffer(["ptr", "i32"])
    pb.pack(out.data_ptr(), nfloats)
    lk.launcher((256, 1, 1), smem)((1, 1, 1), current_stream_handle(dev), pb)
    torch.cuda.synchronize()
    assert out.item() == pytest.approx(nfloats * (nfloats - 1) / 2, rel=1e-5)


def test_too_much_shared_memory_is_a_clear_error(torch):
    dev = torch.cuda.current_device()
    mod = compile_cuda(BIG_SMEM, "big_smem")
    with pytest.raises(DriverError, match="shared memory"):
        load_kernel(mod, dev, dynamic_smem=max_shared_per_block_optin(dev) + 1024)


def test_non_default_stream(torch, add1_mod):
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    s = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        h = current_stream_handle(dev)
        assert h == s.cuda_stream and h != 0
        torch.cuda._sleep(1_000_000)  # keep s busy so ordering matters
        _add1(lk, x, h)
        x.add_(1)  # same stream: must see the kernel's +1
    s.synchronize()
    assert torch.all(x == 2)


def test_cuda_graph_capture(torch, add1_mod):
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    lr = lk.launcher((128, 1, 1))
    x = torch.zeros(1000, device="cuda")
    pb = ParamBuffer(["ptr", "i32"])
    grid = (8, 1, 1)
    # warm up on a side stream (as torch recommends before capture)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pb.pack(x.data_ptr(), x.numel())
        lr(grid, current_stream_handle(dev), pb)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.all(x == 1)

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pb.pack(x.data_ptr(), x.numel())
        lr(grid, current_stream_handle(dev), pb)  # torch's capture stream
    pb.pack(0, 0)  # params were copied at capture: clobbering must not matter
    torch.cuda.synchronize()
    assert torch.all(x == 1)  # capture does not run the kernel
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.all(x == 4)


BLOB = r"""
struct alignas(64) Blob128 { unsigned long long w[16]; };  // stands in for CUtensorMap
extern "C" __global__ void read_blob(const __grid_constant__ Blob128 b, int scale, unsigned long long* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = b.w[threadIdx.x] * scale;
}
"""


def test_blob128_grid_constant_param(torch):
    import struct as _struct

    dev = torch.cuda.current_device()
    lk = load_kernel(compile_cuda(BLOB, "read_blob"), dev)
    out = torch.zeros(16, device="cuda", dtype=torch.int64)
    words = [(i + 1) * 0x0101010101 for i in range(16)]
    pb = ParamBuffer(["blob128", "i32", "ptr"])
    pb.pack(_struct.pack("<16Q", *words), 3, out.data_ptr())
    lk.launcher((32, 1, 1))((1, 1, 1), current_stream_handle(dev), pb)
    torch.cuda.synchronize()
    assert out.tolist() == [w * 3 for w in words]


def test_cluster_launch(torch):
    dev = torch.cuda.current_device()
    mod = compile_cuda(CLUSTER, "cluster_ids")
    lk = load_kernel(mod, dev)
    out = torch.full((8,), -1, device="cuda", dtype=torch.int32)
    pb = ParamBuffer(["ptr"])
    pb.pack(out.data_ptr())
    lk.launcher((32, 1, 1), 0, cluster=(2, 1, 1))((8, 1, 1), current_stream_handle(dev), pb)
    torch.cuda.synchronize()
    assert out.tolist() == [0, 1] * 4


def test_launch_from_fresh_thread(torch, add1_mod):
    """A new Python thread has no current CUDA context until tkpy sets one."""
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    lr = lk.launcher((128, 1, 1))
    x = torch.zeros(256, device="cuda")
    stream = torch.cuda.current_stream(dev).cuda_stream
    torch.cuda.synchronize()

    def work():
        pb = ParamBuffer(["ptr", "i32"])
        pb.pack(x.data_ptr(), x.numel())
        lr((2, 1, 1), stream, pb)

    in_fresh_thread(work)
    torch.cuda.synchronize()
    assert torch.all(x == 1)


def test_launch_error_is_reported(torch, add1_mod):
    dev = torch.cuda.current_device()
    lk = load_kernel(add1_mod, dev)
    pb = ParamBuffer(["ptr", "i32"])
    pb.pack(0, 0)
    with pytest.raises(DriverError, match="cuLaunchKernelEx"):
        Launcher(lk.function, (4096, 1, 1), kernel=lk)((1, 1, 1), current_stream_handle(dev), pb)


def test_repeated_cold_compiles_with_the_driver_started_report_in_one_run(torch, tmp_path, monkeypatch):
    """With the driver started (where NVRTC 13.0 took cubins from the CUDA compute cache and ran no ptxas: RESULTS.md
    runs 34-40), the same source compiled into 5 empty disk caches: one NVRTC run each, ptxas' report in each."""
    from cuda.bindings import nvrtc as bindings

    from tkpy.runtime import clear_memo

    torch.zeros(1, device="cuda")
    runs = []
    real = bindings.nvrtcCompileProgram
    monkeypatch.setattr(bindings, "nvrtcCompileProgram", lambda prog, n, opts: runs.append(opts) or real(prog, n, opts))
    src = ADD1 + f"// {tmp_path.name}\n"
    for i in range(5):
        clear_memo()
        monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / f"cache{i}"))
        m = compile_cuda(src, "add1")
        assert not m.from_cache and m.resources.found and m.resources.registers > 0, m.log
    assert len(runs) == 5
    clear_memo()
