"""What Python's own functions do to tkpy's traced values (tkpy.ir.expr.Traced): runtime scalars, tiles and vectors,
global tensors and the values of a tk.map function.

A kernel runs on the host once, while it is traced; its values stand for what the GPU will compute, so they have no
Python number or array to give. math.sqrt(x), float(x), int(x), range(n), numpy's functions (np.exp(t)), torch's
(torch.sigmoid(x)), a Python `if` or `while` on a runtime value and comparisons of tiles therefore fail at trace time,
naming the user's line and what to write instead: the tk function (tk.sqrt), tk.range, `with tk.if_(...)`. Numpy
scalars' arithmetic (np.float32(2) * t) is the same Python operator's, as it was before numpy asked the value.
"""
from __future__ import annotations

import linecache
import operator
import re

import numpy as np

from ..errors import TraceAttributeError
from ..frontend.context import user_frame, user_loc
from ..ir.core import GlobalVar, SharedRef, Var
from ..ir.expr import Expr, Traced, render, tile_syntax
from ..tiles.types import RT, RV, ST, SV
from ._checks import fail, user_name

# What to use for a function of the same name (math.sqrt, np.sqrt, torch.sqrt: tk.sqrt).
TK_FUNCTION = {
    "sqrt": "tk.sqrt", "rsqrt": "tk.rsqrt", "exp": "tk.exp", "exp2": "tk.exp2", "log": "tk.log", "log2": "tk.log2",
    "log1p": "tk.log1p", "tanh": "tk.tanh", "erf": "tk.erf", "sigmoid": "tk.sigmoid", "expit": "tk.sigmoid",
    "pow": "tk.pow (or x ** y)", "power": "tk.pow (or x ** y)", "float_power": "tk.pow (or x ** y)",
    "abs": "tk.abs (or abs(x))", "fabs": "tk.abs (or abs(x))", "absolute": "tk.abs (or abs(x))",
    "max": "tk.max", "maximum": "tk.max", "fmax": "tk.max", "amax": "tk.row_max / tk.col_max",
    "min": "tk.min", "minimum": "tk.min", "fmin": "tk.min", "amin": "tk.row_min / tk.col_min",
    "relu": "tk.relu", "neg": "-x", "negative": "-x", "square": "x * x (or x ** 2)", "reciprocal": "1 / x",
    "silu": "x * tk.sigmoid(x)", "gelu": "0.5 * x * (1 + tk.erf(x * 0.7071067811865476))",
    "softplus": "tk.log1p(tk.exp(x))", "expm1": "tk.exp(x) - 1", "exp10": "tk.exp2(x * 3.321928094887362)",
    "log10": "tk.log2(x) * 0.3010299956639812", "clamp": "tk.max(tk.min(x, high), low)",
    "clip": "tk.max(tk.min(x, high), low)", "sum": "tk.row_sum / tk.col_sum", "prod": "tk.row_prod / tk.col_prod",
    "softmax": "tk.row_max, tk.sub_row, tk.exp, tk.row_sum, tk.div_row (or tk.OnlineSoftmax)",
}
ELEMENTWISE = ("tk.exp", "tk.exp2", "tk.log", "tk.log2", "tk.log1p", "tk.sqrt", "tk.rsqrt", "tk.pow", "tk.sigmoid",
               "tk.tanh", "tk.erf", "tk.abs", "tk.relu", "tk.max", "tk.min")
# numpy's ufuncs that are Python operators: what np.float32(2) * t (numpy asking t first) stands for.
NUMPY_OPERATORS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "true_divide": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "power": operator.pow, "negative": operator.neg,
    "absolute": abs, "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne,
}


