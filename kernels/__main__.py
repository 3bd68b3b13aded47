"""The kernels' demos: `python -m tkpy.kernels [softmax | matmul_fp8 [--shape M N K] [--kinds e4m3,e5m2]]`.

softmax (the default): on a Hopper GPU, runs tkpy.kernels.softmax and its backward over narrow rows (the tile kernels)
and wide ones (a row over a cluster of blocks) and checks them against float64 torch, then prints the generated
narrow kernel; without a GPU, prints the generated CUDA and compiles the kernels to sm_90a cubins. matmul_fp8: checks a product against float64 (on the CPU interpreter without a GPU) and, on a GPU,
times it against torch._scaled_mm in the same run.
"""
from __future__ import annotations

import argparse
import os

import torch

import tkpy as tk
from tkpy.kernels import gemm_fp8, matmul_fp8, softmax, softmax_kernel, softmax_policy
from tkpy.kernels.row_softmax import softmax_backward_rows, softmax_rows

WIDE = 131072                      # the demo's wide rows: a row over a cluster of 8 blocks


def softmax_demo() -> None:
    if not tk.gpu_available():
        x, wide = torch.randn(1024, 64, dtype=torch.bfloat16), torch.empty(8, WIDE, dtype=torch.bfloat16)
        forward = softmax_kernel.forward_kernel(softmax_policy.config_for("forward", WIDE, "bf16"))
        backward = softmax_kernel.backward_kernel(softmax_policy.config_for("backward", WIDE, "bf16"))
        print(softmax_rows.source(x, x, 64))
        for kernel, args in ((softmax_rows, (x, x, 64)), (softmax_backward_rows, (x, x, x, 64)),
                             (forward, (wide, wide)), (backward, (wide, wide, wide))):
            compiled = kernel.trace(*args).lower().compile()
            print(f"// No Hopper GPU found: compiled {kernel.name} to an sm_90a cubin ({len(compiled.cubin)} bytes; "
                  f"{compiled.resources.summary()}), not launched.")
        return
    for rows, width in ((4096, 128), (64, WIDE)):
        x = torch.randn(rows, width, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        x64, dy = x.detach().double().requires_grad_(), torch.randn_like(x)
        y, ref = softmax(x), torch.softmax(x64, dim=-1)
        y.backward(dy)
        ref.backward(dy.double())
        for what, out, want in (("softmax", y, ref), ("its backward", x.grad, x64.grad)):
            err = ((out.double() - want).norm() / want.norm()).item()
            print(f"{what} {rows}x{width} bf16 on {torch.cuda.get_device_name()}: relative error {err:.2e} "
                  f"({'OK' if err < 1e-2 else 'FAILED'})")
    x = torch.randn(4096, 128, dtype=torch.bfloat16, device="cuda")
    print(softmax_rows.source(x, x, 128).split("// ---- end of prelude ----")[1])


def matmul_fp8_demo(shape, kinds_arg: str) -> None:
    kinds = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    ka, kb = (kinds[x] for x in kinds_arg.split(","))
    gpu = tk.gpu_available()
    m, n, k = shape or ((4096, 4096, 4096) if gpu else (256, 512, 256))
    device = "cuda" if gpu else "cpu"
    a = (torch.randn(m, k, device=device) * 2).to(ka)
    w = (torch.randn(n, k, device=device) * 2).to(kb)
    scale_a = torch.tensor([0.5], device=device)
    scale_b = torch.tensor([0.25], device=device)
    if not gpu:
        os.environ["TKPY_INTERPRET"] = "1"      # no GPU: run the kernel on the CPU interpreter
    c = matmul_fp8(a, w.T, scale_a, scale_b)
    ref = gemm_fp8.reference(a, w.T, scale_a, scale_b)
    err = ((c.double() - ref.double()).norm() / ref.double().norm()).item()
    print(f"matmul_fp8 {m}x{n}x{k} {kinds_arg}: relative error {err:.2e} against float64 "
          f"({'GPU' if gpu else 'interpreter'})")
    if not gpu:
        return
    try:
        from benchmarks.timing import median_ms
    except ImportError:
        print("  (timing: run from a checkout of tkpy, whose benchmarks/ times kernels)")
        return
    flops = 2 * m * n * k
    ours = median_ms(lambda: matmul_fp8(a, w.T, scale_a, scale_b, out=c))
    print(f"  tkpy matmul_fp8:       {ours * 1e3:8.1f} us  {flops / ours / 1e9:7.1f} TFLOP/s")
    try:
        theirs = median_ms(lambda: torch._scaled_mm(a, w.T, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16))
        print(f"  torch._scaled_mm:      {theirs * 1e3:8.1f} us  {flops / theirs / 1e9:7.1f} TFLOP/s"
              f"  (tkpy / torch time: {ours / theirs:.2f})")
    except RuntimeError as e:          # e.g. an fp8 combination cuBLASLt does not take
        print(f"  torch._scaled_mm: not run ({str(e).splitlines()[0]})")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tkpy.kernels", description=__doc__.split("\n")[0])
    parser.add_argument("demo", nargs="?", default="softmax", choices=("softmax", "matmul_fp8"))
    parser.add_argument("--shape", type=int, nargs=3, default=None, metavar=("M", "N", "K"))
    parser.add_argument("--kinds", default="e4m3,e4m3", help="fp8 kinds of A and B, e.g. e4m3,e5m2")
    args = parser.parse_args()
    if args.demo == "softmax":
        softmax_demo()
    else:
        matmul_fp8_demo(args.shape, args.kinds)


if __name__ == "__main__":
    main()
