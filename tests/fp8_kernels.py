"""fp8 test kernels and references shared by the CPU tests (test_fp8.py: trace, codegen, NVRTC/SASS, interpreter)
and the GPU tests (test_gpu_fp8.py)."""
from __future__ import annotations

import functools

import torch

import tkpy as tk
from tkpy import bf16, f32, fp16

FP8 = {"e4m3": tk.fp8e4m3, "e5m2": tk.fp8e5m2}
TORCH8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
WIDE = {"f32": f32, "bf16": bf16, "fp16": fp16}
TORCH_WIDE = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def quantize(x: torch.Tensor, kind: str) -> torch.Tensor:
    """x rounded to fp8 as cvt.rn.satfinite does: nearest even, saturating to the largest finite value (torch's own
    conversion overflows to NaN / inf in some versions, so clamp first)."""
    m = torch.finfo(TORCH8[kind]).max
    return x.float().clamp(-m, m).to(TORCH8[kind])


def fp8_poisoned(*shape, kind: str, device="cuda") -> torch.Tensor:
    """An fp8 output full of NaN (code 0x7F in both formats)."""
    return torch.full(shape, 0x7F, dtype=torch.uint8, device=device).view(TORCH8[kind])


def random_fp8(*shape, kind: str, scale=1.0, device="cpu", seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return quantize(torch.randn(*shape, generator=g, dtype=torch.float64) * scale, kind).to(device)


def conversion_inputs(rows: int, cols: int, kind: str, seed=0) -> torch.Tensor:
    """float32 values that exercise the conversion: random values over the format's range, every midpoint between
    neighbouring fp8 values (ties, rounded to the even one), values beyond the largest finite (saturated),
    subnormals and zeros."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(256, dtype=torch.uint8).view(TORCH8[kind]).float()
    v = t[torch.isfinite(t)].unique().double()
    mids = ((v[1:] + v[:-1]) / 2).float()
    m = torch.finfo(TORCH8[kind]).max
    special = torch.tensor([0.0, -0.0, 2 * m, -3 * m, m * 1.01, 1e-30, -1e-30, float(v[v > 0].min()) / 2])
    rnd = torch.randn(rows * cols, generator=g) * torch.exp2(torch.randint(-12, 12, (rows * cols,), generator=g).float())
    x = torch.cat([mids, special, rnd])[: rows * cols]
    return x[torch.randperm(x.numel(), generator=g)].reshape(rows, cols)


@functools.cache
def wgmma_kernel(a_kind: str, b_kind: str, n: int, k: int, a_regs: bool = False):
    """c[64-row tile x, n-col tile y] = 2 * a_tile @ b_tile^T (mm_ABt then mma_ABt, one warpgroup), a (M, k) and
    b (N, k) fp8 loaded by TMA (A as each warp's 16 x k register tile when a_regs)."""
    adt, bdt = FP8[a_kind], FP8[b_kind]

    @tk.kernel(warps=4, name=f"fp8_wgmma_{a_kind}_{b_kind}_n{n}_k{k}{'_rs' if a_regs else ''}")
    def kern(a: tk.gl[adt, "M", k], b: tk.gl[bdt, "N", k], c: tk.gl[f32, "M", "N"]):
        sa = tk.st(adt, 64, k)
        sb = tk.st(bdt, n, k)
        sem = tk.semaphore()
        acc = tk.rt(f32, 16, n)
        tk.init_semaphore(sem, 1)
        tk.sync()
        with tk.if_(tk.warp_id() == 0):
            tk.tma.expect(sem, sa, sb)
            tk.tma.load_async(sa, a, (tk.block_idx.x, 0), sem)
            tk.tma.load_async(sb, b, (tk.block_idx.y, 0), sem)
        tk.wait(sem, 0)
        if a_regs:
            ra = tk.rt(adt, 16, k)
            tk.warpgroup.load(ra, sa)
            tk.warpgroup.mm_ABt(acc, ra, sb)
            tk.warpgroup.mma_ABt(acc, ra, sb)
        else:
            tk.warpgroup.mm_ABt(acc, sa, sb)
            tk.warpgroup.mma_ABt(acc, sa, sb)
        tk.warpgroup.mma_async_wait()
        tk.warpgroup.store(c, acc, (tk.block_idx.x, tk.block_idx.y))
    return kern


def wgmma_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 2 * (a.double() @ b.double().T)


def wgmma_bound(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element error allowed against the float64 reference: fp32 accumulation over K products (the tensor
    cores' fp8 accumulation keeps fewer bits than fp32; 2^-10 of the sum of |products| covers it), far below what
    a misplaced element would cost."""
    return 2 * (a.double().abs() @ b.double().abs().T) * 2.0 ** -10 + 1e-6


@functools.cache
def tma_roundtrip_kernel(kind: str, rows: int, cols: int, swizzle: int):
    """TMA-load an fp8 tile, read it through registers into y (rt <- st, gl <- rt), TMA-store it into z."""
    dt = FP8[kind]

    @tk.kernel(warps=1, name=f"fp8_tma_{kind}_{rows}x{cols}_s{swizzle}")
    def kern(x: tk.gl[dt, "R", "C"], y: tk.gl[dt, "R", "C"], z: tk.gl[dt, "R", "C"]):
        s = tk.st(dt, rows, cols, swizzle=swizzle)
        sem = tk.semaphore()
        t = tk.rt(dt, rows, cols)
        tk.init_semaphore(sem, 1)
        tk.warp_sync()
        tk.tma.expect(sem, s)
        tk.tma.load_async(s, x, (tk.block_idx.y, tk.block_idx.x), sem)
        tk.wait(sem, 0)
        tk.load(t, s)
        tk.store(y, t, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_async(z, s, (tk.block_idx.y, tk.block_idx.x))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
    return kern


@functools.cache
def convert_kernel(kind: str, wide: str, layout: str):
    """Each warp converts its 16 x 64 tile of x (f32/bf16/fp16) to fp8 in registers (tk.copy, into q) and into an
    fp8 shared tile (st <- rt, TMA-stored into qs); then back: the fp8 tile of q read from global memory and
    widened to bf16 (into back), and the shared tile read into f32 registers (into back32)."""
    dt, wt = FP8[kind], WIDE[wide]

    @tk.kernel(warps=1, name=f"fp8_convert_{kind}_{wide}_{layout}")
    def kern(x: tk.gl[wt, "R", 64], q: tk.gl[dt, "R", 64], qs: tk.gl[dt, "R", 64], back: tk.gl[bf16, "R", 64],
             back32: tk.gl[f32, "R", 64]):
        t = tk.rt(wt, 16, 64, layout)
        t8 = tk.rt(dt, 16, 64, layout)
        s = tk.st(dt, 16, 64)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.copy(t8, t)
        tk.store(q, t8, (tk.block_idx.x, 0))
        tk.store(s, t)
        tk.fence_proxy_async()
        tk.warp_sync()
        tk.tma.store_async(qs, s, (tk.block_idx.x, 0))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
        tb = tk.rt(bf16, 16, 64, layout)
        tk.copy(tb, t8)
        tk.store(back, tb, (tk.block_idx.x, 0))
        tf = tk.rt(f32, 16, 64, layout)
        tk.load(tf, s)
        tk.store(back32, tf, (tk.block_idx.x, 0))
    return kern


@functools.cache
def plain_copy_kernel(kind: str):
    """Copies without TMA on a 100 x 80 tensor (ragged tiles on both axes, bounds-checked): x -> shared by
    cp.async (block scope, zero-filled past the edges) -> y by a block store; x -> fp8 registers (fill 1000.0,
    rounded to fp8: saturated in e4m3) -> f32 registers -> z (100 x 96: the fill shows in the last 16 columns)."""
    dt = FP8[kind]

    @tk.kernel(warps=4, name=f"fp8_plain_copies_{kind}")
    def kern(x: tk.gl[dt, 100, 80], y: tk.gl[dt, 100, 80], z: tk.gl[f32, 100, 96]):
        s = tk.st(dt, 64, 32)
        tk.block.load_async(s, x, (tk.block_idx.y, tk.block_idx.x), masked=True)
        tk.load_async_wait()
        tk.sync()
        tk.block.store(y, s, (tk.block_idx.y, tk.block_idx.x))
        t = tk.rt(dt, 16, 32)
        tf = tk.rt(f32, 16, 32)
        tk.load(t, x, (tk.block_idx.y * 4 + tk.warp_id(), tk.block_idx.x), fill=1000.0)
        tk.copy(tf, t)
        tk.store(z, tf, (tk.block_idx.y * 4 + tk.warp_id(), tk.block_idx.x))
    return kern


def plain_copy_reference(x: torch.Tensor, kind: str) -> torch.Tensor:
    """What plain_copy_kernel writes into z: x as f32, the fill in fp8 in columns 80..95 (e4m3: 448, saturated;
    e5m2: 1024, the nearest)."""
    z = torch.full((100, 96), quantize(torch.tensor(1000.0), kind).item(), dtype=torch.float32, device=x.device)
    z[:, :80] = x.float()
    return z
