"""What the row kernels share (the norms, kernels/norm_*.py; cross-entropy, kernels/cross_entropy_*.py; the softmax,
kernels/softmax_*.py): a row split into pieces over the warps of a block and the blocks of a cluster, in their configs
(RowSplit), in their bodies (which piece and row a warp holds, the persistent loop over row groups, the reductions
over a row's warps), in their policies (warps_for) and in their launches (the persistent grid); and the elementwise
kernels' (row, piece) tasks (kernels/glu_kernel.py, cross-entropy's backward: PieceSplit).

A row lies in registers, split into pieces: warp `w` of a block holds piece `rank * S + w % S` of row `step * G + w //
S` (S = warps_per_row warps a row, G = rows_per_block rows a block at a time, `rank` the block's in its cluster of C),
a contig vector of `piece` values (8 consecutive elements a lane per chunk of 256: one 16-byte load or store each, two
of fp32). The blocks (clusters) loop over the row groups, a persistent grid of as many as the GPU runs at once; a
row's statistics reduce over its warps with tk.block.* (tk.cluster.* when C > 1), one barrier (or semaphore wait) a
reduction.

    RowSplit                                         the split's fields checked and its derived sizes (configs)
    part_of, row_of, first_step, stride, steps       the layout inside a kernel (at trace time)
    StagedRows, check_stages                         the next rows in flight through shared memory (cp.async)
    SharedPieces                                     a row's pieces in shared memory, read a chunk at a time
    scope, row_sum, row_max                          a row's reductions over its warps (and blocks)
    placeholder, placeholder_tensor                  tensors a config does not have
    warps_for, grid_for, grid                        the policy's and the launch's arithmetic
    PieceSplit, piece_tasks, piece_place, piece_grid the elementwise kernels' (row, piece) tasks
    block_partial, sum_partials                      a launch's sum over its blocks, in a fixed order

A sum over a whole launch (cross-entropy's loss and its mean's divisor) goes through a vector of partials, one a
block: each block's sum over its warps (tk.block.sum's one order) written to its element, then summed by whoever
needs the total, after the launch or in its last block (tk.last_block), in one order too: the same bits every run,
where float atomics would add in the order the blocks happen to finish.
"""
# (No `from __future__ import annotations`: the kernels' bodies call these while they are traced.)
from dataclasses import dataclass, replace

import tkpy as tk

from .op_support import resident_blocks

CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
CLUSTERS = (1, 2, 4, 8)
MAX_WARPS = 32                              # 1024 threads a block
MAX_VALUES_PER_LANE = 64                    # a row's piece in one lane's registers, at most (fp32 values)
PIECE = 512                                 # elements a warp's piece aims at: 16 values a lane (warps_for)
INTERPRETER_SMS = 2                         # the "SMs" the interpreter sizes grids for: a few blocks, each looping


