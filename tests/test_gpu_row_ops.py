"""Rows in contig register vectors on the GPU (tests/test_row_ops.py's kernels): row statistics reduced over a warp,
groups of a block's warps and clusters of 2 to 8 blocks, against float64 torch on every element, with the outputs
poisoned; the same bits from every warp of a group (the stored x - mean is the same whichever warp wrote it); a row
softmax whose statistics merge in one exchange (tk.block / tk.cluster.merge_softmax); int scalar loads of int32 and
int64 tensors and int stores into them, scalar partials in group reductions, and a vector's index_fill in each
layout, as the interpreter checks them."""
from __future__ import annotations

import pytest
import torch

import row_kernels
from gpu_util import requires_gpu
import tkpy as tk
from tkpy import bf16, f32
from test_row_ops import (DTYPES, check_int_scalar_loads, check_int_scalar_stores, check_row_softmax, check_row_stats,
                          check_scalar_partials, check_segment_reductions, check_vector_index_fill, softmax_input,
                          VECTOR_LAYOUTS)

pytestmark = requires_gpu

GPU_CASES = [(256, 4, 1, 1), (1000, 8, 2, 1), (4096, 8, 8, 1), (8192, 16, 16, 1), (6000, 8, 4, 2),
             (16384, 16, 16, 2), (32768, 16, 16, 4), (65536, 16, 16, 8), (1024, 2, 1, 4)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "n{}-w{}-g{}-c{}".format(*c))
@pytest.mark.parametrize("rows", [1, 37, 1000])
def test_row_statistics_match_float64(case, dtype, rows):
    n, warps, group, cluster = case
    x = (torch.randn(rows, n, device="cuda") * 2 + 1).to(dtype)
    check_row_stats(x, warps, group, cluster, interpret=False)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "n{}-w{}-g{}-c{}".format(*c))
def test_split_softmax_matches_float64(case, dtype):
    n, warps, group, cluster = case
    check_row_softmax(softmax_input(300, n, dtype).cuda(), warps, group, cluster, interpret=False)


def test_many_blocks_and_a_persistent_loop_agree_with_the_interpreter():
    x = torch.randn(300, 3000).to(torch.bfloat16)
    for blocks in (1, 7, 64):
        y, stats = row_kernels.run_row_stats(x.cuda(), 4, 2, 2, blocks=blocks)
        y_cpu, stats_cpu = row_kernels.run_row_stats(x, 4, 2, 2, blocks=2, interpret=True)
        torch.testing.assert_close(stats.cpu(), stats_cpu, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(y.cpu().float(), y_cpu.float(), rtol=2 ** -7, atol=1e-2)


@pytest.mark.parametrize("dtype", [tk.i32, tk.i64])
def test_int_scalar_loads(dtype):
    check_int_scalar_loads(dtype, device="cuda")


@pytest.mark.parametrize("dtype", [tk.i32, tk.i64])
def test_int_scalar_stores(dtype):
    check_int_scalar_stores(dtype, device="cuda")


def test_scalar_partials_reduce_with_vectors():
    check_scalar_partials(device="cuda")


@pytest.mark.parametrize("layout", VECTOR_LAYOUTS)
@pytest.mark.parametrize("dtype", [f32, bf16], ids=str)
def test_vector_index_fill_in_every_layout(dtype, layout):
    check_vector_index_fill(dtype, layout, device="cuda")


@pytest.mark.parametrize("size", [8, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype", [f32, bf16], ids=str)
def test_segment_reductions_of_contig_vectors(dtype, size):
    check_segment_reductions(dtype, size, 512, device="cuda")
