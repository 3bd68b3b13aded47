"""tkpy.kernels.softmax on the GPU (tests/test_softmax_op.py's checks): forward and backward against float64 torch on
every element, outputs poisoned, over row widths 1..262144 (the tile kernels, a warp a row, several warps, a block's
16, clusters of 2-8 blocks; y through shared memory past 131072), odd widths (padded rows) and the three dtypes; few
and many rows (the persistent grid's loop); the policy's variants forced; rows of -inf; opcheck and torch.compile on
CUDA tensors."""
from __future__ import annotations

import pytest
import torch

from gpu_util import compiled_grads_match_eager, rand, requires_gpu
from test_softmax_op import DTYPES, U, assert_within, check
from tkpy.kernels import softmax

pytestmark = requires_gpu

WIDTHS = [1, 5, 40, 100, 128, 129, 256, 512, 1000, 1001, 2048, 4096, 5000, 8192, 12345, 16384, 32768, 50257, 65536,
          131072, 200000, 262144]


@DTYPES
@pytest.mark.parametrize("width", WIDTHS)
def test_forward_and_backward_across_widths(width, dtype):
    rows = max(3, min(2000, 2 ** 22 // width))             # a few MB: several rows a block of the grid
    check((rows, width), dtype, device="cuda")


@pytest.mark.parametrize("rows", [1, 7, 133, 5000])
@pytest.mark.parametrize("width", [100, 1024, 65536, 262144])
def test_row_counts(rows, width):
    rows = min(rows, 2 ** 27 // width)   # (512 of 262144: still many rows a cluster; 5000 took 10 GB a tensor)
    check((rows, width), torch.bfloat16, device="cuda")
    check((rows, width), torch.float32, device="cuda")


SPLIT = dict(tile=False)
VARIANTS = [
    (dict(SPLIT, prefetch=False), dict(SPLIT, prefetch=False)),
    (dict(SPLIT, prefetch=True), dict(SPLIT, prefetch=True)),
    (dict(SPLIT, blocks_per_sm=1), dict(SPLIT, stage=True, prefetch=False)),
    (dict(SPLIT, warps_per_row=4, rows_per_block=2, cluster=2), dict(SPLIT, warps_per_row=2, rows_per_block=2,
                                                                    cluster=4, prefetch=False)),
    (dict(SPLIT, stages=2), dict(SPLIT, persistent=False)),
    (dict(SPLIT, stage=True, prefetch=False, blocks_per_sm=2), dict(SPLIT, stage=True, prefetch=False,
                                                                    persistent=False)),
    (dict(SPLIT, stage=True, prefetch=False, persistent=False), dict(SPLIT, stage=True, stage_dy=True,
                                                                     prefetch=False, blocks_per_sm=2)),
    (dict(SPLIT, warps_per_row=2, rows_per_block=1, cluster=2, stages=3), dict(SPLIT)),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
@pytest.mark.parametrize("width", [200, 4096, 6000])
def test_variants(width, variant, dtype):
    forward_options, backward_options = VARIANTS[variant]
    defaults = dict(warps_per_row=max(1, min(16, width // 512)), rows_per_block=1 if width > 512 else 4)
    check((1000, width), dtype, device="cuda", forward_options={**defaults, **forward_options},
          backward_options={**defaults, **backward_options})


# x's piece through shared memory in the forward (stage), y's and dy's in the backward (stage_dy), at the widest
# rows: a cluster of 8 blocks of 16 warps (64 values a lane at 262144), of 4 at 65536; a ragged width
STAGED_WIDE = [(262144, dict(warps_per_row=16, cluster=8), (2, 1)),
               (200000, dict(warps_per_row=16, cluster=8), (1, 1)),
               (65536, dict(warps_per_row=16, cluster=4, persistent=False), (2, 1))]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("case", range(len(STAGED_WIDE)))
def test_staged_kernels_of_wide_rows(case, dtype):
    width, split, (forward_blocks, backward_blocks) = STAGED_WIDE[case]
    if dtype == torch.float32 and width > 131072:       # (128 KB of fp32 a block: x; y and dy would pass the SM's)
        forward_blocks, backward = 1, dict(tile=False)
    else:
        backward = dict(tile=False, rows_per_block=1, stage=True, stage_dy=True, prefetch=False, stages=0,
                        blocks_per_sm=backward_blocks, **split)
    forward = dict(tile=False, rows_per_block=1, stage=True, prefetch=False, stages=0, blocks_per_sm=forward_blocks,
                   **split)
    check((37, width), dtype, device="cuda", forward_options=forward, backward_options=backward)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("width,packed,rows", [(128, 2, 5000), (128, 4, 20000), (64, 8, 8000), (8, 32, 3200),
                                               (128, 4, 4099)])
def test_packed_rows(width, packed, rows, persistent, dtype):
    """Rows of 8 to 128 several to a warp's piece (the last case a row short of whole packed ones: the tile
    kernels), persistent with the next piece in flight and a block a row group."""
    options = dict(tile=False, warps_per_row=1, rows_per_block=4, blocks_per_sm=4, packed=packed,
                   prefetch=persistent, persistent=persistent)
    check((rows, width), dtype, device="cuda", forward_options=options, backward_options=options)


@pytest.mark.parametrize("width", [40, 3000, 100000])
def test_rows_of_minus_infinity(width):
    x = rand(64, width, dtype=torch.float32)
    x[1, ::3] = -float("inf")
    x[2] = -float("inf")
    y, ref = softmax(x), torch.softmax(x.double(), -1)
    assert y[2].isnan().all() and (y[1, ::3] == 0).all()
    keep = torch.arange(64, device="cuda") != 2
    assert_within(y[keep], ref[keep], U[torch.float32] * ref[keep] + 1e-38, "y")


def test_the_benchmark_shape():
    check((16384, 4096), torch.bfloat16, device="cuda")


def test_opcheck_on_cuda():
    for width in (40, 4096, 100000):
        x = rand(33, width, dtype=torch.bfloat16).requires_grad_()
        torch.library.opcheck(torch.ops.tkpy.softmax.default, (x,))
        torch.library.opcheck(torch.ops.tkpy.softmax_backward.default,
                              (rand(33, width, dtype=torch.bfloat16), softmax(x.detach())))


def test_compiled_matches_eager():
    def fn(x, z):
        return torch.tanh(softmax(x)).float().sum() + softmax(z).pow(2).sum()

    compiled_grads_match_eager(fn, [rand(64, 4096, dtype=torch.bfloat16).requires_grad_(),
                                    rand(8, 65536, dtype=torch.float32).requires_grad_()])
