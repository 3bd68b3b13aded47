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

fp32 = f32
half = fp16
float16 = fp16
bfloat16 = bf16
float32 = f32

TILE_DTYPES = (bf16, fp16, f32)
MMA_INPUT_DTYPES = (bf16, fp16)


def from_torch(torch_dtype) -> DType:
    """The tkpy dtype of a torch dtype, or a clear error."""
    for dt in (bf16, fp16, f32, i32):
        if dt.torch == torch_dtype:
            return dt
    raise TypeError(f"tkpy has no element type for torch dtype {torch_dtype}; supported: bf16, fp16, f32")
