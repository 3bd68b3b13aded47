"""Run one kernel case a few times, for a profiler (ncu) on the GPU machine.

    ncu --clock-control none -k regex:NAME --launch-skip 2 --launch-count 1 --set full \
        python3 benchmarks/profile_cases.py CASE

Cases: gemm M N K nn|nt [block_n=64 ...] (tkpy matmul, then cuBLAS: filter with -k), attention B H N D
causal(0/1) [key=value ...] [--only-sdpa] [--flash] (tkpy: attention(), or tkpy.kernels.attention_forward._launch with those
options, e.g. pingpong=False overlap=False; then SDPA cuDNN, and with --flash SDPA flash), attention_bwd B H N D
causal(0/1) [--only-sdpa] [--flash] (tkpy's attention_backward, then SDPA's backward under cuDNN and flash), rotary B S
HQ HK D (tkpy's rotary, then torch.compile's), rms_norm|layer_norm ROWS WIDTH (tkpy's, then torch.compile's),
memory OP fwd|bwd|f+b [ROWS WIDTH [compile]] (tkpy's memory-bound ops, MEMORY_OPS, memory_case; or torch.compile's).
Each runs 3 times after building its inputs.
"""
from __future__ import annotations

import sys
from pathlib import Path
import tkpy.kernels as tkpy_kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> None:
    import torch
    what, *dims = argv
    if what == "gemm":
        from tkpy.kernels import gemm
        m, n, k, layout = int(dims[0]), int(dims[1]), int(dims[2]), dims[3]
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        b = w.T if layout == "nt" else w.reshape(k, n)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        extra = dict(x.split("=") for x in dims[4:])
        options = {key: int(v) for key, v in extra.items()}
        for _ in range(3):
            tkpy_kernels.matmul(a, b, out=c, **options)
        for _ in range(3):
            torch.matmul(a, b, out=c)
    elif what == "attention":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from tkpy.kernels import attention_forward as att
        from tkpy.kernels import attention_policy as policy
        bsz, h, n, d, causal = (int(x) for x in dims[:5])
        options = dict(attention_option(x) for x in dims[5:] if "=" in x)
        q, k, v = (torch.randn(bsz, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(bsz, h, max(policy.lse_rows(n, g) for g in (2, 3)), device="cuda")
        if "--only-sdpa" not in argv:
            for _ in range(3):
                if options:
                    att._launch(q, k, v, o, lse, bool(causal), None, **options)
                else:
                    tkpy_kernels.attention(q, k, v, causal=bool(causal))
        backends = [SDPBackend.CUDNN_ATTENTION] + ([SDPBackend.FLASH_ATTENTION] if "--flash" in argv else [])
        for backend in backends:
            with sdpa_kernel([backend]):
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    elif what == "attention_bwd":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from tkpy.kernels.attention_backward import attention_backward
        bsz, h, n, d, causal = (int(x) for x in dims[:5])
        q, k, v, do = (torch.randn(bsz, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(4))
        if "--only-sdpa" not in argv:
            o, lse = tkpy_kernels.attention(q, k, v, causal=bool(causal), return_lse=True)
            for _ in range(3):
                attention_backward(do, q, k, v, o, lse, bool(causal))
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        backends = [SDPBackend.CUDNN_ATTENTION] + ([SDPBackend.FLASH_ATTENTION] if "--flash" in argv else [])
        for backend in backends:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                for _ in range(3):
                    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    elif what == "rotary":
        from tkpy.kernels import rotary
        bsz, seq, hq, hk, d = (int(x) for x in dims[:5])
        q = torch.randn(bsz, seq, hq, d, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(bsz, seq, hk, d, dtype=torch.bfloat16, device="cuda")
        cos, sin = (torch.randn(seq, d // 2, device="cuda") for _ in range(2))
        for _ in range(3):
            rotary(q, k, cos, sin)
        compiled = torch.compile(eager_rotary)
        for _ in range(3):
            compiled(q, k, cos, sin)
    elif what in ("rms_norm", "layer_norm"):
        import torch.nn.functional as F

        from tkpy import kernels
        rows, width = int(dims[0]), int(dims[1])
        x = torch.randn(rows, width, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(width, dtype=torch.bfloat16, device="cuda")
        ours, theirs = getattr(kernels, what), getattr(F, what)
        compiled = torch.compile(lambda x, w: theirs(x, (width,), w))
        for _ in range(3):
            ours(x, (width,), w)
        for _ in range(3):
            compiled(x, w)
    elif what == "memory":
        memory_case(*dims)
    else:
        raise SystemExit(f"unknown case {what!r}")
    torch.cuda.synchronize()


MEMORY_OPS = ("copy", "rms", "rms+residual", "layer", "layer+residual", "softmax", "softmax_f32", "swiglu", "geglu",
              "rotary", "cross_entropy")


def memory_case(op: str, direction: str = "fwd", rows: str = "16384", width: str = "4096", impl: str = "tkpy") -> None:
    """tkpy's memory-bound op `op` on rows x width bf16 inputs (rotary: q (4, 4096, 32, 128) and k of 8 heads), 3
    times: its forward ("fwd"), or after one forward its backward through autograd ("bwd"; cross_entropy "f+b": the
    forward writing the gradient, and the backward); "copy" is y = x * 1 (torch's elementwise kernel). impl
    "compile": torch.compile of torch's own function instead (norms, softmax, the GLUs, cross-entropy), the peer
    the benchmark compares with."""
    import torch

    if impl == "compile" and op in ("copy", "rotary"):
        raise SystemExit(f"memory {op}: no compiled peer here (profile_cases.py rotary ... times torch.compile's)")
    ops = compiled_peers() if impl == "compile" else tkpy_kernels
    rows, width = int(rows), int(width)
    dtype = torch.float32 if op == "softmax_f32" else torch.bfloat16
    make = lambda *shape: torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=direction != "fwd")  # noqa
    if op == "copy":
        x, y = make(rows, width).detach(), torch.empty(rows, width, device="cuda", dtype=dtype)
        run = lambda: (torch.mul(x, 1.0, out=y),)  # noqa: E731   (a kernel: copy_ of one dtype is a memcpy)
        inputs = ()
    elif op == "rotary":
        q, k = make(4, 4096, 32, 128), make(4, 4096, 8, 128)
        cos, sin = (torch.randn(4096, 64, device="cuda") for _ in range(2))
        inputs, run = (q, k), lambda: ops.rotary(q, k, cos, sin)
    elif op == "cross_entropy":
        x, t = make(rows, width), torch.randint(0, width, (rows,), device="cuda")
        inputs, run = (x,), lambda: (ops.cross_entropy(x, t),)
    elif op in ("swiglu", "geglu"):
        g, u = make(rows, width), make(rows, width)
        inputs, run = (g, u), lambda: (getattr(ops, op)(g, u),)
    elif op.startswith("softmax"):
        x = make(rows, width)
        inputs, run = (x,), lambda: (ops.softmax(x),)
    else:
        x, w, b = make(rows, width), make(width), make(width)
        r = make(rows, width) if "residual" in op else None
        if op.startswith("rms"):
            inputs, run = (x, w) + ((r,) if r is not None else ()), lambda: ops.rms_norm(x, (width,), w, 1e-6,
                                                                                          residual=r)
        else:
            inputs = (x, w, b) + ((r,) if r is not None else ())
            run = lambda: ops.layer_norm(x, (width,), w, b, 1e-5, residual=r)  # noqa: E731
    if direction == "fwd" or op == "cross_entropy" and direction == "f+b":
        for _ in range(3):
            out = run()
            if direction == "f+b":
                torch.autograd.grad(out[0], inputs)
        return
    outputs = run()
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    grads = [torch.randn_like(y) for y in outputs]
    for _ in range(3):
        torch.autograd.grad(outputs, inputs, grads, retain_graph=True)


def compiled_peers():
    """torch.compile of torch's functions, under the names memory_case calls tkpy's by."""
    import types

    import torch
    import torch.nn.functional as F

    def rms_norm(x, shape, w, eps, residual=None):
        h = x + residual if residual is not None else x
        return (F.rms_norm(h, shape, w, eps), h) if residual is not None else F.rms_norm(h, shape, w, eps)

    def layer_norm(x, shape, w, b, eps, residual=None):
        h = x + residual if residual is not None else x
        return (F.layer_norm(h, shape, w, b, eps), h) if residual is not None else F.layer_norm(h, shape, w, b, eps)

    functions = dict(rms_norm=rms_norm, layer_norm=layer_norm, softmax=lambda x: torch.softmax(x, -1),
                     swiglu=lambda g, u: F.silu(g) * u, geglu=lambda g, u: F.gelu(g) * u,
                     cross_entropy=lambda x, t: F.cross_entropy(x.float(), t))
    return types.SimpleNamespace(**{name: torch.compile(fn, dynamic=False) for name, fn in functions.items()})


def eager_rotary(q, k, cos, sin):
    """GPT-NeoX rotary in torch ops (what torch.compile fuses), for the profiler's comparison."""
    import torch
    c, s = (t[None, :, None, :].float() for t in (cos, sin))
    def rot(x):
        a, b = x.float().chunk(2, -1)
        return torch.cat((a * c - b * s, b * c + a * s), -1).to(x.dtype)
    return rot(q), rot(k)


def attention_option(text: str) -> tuple:
    """key=value of an attention option: ints, True/False, or else the string as it is."""
    key, value = text.split("=")
    if value in ("True", "False"):
        return key, value == "True"
    return key, int(value) if value.lstrip("-").isdigit() else value


if __name__ == "__main__":
    main(sys.argv[1:])
