"""Element types of tiles: their sizes, C++ names and torch counterparts."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """A scalar element type.

    `ctype` is the storage type in generated C++ (bf16/fp16 are project-defined
    16-bit storage structs, see the codegen prelude); `ctype2` is the packed pair
    that register tiles hold per register.
    """

    name: str
    bits: int
    ctype: str
    ctype2: str
    torch_name: str
    is_float: bool = True

    @property
    def nbytes(self) -> int:
        return self.bits // 8

    @property
    def torch(self):
        import torch

        return getattr(torch, self.torch_name)

    def __repr__(self) -> str:
        return self.name


bf16 = DType("bf16", 16, "bf16", "bf16_2", "bfloat16")
fp16 = DType("fp16", 16, "fp16", "fp16_2", "float16")
f32 = DType("f32", 32, "float", "float2", "float32")
i32 = DType("i32", 32, "int", "int2", "int32", is_float=False)
i64 = DType("i64", 64, "long long", "longlong2", "int64", is_float=False)   # (global tensors: indices, targets)
# 8-bit floats (OCP FP8): e4m3 without infinities (max 448, torch's float8_e4m3fn) and e5m2 (max 57344).
# Register tiles hold them in pairs (16-bit fp8x2 structs in the row/col fragment layout of 16-bit
# tiles); conversions round to nearest even and saturate to the largest finite value (cvt.rn.satfinite).
fp8e4m3 = DType("fp8e4m3", 8, "fp8e4m3", "fp8e4m3_2", "float8_e4m3fn")
fp8e5m2 = DType("fp8e5m2", 8, "fp8e5m2", "fp8e5m2_2", "float8_e5m2")

fp32 = f32
half = fp16
float16 = fp16
bfloat16 = bf16
float32 = f32
int32 = i32
int64 = i64
INT_DTYPES = (i32, i64)               # integer global tensors: tk.atomic_add's counters (i32), scalar loads

TILE_DTYPES = (bf16, fp16, f32)
MMA_INPUT_DTYPES = (bf16, fp16)
FP8_DTYPES = (fp8e4m3, fp8e5m2)
FP8_MAX = {"fp8e4m3": 448.0, "fp8e5m2": 57344.0}   # the largest finite values (where satfinite clamps)
ALL_DTYPES = (bf16, fp16, f32, *INT_DTYPES, *FP8_DTYPES)
BY_NAME = {dt.name: dt for dt in ALL_DTYPES}


def named_like(x) -> DType | None:
    """The tkpy dtype that torch dtype `x` (torch.float32, ...) is, by name (for the errors of a torch dtype given
    where tkpy's is expected), else None; without importing torch."""
    text = str(x)
    return next((dt for dt in ALL_DTYPES if text == f"torch.{dt.torch_name}"), None)


def from_torch(torch_dtype) -> DType:
    """The tkpy dtype of a torch dtype, or a clear error."""
    for dt in ALL_DTYPES:
        if dt.torch == torch_dtype:
            return dt
    raise TypeError(f"tkpy has no element type for torch dtype {torch_dtype}; supported: bf16, fp16, f32, "
                    "fp8e4m3 (float8_e4m3fn), fp8e5m2 (float8_e5m2), i32 and i64 (int32, int64)")
