"""Errors a newcomer meets, each naming the user's file:line and saying the fix: Python control flow and range() on
runtime values, Python's math / numpy / torch functions on tkpy values, a kernel called without a grid, no GPU, a
static dim the kernel's tiles leave partly uncovered, register tiles too big, and the torch habits (t.sum(), t @ u,
t[0, 0] = 1, tk.zeros, torch dtypes in tk.gl). Each test asserts the message names this file, the line of the
offending statement and the fix."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32

from test_trace_codegen import line_of

X = torch.zeros(64, 64)
FILE = os.path.basename(__file__)


def says(error, fn, text: str, *fixes: str) -> None:
    """The error names this file at the line of `fn` that holds `text`, and each fix."""
    message = str(error.value if hasattr(error, "value") else error)
    assert f"{FILE}:{line_of(fn, text)}:" in message, message
    for fix in fixes:
        assert fix in message, f"{fix!r} not in: {message}"


def one_tile(body, *, tensor=None):
    """A one-warp kernel over a 16 x 64 f32 tile `t` of its argument x (and a runtime int n): body(t, n, x)."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 64], n: int):
        t = tk.rt(f32, 16, 64)
        tk.load(t, x, (0, 0))
        body(t, n, x)
        tk.store(x, t, (0, 0))
    return k


def trace(body):
    return one_tile(body).trace(X, 3)


# -- Python control flow and range() on runtime values ----------------------------------------------------------------
def branch_if(t, n, x):
    if n > 0:                                            # the offending line
        tk.exp(t, t)


def branch_while(t, n, x):
    while n > 0:                                         # the offending line
        n = n - 1


def branch_and(t, n, x):
    both = tk.warp_id() == 0 and n > 0                   # the offending line
    del both


def branch_or(t, n, x):
    either = n > 1 or n < 0                              # the offending line
    del either


def branch_not(t, n, x):
    neither = not n > 0                                  # the offending line
    del neither


def branch_chained(t, n, x):
    inside = 0 < n < 4                                   # the offending line
    del inside


@pytest.mark.parametrize("body", [branch_if, branch_while, branch_and, branch_or, branch_not, branch_chained])
def test_python_control_flow_on_a_runtime_value(body):
    with pytest.raises(tk.TraceError) as e:
        trace(body)
    says(e, body, "# the offending line", "is a runtime value", "with tk.if_(cond):", "tk.range")


