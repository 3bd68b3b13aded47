"""tkpy.kernels.rotary on the GPU (tests/test_rotary.py's checks): both layouts, GQA, head dims 16-256 (rows in pieces
where they divide 256, groups of heads where not), partial rotary, offsets (decoding: one position), fp32 and 16-bit
tables, both dtypes, strided and transposed inputs, against float64 on every element with the gradients; outputs
poisoned."""
from __future__ import annotations

import pytest
import torch

from gpu_util import requires_gpu
from test_rotary import check, check_one_step_grid

pytestmark = requires_gpu


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim,rotary_dim", [(64, 64), (128, 128), (128, 64), (256, 256), (80, 32), (96, 96),
                                                 (160, 160), (192, 64), (16, 16), (240, 48)])
def test_across_head_dims(head_dim, rotary_dim, dtype, interleaved):
    check(2, 300, 8, 2, head_dim, rotary_dim, dtype, interleaved, device="cuda")


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("seq,offset,table", [(1, 4000, torch.float32), (17, 123, torch.bfloat16), (2048, 0, None)])
def test_offsets_and_tables(seq, offset, table, interleaved):
    check(3, seq, 32, 8, 128, 128, torch.bfloat16, interleaved, offset, table or torch.bfloat16, device="cuda")


@pytest.mark.parametrize("heads_q,heads_k", [(32, 1), (4, 1), (12, 4), (5, 5), (40, 40)])
def test_head_counts(heads_q, heads_k):
    check(2, 129, heads_q, heads_k, 128, 128, device="cuda")        # pieces of 1-4 chunks, 1 or 2 positions a warp


@pytest.mark.parametrize("layout", ["fused", "heads_first"])
@pytest.mark.parametrize("head_dim", [128, 96])
def test_strided_and_transposed_inputs(layout, head_dim):
    check(2, 257, 16, 4, head_dim, head_dim, layout=layout, device="cuda")


def test_a_warp_for_every_group_of_positions():
    check_one_step_grid(device="cuda")
