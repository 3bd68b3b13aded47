"""benchmarks/sweep_row_splits.py's CPU parts: the splits it tries stay within a lane's and an SM's limits and the
configs take them (the gated activations' every one, the staged ones by their names); the split best for several
cases together is the one whose worst ratio to each case's best is largest."""
from __future__ import annotations

import pytest

from benchmarks.sweep_row_splits import GLU_SPLITS, best_for_all, split_name, splits
from tkpy.kernels.cross_entropy_policy import forward_config
from tkpy.kernels.glu_policy import config_for as glu_config


@pytest.mark.parametrize("width", [512, 4096, 50257, 262144])
def test_the_splits_stay_within_a_lane_and_an_sm(width):
    tried = splits(width)
    assert tried
    for o in tried:
        pieces = o["warps_per_row"] * o["cluster"]
        values = -(-width // (pieces * 256)) * 256 // 32
        assert values <= 64 and o["warps_per_row"] * o["rows_per_block"] * o["blocks_per_sm"] <= 64, o
        assert o["cluster"] == 1 or o["rows_per_block"] == 1, o
    accepted = 0
    for o in tried:
        try:
            c = forward_config(width, "bf16", "mean", True, False, None, **o)
        except ValueError:
            continue
        accepted += 1
        assert split_name(vars(c)) == split_name(o)
    assert accepted


def test_lanes_of_few_values_only_where_an_sm_holds_many_warps():
    """Pieces under 16 values a lane (8 at 2048 elements over 8 warps) only at 48 warps an SM or more (6 or 8
    blocks of 8), where torch.compile's softmax backward keeps its bytes in flight (RESULTS.md run 334)."""
    from benchmarks.sweep_row_splits import MANY_WARPS
    for width in (512, 2048):
        few = [o for o in splits(width) if -(-width // (o["warps_per_row"] * 256)) * 256 // 32 < 16]
        assert few and all(o["warps_per_row"] * o["rows_per_block"] * o["blocks_per_sm"] >= MANY_WARPS
                           for o in few), width
    assert {split_name(o) for o in splits(2048)} >= {"s8g1c1b6p1", "s8g1c1b8p0"}
    assert "s8g1c1b4p0" not in {split_name(o) for o in splits(2048)}       # (8 values a lane at 32 warps an SM)


def test_the_best_split_for_all_cases_maximizes_its_worst_ratio():
    cases = {"a": {"x": 1.0, "y": 0.9, "z": 0.5}, "b": {"x": 0.5, "y": 0.95, "z": 1.0}}
    score, name = best_for_all(cases)
    assert name == "y" and score == pytest.approx(0.9)


def test_the_glu_splits_are_configs_within_an_sm():
    assert len(GLU_SPLITS) > 20 and all(o["warps"] * o["blocks_per_sm"] <= 64 for o in GLU_SPLITS)
    for o in GLU_SPLITS:
        for direction in ("forward", "backward"):
            c = glu_config("gelu", direction, 4096, "bf16", **o)
            assert (c.chunks, c.warps, c.blocks_per_sm, c.persistent) == tuple(o.values())


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("width", [4096, 8192, 16384])
def test_the_softmax_splits_are_configs(dtype, width):
    """Every split softmax_splits tries, each direction, is the config its name says, whatever the table's row at
    that width has (its pieces through shared memory at f32 4096 and bf16 8192: not the plain splits')."""
    from benchmarks.sweep_row_splits import config_name, softmax_splits
    from tkpy.kernels.softmax_policy import config_for
    for direction in ("forward", "backward"):
        tried = softmax_splits(width, direction, config_for(direction, width, dtype))
        assert any(o["stage"] for o in tried.values()) and any(not o["stage"] for o in tried.values())
        for name, o in tried.items():
            assert config_name(config_for(direction, width, dtype, **o)) == name, (direction, o)


@pytest.mark.parametrize("direction,width", [("forward", 8192), ("backward", 4096), ("backward", 8192)])
def test_the_norm_splits_are_configs(direction, width):
    """Every split norm_splits tries (with the weight-from-L2 and the sums-in-shared twins) is the config its name
    says, whatever the table's row has (forward 8192: the pieces through shared memory, the weight from L2)."""
    from benchmarks.sweep_row_splits import config_name, norm_splits
    from tkpy.kernels.norm_policy import config_for
    policy = config_for("layer", direction, width, "bf16", "bf16", True, True)
    tried = norm_splits(width, direction, policy, weight_from_l2=True, sums_in_shared=True)
    assert any(n.endswith("ss") for n in tried) == (direction == "backward")
    for name, o in tried.items():
        c = config_for("layer", direction, width, "bf16", "bf16", True, True, **o)
        assert config_name(c) == name and c.sums_in_shared == name.endswith("ss"), (name, c.name)


def test_the_norm_splits_with_the_weight_from_l2_are_named_as_the_configs():
    """weight_from_l2_too: a W twin of every split (rows ahead through shared memory too), each a norm config of
    that name, the weight read a row at a time; the policy's own name carries no W."""
    from benchmarks.sweep_row_splits import config_name, staged_too, weight_from_l2_too
    from tkpy.kernels.norm_policy import config_for
    base = staged_too(splits(2048, most_values=32))
    tried = weight_from_l2_too(base)
    assert len(tried) == 2 * len(base) and all(f"{n}W" in tried for n in base)
    for name, o in tried.items():
        for direction in ("forward", "backward"):
            c = config_for("layer", direction, 2048, "bf16", "bf16", True, True, **o)
            assert config_name(c) == name and c.weight_in_registers == (not name.endswith("W")), (name, c.name)
    assert not config_name(config_for("rms", "forward", 2048, "bf16", "bf16", False, False)).endswith("W")


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_norm_splits_with_the_pieces_in_shared_memory_are_configs(direction):
    """staged_pieces for the norms (`stage`; the backward persistent only): each a norm config of that name."""
    from benchmarks.sweep_row_splits import config_name, staged_pieces
    from tkpy.kernels.norm_policy import config_for
    persistent = (True, False) if direction == "forward" else (True,)
    tried = staged_pieces(8192, dict(stage=True), (1, 2), persistent)
    assert tried and {o["persistent"] for o in tried} == set(persistent)
    for o in tried:
        c = config_for("layer", direction, 8192, "bf16", "bf16", True, True, **o)
        assert c.stage and not c.weight_in_registers and config_name(c).endswith("S"), c.name


def test_staged_splits_are_named_as_the_configs_and_taken_by_them():
    from benchmarks.sweep_row_splits import config_name, staged_too
    tried = staged_too(splits(4096))
    staged = [n for n in tried if "st" in n]
    assert staged and all(not tried[n]["prefetch"] for n in staged)
    for name, o in tried.items():
        try:
            c = forward_config(4096, "bf16", "mean", True, False, None, **o)
        except ValueError:
            continue
        assert config_name(c) == name


@pytest.mark.parametrize("width", [8, 32, 128])
def test_the_packed_splits_are_taken_by_the_softmax_configs(width):
    """Narrow rows: each packed split a config of its own (by name), within 32 values a lane, both directions."""
    from benchmarks.sweep_row_splits import packed_splits
    from tkpy.kernels.softmax_policy import config_for
    tried = packed_splits(width)
    configs = {config_for(d, width, dtype, **o) for o in tried.values() for d in ("forward", "backward")
               for dtype in ("bf16", "f32")}
    assert len(configs) == 4 * len(tried) and all(c.packed and c.values_per_lane <= 32 for c in configs)
