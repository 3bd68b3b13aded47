"""Row/column reductions of register tiles into vectors, and vector broadcasts back onto tiles."""
from __future__ import annotations

from ..frontend.context import current
from ..ir.core import BROADCAST_FNS, REDUCE_FNS
from ._checks import describe, emit, fail, register_tile, register_vector, same_layout, same_shape


def vector_for(tile, vec, axis: str, what: str):
    """`vec` must be the vector type that `tile` reduces to along `axis` ('row': one value per row)."""
    expected = tile.type.col_vec() if axis == "row" else tile.type.row_vec()
    if vec.type.length != expected.length or vec.type.layout != expected.layout:
        per = "row" if axis == "row" else "column"
        fail(f"{what}: {describe(vec)} does not hold one value per {per} of {describe(tile)}; "
             f"expected rv<{expected.length}, {expected.layout}> "
             f"(declare it with tk.{'col_vec' if axis == 'row' else 'row_vec'}(tile))")


def _reduce(fn: str, axis: str):
    def op(dst, src=None, accum=None):
        if src is None:     # tk.row_max(t): a new vector
            t = register_tile(dst, f"{axis}_{fn} source")
            v = current().declare(t.type.col_vec() if axis == "row" else t.type.row_vec(), "v")
            v.value = True
            op(v, t)
            return v
        v = register_vector(dst, f"{axis}_{fn} destination")
        t = register_tile(src, f"{axis}_{fn} source")
        vector_for(t, v, axis, f"{axis}_{fn}")
        args = [v, t]
        if accum is not None:
            acc = register_vector(accum, f"{axis}_{fn} accumulator")
            same_shape(v, acc, f"{axis}_{fn}")
            same_layout(v, acc, f"{axis}_{fn}")
            args.append(acc)
        return emit("reduce", *args, fn=fn, axis=axis)
    op.__name__ = f"{axis}_{fn}"
    op.__doc__ = (f"dst[i] = {fn} over the {'columns of row' if axis == 'row' else 'rows of column'} i of src "
                  f"(combined with `accum` when given). `tk.{axis}_{fn}(src)` returns a new vector.")
    return op


def _broadcast(fn: str, axis: str):
    def op(dst, src, vec, skip_ones: bool = False):
        d = register_tile(dst, f"{fn}_{axis} destination")
        s = register_tile(src, f"{fn}_{axis} source")
        same_shape(d, s, f"{fn}_{axis}")
        same_layout(d, s, f"{fn}_{axis}")
        v = register_vector(vec, f"{fn}_{axis} vector")
        vector_for(s, v, axis, f"{fn}_{axis}")
        if not skip_ones:
            return emit("broadcast", d, s, v, fn=fn, axis=axis)
        if fn != "mul" or d is not s:
            fail(f"{fn}_{axis}: skip_ones skips an in-place multiplication (tk.mul_{axis}(t, t, vec, skip_ones=True)); "
                 f"got {describe(d)} = {fn}({describe(s)}, ...)")
        return emit("broadcast", d, s, v, fn=fn, axis=axis, skip_ones=True)
    op.__name__ = f"{fn}_{axis}"
    op.__doc__ = (f"dst = {fn}(src, vec) with vec broadcast along each "
                  f"{'row (one value per row)' if axis == 'row' else 'column (one value per column)'}."
                  + ("\n\n`skip_ones=True` (in place only: `t = t * vec`): the warp skips the multiplication when every "
                     "element of vec is exactly 1 (a warp vote and a uniform branch; the same result), e.g. an "
                     "online softmax's rescale of its accumulator when no row max moved." if fn == "mul" else ""))
    return op


row_max, row_min, row_sum, row_prod = (_reduce(f, "row") for f in REDUCE_FNS)
col_max, col_min, col_sum, col_prod = (_reduce(f, "col") for f in REDUCE_FNS)
add_row, sub_row, mul_row, div_row = (_broadcast(f, "row") for f in BROADCAST_FNS)
add_col, sub_col, mul_col, div_col = (_broadcast(f, "col") for f in BROADCAST_FNS)
