"""The C++ prelude: header-free device helpers every generated kernel starts with.

NVRTC ships no headers, so storage types, conversions and PTX wrappers are
written here, one module per area. Each module exposes SECTIONS, a list of C++
texts (each closing any namespace it opens); the prelude is their concatenation
in the order below.
"""
from . import fp8 as fp8_section, hopper, math as math_section, scalar, warp, warp_extra, warp_ops

PRELUDE_HEAD = "// ---- tkpy prelude: header-free device helpers (NVRTC ships no headers) ----"
PRELUDE_TAIL = "// ---- end of prelude ----\n"
MODULES = (warp, warp_ops, warp_extra, hopper, scalar)  # in order; a module's sections may use those of the modules before it
SECTIONS = [section for module in MODULES for section in module.SECTIONS]
PRELUDE = "\n".join([PRELUDE_HEAD, *SECTIONS, PRELUDE_TAIL])


def prelude_for(wgmma_variants: set, tma5: bool = False, fp8: bool = False, math: bool = False) -> str:
    """The prelude plus the wgmma wrappers this kernel uses (generated per accumulator width), the
    5-d TMA copies when it moves tiles of a 5-d global tensor by TMA, the fp8 types and conversions
    when it has fp8 tensors or tiles, and the math functions (prelude/math.py) when it uses one."""
    if not wgmma_variants and not tma5 and not fp8 and not math:
        return PRELUDE
    extra = (([fp8_section.SECTION] if fp8 else []) + ([math_section.SECTION] if math else [])
             + ([hopper.wgmma_section(wgmma_variants)] if wgmma_variants else [])
             + ([hopper.TMA5_SECTION] if tma5 else []))
    return "\n".join([PRELUDE_HEAD, *SECTIONS, *extra, PRELUDE_TAIL])
