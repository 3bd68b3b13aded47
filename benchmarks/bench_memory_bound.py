"""Memory-bound kernels on the GPU: tkpy's rms_norm and layer_norm (with and without the fused residual), forward and
backward, against torch eager, torch.compile of the same function, and the copy bandwidth, all in the same run; then
softmax (bf16 and fp32, SOFTMAX_OPS) over its own sweep of widths; swiglu, geglu and rotary (OTHER_OPS) the same way;
then cross-entropy (XENT_SHAPES), its forward alone (the loss, no gradient) and the forward with the backward
(loss.backward(): tkpy's forward writes the gradient, its backward of a factor of 1 reads nothing).

GB/s counts the bytes each kernel must read and write once: forward, x (and the residual) in, y (and residual_out)
out, the weight (and bias) once, the fp32 statistics (rstd, and mean for layer norm) out; backward, x (h with the
residual), dy (and residual_out's gradient) and the statistics in, dx out (it is the residual's gradient too), the
weight in and its (and the bias's) gradient out once. Copy: y.copy_(x) over the input's bytes (read + write), the
ceiling a streaming kernel can reach. Times: GPU time per call from CUDA-graph replays (benchmarks/timing.py);
the backward alone, from a forward recorded once (tkpy: its backward operator on the saved statistics; torch:
autograd.grad of the recorded graph, retained; OTHER_OPS: autograd.grad of each one's recorded graph). OTHER_OPS'
bytes: swiglu/geglu of gate and up (rows x width each) forward gate, up in, out out (3), backward gate, up, dout in,
dgate, dup out (5); rotary of q (B, S, 32, 128) and k (B, S, 8, 128), each way q and k in and out and the cos/sin
tables (S x 64 fp32) in. Softmax's bytes: forward x in, y out; backward y, dy in, dx out. Cross-entropy's bytes:
the logits in (bf16) and the int64 targets, and for the forward with the backward the logits' gradient out (its loss
and per-row statistics are noise). Cases: 16384 x 4096 bf16, and a sweep of widths from 1k to 64k at the same 64M
elements (rows = 2^26 / width; softmax's from 128 to 256k, bf16 and fp32). Each row also gives the largest relative
difference of tkpy's output from eager's (softmax's: of its norm).

    PYTHONPATH=. python3 benchmarks/bench_memory_bound.py [--quick] [--variants [NAME]] [--no-compile] [--only GROUP]
        --quick: 16384 x 4096 only (cross-entropy's too); --variants: tkpy's kernel variants per width too (for
        norm_policy's, softmax_policy's and rotary_policy's tables; NAME: those whose name holds it alone);
        --no-compile: without torch.compile (its compiles take most of the run's time);
        --only norms|softmax|other|cross-entropy: one group of ops (a sweep of all of them passes a 10-minute limit)
        (the table on stdout; $OUT/memory_bound.json and $OUT/memory_bound.png when OUT is set)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADLINE = (16384, 4096)
ELEMENTS = 1 << 26                                # the sweep's cases: rows x width = 64M elements (128 MB in bf16)
SWEEP = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
OPS = ("rms", "rms+residual", "layer", "layer+residual")
# tkpy variants (NormConfig fields over the policy's choice) timed by --variants
VARIANTS = {"prefetch": dict(prefetch=True), "no prefetch": dict(prefetch=False, stages=0),
            "2 rows ahead in shared memory": dict(prefetch=False, stages=2),
            "3 rows ahead in shared memory": dict(prefetch=False, stages=3),
            "weight from L2": dict(weight_in_registers=False), "1 block/SM": dict(blocks_per_sm=1),
            "2 blocks/SM": dict(blocks_per_sm=2), "3 blocks/SM": dict(blocks_per_sm=3),
            "pieces in shared memory, 2 blocks/SM": dict(stage=True, blocks_per_sm=2),     # (the forward's)
            "statistics a row ahead": dict(stats_ahead=True)}                             # (the backward's)
SOFTMAX_OPS = {"softmax": "bfloat16", "softmax f32": "float32"}      # op -> the tensors' torch dtype
SOFTMAX_SWEEP = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
# SoftmaxConfig fields over the policy's choice, timed by --variants (a variant a config refuses: nan)
SOFTMAX_VARIANTS = {"prefetch": dict(prefetch=True), "no prefetch": dict(prefetch=False),
                    "1 block/SM": dict(blocks_per_sm=1), "2 blocks/SM": dict(blocks_per_sm=2),
                    "4 blocks/SM": dict(blocks_per_sm=4), "x / y staged": dict(stage=True),
                    "y and dy staged, 2 blocks/SM": dict(stage=True, stage_dy=True, blocks_per_sm=2),
                    "2 rows ahead in shared memory": dict(stages=2), "a block a row group": dict(persistent=False)}
# ... where the policy takes the tile kernels: more warps a block, or the split kernels' warp a row
SOFTMAX_TILE_VARIANTS = {"tile, 8 warps": dict(rows_per_block=128),
                         "a warp a row": dict(tile=False, rows_per_block=8, blocks_per_sm=4, prefetch=True)}
# ... where it packs rows (a chunk of whole rows a warp): the tile kernels, two chunks, the other grid, the prefetch
SOFTMAX_PACKED_VARIANTS = {"the tile kernels": dict(tile=True, packed=0, rows_per_block=64, blocks_per_sm=1,
                                                    persistent=True),
                           "two chunks a warp": dict(packed=2), "the persistent grid": dict(persistent=True),
                           "a block a row group": dict(persistent=False), "prefetch": dict(prefetch=True)}


def main(sweep: bool = True, variants: str | None = None, compiled: bool = True, only: str | None = None) -> list[dict]:
    """The table (see the module's docstring); `variants`: None none, else those whose name holds it ("" all)."""
    import torch

    from benchmarks.bench_attention import save
    copy_cache: dict = {}
    print_header()
    rows = []
    groups = {"norms": (OPS, SWEEP, case_row, variant_times),
              "softmax": (SOFTMAX_OPS, SOFTMAX_SWEEP, softmax_row, softmax_variant_times)}
    for ops, widths, measure, time_variants in (groups[g] for g in groups if only in (None, g)):
        cases = [HEADLINE] + ([(ELEMENTS // n, n) for n in widths if (ELEMENTS // n, n) != HEADLINE] if sweep else [])
        for rows_, width in cases:
            for op in ops:
                for direction in ("forward", "backward"):
                    row = measure(op, direction, rows_, width, compiled, copy_cache)
                    if variants is not None:
                        row["variants"] = time_variants(op, direction, rows_, width, row["bytes"], variants)
                    rows.append(row)
                    print_row(row, flush=True)
                torch.cuda.empty_cache()
    for op in OTHER_OPS if only in (None, "other") else ():
        for direction in ("forward", "backward"):
            row = other_row(op, direction, compiled, copy_cache)
            if variants is not None and op == "rotary":
                row["variants"] = rotary_variant_times(direction, row["bytes"], variants)
            rows.append(row)
            print_row(row, flush=True)
    for shape in (XENT_SHAPES if sweep else XENT_SHAPES[:1]) if only in (None, "cross-entropy") else ():
        for direction in ("forward", "forward+backward"):
            row = cross_entropy_row(direction, *shape, compiled, copy_cache)
            rows.append(row)
            print_row(row, flush=True)
        torch.cuda.empty_cache()
    out_dir = save("memory_bound.json", rows)
    if out_dir:
        plot(rows, out_dir / "memory_bound.png")
    return rows


OTHER_OPS = ("swiglu", "geglu", "rotary")
GLU_SHAPE = (16384, 4096)                         # (rows, width) of gate and of up
ROTARY_SHAPE = (8, 2048)                          # (batch, seq) of q (32 heads) and k (8 heads) at head dim 128
# rotary kernel variants (RotaryConfig fields over the policy's choice: 4 chunks, 1 position, 8 warps x 4 blocks, a
# warp a position one each)
# timed by --variants, for kernels/rotary_policy.py's table
ROTARY_VARIANTS = {"2 chunks": dict(chunks=2), "8 chunks, 2 blocks/SM": dict(chunks=8, blocks_per_sm=2),
                   "2 positions, 2 blocks/SM": dict(positions=2, blocks_per_sm=2), "2 blocks/SM": dict(blocks_per_sm=2),
                   "3 blocks/SM": dict(blocks_per_sm=3), "16 warps x 2 blocks": dict(warps=16, blocks_per_sm=2),
                   "4 warps x 4 blocks": dict(warps=4),
                   "1 chunk, 16 warps x 4 blocks (full occupancy)": dict(chunks=1, warps=16),
                   "the persistent grid": dict(persistent=True)}


def other_row(op: str, direction: str, compiled: bool, copy_cache: dict) -> dict:
    """GB/s of swiglu, geglu or rotary (forward, or the backward of a forward recorded once) for tkpy, torch eager
    and torch.compile, with the copy bandwidth of the 16384 x 4096 headline."""
    import torch
    import torch.nn.functional as F

    from benchmarks.bench_attention_bwd import forward_on_side_stream
    from benchmarks.timing import median_ms
    from tkpy.kernels import geglu, rotary, swiglu
    make = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    if op == "rotary":
        half = 64
        *args, cos, sin = rotary_inputs()
        args = tuple(args)
        big = sum(x.numel() * 2 for x in args)
        nbytes = 2 * big + 2 * cos.numel() * 4
        ours = lambda q, k: rotary(q, k, cos, sin)  # noqa: E731

        def eager(q, k):
            def rot(x):
                x1, x2 = x[..., :half].float(), x[..., half:].float()
                c, s_ = cos[:, None, :], sin[:, None, :]
                return torch.cat([x1 * c - x2 * s_, x2 * c + x1 * s_], -1).to(x.dtype)
            return rot(q), rot(k)
    else:
        rows, width = GLU_SHAPE
        args = (make(rows, width), make(rows, width))
        nbytes = rows * width * 2 * (3 if direction == "forward" else 5)
        ours = swiglu if op == "swiglu" else geglu
        eager = (lambda g, u: F.silu(g) * u) if op == "swiglu" else (lambda g, u: F.gelu(g) * u)
    rows_, width_ = (ROTARY_SHAPE[0] * ROTARY_SHAPE[1], 40 * 128) if op == "rotary" else GLU_SHAPE
    row = {"op": op, "direction": direction, "rows": rows_, "width": width_, "bytes": nbytes,
           "copy": copy_gbps(copy_cache, *HEADLINE, torch.bfloat16)}
    with torch.no_grad():
        reference = torch.cat([y.float().flatten() for y in _tuple(eager(*args))])
        mine = torch.cat([y.float().flatten() for y in _tuple(ours(*args))])
        row["diff_vs_eager"] = ((mine - reference).norm() / reference.norm()).item()
    def backward(name, fn):
        outputs = _tuple(forward_on_side_stream(lambda: fn(*args)))
        grads = [torch.randn_like(y) for y in outputs]
        return median_ms(lambda: torch.autograd.grad(outputs, args, grads, retain_graph=True))
    time_implementations(row, implementations(ours, eager, compiled), args, backward)
    return row


XENT_SHAPES = ((16384, 4096), (4096, 131072), (4096, 262144))   # (rows, classes): the headline; Llama 3's and
# Gemma's vocabularies (128256, 262144) in round numbers


def cross_entropy_bytes(direction: str, rows: int, classes: int) -> int:
    """What cross-entropy must read and write once: the bf16 logits and the int64 targets in, and (with the
    backward) the logits' gradient out."""
    logits = rows * classes * 2
    return logits * (1 if direction == "forward" else 2) + rows * 8


def cross_entropy_functions() -> tuple:
    """(tkpy's, torch's) mean cross-entropy of bf16 logits and int64 targets (torch.compile compiles torch's)."""
    import torch.nn.functional as F

    from tkpy.kernels import cross_entropy
    return (lambda x, t: cross_entropy(x, t)), (lambda x, t: F.cross_entropy(x, t))


def cross_entropy_row(direction: str, rows: int, classes: int, compiled: bool, copy_cache: dict) -> dict:
    """GB/s of cross-entropy's forward (the loss, under no_grad) or forward with backward (torch.autograd.grad of
    the loss, both in the timed graph) for tkpy, torch eager and torch.compile, with the copy bandwidth of the
    logits."""
    import torch

    from benchmarks.timing import median_ms
    x = torch.randn(rows, classes, device="cuda", dtype=torch.bfloat16).mul_(2).requires_grad_()
    t = torch.randint(0, classes, (rows,), device="cuda")
    row = {"op": "cross_entropy", "direction": direction, "rows": rows, "width": classes,
           "bytes": cross_entropy_bytes(direction, rows, classes)}
    if (rows, classes) not in copy_cache:
        src = x.detach()
        dst = torch.empty_like(src)
        copy_cache[rows, classes] = 2 * src.numel() * 2 / median_ms(lambda: dst.copy_(src)) / 1e6
        del dst
    row["copy"] = copy_cache[rows, classes]
    ours, eager = cross_entropy_functions()
    with torch.no_grad():
        reference = eager(x, t).float()
        row["diff_vs_eager"] = ((ours(x, t).float() - reference).abs() / reference.abs()).item()
    time_implementations(row, implementations(ours, eager, compiled), (x, t),
                         lambda name, fn: median_ms(lambda: torch.autograd.grad(fn(x, t), x)))
    return row


def rotary_inputs():
    """q, k (ROTARY_SHAPE's positions, 32 and 8 heads of 128, bf16) and the fp32 cos and sin tables."""
    import torch

    (b, seq), half = ROTARY_SHAPE, 64
    make = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    angle = torch.arange(seq, device="cuda")[:, None] * 1e-4 ** (torch.arange(half, device="cuda") / half)
    return make(b, seq, 32, 2 * half), make(b, seq, 8, 2 * half), angle.cos(), angle.sin()


def rotary_variant_times(direction: str, nbytes: int, only: str = "") -> dict:
    """GB/s of the rotary kernel's variants (ROTARY_VARIANTS, over the policy's choice), the launch alone (the
    backward: the inverse rotation)."""
    import torch

    from tkpy.kernels import rotary_op
    q, k, cos, sin = rotary_inputs()
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    with torch.no_grad():
        return variant_gbps(ROTARY_VARIANTS, nbytes, lambda options: lambda: rotary_op.launch(
            q, k, cos, sin, False, 0, direction == "backward", q_out, k_out, options), only)


def variant_gbps(variants: dict, nbytes: int, launch_of, only: str = "") -> dict:
    """GB/s of nbytes for each variant (name -> options; those whose name holds `only`) of a kernel,
    launch_of(options) the call timed; nan (and a line saying why) where one fails."""
    from benchmarks.timing import median_ms
    out = {}
    for name, options in ((n, o) for n, o in variants.items() if only in n):
        try:
            out[name] = nbytes / median_ms(launch_of(options)) / 1e6
        except Exception as e:
            out[name] = float("nan")
            print(f"  variant {name} failed: {str(e).splitlines()[0][:160]}")
    return out


def implementations(ours, eager, compiled: bool) -> dict:
    """The functions a row times: tkpy's, torch eager's and (compiled) torch.compile of eager's."""
    import torch

    impls = {"tkpy": ours, "eager": eager}
    if compiled:
        # Each case's eager function shares its code with the other cases': without the reset, dynamo's
        # recompile limit (8 a code object) leaves the later cases running eagerly under the "compile" name.
        torch._dynamo.reset()
        impls["compile"] = torch.compile(eager, dynamic=False)
    return impls


def time_implementations(row: dict, impls: dict, args: tuple, backward) -> None:
    """row[name] = GB/s of row["bytes"] for each implementation: its forward under no_grad, or backward(name, fn)'s
    milliseconds; nan (and a line saying why) where one fails the case."""
    import torch

    from benchmarks.timing import median_ms
    for name, fn in impls.items():
        try:
            if row["direction"] == "forward":
                with torch.no_grad():
                    ms = median_ms(lambda: fn(*args))
            else:
                ms = backward(name, fn)
            row[name] = row["bytes"] / ms / 1e6
        except Exception as e:            # a backend that fails this case: the row records it
            print(f"  {name} {row['op']} {row['direction']} {row['rows']}x{row['width']} failed: "
                  f"{str(e).splitlines()[0][:160]}")
            row[name] = float("nan")


def _tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def inputs(op: str, rows: int, width: int):
    import torch

    make = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    x, dy = make(rows, width), make(rows, width)
    w, b = (make(width) * 0.1 + 1).requires_grad_(), make(width).requires_grad_()
    r = make(rows, width) if "residual" in op else None
    return x.requires_grad_(), r.requires_grad_() if r is not None else None, w, b, dy


def torch_function(op: str, width: int):
    """The eager function of op (what torch.compile compiles too): (y,) or (y, h) of x, residual, weight, bias."""
    import torch.nn.functional as F

    def fn(x, r, w, b):
        h = x + r if r is not None else x
        y = F.rms_norm(h, (width,), w, 1e-6) if op.startswith("rms") else F.layer_norm(h, (width,), w, b, 1e-5)
        return (y, h) if r is not None else (y,)
    return fn


def tkpy_function(op: str, width: int):
    from tkpy.kernels import layer_norm, rms_norm

    def fn(x, r, w, b):
        if op.startswith("rms"):
            out = rms_norm(x, (width,), w, 1e-6, residual=r)
        else:
            out = layer_norm(x, (width,), w, b, 1e-5, residual=r)
        return out if r is not None else (out,)
    return fn


def bytes_of(op: str, direction: str, rows: int, width: int) -> int:
    """What each kernel must read and write once (see the module docstring), in bytes."""
    big, vec, stats = rows * width * 2, width * 2, rows * 4 * (2 if op.startswith("layer") else 1)
    residual = "residual" in op
    vectors = 2 if op.startswith("layer") else 1                   # weight (and bias)
    if direction == "forward":
        return big * (2 + 2 * residual) + vec * vectors + stats
    return big * (3 + residual) + stats + vec * (1 + vectors)         # x, dy, (dres), dx; w in, dw (db) out


def case_row(op: str, direction: str, rows: int, width: int, compiled: bool, copy_cache: dict) -> dict:
    import torch

    x, r, w, b, dy = inputs(op, rows, width)
    nbytes = bytes_of(op, direction, rows, width)
    row = {"op": op, "direction": direction, "rows": rows, "width": width, "bytes": nbytes,
           "copy": copy_gbps(copy_cache, rows, width, x.dtype)}
    ours = tkpy_function(op, width)
    eager = torch_function(op, width)
    args = (x, r, w, b)
    with torch.no_grad():
        reference = eager(*args)[0].float()
        row["diff_vs_eager"] = ((ours(*args)[0].float() - reference).norm() / reference.norm()).item()
    time_implementations(row, implementations(ours, eager, compiled), args,
                         lambda name, fn: backward_ms(name, op, fn, args, dy, width))
    del x, r, w, b, dy
    return row


def backward_ms(name: str, op: str, fn, args, dy, width: int) -> float:
    """GPU ms of the backward alone: tkpy's backward operator on the forward's saved statistics; torch's autograd
    graph of a forward recorded once (on a side stream, so that a CUDA graph can capture its backward)."""
    import torch

    from benchmarks.bench_attention_bwd import forward_on_side_stream
    from benchmarks.timing import median_ms
    x, r, w, b = args
    dres = torch.randn_like(x) if r is not None else None
    if name == "tkpy":
        with torch.no_grad():
            h = (x + r) if r is not None else x.detach()
            if op.startswith("rms"):
                _, _, rstd = torch.ops.tkpy.rms_norm(h, [width], w, None, 1e-6)
                return median_ms(lambda: torch.ops.tkpy.rms_norm_backward(dy, dres, h, w, rstd, [width]))
            _, _, mean, rstd = torch.ops.tkpy.layer_norm(h, [width], w, b, None, 1e-5)
            return median_ms(lambda: torch.ops.tkpy.layer_norm_backward(dy, dres, h, w, mean, rstd, [width], True))
    outputs = forward_on_side_stream(lambda: fn(*args))
    wrt = [t for t in (x, r, w, b if op.startswith("layer") else None) if t is not None]
    grads = [dy] + ([dres] if r is not None else [])
    return median_ms(lambda: torch.autograd.grad(outputs, wrt, grads, retain_graph=True))


def variant_times(op: str, direction: str, rows: int, width: int, nbytes: int, only: str = "") -> dict:
    """GB/s of tkpy's kernel variants (VARIANTS, over the policy's choice; the pieces in shared memory the
    forward's only) for one case, the forward or backward launch alone."""
    variants = {k: v for k, v in VARIANTS.items() if direction == "forward" or not v.get("stage")}
    return variant_gbps(variants, nbytes, norm_launch_of(op, direction, rows, width), only)


def norm_launch_of(op: str, direction: str, rows: int, width: int):
    """launch_of(options): a function of no arguments that launches tkpy's norm `op` one way alone (the backward
    on statistics of a forward run here), with NormConfig fields `options` over the policy's."""
    import torch

    from tkpy.kernels import norm_launch
    x, r, w, b, dy = inputs(op, rows, width)
    kind = "rms" if op.startswith("rms") else "layer"
    x, w, bias = x.detach(), w.detach(), b.detach() if kind == "layer" else None
    residual = r.detach() if r is not None else None
    with torch.no_grad():
        h = (x + residual) if residual is not None else x
        _, _, mean, rstd = norm_launch.forward(kind, h, [width], w, bias, None, 1e-5)

    dres = torch.randn_like(dy) if residual is not None else None      # (its own tensor: not dy again, from L2)

    def launch_of(options):
        if direction == "backward":
            return lambda: norm_launch.backward(kind, dy, dres, h, w, mean, rstd, [width], kind == "layer", options)
        return lambda: norm_launch.forward(kind, x, [width], w, bias, residual, 1e-5, options)
    return launch_of


def copy_gbps(cache: dict, rows: int, width: int, dtype) -> float:
    """GB/s of a device-to-device copy of a (rows, width) tensor of `dtype` (read + write; timed once a shape)."""
    import torch

    from benchmarks.timing import median_ms
    key = (rows, width, dtype)
    if key not in cache:
        src = torch.randn(rows, width, device="cuda", dtype=dtype)
        dst = torch.empty_like(src)
        cache[key] = 2 * src.numel() * src.element_size() / median_ms(lambda: dst.copy_(src)) / 1e6
    return cache[key]


def softmax_bytes(direction: str, rows: int, width: int, element_size: int) -> int:
    """What softmax must read and write once: x in, y out; backward y and dy in, dx out."""
    return rows * width * element_size * (2 if direction == "forward" else 3)


def softmax_row(op: str, direction: str, rows: int, width: int, compiled: bool, copy_cache: dict) -> dict:
    """GB/s of softmax (forward, or the backward of a forward recorded once; tkpy's: its backward operator on its
    forward's y) for tkpy, torch eager (torch.softmax) and torch.compile of it, with the copy of the same tensor."""
    import torch

    from benchmarks.bench_attention_bwd import forward_on_side_stream
    from benchmarks.timing import median_ms
    from tkpy.kernels import softmax
    x = torch.randn(rows, width, device="cuda", dtype=getattr(torch, SOFTMAX_OPS[op])) * 3
    x.requires_grad_()
    dy = torch.randn_like(x)
    row = {"op": op, "direction": direction, "rows": rows, "width": width,
           "bytes": softmax_bytes(direction, rows, width, x.element_size()),
           "copy": copy_gbps(copy_cache, rows, width, x.dtype)}

    def eager(t):
        return torch.softmax(t, -1)
    with torch.no_grad():
        reference = eager(x).float()
        row["diff_vs_eager"] = ((softmax(x).float() - reference).norm() / reference.norm()).item()

    def backward(name, fn):
        if name == "tkpy":
            with torch.no_grad():
                y = softmax(x)
            return median_ms(lambda: torch.ops.tkpy.softmax_backward(dy, y))
        y = forward_on_side_stream(lambda: fn(x))
        return median_ms(lambda: torch.autograd.grad(y, x, dy, retain_graph=True))
    time_implementations(row, implementations(softmax, eager, compiled), (x,), backward)
    return row


def softmax_variants(direction: str, width: int, dtype: str) -> dict:
    """The variants --variants times for a case: the tile ones where the policy takes the tile kernels, the packed
    ones where it packs rows, else the split ones (dy staged for the backward only, the rows ahead through shared
    memory for the forward only)."""
    from tkpy.kernels import softmax_policy
    if softmax_policy.choice(direction, width, dtype) is softmax_policy.TILE:
        return SOFTMAX_TILE_VARIANTS
    if width in softmax_policy.PACKED_WIDTHS:               # ("two chunks": twice the policy's rows a warp)
        packed = softmax_policy.config_for(direction, width, dtype).packed
        return {k: {**v, "packed": 2 * packed} if k == "two chunks a warp" else v
                for k, v in SOFTMAX_PACKED_VARIANTS.items()}
    return {k: v for k, v in SOFTMAX_VARIANTS.items()
            if not (v.get("stage_dy") and direction == "forward") and not (v.get("stages") and direction == "backward")}


def softmax_variant_times(op: str, direction: str, rows: int, width: int, nbytes: int, only: str = "") -> dict:
    """GB/s of tkpy's softmax variants (SOFTMAX_VARIANTS, over the policy's choice), the launches alone."""
    import torch

    from tkpy.kernels import softmax_op
    x = torch.randn(rows, width, device="cuda", dtype=getattr(torch, SOFTMAX_OPS[op])) * 3
    dy = torch.randn_like(x)
    y = softmax_op.forward(x)
    variants = softmax_variants(direction, width, softmax_op.DTYPES[x.dtype])
    if direction == "forward":
        return variant_gbps(variants, nbytes, lambda options: lambda: softmax_op.forward(x, options), only)
    return variant_gbps(variants, nbytes, lambda options: lambda: softmax_op.backward(dy, y, options), only)


def print_header() -> None:
    print(f"{'op':>15} {'dir':>4} {'rows x width':>13} | {'tkpy':>6} {'eager':>6} {'compile':>7} {'copy':>6} | "
          f"{'/copy':>5} {'/comp':>5} {'/eager':>6} | {'diff':>7}   (GB/s)")


def print_row(r: dict, flush: bool = False) -> None:
    nan = float("nan")
    compiled = r.get("compile", nan)
    direction = {"forward": "fwd", "backward": "bwd", "forward+backward": "f+b"}[r["direction"]]
    text = (f"{r['op']:>15} {direction:>4} {r['rows']:>6}x{r['width']:<6} | {r['tkpy']:>6.0f} "
            f"{r['eager']:>6.0f} {compiled:>7.0f} {r['copy']:>6.0f} | {r['tkpy'] / r['copy']:>5.2f} "
            f"{r['tkpy'] / compiled:>5.2f} {r['tkpy'] / r['eager']:>6.2f} | {r['diff_vs_eager']:>7.1e}")
    if r.get("variants"):
        text += "  variants: " + ", ".join(f"{k} {v:.0f}" for k, v in r["variants"].items())
    print(text, flush=flush)


PANELS = (("rms norm", ("rms", "rms+residual"), " + residual"), ("layer norm", ("layer", "layer+residual"), " + residual"),
          ("softmax", ("softmax", "softmax f32"), " fp32"))    # (title, (solid op, dashed op), the dashed's label)


def plot(rows: list[dict], path: Path) -> None:
    """GB/s against the row width (the sweep's 64M-element cases): rms and layer norm (with the residual dashed) and
    softmax (fp32 dashed), forward and backward, tkpy, torch eager, torch.compile and the copy; skipped without
    matplotlib."""
    from benchmarks.plotting import pyplot
    plt = pyplot("memory_bound.png")
    if plt is None:
        return
    fig, axes = plt.subplots(len(PANELS), 2, figsize=(12, 4 * len(PANELS)))
    for (i, (title, ops, dashed)), (j, direction) in ((a, b) for a in enumerate(PANELS)
                                                      for b in enumerate(("forward", "backward"))):
        ax = axes[i][j]
        for op, style in zip(ops, ("-", "--")):
            case = sorted((r for r in rows if r["op"] == op and r["direction"] == direction
                           and r["rows"] * r["width"] == ELEMENTS), key=lambda r: r["width"])
            widths = [r["width"] for r in case]
            for key, name in (("tkpy", "tkpy"), ("eager", "torch eager"), ("compile", "torch.compile")):
                if any(key in r for r in case):
                    ax.plot(widths, [r.get(key, float("nan")) for r in case], style, marker="o",
                            label=f"{name}{dashed if style == '--' else ''}")
            if style == "-":
                ax.plot(widths, [r["copy"] for r in case], ":", color="black", label="copy")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{title} {direction}, bf16, 64M elements, H200")
        ax.set_ylabel("GB/s")
        ax.set_xlabel("row width")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    group = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    if group not in (None, "norms", "softmax", "other", "cross-entropy"):
        sys.exit(f"--only takes norms, softmax, other or cross-entropy, got {group!r}")
    variants = None
    if "--variants" in sys.argv:                 # (a name after it: those variants alone)
        after = sys.argv[sys.argv.index("--variants") + 1:]
        variants = after[0] if after and not after[0].startswith("--") else ""
    main(sweep="--quick" not in sys.argv, variants=variants, compiled="--no-compile" not in sys.argv, only=group)