def loop_over_rows(t, n, x):
    for i in range(x.rows // 16):                        # the offending line
        tk.exp(t, t)


def test_range_of_a_runtime_dim():
    with pytest.raises(tk.TraceError) as e:
        trace(loop_over_rows)
    says(e, loop_over_rows, "# the offending line", "range() needs a Python int", "`R / 16` is a runtime value",
         "for i in tk.range(x.rows // 16):", "tk.constexpr")


def test_a_map_function_cannot_branch_or_compare():
    def branching(t, n, x):
        tk.map(t, lambda v: v if v > 0 else -v, t)      # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(branching)
    says(e, branching, "# the offending line", "cannot be compared", "tk.max / tk.min / tk.relu")

    def python_max(t, n, x):
        tk.map(t, lambda v: max(v, 0.0), t)             # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(python_max)
    says(e, python_max, "# the offending line", "Python's max() compares its arguments", "use tk.max(a, b)")


# -- Python's math, numpy and torch functions on tkpy values -------------------------------------------------------
@pytest.mark.parametrize("call,fix", [
    (lambda t, n, x: tk.map(t, lambda v: math.sqrt(v), t),
     "math.sqrt cannot take a tkpy value, `v` (an element of a tk.map operand)"),
    (lambda t, n, x: tk.map(t, lambda v: torch.sigmoid(v), t), "torch.sigmoid cannot take a tkpy value"),
    (lambda t, n, x: tk.map(t, lambda v: np.tanh(v), t), "np.tanh cannot take a tkpy value"),
    (lambda t, n, x: tk.store(x, np.exp(t), (0, 0)), "np.exp cannot take a tkpy value, `t` (a register tile"),
    (lambda t, n, x: tk.store(x, torch.erf(t), (0, 0)), "torch.erf cannot take a tkpy value"),
    (lambda t, n, x: tk.map(t, lambda v: math.pow(v, 3), t), "math.pow cannot take a tkpy value"),
    (lambda t, n, x: float(t), "float() cannot take a tkpy value"),
    (lambda t, n, x: torch.nn.functional.gelu(t), "gelu cannot take a tkpy value"),
])
def test_python_math_numpy_and_torch_functions_are_refused_naming_the_tk_function(call, fix):
    with pytest.raises(tk.TraceError) as e:
        trace(call)
    name = fix.split(" cannot")[0].split(".")[-1].rstrip("()")
    tk_name = {"float": "tkpy's elementwise functions", "gelu": "tk.erf", "pow": "tk.pow"}.get(name, f"use tk.{name}")
    says(e, call, fix.split(" cannot")[0], fix, tk_name)


def test_a_math_function_of_a_runtime_scalar():
    def body(t, n, x):
        tk.mul(t, t, math.sqrt(n))                       # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(body)
    says(e, body, "# the offending line", "math.sqrt cannot take a runtime scalar, `n`", "pass it as an int or float")


def test_numpy_scalars_are_numbers():
    """np.float32(2) * t asks t first (numpy's protocol); it is still the multiplication by 2."""
    def body(t, n, x):
        tk.map(t, lambda v: np.float32(2.0) * v - np.float64(0.5), t)
        tk.store(x, np.float32(3.0) * t, (0, 0))
    source = one_tile(body).source(X, 3)
    assert "return 2.0f * x0 - 0.5f;" in source and "tk::mul(" in source and "3.0f);" in source


# -- launching ------------------------------------------------------------------------------------------------------
@tk.kernel(warps=1)
def copy_rows(x: tk.gl[f32, "R", 64], y: tk.gl[f32, "R", 64]):
    t = tk.rt(f32, 16, 64)
    tk.load(t, x, (tk.block_idx.x, 0))
    tk.store(y, t, (tk.block_idx.x, 0))


def test_a_kernel_called_without_a_grid():
    with pytest.raises(TypeError) as e:
        copy_rows(X, X)                                   # the offending line
    says(e, test_a_kernel_called_without_a_grid, "# the offending line", "copy_rows[grid](x, y)",
         "copy_rows[(blocks,)](...)", "copy_rows.interpret[grid](...)")


def test_wrong_arguments_name_the_call():
    with pytest.raises(tk.ArgumentError) as e:
        copy_rows.interpret[(1,)](X)                      # the offending line
    says(e, test_wrong_arguments_name_the_call, "# the offending line", "takes 2 arguments (x, y), got 1")
    with pytest.raises(tk.ArgumentError) as e:
        copy_rows.interpret[(1,)](X, X.double())          # the wrong dtype
    says(e, test_wrong_arguments_name_the_call, "# the wrong dtype", "`y` has dtype torch.float64")


def test_no_gpu_says_how_to_run_on_the_cpu(monkeypatch):
    import tkpy.runtime

    def no_gpu():
        raise tkpy.runtime.NoGPUError("tkpy needs an NVIDIA Hopper GPU (sm_90), but there is none")
    monkeypatch.setattr(tkpy.runtime, "require_gpu", no_gpu)
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)

    @tk.kernel(warps=1)
    def fresh(x: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 16, 64)
        tk.load(t, x, (0, 0))
        tk.store(x, t, (0, 0))
    with pytest.raises(tkpy.runtime.NoGPUError) as e:
        fresh[(1,)](X)                                    # the offending line
    says(e, test_no_gpu_says_how_to_run_on_the_cpu, "# the offending line", "there is none",
         "Setting TKPY_INTERPRET=1 runs the same call on the CPU", "fresh.interpret[grid](...)")


