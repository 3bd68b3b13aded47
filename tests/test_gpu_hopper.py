"""Hopper primitives on the GPU: TMA, semaphores, wgmma, the warp-specialized GEMM (skipped without a GPU)."""
import functools

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32, fp16

from gpu_util import TORCH, poisoned, rand, rel_err, requires_gpu

pytestmark = requires_gpu
DT = {"bf16": bf16, "fp16": fp16, "f32": f32}


@functools.cache
def tma_roundtrip_kernel(dt, rows, cols, swizzle):
    """TMA-load a tile, read it through ldmatrix/registers into y, and TMA-store it unchanged into z."""
    @tk.kernel(warps=1, name=f"tma_roundtrip_{dt}_{rows}x{cols}_s{swizzle}")
    def k(x: tk.gl[DT[dt], "R", "C"], y: tk.gl[DT[dt], "R", "C"], z: tk.gl[DT[dt], "R", "C"]):
        s = tk.st(DT[dt], rows, cols, swizzle=swizzle)
        sem = tk.semaphore()
        t = tk.rt(DT[dt], rows, cols)
        tk.init_semaphore(sem, 1)
        tk.warp_sync()
        tk.tma.expect(sem, s)
        tk.tma.load_async(s, x, (tk.block_idx.y, tk.block_idx.x), sem)
        tk.wait(sem, 0)
        tk.load(t, s)                                  # generic-proxy read of the TMA-written tile
        tk.store(y, t, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_async(z, s, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
    return k


TMA_TILES = [  # dtype, rows, cols, swizzle
    ("bf16", 64, 64, 128), ("bf16", 32, 128, 128), ("bf16", 16, 32, 64), ("bf16", 16, 16, 32), ("fp16", 64, 64, 128),
    ("bf16", 64, 64, 0), ("bf16", 64, 64, 64), ("f32", 32, 32, 128), ("f32", 16, 16, 64), ("bf16", 64, 128, 128)]
WGMMA_SHAPES = [("bf16", 64, 64), ("bf16", 256, 64), ("bf16", 16, 32), ("fp16", 128, 128), ("bf16", 96, 16)]


@pytest.mark.parametrize("dt,rows,cols,swizzle", TMA_TILES)
def test_tma_load_matches_the_shared_layout_and_stores_back(dt, rows, cols, swizzle):
    """TMA's swizzle and tkpy's address function must agree, or the ldmatrix path reads garbage."""
    x = rand(3 * rows, 2 * cols, dtype=TORCH[dt])
    y, z = poisoned(*x.shape, dtype=TORCH[dt]), poisoned(*x.shape, dtype=TORCH[dt])
    tma_roundtrip_kernel(dt, rows, cols, swizzle)[(2, 3)](x, y, z)
    torch.cuda.synchronize()
    assert torch.equal(z, x), "TMA load + store changed the tile"
    assert torch.equal(y, x), "the tile TMA wrote is not where tkpy's swizzle looks for it"


@functools.cache
def tma_5d_kernel():
    """On 5-d tensors (outer, batch, depth, rows, cols): block (x, y, z) moves the 64x64 tile at
    (z // 6, z // 2 % 3, z % 2, y, x) of x by a 5-d TMA load (after a 5-d prefetch) and TMA store into z,
    by register load/store into y, and by a shared-tile load/store into w."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, 2, 3, 2, "R", "C"], y: tk.gl[bf16, 2, 3, 2, "R", "C"],
          z: tk.gl[bf16, 2, 3, 2, "R", "C"], w: tk.gl[bf16, 2, 3, 2, "R", "C"]):
        s = tk.st(bf16, 64, 64)
        s2 = tk.st(bf16, 64, 64)
        sem = tk.semaphore()
        t = tk.rt(bf16, 64, 64)
        at = (tk.block_idx.z // 6, tk.block_idx.z // 2 % 3, tk.block_idx.z % 2, tk.block_idx.y, tk.block_idx.x)
        tk.init_semaphore(sem, 1)
        tk.warp_sync()
        tk.tma.prefetch(s, x, at)
        tk.tma.expect(sem, s)
        tk.tma.load_async(s, x, at, sem)
        tk.load(t, x, at)
        tk.store(y, t, at)
        tk.load(s2, x, at)
        tk.warp_sync()
        tk.store(w, s2, at)
        tk.wait(sem, 0)
        tk.tma.store_async(z, s, at)
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
    return k


def test_tma_round_trip_on_a_5d_tensor():
    """5-d tensor maps (cuTensorMapEncodeTiled rank 5, cp.async.bulk.tensor.5d) and 5-d plain copies;
    x is a strided view (every other outer slab of a bigger tensor) so the outer stride is exercised."""
    big = rand(4, 3, 2, 128, 128, dtype=torch.bfloat16)
    x = big[::2]
    outs = [poisoned(*x.shape, dtype=torch.bfloat16) for _ in range(3)]
    tma_5d_kernel()[(2, 2, 12)](x, *outs)
    for out in outs:
        assert torch.equal(out, x)
    xc = x.contiguous()
    outs = [poisoned(*x.shape, dtype=torch.bfloat16) for _ in range(3)]
    tma_5d_kernel()[(2, 2, 12)](xc, *outs)
    for out in outs:
        assert torch.equal(out, xc)


@functools.cache
def tma_edge_kernel():
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", "C"], z: tk.gl[bf16, "R", "C"], acc: tk.gl[bf16, "R", "C"]):
        s = tk.st(bf16, 64, 64)
        sem = tk.semaphore()
        tk.init_semaphore(sem, 1)
        tk.warp_sync()
        tk.tma.expect(sem, s)
        tk.tma.load_async(s, x, (tk.block_idx.y, tk.block_idx.x), sem)
        tk.wait(sem, 0)
        tk.tma.store_async(z, s, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_add_async(acc, s, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
    return k


@functools.cache
def tma_vector_kernel(dt, length):
    """Block (x, y) TMA-loads the shared vector of x at (batch y // H, head y % H, vector x) (a box of one row:
    the tail past N zero-filled) and stores it through a register vector into the same place of y (M: N rounded up
    to vectors)."""
    @tk.kernel(warps=1, name=f"tma_vector_{dt}_{length}")
    def k(x: tk.gl[DT[dt], "B", "H", "N"], y: tk.gl[DT[dt], "B", "H", "M"]):
        v = tk.sv(DT[dt], length)
        sem = tk.semaphore()
        r = tk.rv(DT[dt], length)
        tk.init_semaphore(sem, 1)
        tk.warp_sync()
        b, h = tk.block_idx.y // x.rows, tk.block_idx.y % x.rows      # (the 4-d view: batch 1, depth B, rows H)
        tk.tma.expect(sem, v)
        tk.tma.load_async(v, x, (b, h, tk.block_idx.x), sem)
        tk.wait(sem, 0)
        tk.load(r, v)
        tk.store(y, r, (b, h, tk.block_idx.x))
    return k


TMA_VECTORS = [("f32", 64), ("f32", 16), ("bf16", 128), ("fp16", 256)]


@pytest.mark.parametrize("dt,length", TMA_VECTORS)
def test_tma_loads_shared_vectors(dt, length):
    """A shared vector is a box of one row: its own tensor map, zero-filled past the tensor's last element."""
    x = rand(2, 3, 2 * length + 8, dtype=TORCH[dt])
    y = poisoned(2, 3, 3 * length, dtype=TORCH[dt])
    tma_vector_kernel(dt, length)[(3, 6)](x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, torch.cat([x, torch.zeros(2, 3, length - 8, dtype=x.dtype, device=x.device)], -1))


def test_tma_partial_tiles_and_store_add():
    """Sizes that are not tile multiples: loads zero-fill, stores clip; store_add adds."""
    x = rand(100, 72, dtype=torch.bfloat16)
    z = poisoned(100, 72, dtype=torch.bfloat16)
    base = rand(100, 72, dtype=torch.bfloat16)
    acc = base.clone()
    tma_edge_kernel()[(2, 2)](x, z, acc)
    torch.cuda.synchronize()
    assert torch.equal(z, x)
    assert rel_err(acc, base.double() + x.double()) < 1e-2


@functools.cache
def wgmma_kernel(dt, n, k, variant, a_regs, windows=False):
    """One warpgroup: TMA A and B into shared tiles, one wgmma op, store the 64 x n fp32 result. windows=True (the
    forms whose shared operands run K along their rows: AB with A in registers, AtB): one wgmma op per 16 rows of K
    on windows of the tiles (tile.subtile), whose descriptors keep the whole tile's panels."""
    trans_a, trans_b = {"AB": (False, True), "ABt": (False, False), "AtB": (True, True), "AtBt": (True, False)}[variant]
    a_shape = (k, 64) if trans_a else (64, k)
    b_shape = (k, n) if trans_b else (n, k)

    @tk.kernel(warps=4, name=f"wgmma_{variant}_{dt}_n{n}_k{k}_{'rs' if a_regs else 'ss'}{'_windows' if windows else ''}")
    def kern(a: tk.gl[DT[dt], "T", *a_shape], b: tk.gl[DT[dt], "T", *b_shape], c: tk.gl[f32, "T", 64, n],
             d: tk.gl[f32, "T", 64, n]):
        sa, sb = tk.st(DT[dt], *a_shape), tk.st(DT[dt], *b_shape)
        sem = tk.semaphore()
        acc = tk.rt(f32, 16, n)
        with tk.if_(tk.warp_id() == 0):
            tk.init_semaphore(sem, 1)
        tk.sync()
        with tk.if_(tk.warp_id() == 0):
            tk.tma.expect(sem, sa, sb)
            tk.tma.load_async(sa, a, (tk.block_idx.x, 0, 0), sem)
            tk.tma.load_async(sb, b, (tk.block_idx.x, 0, 0), sem)
        tk.warpgroup.load(acc, c, (tk.block_idx.x, 0, 0))
        tk.wait(sem, 0)
        mma = getattr(tk.warpgroup, f"mma_{variant}")
        if windows:
            assert variant == "AB" and a_regs or variant == "AtB"
            ra = tk.rt(DT[dt], 16, k)
            if a_regs:
                tk.warpgroup.load(ra, a, (tk.block_idx.x, 0, 0))
            for j in range(k // 16):
                mma(acc, ra.subtile(16, 16, (0, j)) if a_regs else sa.subtile(16, 64, (j, 0)), sb.subtile(16, n, (j, 0)))
        elif a_regs:
            ra = tk.rt(DT[dt], 16, k)
            tk.warpgroup.load(ra, a, (tk.block_idx.x, 0, 0))
            mma(acc, ra, sb)
        else:
            getattr(tk.warpgroup, f"mma_{variant}")(acc, sa, sb)
        tk.warpgroup.mma_async_wait()
        tk.warpgroup.store(d, acc, (tk.block_idx.x, 0, 0))
    return kern


@pytest.mark.parametrize("a_regs", [False, True])
@pytest.mark.parametrize("variant", ["AB", "ABt", "AtB", "AtBt"])
@pytest.mark.parametrize("dt,n,k", WGMMA_SHAPES)
def test_wgmma(dt, n, k, variant, a_regs):
    if a_regs and variant.startswith("At"):
        pytest.skip("a transposed A comes from shared memory only")
    trans_a, trans_b = {"AB": (False, True), "ABt": (False, False), "AtB": (True, True), "AtBt": (True, False)}[variant]
    blocks = 3
    a = rand(blocks, *((k, 64) if trans_a else (64, k)), dtype=TORCH[dt])
    b = rand(blocks, *((k, n) if trans_b else (n, k)), dtype=TORCH[dt])
    c = rand(blocks, 64, n, dtype=torch.float32)
    d = poisoned(blocks, 64, n, dtype=torch.float32)
    wgmma_kernel(dt, n, k, variant, a_regs)[(blocks,)](a, b, c, d)
    am = a.double().transpose(1, 2) if trans_a else a.double()
    bm = b.double() if trans_b else b.double().transpose(1, 2)
    assert rel_err(d, am @ bm + c.double()) < 1e-5


WINDOW_CASES = [("AB", True), ("AtB", False)]


def run_wgmma_on_windows(dt, n, k, variant, a_regs, device="cuda", launch=None):
    """The product as k / 16 wgmma ops on 16-deep windows of the operands, checked against float64; `launch`
    (default: the GPU) runs the kernel. Returns the kernel and its arguments."""
    trans_a = variant == "AtB"
    a = rand(3, *((k, 64) if trans_a else (64, k)), dtype=TORCH[dt], device=device)
    b = rand(3, k, n, dtype=TORCH[dt], device=device)
    c = rand(3, 64, n, dtype=torch.float32, device=device)
    d = poisoned(3, 64, n, dtype=torch.float32, device=device)
    kernel = wgmma_kernel(dt, n, k, variant, a_regs, windows=True)
    (launch or kernel)[(3,)](a, b, c, d)
    am = a.double().transpose(1, 2) if trans_a else a.double()
    assert rel_err(d, am @ b.double() + c.double()) < 1e-5
    return kernel, (a, b, c, d)


@pytest.mark.parametrize("variant,a_regs", WINDOW_CASES)
@pytest.mark.parametrize("dt,n,k", WGMMA_SHAPES)
def test_wgmma_on_windows(dt, n, k, variant, a_regs):
    run_wgmma_on_windows(dt, n, k, variant, a_regs)


@pytest.mark.parametrize("m,n,k", [(128, 256, 64), (256, 512, 512), (1024, 768, 1024), (2048, 2048, 4096)])
def test_warp_specialized_gemm(m, n, k):
    from tkpy.kernels.gemm_ws import matmul
    a, b = rand(m, k, dtype=torch.bfloat16), rand(k, n, dtype=torch.bfloat16)
    c = matmul(a, b, out=poisoned(m, n, dtype=torch.bfloat16))
    assert rel_err(c, a.double() @ b.double()) < 1e-2


def test_gemm_sass_uses_hgmma_and_tma():
    from tkpy.kernels.gemm_ws import gemm_ws
    a = torch.empty(256, 128, dtype=torch.bfloat16)
    b = torch.empty(128, 512, dtype=torch.bfloat16)
    sass = gemm_ws.sass(a, b, torch.empty(256, 512, dtype=torch.bfloat16))
    assert "HGMMA.64x256x16.F32.BF16" in sass and "UTMALDG.4D" in sass


@functools.cache
def multicast_kernel():
    """Clusters of 2: rank 0 multicasts one tile to both blocks; rank 1 then arrives on rank 0's semaphore."""
    @tk.kernel(warps=1, cluster=(2, 1, 1))
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R2", 64], ranks: tk.gl[f32, "B", 16]):
        s = tk.st(bf16, 64, 64)
        loaded, done = tk.semaphore(), tk.semaphore()
        t = tk.rt(bf16, 64, 64)
        r = tk.rt(f32, 16, 16)
        tk.init_semaphore(loaded, 1)
        tk.init_semaphore(done, 1)
        tk.cluster.sync()                            # both blocks' semaphores exist before any signal
        tk.tma.expect(loaded, s)
        with tk.if_(tk.cluster.rank() == 0):
            tk.tma.load_async(s, x, (tk.block_idx.x // 2, 0), loaded, multicast=0b11)
        tk.wait(loaded, 0)
        tk.load(t, s)
        tk.store(y, t, (tk.block_idx.x, 0))
        with tk.if_(tk.cluster.rank() == 1):
            tk.cluster.arrive(done, 0)
        with tk.if_(tk.cluster.rank() == 0):
            tk.wait(done, 0)                         # rank 1 reached this point
        tk.fill(r, tk.cluster.rank())
        tk.store(ranks, r, (tk.block_idx.x, 0))
        tk.cluster.sync()                            # no block exits while another may still signal it
    return k


def test_cluster_multicast_and_remote_arrive():
    blocks = 6
    x = rand(blocks // 2 * 64, 64, dtype=torch.bfloat16)
    y = poisoned(blocks * 64, 64, dtype=torch.bfloat16)
    ranks = poisoned(blocks * 16, 16, dtype=torch.float32)
    multicast_kernel()[(blocks,)](x, y, ranks)
    torch.cuda.synchronize()
    assert torch.equal(y.view(blocks // 2, 2, 64, 64), x.view(blocks // 2, 1, 64, 64).expand(-1, 2, -1, -1))
    expected = torch.tensor([0.0, 1.0] * (blocks // 2), device="cuda").repeat_interleave(16 * 16).view(-1, 16)
    assert torch.equal(ranks, expected)
    with pytest.raises(tk.ArgumentError, match="not a multiple of the cluster"):
        multicast_kernel()[(3,)]


@pytest.mark.parametrize("m,n,k", [(128, 256, 64), (512, 768, 320), (1920, 2048, 1024), (4096, 4096, 512)])
def test_template_gemm(m, n, k):
    """The persistent template GEMM (tkpy.kernels.matmul), including more tiles than SMs (several tasks per
    block)."""
    from tkpy.kernels import matmul
    a, b = rand(m, k, dtype=torch.bfloat16), rand(k, n, dtype=torch.bfloat16)
    c = matmul(a, b, out=poisoned(m, n, dtype=torch.bfloat16))
    assert rel_err(c, a.double() @ b.double()) < 1e-2


def test_tensor_maps_retarget_to_new_tensors_of_the_same_shape():
    """The second call reuses the first map's geometry (cuTensorMapReplaceAddress) for new pointers."""
    kern = tma_roundtrip_kernel("bf16", 64, 64, 128)
    for _ in range(3):
        x = rand(128, 128, dtype=torch.bfloat16)
        y, z = poisoned(*x.shape, dtype=torch.bfloat16), poisoned(*x.shape, dtype=torch.bfloat16)
        kern[(2, 2)](x, y, z)
        torch.cuda.synchronize()
        assert torch.equal(y, x) and torch.equal(z, x)
