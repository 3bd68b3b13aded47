"""Tile types and layout math: the single source of truth for codegen and the interpreter."""
from .dtypes import (DType, bf16, fp16, f32, i32, i64, fp8e4m3, fp8e5m2, from_torch, TILE_DTYPES, MMA_INPUT_DTYPES,
                     FP8_DTYPES)
from .types import RT, RV, ST, SV, GL, GL_AXES, Semaphore
from . import layouts, swizzle

__all__ = ["DType", "bf16", "fp16", "f32", "i32", "i64", "fp8e4m3", "fp8e5m2", "from_torch", "TILE_DTYPES",
           "MMA_INPUT_DTYPES", "FP8_DTYPES",
           "RT", "RV", "ST", "SV", "GL", "GL_AXES", "Semaphore", "layouts", "swizzle"]
