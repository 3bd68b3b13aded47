"""The row kernels' splits swept on the GPU: the evidence behind kernels/cross_entropy_policy.py's,
kernels/norm_policy.py's and kernels/glu_policy.py's tables (RESULTS.md runs 274-275, 305+).

    PYTHONPATH=. python3 benchmarks/sweep_row_splits.py cross-entropy [--dtype bf16|f32] [--widths 4096,8192]
    PYTHONPATH=. python3 benchmarks/sweep_row_splits.py norms [--widths 4096] [--ops rms,layer] [--directions forward]
        [--weight-from-l2] [--sums-in-shared]
    PYTHONPATH=. python3 benchmarks/sweep_row_splits.py glu [--widths 4096] [--directions backward]
    PYTHONPATH=. python3 benchmarks/sweep_row_splits.py softmax [--dtype bf16|f32] [--widths 4096]
        [--directions forward]

For each width, every split of the RowSplit fields (warps a row, rows a block, cluster, blocks an SM, prefetch) that the
config takes and that keeps a lane's piece within its limits is compiled (in parallel threads, NVRTC) and its launches
timed (CUDA-graph replays): cross-entropy's forward (mean: its prologue and kernel) for the loss alone and with the
gradient, also with the rows through shared memory (STAGES) where a split has no prefetch (spilling splits skipped),
over 2^26 logits (at least 2048 rows); the four norms (rms, layer, each with the residual) forward and backward at 2^26
elements, also with the rows in flight through shared memory (STAGES) where a split has no prefetch (and from
STAGED_NORM_WIDTH the pieces there, `stage`: S); swiglu and geglu
forward and backward at 2^26 elements of gate and of up, over their PieceSplit fields (chunks a piece, warps a block,
blocks an SM: GLU_SPLITS); softmax forward and backward at 2^26 elements, also as a grid of every row group
(persistent=False) where a split has no prefetch (the forward: with its next rows through shared memory too, and from
STAGED_PIECE_WIDTH its piece of x there, `stage`: S; the backward's of y and dy, SD), and rows of 8 to 128 elements
as the tile kernels against packed rows (packed_splits). Prints, per case, the policy's fraction of the copy
bandwidth measured in the same run and the best five splits, then the split best for all the cases of a width
together (the largest smallest ratio to each case's best), and for each direction's; writes
$OUT/sweep_<group>_<dtype>_<widths>.json where OUT is set, after each width.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tkpy.frontend.kernel import MAX_WARPS_AN_SM  # noqa: E402

ELEMENTS = 1 << 26
SPLIT_FIELDS = ("warps_per_row", "rows_per_block", "cluster", "blocks_per_sm", "prefetch", "persistent")
LANE_VALUES = (16, 64)          # a lane's piece the sweep tries: from this many values to this many
STAGES = (2, 3)                 # rows in flight through shared memory (the norms' and cross-entropy's `stages`) tried
# Lanes of fewer values (down to FEW_VALUES) only where an SM holds MANY_WARPS or more: torch.compile's f32 softmax
# backward at 2048 elements holds 55 warps an SM of 32 registers, tkpy's 32 of 48 (RESULTS.md run 334)
FEW_VALUES, MANY_WARPS = 8, 48


def splits(width: int, clusters=(1, 2, 4, 8), most_values: int = LANE_VALUES[1]) -> list[dict]:
    """The RowSplit fields tried at `width`: lanes of LANE_VALUES values (FEW_VALUES at MANY_WARPS an SM), blocks of
    4, 8 or 16 warps, 1-4, 6 or 8 of them an SM up to the SM's MAX_WARPS_AN_SM, clusters only past 8192 elements."""
    out = []
    for s, c in itertools.product((1, 2, 4, 8, 16), clusters):
        values = -(-width // (s * c * 256)) * 256 // 32
        few = values < LANE_VALUES[0] and (s > 1 or c > 1)
        if values > most_values or (few and values < FEW_VALUES) or (c > 1 and width <= 8192):
            continue
        for g, b, prefetch in itertools.product((1, 2, 4, 8, 16), (1, 2, 3, 4, 6, 8), (True, False)):
            warps = s * g
            if (c > 1 and g != 1) or warps not in (4, 8, 16) or b * warps > MAX_WARPS_AN_SM \
                    or (few and b * warps < MANY_WARPS):
                continue
            out.append(dict(warps_per_row=s, rows_per_block=g, cluster=c, blocks_per_sm=b, prefetch=prefetch,
                            persistent=True))
    return out


def staged_too(tried: list[dict]) -> dict:
    """name -> split of each split, and of each without the prefetch with the next rows through shared memory
    instead (the configs' `stages`, STAGES of them; the others with none, whatever the policy's table has)."""
    out = {}
    for o in tried:
        out[split_name(o)] = {**o, "stages": 0}
        if not o["prefetch"]:
            out.update({f"{split_name(o)}st{k}": {**o, "stages": k} for k in STAGES})
    return out


def weight_from_l2_too(tried: dict) -> dict:
    """tried, and each split of it with the norms' weight read once a row from L1/L2 instead of held in registers
    (weight_in_registers=False: the registers it frees take more blocks an SM, e.g. rms at 1024 elements 79 -> 55
    with the prefetch under NVRTC), W in its name."""
    return {**tried, **{f"{name}W": {**o, "weight_in_registers": False} for name, o in tried.items()}}


def sums_in_shared_too(tried: dict) -> dict:
    """tried, and each split of it with the norm backward's weight (bias) partial sums in shared memory instead of
    registers (sums_in_shared: room for 32 values a lane beside them, e.g. layer norm at 8192 over 8 warps, 2 blocks
    an SM), ss in its name."""
    return {**tried, **{f"{name}ss": {**o, "sums_in_shared": True} for name, o in tried.items()}}


def one_step_too(tried: list[dict]) -> dict:
    """name -> split of each split, and of each without the prefetch as a grid of every row group too (softmax's
    `persistent=False`)."""
    out = {}
    for o in tried:
        out[split_name(o)] = o
        if not o["prefetch"]:
            twin = {**o, "persistent": False}
            out[split_name(twin)] = twin
    return out


def config_name(c) -> str:
    """A config's split as staged_too (and staged_pieces) names it."""
    return staged_split_name(vars(c))


def split_name(o: dict) -> str:
    """s<warps a row>g<rows a block>c<cluster>b<blocks an SM>p<prefetch>, and n where not persistent (a block a row
    group)."""
    return (f"s{o['warps_per_row']}g{o['rows_per_block']}c{o['cluster']}b{o['blocks_per_sm']}p{int(o['prefetch'])}"
            + ("" if o.get("persistent", True) else "n"))


def best_for_all(cases: dict) -> tuple:
    """(score, split) of the split best for all the cases (name -> {split: fraction}) together."""
    best = {case: max(v for v in got.values()) for case, got in cases.items()}
    common = set.intersection(*(set(got) for got in cases.values()))
    return max(((min(cases[case][n] / best[case] for case in cases), n) for n in common), default=(0.0, None))


def report(case: str, got: dict, policy: str, note: str = "") -> None:
    ranked = sorted(got.items(), key=lambda kv: -kv[1])
    print(f"== {case}: policy {policy} {got.get(policy, float('nan')):.3f} of the copy; {len(got)} ran {note}",
          flush=True)
    for name, fraction in ranked[:5]:
        print(f"   {fraction:.3f} {name}", flush=True)


def cross_entropy(width: int, dtype: str) -> dict:
    """{case: {split: fraction of the copy}} of cross-entropy's forward at `width` classes (the op's launches: the
    mean's prologue and the forward kernel)."""
    import torch

    from benchmarks import bench_memory_bound as bench
    from benchmarks.timing import median_ms
    from tkpy.kernels import cross_entropy_kernel as body, cross_entropy_op as ce
    from tkpy.kernels.cross_entropy_policy import forward_config
    from tkpy.kernels.row_split import placeholder_tensor as placeholder
    from tkpy.tune.parallel import run_all
    rows = max(ELEMENTS // width, 2048)
    x = torch.randn(rows, width, device="cuda", dtype=getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[dtype]))
    t = torch.randint(0, width, (rows,), device="cuda")
    copy = bench.copy_gbps({}, rows, width, x.dtype)
    f32, ticket = placeholder(torch.float32, x.device), torch.zeros(1, device="cuda", dtype=torch.int32)
    cases = {}
    for grad in (False, True):
        configs = {}
        for name, o in staged_too(splits(width)).items():
            try:
                configs[name] = (o, forward_config(width, dtype, "mean", grad, False, None, **o))
            except ValueError:
                pass
        # The forward kernel's arguments as the op's occupancy query passes them (placeholders for the prologue's
        # partials and ticket: the same kernel), for its resources.
        args = (x, t, f32, f32, x.new_empty(1), torch.empty(rows, device="cuda"),
                torch.empty_like(x) if grad else placeholder(x.dtype, x.device), f32, ticket, -100, 0.0)

        def resources(c):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return body.forward_kernel(c).resources(*args)
        compiled = run_all([lambda c=c: resources(c) for _, c in configs.values()], f"{width} grad={grad}",
                           keep=(Exception,))
        got = {}
        for (name, (o, _)), r in zip(configs.items(), compiled):
            if isinstance(r, Exception) or r.spills:
                continue
            ms = median_ms(lambda: ce.forward(x, t, None, -100, 0.0, "mean", grad, o), budget_ms=80)
            got[name] = x.numel() * x.element_size() * (2 if grad else 1) / ms / 1e6 / copy
        case = f"cross_entropy {dtype} {width} {'with the gradient' if grad else 'loss alone'}"
        policy = forward_config(width, dtype, "mean", grad, False, None)
        report(case, got, config_name(policy), f"of {len(configs)} (copy {copy:.0f} GB/s)")
        cases[case] = got
    return cases


def timed_splits(tried: dict, launch_of, nbytes: int, copy: float, what: str) -> dict:
    """{split: fraction of the copy} of each split (name -> options) of launch_of(options), each compiled first in
    parallel threads (those that fail left out), then timed alone."""
    import torch

    from benchmarks import bench_memory_bound as bench
    from tkpy.tune.parallel import run_all
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ran = run_all([launch_of(o) for o in tried.values()], what, keep=(Exception,))
        live = {n: o for (n, o), result in zip(tried.items(), ran) if not isinstance(result, Exception)}
        return {n: v / copy for n, v in bench.variant_gbps(live, nbytes, launch_of).items() if v == v}


# The options of the tables' rows that a plain split has off: set on every split that does not set them itself, so
# that a split runs as its name says whatever the policy's table row for its width has (over_table keeps the
# table's fields that a split does not force).
PLAIN_NORM = dict(stage=False, weight_in_registers=True, sums_in_shared=False)
PLAIN_SOFTMAX = dict(stage=False, stage_dy=False, stages=0)


def plain(tried: dict, fields: dict) -> dict:
    """tried, each split with `fields` (PLAIN_NORM, PLAIN_SOFTMAX) where it does not set them."""
    return {name: {**fields, **o} for name, o in tried.items()}


def norm_splits(width: int, direction: str, policy, weight_from_l2=False, sums_in_shared=False) -> dict:
    """name -> NormConfig fields of the splits tried at `width` in `direction`, the policy's config `policy` among
    them (see norms)."""
    clusters = (1,) if width <= 16384 else (1, 2, 4, 8)          # (a row past 16384 elements spans blocks)
    tried = plain(staged_too(splits(width, clusters=clusters, most_values=32)), PLAIN_NORM)
    if weight_from_l2:
        tried = weight_from_l2_too(tried)
    fields = SPLIT_FIELDS + ("stages", "weight_in_registers", "stage", "sums_in_shared")
    tried[config_name(policy)] = {f: getattr(policy, f) for f in fields}
    backward = direction == "backward"
    if width >= STAGED_NORM_WIDTH[direction]:                 # (the pieces in shared memory: S; the backward's
        tried.update({staged_split_name(o): {**o, "sums_in_shared": False} for o in staged_pieces(    # partial
            width, dict(stage=True), (1, 2, 4, 8) if backward and width >= 8192 else clusters,   # sums: fewer a
            (True,) if backward else (True, False))})                                            # lane over a
    return sums_in_shared_too(tried) if sums_in_shared and backward else tried                   # cluster)


def norms(width: int, ops: tuple | None = None, directions=("forward", "backward"), weight_from_l2=False,
          sums_in_shared=False) -> dict:
    """{case: {split: fraction of the copy}} of the four norms (or `ops` of them), each way (or `directions`), at
    `width` (launches alone, as bench_memory_bound.py's variants); weight_from_l2: each split with the weight from
    L1/L2 too (weight_from_l2_too); sums_in_shared: each backward split with its weight sums in shared memory too
    (sums_in_shared_too)."""
    import torch

    from benchmarks import bench_memory_bound as bench
    from tkpy.kernels.norm_policy import config_for
    rows = ELEMENTS // width
    copy = bench.copy_gbps({}, rows, width, torch.bfloat16)
    cases = {}
    for op in ops or bench.OPS:
        for direction in directions:
            launch_of = bench.norm_launch_of(op, direction, rows, width)
            kind = "rms" if op.startswith("rms") else "layer"
            policy = config_for(kind, direction, width, "bf16", "bf16", kind == "layer", "residual" in op)
            tried = norm_splits(width, direction, policy, weight_from_l2, sums_in_shared)
            got = timed_splits(tried, launch_of, bench.bytes_of(op, direction, rows, width), copy, f"{op} {direction}")
            case = f"{op} {direction} {width}"
            report(case, got, config_name(policy), f"of {len(tried)} (copy {copy:.0f} GB/s)")
            cases[case] = got
    return cases


GLU_SPLITS = [dict(chunks=c, warps=w, blocks_per_sm=b, persistent=p)     # (at most 64 warps an SM; p: persistent)
              for c in (1, 2, 4) for w in (4, 8, 16) for b in (1, 2, 3, 4, 6, 8) for p in (True, False) if w * b <= 64]


def glu(width: int, directions=("forward", "backward")) -> dict:
    """{case: {split: fraction of the copy}} of swiglu and geglu, each way (or `directions`), at `width` (the launch
    alone)."""
    import torch

    from benchmarks import bench_memory_bound as bench
    from tkpy.kernels import glu as op
    from tkpy.kernels.glu_policy import config_for
    rows = ELEMENTS // width
    gate, up, dout = (torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    dgate, dup = torch.empty_like(gate), torch.empty_like(gate)
    copy = bench.copy_gbps({}, rows, width, torch.bfloat16)
    name = lambda o: f"k{o['chunks']}w{o['warps']}b{o['blocks_per_sm']}{'' if o['persistent'] else 'n'}"  # noqa: E731
    cases = {}
    for activation in ("silu", "gelu"):
        for direction in directions:
            def launch_of(o, activation=activation, direction=direction):
                if direction == "forward":
                    return lambda: op.forward(activation, gate, up, dgate, o)
                return lambda: op.backward(activation, dout, gate, up, dgate, dup, o)
            tried = {name(o): o for o in GLU_SPLITS}
            nbytes = rows * width * 2 * (3 if direction == "forward" else 5)
            got = timed_splits(tried, launch_of, nbytes, copy, f"{activation} {direction}")
            case = f"{activation} {direction} {width}"
            report(case, got, name(vars(config_for(activation, direction, width, "bf16"))),
                   f"of {len(tried)} (copy {copy:.0f} GB/s)")
            cases[case] = got
    return cases


def softmax(width: int, dtype: str, directions=("forward", "backward")) -> dict:
    """{case: {split: fraction of the copy}} of softmax forward and backward (or `directions`) at `width` (the launch
    alone; 2^26 elements; the splits of at most 32 values a lane, y in registers)."""
    import torch

    from benchmarks import bench_memory_bound as bench
    from tkpy.kernels import softmax_op
    from tkpy.kernels.softmax_policy import PACKED_WIDTHS, TILE_WIDTH, config_for
    rows = ELEMENTS // width
    x = torch.randn(rows, width, device="cuda", dtype=getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[dtype])) * 3
    dy, y = torch.randn_like(x), softmax_op.forward(x)
    copy = bench.copy_gbps({}, rows, width, x.dtype)
    cases = {}
    for direction in directions:
        def launch_of(o, direction=direction):
            if direction == "forward":
                return lambda: softmax_op.forward(x, o)
            return lambda: softmax_op.backward(dy, y, o)
        policy = config_for(direction, width, dtype)
        if width <= TILE_WIDTH:                          # (narrow rows: the tile kernels against packed rows)
            tile = {"tile": bench.SOFTMAX_PACKED_VARIANTS["the tile kernels"]}
            tried = {**tile, **(packed_splits(width) if width in PACKED_WIDTHS else {})}
        else:
            tried = softmax_splits(width, direction, policy)
        got = timed_splits(tried, launch_of, bench.softmax_bytes(direction, rows, width, x.element_size()), copy,
                           f"softmax {direction}")
        case = f"softmax {dtype} {direction} {width}"
        policy_name = "tile" if policy.tile else f"k{policy.packed}" * bool(policy.packed) + config_name(policy)
        report(case, got, policy_name, f"of {len(tried)} (copy {copy:.0f} GB/s)")
        cases[case] = got
    return cases


def softmax_splits(width: int, direction: str, policy) -> dict:
    """name -> SoftmaxConfig fields of the split kernels' splits tried at `width` (past TILE_WIDTH) in `direction`,
    the policy's config `policy` among them (see softmax)."""
    tried = plain(one_step_too(splits(width, most_values=32)), PLAIN_SOFTMAX)
    if direction == "forward":                           # (the rows ahead through shared memory: its `stages`)
        tried.update(plain({n: o for n, o in staged_too(splits(width, most_values=32)).items() if o["stages"]},
                           PLAIN_SOFTMAX))
    if width >= STAGED_PIECE_WIDTH:                      # (x's, or y's and dy's, pieces in shared memory)
        staged = dict(stage=True, stage_dy=direction == "backward")
        tried.update({staged_split_name(o): o for o in staged_pieces(width, staged)})
    tried.setdefault(config_name(policy), {f: getattr(policy, f) for f in SPLIT_FIELDS + ("stage", "stage_dy",
                                                                                          "stages")})
    return tried


STAGED_PIECE_WIDTH = 4096       # softmax from this wide: the splits with the pieces in shared memory too


# norms from this wide (by direction): the splits with the pieces in shared memory too
STAGED_NORM_WIDTH = {"forward": 4096, "backward": 2048}


def staged_pieces(width: int, staged: dict, clusters=(1, 2, 4, 8), persistent=(True, False)) -> list[dict]:
    """The splits with the pieces in shared memory (up to 64 values a lane, a chunk of each in registers), `staged`
    their fields: the norms' x (and residual; the backward's dy and residual_out's gradient; `stage`), softmax's x,
    or its backward's y and dy (`stage`, `stage_dy`); persistent and (where `persistent` has False) a block a row
    group."""
    return [{**o, **staged, "prefetch": False, "stages": 0, "persistent": p}
            for o in splits(width, clusters=clusters, most_values=64) if not o["prefetch"]
            for p in persistent]


def staged_split_name(o: dict) -> str:
    """split_name, S where x's (the backward's y's) piece passes through shared memory, SD where dy's does too,
    st<k> with k rows ahead."""
    return split_name(o) + ("S" if o.get("stage") else "") + ("D" if o.get("stage_dy") else "") \
        + (f"st{o['stages']}" if o.get("stages") else "") \
        + ("W" if o.get("weight_in_registers") is False and not o.get("stage") else "") \
        + ("ss" if o.get("sums_in_shared") else "")


def packed_splits(width: int) -> dict:
    """name -> SoftmaxConfig fields of the packed splits tried at `width` (rows of 8 to 128 elements): 1, 2 or 4
    chunks of rows a warp's piece (up to 32 values a lane), 4 or 8 warps a block, 1, 2 or 4 blocks an SM, the
    prefetch or not, a block a row group too."""
    from tkpy.kernels.row_split import CHUNK
    out = {}
    for chunks, g, b in itertools.product((1, 2, 4), (4, 8), (1, 2, 4)):
        packed = chunks * CHUNK // width
        if packed < 2 or chunks * 8 > 32:
            continue
        base = dict(tile=False, packed=packed, warps_per_row=1, rows_per_block=g, blocks_per_sm=b)
        for prefetch, persistent in ((True, True), (False, True), (False, False)):
            o = {**base, "prefetch": prefetch, "persistent": persistent}
            out[f"k{packed}" + split_name({**o, "cluster": 1})] = o
    return out


GROUPS = {"cross-entropy": cross_entropy, "norms": norms, "glu": glu, "softmax": softmax}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("group", choices=tuple(GROUPS))
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "f32"), help="cross-entropy's logits, softmax's x")
    parser.add_argument("--ops", default=None,
                        help="norms: comma-separated of rms, rms+residual, layer, layer+residual")
    parser.add_argument("--widths", default=None, help="comma-separated (default: 512-262144, norms 4096)")
    parser.add_argument("--directions", default="forward,backward",
                        help="norms, glu, softmax: forward, backward or both")
    parser.add_argument("--weight-from-l2", action="store_true",
                        help="norms: each split with the weight read from L1/L2 a row too (W)")
    parser.add_argument("--sums-in-shared", action="store_true",
                        help="norms: each backward split with the weight sums in shared memory too (ss)")
    a = parser.parse_args()
    default = "512,1024,2048,4096,8192,16384,32768,65536,131072,262144" if a.group == "cross-entropy" else "4096"
    results = {}
    for width in (int(w) for w in (a.widths or default).split(",")):
        directions = tuple(a.directions.split(","))
        if a.group == "cross-entropy":
            cases = cross_entropy(width, a.dtype)
        elif a.group == "softmax":
            cases = softmax(width, a.dtype, directions)
        elif a.group == "norms":
            cases = norms(width, tuple(a.ops.split(",")) if a.ops else None, directions, a.weight_from_l2,
                          a.sums_in_shared)
        else:
            cases = glu(width, directions)
        for direction in ("forward", "backward"):        # (the norms', the GLUs' and softmax's tables are by direction)
            one_way = {case: got for case, got in cases.items() if f" {direction} " in case}
            if one_way and len(one_way) < len(cases):
                score, name = best_for_all(one_way)
                print(f"## width {width} {direction}: best for its {len(one_way)} cases together {name} "
                      f"({score:.3f} of each case's best at least)", flush=True)
        score, name = best_for_all(cases)
        print(f"## width {width}: best for all {len(cases)} cases together {name} "
              f"({score:.3f} of each case's best at least)", flush=True)
        results.update(cases)
        if os.environ.get("OUT"):                        # (after each width: a cut-short run keeps the widths done)
            widths = (a.widths or "default").replace(",", "-")
            path = Path(os.environ["OUT"]) / f"sweep_{a.group}_{a.dtype}_{widths}.json"
            path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