@dataclass(frozen=True, kw_only=True)
class RowSplit:
    """How a row kernel's blocks take the rows (a config's fields, after what it computes; `width` is the
    config's): each row split over `warps_per_row` warps of a block and `cluster` blocks of a cluster, each warp
    holding a piece of `piece` elements (width / (warps_per_row * cluster) rounded up to 256); a block holds
    `rows_per_block` rows at a time and loops over the rows (a persistent grid of `blocks_per_sm` blocks an SM, the
    launch bounds' minimum). `persistent=False`: a block (cluster) for every row group instead, each taking one step
    and the GPU's block scheduler handing them out (no row ahead to prefetch; the softmax backward's rows measured
    4-9% faster so, RESULTS.md run 317)."""

    warps_per_row: int = 1
    rows_per_block: int = 4
    cluster: int = 1
    blocks_per_sm: int = 1
    persistent: bool = True

    def check_split(self, fail) -> None:
        """fail(reason) where the split cannot run (each config calls it from its __post_init__)."""
        if self.cluster not in CLUSTERS:
            fail(f"cluster must be one of {CLUSTERS}, got {self.cluster!r}")
        for option in ("warps_per_row", "rows_per_block", "blocks_per_sm"):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                fail(f"{option} must be a positive int, got {value!r}")
        if self.warps > MAX_WARPS:
            fail(f"{self.warps_per_row} warps a row x {self.rows_per_block} rows is {self.warps} warps, more than "
                 f"{MAX_WARPS} a block")
        if self.warps_per_row > 1 and self.rows_per_block > 15:
            fail("rows of several warps take a named barrier each: at most 15 rows a block")
        if self.values_per_lane > MAX_VALUES_PER_LANE:
            fail(f"a piece of {self.piece} elements is {self.values_per_lane} values a lane, more than "
                 f"{MAX_VALUES_PER_LANE}: more warps a row or a larger cluster")
        if not isinstance(self.persistent, bool):
            fail(f"persistent must be a bool, got {self.persistent!r}")
        if not self.persistent and (getattr(self, "prefetch", False) or getattr(self, "stages", 0)):
            fail("the rows ahead (prefetch, stages) are the persistent loop's: a grid of every row group "
                 "(persistent=False) takes one step a block")

    @property
    def warps(self) -> int:
        return self.warps_per_row * self.rows_per_block

    @property
    def pieces(self) -> int:
        """The pieces a row is split into: one a warp of each block of the cluster."""
        return self.warps_per_row * self.cluster

    @property
    def piece(self) -> int:
        return -(-self.width // (self.pieces * CHUNK)) * CHUNK

    @property
    def values_per_lane(self) -> int:
        return self.piece // 32

    @property
    def ragged(self) -> bool:
        """Whether the pieces cover more than a row (the last ones are masked; a piece wholly past the row's end
        loads its fill and stores nothing: an idle warp)."""
        return self.piece * self.pieces != self.width

    @property
    def split_name(self) -> str:
        """The split's part of a kernel's name: s<warps a row>g<rows a block>c<cluster>, _onestep where not
        persistent."""
        return f"s{self.warps_per_row}g{self.rows_per_block}c{self.cluster}{'' if self.persistent else '_onestep'}"

    def kernel_options(self) -> dict:
        """@tk.kernel's warps, cluster and blocks_per_sm for the split."""
        return dict(warps=self.warps, cluster=(self.cluster, 1, 1) if self.cluster > 1 else None,
                    blocks_per_sm=self.blocks_per_sm)


# -- in the bodies --------------------------------------------------------------------------------------------------

def part_of(c: RowSplit):
    """The piece of its rows this warp holds (a runtime scalar)."""
    return (tk.cluster.rank() * c.warps_per_row if c.cluster > 1 else 0) + tk.warp_id() % c.warps_per_row


def row_of(c: RowSplit, step):
    """The row this warp holds at step `step` of the loop."""
    return tk.let(step * c.rows_per_block + tk.warp_id() // c.warps_per_row, "row")


def first_step(c: RowSplit):
    """This block's (cluster's) first row group."""
    return tk.block_idx.x // c.cluster if c.cluster > 1 else tk.block_idx.x


def stride(c: RowSplit):
    """Row groups from one of this block's (cluster's) to its next."""
    return tk.grid_dim.x // c.cluster if c.cluster > 1 else tk.grid_dim.x


def steps(c: RowSplit, rows):
    """The persistent loop over this cluster's (block's) row groups."""
    return tk.range(first_step(c), tk.cdiv(rows, c.rows_per_block) if c.rows_per_block > 1 else rows, stride(c))


def scope(c: RowSplit):
    """Where a row's reductions run: tk.cluster when it spans blocks, else tk.block (their `warps=` the row's)."""
    return tk.cluster if c.cluster > 1 else tk.block


def row_sum(c: RowSplit, *values):
    """The sums of the vectors (or of each warp's scalar partials) over a row's warps (and blocks)."""
    return scope(c).sum(*values, warps=c.warps_per_row)


def row_max(c: RowSplit, *vectors):
    """The largest elements of the vectors over a row's warps (and blocks)."""
    return scope(c).amax(*vectors, warps=c.warps_per_row)


STAGES = (0, 2, 3, 4)                       # a config's `stages`: rows ahead through shared memory (0: none)


def check_stages(c, fail) -> None:
    """fail(reason) unless c.stages (StagedRows' rows ahead, instead of c.prefetch's one row in registers) is one of
    STAGES, without the prefetch."""
    if c.stages not in STAGES:
        fail(f"stages must be one of {STAGES}, got {c.stages!r}")
    if c.stages and c.prefetch:
        fail("stages (the next rows through shared memory) is instead of the prefetch (the next row in registers)")


def over_table(c, forced: dict):
    """Config `c` (a policy table's choice) with the fields `forced` over it. Forcing rows ahead (the prefetch,
    stages) takes the persistent loop they need too, forcing either takes the table's other away (each is instead of
    the other, check_stages), forcing persistent=False the table's rows ahead, and forcing a piece through shared
    memory (`stage`) the rows ahead too (and the norms' weight in registers), forcing rows ahead the table's `stage`;
    unless those are forced as well."""
    if not forced:
        return c
    implied = {}
    if forced.get("prefetch") or forced.get("stages"):
        implied["persistent"] = True
        if getattr(c, "stage", False):              # (a piece through shared memory is instead of rows ahead)
            implied["stage"] = False
            if hasattr(c, "stage_dy"):
                implied["stage_dy"] = False
            if hasattr(c, "weight_in_registers"):
                implied["weight_in_registers"] = True
    if (forced.get("prefetch") or forced.get("persistent") is False or forced.get("stage")) and hasattr(c, "stages"):
        implied["stages"] = 0
    if forced.get("stages") or forced.get("persistent") is False or forced.get("stage"):
        implied["prefetch"] = False
    if forced.get("stage") and hasattr(c, "weight_in_registers"):    # (the norms': a chunk of the weight at a time)
        implied["weight_in_registers"] = False
    return replace(c, **{**implied, **forced})


class SharedPieces:
    """This warp's pieces of a row of some tensors (of one dtype) in shared memory (the configs' `stage`), copied by
    cp.async (no registers on the way) and read back a chunk at a time, so that a block holds a chunk of each in
    registers and several blocks an SM keep their rows' loads in flight. `load(row, part)` waits until the warp is
    done reading the last row's, copies this row's (0 past the rows and the row's end) and waits for them: `start`
    and `wait`, between which a kernel may load other tensors into registers; `chunk(i, k)` is chunk k (an int or a
    tk.range index) of tensor i's piece, `col(part, k)` its column in CHUNKs."""

    def __init__(self, c: RowSplit, tensors: tuple):
        self.tensors, self.segments = tensors, c.piece // CHUNK
        self.slots = [tk.sv(t.type.dtype, CHUNK, count=c.warps * self.segments, name=f"pieces_of_{t.name}")
                      for t in tensors]
        self.base = tk.let(tk.warp_id() * self.segments, "base")

    def load(self, row, part) -> None:
        self.start(row, part)
        self.wait()

    def start(self, row, part) -> None:
        tk.warp_sync()                                   # (the last row's reads of the pieces are done)
        for k in tk.range(self.segments):
            for slots, tensor in zip(self.slots, self.tensors):
                tk.load_async(slots[self.base + k], tensor, (row, self.col(part, k)), masked=True)

    def wait(self) -> None:
        tk.load_async_wait(0)
        tk.warp_sync()                                   # (the other lanes' copies)

    def chunk(self, i: int, k):
        return self.slots[i][self.base + k]

    def col(self, part, k):
        return part * self.segments + k


class StagedRows:
    """The next `stages` rows' pieces of some tensors (of one dtype) in flight through shared memory, a ring of
    `stages` slots a warp and tensor filled by cp.async (tk.load_async: no registers held, so more bytes in flight
    than a register prefetch's one row). `start(part)` before the row loop issues the first `stages` rows; `take(...)`
    at the top of each step waits for this row's copies, loads them into the vectors and issues the row `stages`
    steps on into the freed slots. Rows past the last read as 0, and so does a row whose `skip` (a runtime bool of
    the issued row: cross-entropy's ignored targets) is true, with no bytes read. One cp.async group a tensor and
    row, so the wait leaves the later rows' in flight."""

    def __init__(self, c: RowSplit, tensors: tuple, stages: int):
        self.c, self.tensors, self.stages = c, tensors, stages
        self.ring = tk.sv(tensors[0].type.dtype, c.piece, count=c.warps * stages * len(tensors))
        self.turn = tk.var(0, "turn")                   # steps taken: the slot of this step's row is turn % stages

    def _slot(self, stage, t: int):
        return (tk.warp_id() * self.stages + stage) * len(self.tensors) + t

    def _issue(self, stage, row, part, skip) -> None:
        if skip is not None:                            # (past the last row: the copies read nothing)
            read = tk.var(0, "read")
            tk.assign(read, row)
            with tk.if_(skip):
                tk.assign(read, self.tensors[0].rows)
            row = read
        for t, g in enumerate(self.tensors):
            tk.load_async(self.ring[self._slot(stage, t)], g, (row, part), masked=True)

    def start(self, part, skips=None) -> None:
        """`skips`: None, or each first row's skip."""
        for k in range(self.stages):
            self._issue(k, row_of(self.c, first_step(self.c) + k * stride(self.c)), part,
                        None if skips is None else skips[k])

    def take(self, vectors, step, part, skip=None) -> None:
        """`skip`: the skip of the row this step issues (`stages` steps on), or None."""
        stage = tk.let(self.turn % self.stages, "stage")
        tk.load_async_wait(len(self.tensors) * (self.stages - 1))
        tk.warp_sync()                                  # (the other lanes' copies)
        for t, v in enumerate(vectors):
            tk.load(v, self.ring[self._slot(stage, t)])
        tk.warp_sync()                                  # (every lane's reads before the slots refill)
        self._issue(stage, row_of(self.c, step + self.stages * stride(self.c)), part, skip)
        self.turn += 1


# -- tensors a config does not have ---------------------------------------------------------------------------------

PLACEHOLDER = 16                            # bytes of an absent tensor's placeholder


def placeholder(dtype):
    """The annotation of an absent tensor: PLACEHOLDER bytes of `dtype` (the body never reads it)."""
    return tk.gl[dtype, PLACEHOLDER // dtype.nbytes]


_PLACEHOLDERS: dict = {}     # (torch dtype, device) -> a 16-byte tensor standing for an absent one


def placeholder_tensor(dtype, device):
    """The tensor a launch passes for an absent one: PLACEHOLDER bytes of torch dtype `dtype` on `device`."""
    key = (dtype, device)
    t = _PLACEHOLDERS.get(key)
    if t is None:
        import torch
        t = _PLACEHOLDERS[key] = torch.zeros(PLACEHOLDER // torch.empty(0, dtype=dtype).element_size(), dtype=dtype,
                                             device=device)
    return t


def block_partial(partials, value) -> None:
    """partials[block] = the sum of `value` (a float scalar, each warp's own) over the block's warps, in one order
    (tk.block.sum): every warp of the block calls it."""
    total = tk.block.sum(value)
    with tk.if_(tk.warp_id() == 0):
        tk.store(partials, total, (tk.block_idx.x,))


PARTIAL_CHUNKS = 4                          # chunks of 256 partials sum_partials loads at a time


def sum_partials(partials):
    """The sum of the fp32 vector `partials` (a gl of a run-time length), in one order: chunks of 256 each summed
    over the warp (tk.sum), added in turn, PARTIAL_CHUNKS loaded at a time. The same bits in every warp that calls
    it (a runtime float scalar)."""
    total = tk.var(0.0, "total")
    chunks = [tk.rv(tk.f32, CHUNK, "contig", name="partial") for _ in range(PARTIAL_CHUNKS)]
    for i in tk.range(tk.cdiv(partials.cols, CHUNK * PARTIAL_CHUNKS)):
        for k, v in enumerate(chunks):
            tk.load(v, partials, (i * PARTIAL_CHUNKS + k,), fill=0.0)
        for v in chunks:
            total += tk.sum(v)
    return total


# -- in the policies and the launches -------------------------------------------------------------------------------

def warps_for(width: int, most: int, cluster: int) -> int:
    """Warps a row: as many as pieces of PIECE elements cover a block's share of it, at most `most`; capped, as few
    as pieces of the capped count's size cover the row (50257 over 4 blocks of 16 warps: pieces of 1024 elements,
    13 warps a block cover it, 16 would hang 15279 elements past its end)."""
    warps = max(1, min(most, -(-width // (cluster * PIECE))))
    piece = -(-width // (cluster * warps * CHUNK)) * CHUNK
    return -(-width // (cluster * piece))


def grid_for(c: RowSplit, rows: int, resident: int) -> int:
    """Blocks of the persistent grid: clusters enough for every row group, at most what `resident` blocks hold (what
    the GPU runs at once: op_support.resident_blocks, from the occupancy queries); not c.persistent: every row
    group's."""
    groups = -(-rows // c.rows_per_block)
    return max(1, min(groups, resident // c.cluster) if c.persistent else groups) * c.cluster


def grid(kernel, c: RowSplit, rows: int, args) -> int:
    """The persistent grid of `kernel` (config `c`) over `rows` rows of args[0]: as many blocks (clusters) as the GPU
    runs at once, or INTERPRETER_SMS SMs' worth in the interpreter (a few blocks, each looping over several row
    groups; not c.persistent: every row group's, no occupancy asked)."""
    return grid_for(c, rows, resident_blocks(kernel, c, args, INTERPRETER_SMS) if c.persistent else 0)


# -- elementwise kernels: (row, piece) tasks --------------------------------------------------------------------------

MAX_CHUNKS = 8                              # chunks of a piece, at most (64 fp32 values a lane a vector)


@dataclass(frozen=True, kw_only=True)
class PieceSplit:
    """How an elementwise kernel's warps take the rows (a config's fields, after what it computes; `width` is the
    config's): a row is cut into pieces of `chunks` x 256 elements (contig vectors, 16-byte copies), one (row,
    piece) a warp at a time; the `warps` warps of each of the blocks (`blocks_per_sm` an SM) loop over them, a
    persistent grid (piece_tasks); `persistent=False`: a warp for every task instead, one each (as RowSplit's)."""

    chunks: int = 2
    warps: int = 8
    blocks_per_sm: int = 2
    persistent: bool = True

    def check_split(self, fail, most_chunks: int = MAX_CHUNKS) -> None:
        """fail(reason) where the split cannot run (each config calls it from its __post_init__)."""
        if self.chunks not in range(1, most_chunks + 1):
            fail(f"chunks must be 1 to {most_chunks}, got {self.chunks!r}")
        for option, most in (("warps", MAX_WARPS), ("blocks_per_sm", 16)):
            value = getattr(self, option)
            if not isinstance(value, int) or not 1 <= value <= most:
                fail(f"{option} must be an int from 1 to {most}, got {value!r}")
        if not isinstance(self.persistent, bool):
            fail(f"persistent must be a bool, got {self.persistent!r}")

    @property
    def piece(self) -> int:
        """Elements of a row a warp takes at a time."""
        return self.chunks * CHUNK

    @property
    def pieces(self) -> int:
        """Pieces a row: the last one masked where the width is not a multiple of the piece."""
        return -(-self.width // self.piece)

    @property
    def split_name(self) -> str:
        return f"p{self.chunks}w{self.warps}b{self.blocks_per_sm}{'' if self.persistent else '_onestep'}"


def piece_tasks(c: PieceSplit, rows):
    """This warp's (row, piece) tasks, every warp of the grid's in turn."""
    return tk.range(tk.block_idx.x * c.warps + tk.warp_id(), rows * c.pieces, tk.grid_dim.x * c.warps)


def piece_place(c: PieceSplit, task):
    """(row, piece) of a task."""
    if c.pieces == 1:
        return task, 0
    return tk.let(task // c.pieces, "row"), tk.let(task % c.pieces, "part")


def piece_grid(c: PieceSplit, rows: int, resident: int) -> int:
    """Blocks of an elementwise kernel's persistent grid: enough warps for every (row, piece), at most `resident`
    (not c.persistent: no more than that)."""
    blocks = -(-rows * c.pieces // c.warps)
    return max(1, min(blocks, resident) if c.persistent else blocks)
