"""TMA tensor maps: built on the host from a torch tensor and the shared tile it is copied into.

Every map of a tensor of up to 4 dims is 4-d, innermost first (cols, rows, depth,
batch), whatever the tensor's rank, so generated code issues `cp.async.bulk.tensor.4d`;
a 5-d tensor gets a 5-d map (cols, rows, depth, batch, outer) and `.5d` copies. The
box is one swizzle panel of the shared tile: (panel_cols, rows, 1, 1[, 1]).
Encoding needs a driver and a current context; the geometry is pure Python.
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..ir.expr import cdiv
from ..tiles.types import ST
from .driver import CUDA_ERROR_INVALID_CONTEXT, _driver, check, device_context, primary_context

MAX_CACHED = 64   # encoded maps kept per tile shape (keyed by pointer, shape and strides)


@dataclass(frozen=True)
class Geometry:
    dims: tuple      # elements, innermost first
    strides: tuple   # bytes, of dims 1..3 (1..4 for a 5-d map)
    box: tuple       # elements per dim


def geometry(shape, strides, elem_bytes: int, tile: ST) -> Geometry:
    """The 4-d view of a tensor of up to 4 dims (right-aligned to batch, depth, rows, cols), or the
    5-d view of a 5-d tensor (outer, batch, depth, rows, cols)."""
    if not 1 <= len(shape) <= 5:
        raise ValueError(f"TMA tensor maps take tensors of 1 to 5 dims, got shape {tuple(shape)}")
    n = max(4, len(shape))
    shape = (1,) * (n - len(shape)) + tuple(int(s) for s in shape)
    strides = (0,) * (n - len(strides)) + tuple(int(s) for s in strides)
    dims = tuple(reversed(shape))                      # cols, rows, depth, batch[, outer]
    elem_strides = list(reversed(strides))             # cols (1), rows, depth, batch[, outer]
    align = 16 // elem_bytes                           # TMA strides are multiples of 16 bytes
    for i in range(1, n):                              # padded or size-1 dims: any valid stride
        if shape[n - 1 - i] == 1 or elem_strides[i] == 0:
            extent = elem_strides[i - 1] * dims[i - 1] if i > 1 else dims[0]
            elem_strides[i] = cdiv(extent, align) * align
    return Geometry(dims, tuple(s * elem_bytes for s in elem_strides[1:]), (tile.panel_cols, tile.rows) + (1,) * (n - 2))


_DTYPES = {"bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "fp16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
           "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
           # fp8 moves as raw bytes (the driver has no fp8 element type; TMA copies do not convert, and
           # reductions, which would add them as integers, are refused at trace time)
           "fp8e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8", "fp8e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             128: "CU_TENSOR_MAP_SWIZZLE_128B"}


def l2_promotion(panel_bytes: int) -> str:
    """The L2 promotion of a map whose box rows are `panel_bytes` long (one swizzle panel): the box row itself, 64,
    128 or 256 bytes (none below 64). Promoting 128-byte rows to 256 bytes fetched each row's neighbouring panel
    ahead of the load that reads it and slowed streaming loads (attention's one-row decoding over 8192 keys: 8%,
    benchmarks/RESULTS.md run 147; weight-streaming GEMMs 2-3.5%, run 148); loads that hit in L2 ran level (the
    attention prefill cases; GEMM 4096^3 1% behind)."""
    for size in (256, 128, 64):
        if panel_bytes >= size:
            return f"CU_TENSOR_MAP_L2_PROMOTION_L2_{size}B"
    return "CU_TENSOR_MAP_L2_PROMOTION_NONE"


_driver_lock = threading.Lock()


def _in_context(device: int, call: Callable[[], tuple], what: str):
    """check(call()) for one of the driver's tensor-map calls, under `device`'s primary context (device_context: a
    thread whose current context is another device's, or none, gets it pushed for the call). On the H200, 16 fresh
    threads making their first attention call at once still got CUDA_ERROR_INVALID_CONTEXT now and then (runs 251,
    253) with the primary context current; so these calls are serialized (they run on cache misses only) and
    retried once after making the primary context current."""
    with _driver_lock, device_context(device):
        result = call()
        if result[0] == CUDA_ERROR_INVALID_CONTEXT:
            check(_driver().cuCtxSetCurrent(primary_context(device)), "cuCtxSetCurrent")
            result = call()
        return check(result, what)


def encode(pointer: int, geo: Geometry, tile: ST, device: int) -> bytes:
    """The 128 bytes of a CUtensorMap (cuTensorMapEncodeTiled); out-of-bounds elements read as zero."""
    d = _driver()
    u64, u32 = d.cuuint64_t, d.cuuint32_t
    tmap = _in_context(device, lambda: d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, _DTYPES[tile.dtype.name]), len(geo.dims), pointer,
        [u64(x) for x in geo.dims], [u64(x) for x in geo.strides], [u32(x) for x in geo.box], [u32(1)] * len(geo.dims),
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(d.CUtensorMapSwizzle, _SWIZZLES[tile.swizzle]),
        getattr(d.CUtensorMapL2promotion, l2_promotion(geo.box[0] * tile.dtype.nbytes)),
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), f"cuTensorMapEncodeTiled({geo}, {tile})")
    return ctypes.string_at(tmap.getPtr(), 128)


def retarget(blob: bytes, pointer: int, device: int) -> bytes:
    """The same tensor map at another address (cuTensorMapReplaceAddress: 0.4 us against 2 us to encode)."""
    d = _driver()
    tmap = d.CUtensorMap()
    ctypes.memmove(tmap.getPtr(), blob, 128)
    _in_context(device, lambda: d.cuTensorMapReplaceAddress(tmap, pointer), "cuTensorMapReplaceAddress")
    return ctypes.string_at(tmap.getPtr(), 128)


class TensorMapEncoder:
    """tensor -> tensor-map bytes for one shared tile type: cached by (pointer, shape, strides); a new
    pointer with a known shape and strides retargets the cached map instead of encoding anew."""

    def __init__(self, tile: ST, device: int):
        self.tile = tile
        self.device = device
        self._cache: dict = {}          # (pointer, shape, strides) -> bytes
        self._by_geometry: dict = {}    # (shape, strides) -> bytes of some map with that geometry

    def __call__(self, t) -> bytes:
        key = (t.data_ptr(), t.shape, t.stride())
        blob = self._cache.get(key)
        if blob is None:
            similar = self._by_geometry.get(key[1:])
            if similar is not None:
                blob = retarget(similar, key[0], self.device)
            else:
                geo = geometry(t.shape, t.stride(), t.element_size(), self.tile)
                blob = encode(key[0], geo, self.tile, self.device)
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
                self._by_geometry.clear()
            self._cache[key] = blob
            self._by_geometry[key[1:]] = blob
        return blob
