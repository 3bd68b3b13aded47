"""Tile types: register (rt/rv), shared (st/sv) and global (gl). Pure Python, no CUDA.

These are *types*; the values a kernel manipulates are IR variables carrying one
of them (see tkpy.ir). Every size, layout and address question about a tile is
answered here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from . import layouts, swizzle as swz
from .dtypes import DType, FP8_DTYPES, TILE_DTYPES, f32, named_like

Dim = Union[int, str]  # static size or the name of a dynamic one


def _check_dtype(dtype: DType, what: str, fp8: bool = True) -> None:
    if dtype in FP8_DTYPES:
        if not fp8:
            raise TypeError(f"{what} element type {dtype!r} is not supported: fp8 is for register and shared tiles "
                            "(rt, st) and global tensors; give vectors a 16- or 32-bit type (e.g. f32)")
        return
    if dtype not in TILE_DTYPES:
        ours = named_like(dtype)
        use = f": write tk.{ours.name} (tkpy's dtypes, not torch's)" if ours else ""
        raise TypeError(f"{what} element type must be one of {TILE_DTYPES + FP8_DTYPES}, got {dtype!r}{use}")


def _check_multiple(n: int, of: int, what: str) -> None:
    if not isinstance(n, int) or n <= 0 or n % of:
        raise ValueError(f"{what} must be a positive multiple of {of}, got {n!r}")


@dataclass(frozen=True)
class RT:
    """Register tile: each warp holds its own rows x cols tile, spread over its 32 lanes."""

    dtype: DType
    rows: int
    cols: int
    layout: str = "row"

    def __post_init__(self):
        _check_dtype(self.dtype, "rt")
        _check_multiple(self.rows, layouts.BASE_ROWS, "rt rows")
        _check_multiple(self.cols, layouts.BASE_COLS, "rt cols")
        if self.layout not in ("row", "col"):
            raise ValueError(f"rt layout must be 'row' or 'col', got {self.layout!r}")

    @property
    def height(self) -> int:
        return self.rows // layouts.BASE_ROWS

    @property
    def width(self) -> int:
        return self.cols // layouts.BASE_COLS

    @property
    def registers_per_lane(self) -> int:
        """32-bit registers each lane spends on this tile."""
        return self.height * self.width * layouts.ELEMS_PER_BASE * self.dtype.nbytes // 4

    def col_vec(self, dtype: DType | None = None) -> "RV":
        """Type of a vector with one value per row (what row_max produces); f32 for an fp8 tile."""
        return RV(dtype or self._vector_dtype, self.rows, layouts.reduction_vector_layout(self.layout, "row"))

    def row_vec(self, dtype: DType | None = None) -> "RV":
        """Type of a vector with one value per column (what col_max produces); f32 for an fp8 tile."""
        return RV(dtype or self._vector_dtype, self.cols, layouts.reduction_vector_layout(self.layout, "col"))

    def broadcast_axis(self, vec: "RV") -> str | None:
        """'row' if vector type `vec` holds one value per row of this tile (col_vec's length and layout),
        'col' if one per column (row_vec's), else None. The two layouts differ (ortho / align), so this
        is unambiguous for square tiles too."""
        for axis, want in (("row", self.col_vec()), ("col", self.row_vec())):
            if (vec.length, vec.layout) == (want.length, want.layout):
                return axis
        return None

    @property
    def _vector_dtype(self) -> DType:
        return f32 if self.dtype in FP8_DTYPES else self.dtype   # there are no fp8 vectors

    def with_(self, **changes) -> "RT":
        fields = dict(dtype=self.dtype, rows=self.rows, cols=self.cols, layout=self.layout)
        fields.update(changes)
        return RT(**fields)

    def __str__(self) -> str:
        return f"rt<{self.dtype}, {self.rows}x{self.cols}, {self.layout}>"


@dataclass(frozen=True)
class RV:
    """Register vector, laid out to match the tile dimension it reduces or broadcasts along."""

    dtype: DType
    length: int
    layout: str = "ortho"

    def __post_init__(self):
        _check_dtype(self.dtype, "rv", fp8=False)
        if self.layout not in layouts.VECTOR_LAYOUTS:
            raise ValueError(f"rv layout must be one of {', '.join(map(repr, layouts.VECTOR_LAYOUTS))}, "
                             f"got {self.layout!r}")
        _check_multiple(self.length, layouts.vector_chunk(self.layout), f"rv length ({self.layout})")

    @property
    def chunks(self) -> int:
        return self.length // layouts.vector_chunk(self.layout)

    @property
    def values_per_chunk(self) -> int:
        return layouts.vector_values_per_chunk(self.layout)

    # As a one-row tile: how copies to and from global memory address it (a vector lies along a row).
    rows = 1

    @property
    def cols(self) -> int:
        return self.length

    def __str__(self) -> str:
        return f"rv<{self.dtype}, {self.length}, {self.layout}>"


@dataclass(frozen=True)
class ST:
    """Shared tile: one rows x cols tile per block (or `count` of them), swizzled."""

    dtype: DType
    rows: int
    cols: int
    swizzle: int = -1   # -1: choose from the row width

    def __post_init__(self):
        _check_dtype(self.dtype, "st")
        _check_multiple(self.rows, layouts.BASE_ROWS, "st rows")
        _check_multiple(self.cols, layouts.BASE_COLS, "st cols")
        if self.swizzle == -1:
            object.__setattr__(self, "swizzle", swz.choose_swizzle(self.cols, self.dtype.nbytes))
        if self.swizzle not in swz.SWIZZLE_MODES:
            raise ValueError(f"st swizzle must be one of {swz.SWIZZLE_MODES} bytes, got {self.swizzle!r}")
        if self.swizzle and (self.cols * self.dtype.nbytes) % self.swizzle:
            raise ValueError(f"a {self.swizzle}-byte swizzle needs rows of a multiple of {self.swizzle} bytes; "
                             f"{self.cols} x {self.dtype} is {self.cols * self.dtype.nbytes} bytes")

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.dtype.nbytes

    @property
    def alignment(self) -> int:
        return swz.SWIZZLE_ALIGNMENT if self.swizzle else 16

    @property
    def panel_cols(self) -> int:
        return swz.panel_cols(self.cols, self.dtype.nbytes, self.swizzle)

    def byte_offset(self, row, col):
        return swz.byte_offset(row, col, rows=self.rows, cols=self.cols,
                               elem_bytes=self.dtype.nbytes, swizzle=self.swizzle)

    def __str__(self) -> str:
        return f"st<{self.dtype}, {self.rows}x{self.cols}, swizzle {self.swizzle}B>"


@dataclass(frozen=True)
class SV:
    """Shared vector: `length` contiguous elements."""

    dtype: DType
    length: int

    def __post_init__(self):
        _check_dtype(self.dtype, "sv", fp8=False)
        _check_multiple(self.length, 16, "sv length")

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.nbytes

    @property
    def alignment(self) -> int:
        return 16

    # As a one-row tile: how copies to and from global memory (TMA included: a box of one row) address it.
    rows = 1
    swizzle = 0

    @property
    def cols(self) -> int:
        return self.length

    @property
    def panel_cols(self) -> int:
        return self.length

    def byte_offset(self, row, col):
        return col * self.dtype.nbytes

    def __str__(self) -> str:
        return f"sv<{self.dtype}, {self.length}>"


@dataclass(frozen=True)
class Semaphore:
    """An mbarrier in shared memory (8 bytes): counts arrivals and async-copy bytes per phase."""

    nbytes: int = 8
    alignment: int = 8

    def __str__(self) -> str:
        return "semaphore"


GL_AXES = ("batch", "depth", "rows", "cols")


@dataclass(frozen=True)
class GL:
    """Global tensor view of up to 5 dims, right-aligned to (outer, batch, depth, rows, cols).

    `dims` always holds the 4 innermost (batch, depth, rows, cols); a 5-d view keeps its leading
    dim in `outer` (1 otherwise), so views of up to 4 dims are exactly what they were before.

    Each dim is static (an int, checked at call time and folded into the code) or
    dynamic (a name; dims sharing a name across parameters must be equal).
    """

    dtype: DType
    dims: tuple  # always 4 entries after construction
    outer: object = 1   # the leading dim of a 5-d view (set from dims; compared, so 5-d views differ by it)

    def __post_init__(self):
        dims = tuple(self.dims)
        if not 1 <= len(dims) <= 5:
            raise ValueError(f"gl takes 1 to 5 dims (outer, batch, depth, rows, cols), got {len(dims)}")
        for d in dims:
            if not (isinstance(d, str) and d.isidentifier()) and not (isinstance(d, int) and d > 0):
                raise ValueError(f"gl dims are positive ints (static) or identifier strings (dynamic), got {d!r}")
        object.__setattr__(self, "outer", dims[0] if len(dims) == 5 else 1)
        object.__setattr__(self, "dims", (1,) * max(0, 4 - len(dims)) + dims[-4:])
        object.__setattr__(self, "rank", len(dims))

    @property
    def shown(self) -> tuple:
        """The dims as declared (one per dim of the tensor)."""
        return ((self.outer,) + self.dims)[5 - self.rank:]

    @property
    def dynamic_dims(self) -> tuple[str, ...]:
        return tuple(d for d in self.shown if isinstance(d, str))

    def __str__(self) -> str:
        return f"gl<{self.dtype}, {', '.join(map(str, self.shown))}>"


MAX_WORLD = 8   # GPUs of one host (an NVLink domain of H200s)


@dataclass(frozen=True)
class PGL:
    """A parallel global tensor (ThunderKittens' pgl): one `gl` per GPU of a group of `world` GPUs of one host,
    each reachable from every GPU of the group (peer memory); all of one type."""

    gl: GL
    world: int

    def __post_init__(self):
        if not isinstance(self.gl, GL):
            raise TypeError(f"write tk.pgl[tk.gl[dtype, dims...], world], e.g. tk.pgl[tk.gl[bf16, 'M', 'K'], 4]; "
                            f"got {self.gl!r} for the gl")
        if isinstance(self.world, bool) or not isinstance(self.world, int) or not 1 <= self.world <= MAX_WORLD:
            raise ValueError(f"a pgl spans 1 to {MAX_WORLD} GPUs of one host, got world={self.world!r}")

    def __str__(self) -> str:
        return f"pgl<{self.gl}, {self.world}>"


TileType = Union[RT, RV, ST, SV, Semaphore]
