"""Prelude helpers of the math functions (tk.sqrt, tk.rsqrt, tk.sigmoid, tk.tanh, tk.pow and `**`, tk.log1p,
tk.erf): their functors (written in tkpy/tiles/math_approx.py beside the interpreter's twins) and the named tile ops
(tk::sqrt(dst, src), ...), in the kernels that use one, after the warp-level helpers whose op_exp2, op_div and map
templates they call."""
from __future__ import annotations

from ...ir.core import MATH_FNS
from ...tiles import math_approx
from .helpers import helpers
from .warp_ops import named_unary

HELPERS = helpers(math_approx.CPP + "\n" + "\n\n".join(named_unary(fn) for fn in MATH_FNS))