@tile_syntax("foreign")
def refuse(hook: str, value, args: tuple, kwargs: dict):
    """What `value` answers to Python's `hook` (a Traced hook, "__bool__" or "comparison"): an error naming the
    user's line, or the result of numpy scalar arithmetic."""
    if hook == "__array_ufunc__":
        result = _numpy_operator(args, kwargs)
        if result is not NotImplemented:
            return result
    if value is None:                               # __torch_function__: a classmethod, the value among its args
        value = next((a for a in _flat(args[1:]) if isinstance(a, Traced)), None)
    call = _call_text()
    what = _describe(value)
    if hook == "__bool__":
        fail(_no_truth_value(value, what))
    if hook == "comparison":
        fail(_no_comparison(call, what))
    if hook == "attribute":
        raise TraceAttributeError(_no_attribute(args[0], what), user_loc())
    if hook == "__setitem__":
        fail(f"{what} is not assigned element by element: ops write whole tiles (tk.fill, tk.copy, tk.map), and the "
             "masks (tk.tril, tk.triu, tk.right_fill, tk.make_causal, ...) replace the elements past a boundary")
    if hook == "__matmul__":
        fail(f"@ cannot take {what}: tiles multiply into an accumulator, destination first: tk.mma_AB(c, a, b, c) "
             "(a warp's mma.sync; also mma_ABt, mma_AtB, mma_AtBt) or tk.warpgroup.mma_AB(acc, a, b) (wgmma)")
    name = _function_name(hook, args, call)
    if hook == "__index__" and isinstance(value, Expr) and name == "range":
        loop = f"for i in tk.{call}" if call and call.startswith("range(") else "for i in tk.range(...)"
        fail(f"range() needs a Python int, but {what} is a runtime value (known when the kernel runs, not while it "
             f"is traced): `{loop}:` loops on the GPU; a static dim (tk.gl[bf16, 'R', 64]) or a tk.constexpr "
             "argument is a Python int, for a loop unrolled at trace time")
    if isinstance(value, Expr):
        fail(f"{name} cannot take a runtime scalar, {what}: it has no value while the kernel is traced. Runtime "
             "scalars take + - * / // % and comparisons (and tk.call('min' / 'max', ...)); compute the rest on the "
             "host and pass it as an int or float argument, or on tiles with tkpy's functions")
    if any(_is_host_array(a) for a in _flat(args[1:])):     # t * torch_tensor, np_array * t
        fail(f"{name} cannot take a tkpy value, {what}, with a host tensor: a torch tensor or numpy array inside a "
             "kernel is a value of the host, not of the GPU's threads; pass it as a kernel argument (a tk.gl "
             "parameter) and tk.load it into a tile")
    fail(f"{name} cannot take a tkpy value, {what}: Python's, numpy's and torch's functions run on the host "
         f"while the kernel is traced; {_suggestion(name, value)}")


def _numpy_operator(args: tuple, kwargs: dict):
    """ufunc(*inputs) as its Python operator when it is one and the other inputs are numbers, else NotImplemented."""
    ufunc, method, *inputs = args
    op = NUMPY_OPERATORS.get(getattr(ufunc, "__name__", ""))
    if op is None or method != "__call__" or kwargs:
        return NotImplemented
    numbers = [x.item() if isinstance(x, np.generic) else x for x in inputs]
    if not all(isinstance(x, (Traced, int, float)) for x in numbers):
        return NotImplemented
    return op(*numbers)


def _flat(args):
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from _flat(a)
        else:
            yield a


def _call_text() -> str | None:
    """The source of the expression the user's frame is evaluating (a call: `math.sqrt(x)`), or None."""
    frame = user_frame()
    if frame is None:
        return None
    try:
        line, end_line, col, end_col = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, IndexError, ValueError):
        return None
    text = linecache.getline(frame.f_code.co_filename, line or 0).encode()
    if not text or col is None:
        return None
    return text[col:end_col if end_line == line else None].decode(errors="replace").strip()


def _function_name(hook: str, args: tuple, call: str | None) -> str:
    """How to name the Python function that asked: the user's spelling of the call (np.exp), else numpy's or
    torch's own name for it, else the conversion (float())."""
    callee = re.match(r"([A-Za-z_][\w.]*)\s*\(", call or "")
    spelled = callee.group(1) if callee else None
    own = None
    if hook in ("__array_ufunc__", "__array_function__"):
        own = f"numpy.{getattr(args[0], '__name__', 'function')}"
    elif hook == "__torch_function__":
        func = args[0]
        name = getattr(func, "__name__", str(func))
        module = getattr(func, "__module__", None) or "torch"
        qualified = getattr(func, "__qualname__", name)
        own = (f"torch.Tensor.{name}" if "Tensor" in qualified or module.startswith("torch._")
               else f"{module}.{name}" if module.startswith("torch.nn") else f"torch.{name}")
    if spelled and (own is None or spelled.rsplit(".", 1)[-1] == own.rsplit(".", 1)[-1]):
        return spelled
    if own is not None:
        return own
    return {"__float__": "float()", "__int__": "int()", "__index__": "a Python int", "__complex__": "complex()",
            "__round__": "round()", "__floor__": "math.floor", "__ceil__": "math.ceil", "__trunc__": "math.trunc",
            "__array__": "a numpy array"}.get(hook, "a Python function")


def _describe(value) -> str:
    """The value as the messages name it: `n > 0`, `t` (a register tile rt<f32, 16x64, row>), `x` (an element of a
    tk.map operand)."""
    if isinstance(value, Expr):
        return f"`{render(value)}`"
    if isinstance(value, (Var, SharedRef, GlobalVar)):
        kind = {RT: "a register tile", RV: "a register vector", ST: "a shared tile", SV: "a shared vector"}.get(
            type(value.type), "a global tensor" if isinstance(value, GlobalVar) else "a semaphore")
        return f"`{user_name(value)}` ({kind} {value.type})"
    name = user_name(value) if value is not None else ""
    return f"`{name}` (an element of a tk.map operand)" if name else "an element of a tk.map operand"