# -- static dims the tiles leave uncovered --------------------------------------------------------------------------
@tk.kernel(warps=1)
def narrow_softmax(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R", 64], D: tk.constexpr):
    t = tk.rt(f32, 16, D)
    tk.load(t, x, (tk.block_idx.x, 0))                    # the first copy
    tk.exp(t, t)
    tk.store(y, t, (tk.block_idx.x, 0))


def test_a_constexpr_width_narrower_than_the_static_columns():
    x = torch.zeros(32, 64, dtype=torch.bfloat16)
    with pytest.raises(tk.TraceError) as e:
        narrow_softmax.interpret[(2,)](x, x.clone(), 32)
    says(e, narrow_softmax.fn, "# the first copy", "`x` (gl<bf16, R, 64>) has 64 static columns", "0..31 only",
         "tiles 32 columns wide (D = 32)", "columns 32..63 are never read", "pass D = 64",
         "for j in range(2)", "declare it dynamic")
    narrow_softmax.interpret[(2,)](x, x.clone(), 64)      # the whole row: fine
    narrow_softmax.interpret[(2,)](x, x.clone(), 128)     # wider than the tensor: masked, fine


def test_pieces_copied_at_every_coordinate_or_at_runtime_ones_are_fine():
    @tk.kernel(warps=1)
    def pieces(x: tk.gl[f32, "R", 64], y: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 16, 32)
        for j in range(2):                                # unrolled: column tiles 0 and 1
            tk.load(t, x, (tk.block_idx.x, j))
            tk.store(y, t, (tk.block_idx.x, j))

    @tk.kernel(warps=1)
    def runtime_column(x: tk.gl[f32, "R", 64], y: tk.gl[f32, "R", 64], j: int):
        t = tk.rt(f32, 16, 32)
        tk.load(t, x, (0, j))                             # which columns: known when it runs
        tk.store(y, t, (0, j))
    pieces.trace(X, X)
    runtime_column.trace(X, X, 1)


def test_copies_that_start_past_column_0_choose_their_columns():
    @tk.kernel(warps=1)
    def last_piece(x: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 16, 32)
        tk.load(t, x, (0, 1))
        tk.store(x, t, (0, 1))
    last_piece.trace(X)


# -- register tiles too big ----------------------------------------------------------------------------------------
def test_register_tiles_too_big_say_how_to_split_the_row():
    @tk.kernel(warps=4)
    def wide(x: tk.gl[bf16, "R", 256], y: tk.gl[bf16, "R", 256]):
        t = tk.rt(f32, 16, 256)                           # the biggest tile
        u = tk.rt(f32, 16, 256)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.exp(u, t)
        tk.add(t, t, u)
        tk.store(y, t, (tk.block_idx.x, 0))
    with pytest.raises(tk.TraceError) as e:
        wide.trace(torch.zeros(64, 256, dtype=torch.bfloat16), torch.zeros(64, 256, dtype=torch.bfloat16))
    says(e, wide.fn, "# the biggest tile", "need at least 256 registers per thread", "`t` rt<f32, 16x256, row> (128",
         "`u` rt<f32, 16x256, row>", "use tiles of 16 x 128 and loop over column pieces")


# -- torch habits ---------------------------------------------------------------------------------------------------
def test_tile_methods_torch_has_say_the_tk_op():
    def body(t, n, x):
        tk.store(x, t.sum(), (0, 0))                     # the offending line
    with pytest.raises(AttributeError) as e:
        trace(body)
    assert isinstance(e.value, tk.TraceError)
    says(e, body, "# the offending line", "`t` (a register tile rt<f32, 16x64, row>) has no attribute `sum`",
         "tk.row_sum / tk.col_sum")

    def probe(t, n, x):
        assert not hasattr(t, "sum") and getattr(t, "numpy", None) is None
    trace(probe)


def test_tile_elements_and_matmul():
    def assign(t, n, x):
        t[0, 0] = 1.0                                     # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(assign)
    says(e, assign, "# the offending line", "is not assigned element by element", "tk.fill")

    def element(t, n, x):
        tk.exp(t[0], t[0])                                # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(element)
    says(e, element, "# the offending line", "is indexed by one or two slices", "not addressable one by one")

    def matmul(t, n, x):
        tk.store(x, t @ t, (0, 0))                        # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(matmul)
    says(e, matmul, "# the offending line", "@ cannot take", "tk.mma_AB(c, a, b, c)")


def test_an_op_passed_on_as_if_it_were_a_tile():
    def body(t, n, x):
        tk.store(x, tk.exp(t, t), (0, 0))                 # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(body)
    says(e, body, "# the offending line", "the unary op that a tk function returned", "use the value form")


def test_names_tkpy_does_not_have():
    with pytest.raises(AttributeError, match=r"no attribute 'zeros'; use t = tk.rt\(f32, 16, 64\); tk.zero\(t\)"):
        tk.zeros(16, 64)
    with pytest.raises(AttributeError, match=r"no attribute 'row_summ'; use tk.row_sum"):
        tk.row_summ
    assert not hasattr(tk, "zeros")


def test_signature_mistakes_name_the_def():
    with pytest.raises(TypeError, match=r"tk.gl takes tkpy's dtypes .* not torch.float32: write tk.gl\[tk.f32, ...\]"):
        tk.gl[torch.float32, "R", 64]
    with pytest.raises(tk.TraceError) as e:
        @tk.kernel(warps=1)
        def unannotated(x, n: int):                       # the def
            pass
    says(e, test_signature_mistakes_name_the_def, "# the def", "parameter `x` needs an annotation")


def test_a_returned_value_names_the_return():
    @tk.kernel(warps=1)
    def returns(x: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 16, 64)
        return t                                          # the return
    with pytest.raises(tk.TraceError) as e:
        returns.trace(X)
    says(e, returns.fn, "# the return", "must not return a value", "tk.store")


def test_global_tensors_have_a_shape():
    def body(t, n, x):
        rows, cols = x.shape
        assert cols == 64 and rows.name == "R"
    trace(body)


def test_a_value_form_whose_result_is_dropped():
    def body(t, n, x):
        tk.exp(t)                                         # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(body)
    says(e, body, "# the offending line", "the new tile this expression returns is never used", "tk.exp(t, t)")

    def reduced(t, n, x):
        tk.row_max(t)                                     # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(reduced)
    says(e, reduced, "# the offending line", "the new vector", "tk.row_max(v, t)")


def test_a_tile_used_after_the_loop_it_was_declared_in():
    def body(t, n, x):
        for i in tk.range(n):
            s = tk.row_sum(t)
            tk.mul(t, t, 0.5)
        tk.sub_row(t, t, s)                               # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(body)
    says(e, body, "# the offending line", "is used outside the scope it was declared in", "declare it before the loop")


def test_tile_declarations_take_python_ints_and_tkpy_dtypes():
    def runtime_rows(t, n, x):
        tk.rt(f32, x.rows, 64)                            # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(runtime_rows)
    says(e, runtime_rows, "# the offending line", "`R` is a runtime value", "tk.constexpr")

    def torch_dtype(t, n, x):
        tk.rt(torch.bfloat16, 16, 64)                     # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(torch_dtype)
    says(e, torch_dtype, "# the offending line", "got torch.bfloat16: write tk.bf16")


def test_kernel_options_by_name():
    with pytest.raises(TypeError) as e:
        @tk.kernel(4)                                     # the offending line
        def k(x: tk.gl[f32, "R", 64]):
            pass
    says(e, test_kernel_options_by_name, "# the offending line", "@tk.kernel(warps=4)")


HOST = torch.ones(16, 64)


def test_a_host_tensor_inside_a_kernel():
    def times_host(t, n, x):
        tk.store(x, HOST * t, (0, 0))                     # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(times_host)
    says(e, times_host, "# the offending line", "with a host tensor", "pass it as a kernel argument (a tk.gl")

    def host_times(t, n, x):
        tk.store(x, t * HOST, (0, 0))                     # the offending line
    with pytest.raises(tk.TraceError) as e:
        trace(host_times)
    says(e, host_times, "# the offending line", "a host Tensor of shape (16, 64)", "tk.load it into a tile")
