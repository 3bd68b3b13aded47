"""Prelude section of the math functions (tk.sqrt, tk.rsqrt, tk.sigmoid, tk.tanh, tk.pow and `**`, tk.log1p,
tk.erf): their functors (written in tkpy/tiles/math_approx.py beside the interpreter's twins) and the named tile ops
(tk::sqrt(dst, src), ...), included only in kernels that use one, after the warp-level sections whose op_exp2,
op_div and map templates they call."""
from __future__ import annotations

from ...ir.core import MATH_FNS
from ...tiles import math_approx
from .warp_ops import named_unary

SECTION = ("namespace tk {" + math_approx.CPP + "\n".join(named_unary(fn) for fn in MATH_FNS)
           + "\n}  // namespace tk\n")
