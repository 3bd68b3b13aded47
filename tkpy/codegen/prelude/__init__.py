"""The C++ prelude: header-free device helpers every generated kernel starts with.

NVRTC ships no headers, so storage types, conversions and PTX wrappers are
written here, one module per area. Each module exposes SECTIONS, a list of C++
texts (each closing any namespace it opens); the prelude is their concatenation
in the order below.
"""
from . import warp

PRELUDE = "\n".join(
    ["// ---- tkpy prelude: header-free device helpers (NVRTC ships no headers) ----",
     *warp.SECTIONS,
     "// ---- end of prelude ----\n"])