def _suggestion(name: str, value) -> str:
    base = name.rstrip("()").rsplit(".", 1)[-1]
    tk_name = TK_FUNCTION.get(base) or f"tkpy's elementwise functions ({', '.join(ELEMENTWISE)}) and + - * / **"
    if isinstance(value, (GlobalVar, SharedRef)) or (isinstance(value, Var) and value.is_shared):
        return f"load it into a register tile (tk.load), then use {tk_name}"
    return f"use {tk_name}"


def _is_host_array(x) -> bool:
    return type(x).__module__.split(".")[0] in ("torch", "numpy") and hasattr(x, "shape") and not isinstance(x, Traced)


def _no_truth_value(value, what: str) -> str:
    if isinstance(value, Expr):
        return (f"{what} is a runtime value, known only when the kernel runs: Python's if, while, and, or, not and "
                "bool() run once, while the kernel is traced. For a runtime branch use `with tk.if_(cond):` (then "
                "`with tk.else_():`), combine conditions with & | ~, loop with tk.range; Python values (static dims, "
                "tk.constexpr arguments) branch at trace time")
    return ("a tk.map function is traced once, on placeholders for its operands' elements: it cannot branch on "
            f"their values ({what} in an if, and, or, not); select with tk.max / tk.min / tk.relu")


# What a torch user reaches for on a tile, and tkpy's way.
TILE_ATTRIBUTES = {
    "shape": "its type: t.type.rows, t.type.cols (t.type.length for a vector)", "size": "t.type.rows, t.type.cols",
    "dtype": "t.type.dtype", "T": "tk.transpose(dst, t) (tk.swap_layout changes the layout)",
    "t": "tk.transpose(dst, t)", "transpose": "tk.transpose(dst, t)",
    "float": "tk.copy(dst, t) into a tile of that dtype", "to": "tk.copy(dst, t) into a tile of that dtype",
    "bfloat16": "tk.copy(dst, t) into a tile of that dtype", "half": "tk.copy(dst, t) into a tile of that dtype",
    "zero_": "tk.zero(t)", "fill_": "tk.fill(t, value)", "copy_": "tk.copy(t, src)",
    **dict.fromkeys(("item", "numpy", "tolist", "cpu"), "nothing: a tile has no values while the kernel is traced; "
                                                         "tk.store it and read the tensor after the launch"),
}


def _no_attribute(name: str, what: str) -> str:
    use = TILE_ATTRIBUTES.get(name) or TK_FUNCTION.get(name)
    return (f"{what} has no attribute `{name}`: tiles take tkpy's destination-first ops, as ThunderKittens' "
            f"(tk.row_max(m, t), tk.sub_row(t, t, m), tk.exp(t, t)); use {use or 'tk.' + name + ' if tkpy has it'}")


def missing_name(name: str, names) -> str:
    """What `tk.<name>` that does not exist should say: the tk way for a torch name, or the closest of `names`."""
    import difflib

    use = {"zeros": "t = tk.rt(f32, 16, 64); tk.zero(t)", "ones": "t = tk.rt(f32, 16, 64); tk.one(t)",
           "full": "t = tk.rt(f32, 16, 64); tk.fill(t, value)", "empty": "tk.rt(f32, 16, 64) (a register tile)",
           "tensor": "tk.rt / tk.st (register and shared tiles) and tk.gl (a kernel's tensor parameter)",
           "matmul": "tk.mma_AB(c, a, b, c) or tk.warpgroup.mma_AB(acc, a, b)", "mm": "tk.mma_AB(c, a, b, c)",
           "dot": "tk.mma_AB(c, a, b, c)", "where": "tk.max / tk.min, or the masks (tk.tril, tk.right_fill, ...)",
           "float32": "tk.f32", "float16": "tk.fp16", "int": "tk.i32", "jit": "@tk.kernel(warps=4)",
           "program_id": "tk.block_idx.x (and .y, .z)", "arange": "tk.range for a loop on the GPU",
           **TK_FUNCTION}.get(name)
    if use is None:
        close = difflib.get_close_matches(name, [n for n in names if not n.startswith("_")], n=3)
        use = " or ".join(f"tk.{n}" for n in close) if close else None
    return f"module 'tkpy' has no attribute '{name}'" + (f"; use {use}" if use else "")


def _no_comparison(call: str | None, what: str) -> str:
    builtin = re.match(r"(max|min)\s*\(", call or "")
    if builtin:
        return (f"Python's {builtin.group(1)}() compares its arguments, and {what} has no comparisons; use "
                f"tk.{builtin.group(1)}(a, b), elementwise")
    return (f"{what} cannot be compared (< <= > >=): tiles and map values have no comparisons; select elementwise "
            "with tk.max / tk.min / tk.relu, or mask with tk.tril / tk.triu / tk.right_fill / tk.make_causal")
