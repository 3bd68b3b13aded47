"""The config of the softmax kernels (kernels/softmax_kernel.py, kernels/row_softmax.py): SoftmaxConfig, a frozen
dataclass of what one kernel computes (forward or backward, the row width, the dtype) and how its warps take the rows
(kernels/softmax_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks
from .row_split import CHUNK, RowSplit, check_stages

DIRECTIONS = ("forward", "backward")
DTYPES = ("bf16", "fp16", "f32")            # the input's and output's type (the statistics are fp32)
MAX_WIDTH = 262144
TILE_ROWS = 16                              # rows a warp of the tile kernels: one register tile's
TILE_WIDTH = 256                            # the tile kernels' widest rows; fp32 backward's (two fp32 tiles of 16 x 256
TILE_FP32_BACKWARD = 128                    # would pass a thread's 255 registers)
PACKED_WIDTHS = (8, 16, 32, 64, 128)        # rows that pack several to a warp's piece (tk.segment_sum's sizes)


@dataclass(frozen=True)
class SoftmaxConfig(RowSplit):
    """One softmax kernel: y = softmax(x) over rows of `width` elements of `dtype` (forward), or dx = y * (dy -
    rowsum(dy * y)) from y and dy (backward), fp32 math.

    How, `tile`: each warp takes 16 whole rows in a register tile (as wide as a row rounded up to 16 columns),
    `rows_per_block` / 16 warps a block, a block per `rows_per_block` rows (kernels/row_softmax.py): narrow rows.
    Otherwise a row is split over `warps_per_row` warps of a block and `cluster` blocks (the RowSplit fields,
    keyword-only; kernels/row_split.py: each warp a contig piece, 16-byte copies), `rows_per_block` rows a block at a
    time, a persistent grid of `blocks_per_sm` blocks an SM (or a block a row group: `persistent=False`);
    `prefetch`: the next row's loads in flight while a row is reduced and written; `stage`: the backward's y passes
    through shared memory a chunk at a time, dy alone in registers (fp32 rows whose y and dy together would pass the
    registers), and with `stage_dy` dy too, the forward's x the same way (a chunk in registers: several blocks an SM
    for the widest rows).
    `stages` (forward, 2 to 4, instead of the prefetch): the next rows' x through shared memory
    (row_split.StagedRows: no registers held for them). `packed` (rows of 8 to 128 elements, a power of two): a
    warp's piece holds that many consecutive rows (`packed` x `width` elements, whole 256-element chunks), each
    reduced over its own lanes (tk.segment_max, tk.segment_sum): a warp a piece, its lanes' 16-byte copies all of
    them a row's, where a row of 128 fills only half a chunk."""

    direction: str
    width: int
    dtype: str = "bf16"
    tile: bool = False
    prefetch: bool = False
    stage: bool = False
    stage_dy: bool = False
    packed: int = 0
    stages: int = 0

    def __post_init__(self) -> None:
        fail = config_checks(self, direction=DIRECTIONS, dtype=DTYPES)
        if not isinstance(self.width, int) or not 1 <= self.width <= MAX_WIDTH:
            fail(f"width must be an int from 1 to {MAX_WIDTH}, got {self.width!r}")
        if self.stage and (self.prefetch or self.stages):
            fail("stage (the row's piece through shared memory) is without prefetch or stages")
        if self.stage_dy not in (True, False) or self.stage_dy and (self.direction != "backward" or not self.stage):
            fail(f"stage_dy (dy through shared memory too) is the backward's, with stage; got {self.stage_dy!r}")
        check_stages(self, fail)
        if self.stages and (self.direction != "forward" or self.tile):
            fail("stages (the next rows through shared memory) is the split forward's")
        if self.packed:
            self._check_packed(fail)
        if self.tile:
            self._check_tile(fail)
        else:
            self.check_split(fail)

    def _check_packed(self, fail) -> None:
        if not isinstance(self.packed, int) or isinstance(self.packed, bool) or self.packed < 2:
            fail(f"packed (rows a warp's piece holds) must be an int of at least 2, got {self.packed!r}")
        if self.width not in PACKED_WIDTHS:
            fail(f"packed rows are {PACKED_WIDTHS} elements wide (whole lanes of a 256-element chunk each), got "
                 f"{self.width}")
        if self.packed * self.width % CHUNK:
            fail(f"packed rows fill whole 256-element chunks: {self.packed} rows of {self.width} do not")
        if (self.tile, self.warps_per_row, self.cluster, self.stage) != (False, 1, 1, False):
            fail("packed rows are a warp's: no tile, warps_per_row, cluster or stage")

    def _check_tile(self, fail) -> None:
        if (self.warps_per_row, self.cluster, self.prefetch, self.stage) != (1, 1, False, False):
            fail("a tile kernel takes whole rows in one warp: no warps_per_row, cluster, prefetch or stage")
        if self.rows_per_block % TILE_ROWS or not TILE_ROWS <= self.rows_per_block <= 32 * TILE_ROWS:
            fail(f"a tile kernel's rows_per_block is 16 a warp, up to 32 warps: got {self.rows_per_block!r}")
        widest = TILE_FP32_BACKWARD if (self.dtype, self.direction) == ("f32", "backward") else TILE_WIDTH
        if self.width > widest:
            fail(f"a tile kernel holds rows of up to {widest} elements ({self.dtype} {self.direction}), got "
                 f"{self.width}")
        if self.blocks_per_sm != 1:
            fail("a tile kernel's grid is a block per rows_per_block rows (blocks_per_sm is the persistent grid's)")

    @property
    def warps(self) -> int:
        return self.rows_per_block // TILE_ROWS if self.tile else self.warps_per_row * self.rows_per_block

    @property
    def piece(self) -> int:
        return self.packed_width if self.packed else super().piece

    @property
    def packed_width(self) -> int:
        """The kernel's rows: `packed` of the caller's each where packed."""
        return self.packed * self.width if self.packed else self.width

    @property
    def tile_width(self) -> int:
        """The tile kernels' register tile width: the row rounded up to 16 columns."""
        return -(-self.width // 16) * 16

    @property
    def name(self) -> str:
        how = [f"tile{self.rows_per_block}"] if self.tile else [self.split_name, f"b{self.blocks_per_sm}",
                                                               self.prefetch and "prefetch", self.stage and "stage",
                                                               self.stage_dy and "dy",
                                                               self.packed and f"packed{self.packed}",
                                                               self.stages and f"st{self.stages}"]
        tags = ["softmax", "fwd" if self.direction == "forward" else "bwd", self.dtype, str(self.width), *how]
        return "_".join(t for t in tags if t)
