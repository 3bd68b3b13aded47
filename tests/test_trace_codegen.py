"""Tracing, trace-time errors, the IR printer, codegen and NVRTC compilation -- all without a GPU."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32, fp16
from tkpy.kernels.row_softmax import softmax_rows
from tkpy.kernels.warp_matmul import warp_matmul_bf16, warp_matmul_fp16

X64 = torch.empty(256, 64, dtype=torch.bfloat16)


def line_of(fn, text: str) -> int:
    """The source line of `fn` containing `text` (to check that errors name the user's line)."""
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, l in enumerate(lines) if text in l)


def test_softmax_ir_names_user_variables_and_lines():
    text = softmax_rows.ir(X64, X64, 64)
    assert "kernel softmax_rows(@x: gl<bf16, R, C>, @y: gl<bf16, R, C>) warps=4" in text
    assert "%t = rt<f32, 16x64, row>" in text
    assert re.search(r"row_max %m, %t\s+# row_softmax.py:\d+", text)
    assert "sub_row %t, %t, %m" in text and "div_row %t, %t, %s" in text
    assert "constexpr D=64" in text


def test_softmax_source_reads_like_thunderkittens():
    src = softmax_rows.source(X64, X64, 64)
    body = src.split("// ---- end of prelude ----")[1]
    assert "#include" not in src                                    # NVRTC has no headers
    assert 'extern "C" __global__ void __launch_bounds__(128)' in body
    for stmt in ("tk::rt<float, 1, 4, tk::row_l> t;", "tk::row_max(m, t);", "tk::sub_row(t, t, m);", "tk::exp(t, t);",
                 "tk::div_row(t, t, s);", "tk::store_masked(y, t, 0, 0, (block_x * 4 + warpid) * 16, 0);"):
        assert stmt in body
    # every statement is preceded by its Python origin
    assert re.search(r"// row_softmax\.py:\d+  tk\.row_max\(m, t\)\n\s+tk::row_max\(m, t\);", body)


def test_register_tiles_take_a_name_made_unique():
    """tk.rt(..., name=) names a tile the kernel's code cannot name from a Python variable (e.g. one made in a
    helper), unique among the kernel's names; a name that is no identifier is refused at its line."""
    def loaded(x):
        scores = tk.rt(f32, 16, 64, name="scores")      # (a helper's locals name nothing: the kernel's do)
        tk.load(scores, x, (0, 0))
        return scores

    @tk.kernel(warps=4)
    def named(x: tk.gl[f32, 16, 64]):
        tk.copy(loaded(x), loaded(x))
    src = named.source(torch.empty(16, 64))
    assert "tk::rt<float, 1, 4, tk::row_l> scores;" in src and "tk::rt<float, 1, 4, tk::row_l> scores_1;" in src
    assert "tk::copy(scores, scores_1);" in src

    @tk.kernel(warps=4)
    def badly_named(x: tk.gl[f32, 16, 64]):
        tk.rt(f32, 16, 64, name="2nd")
    with pytest.raises(tk.TraceError, match="identifier") as e:
        badly_named.trace(torch.empty(16, 64))
    assert str(line_of(badly_named, 'name="2nd"')) in str(e.value)


def test_shared_tiles_and_vectors_take_a_name_too():
    """tk.st and tk.sv take name= as tk.rt does (row_split.SharedPieces names its arrays after their tensors)."""
    def round_trip(x):                                  # (a helper's locals name nothing: the kernel's do)
        tile, _ = tk.st(f32, 16, 64, name="staging"), tk.sv(f32, 64, count=2, name="sums")
        tk.load(tile, x, (0, 0))
        tk.store(x, tile, (0, 0))

    @tk.kernel(warps=4)
    def named(x: tk.gl[f32, 16, 64]):
        round_trip(x)
    src = named.source(torch.empty(16, 64))
    assert re.search(r"tk::st<float, 16, 64[^>]*> staging\{", src) and re.search(r"> sums\{", src)

    @tk.kernel(warps=4)
    def badly_named(x: tk.gl[f32, 16, 64]):
        tk.sv(f32, 64, name="a b")
    with pytest.raises(tk.TraceError, match="tk.sv needs an identifier"):
        badly_named.trace(torch.empty(16, 64))


def test_names_cxx_reserves_take_a_suffix():
    """A name given directly that C++ reserves (tk.rt(name="do"), a template buffer `do`, as attention's backward's
    dO tiles) becomes do_ in the generated code, which compiles."""
    def loaded(x):
        grad = tk.rt(f32, 16, 64, name="do")            # (a helper's locals name nothing)
        tk.load(grad, x, (0, 0))
        return grad

    @tk.kernel(warps=4)
    def reserved(x: tk.gl[f32, 16, 64]):
        tk.store(x, loaded(x), (0, 0))
    src = reserved.source(torch.empty(16, 64))
    assert "tk::rt<float, 1, 4, tk::row_l> do_;" in src
    assert reserved.resources(torch.empty(16, 64)).spills == 0


def test_specializations_are_cached_per_constexpr_and_contiguity():
    a = softmax_rows.trace(X64, X64, 64)
    b = softmax_rows.trace(torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(64, 32, dtype=torch.bfloat16), 32)
    assert a.key != b.key
    assert softmax_rows.source(X64, X64, 64) is softmax_rows.source(X64, X64, 64)


@pytest.mark.parametrize("kern", [warp_matmul_bf16, warp_matmul_fp16])
def test_warp_matmul_compiles_to_hmma_and_ldmatrix(kern):
    dt = torch.bfloat16 if kern is warp_matmul_bf16 else torch.float16
    a, b, c = torch.empty(128, 64, dtype=dt), torch.empty(64, 128, dtype=dt), torch.empty(128, 128)
    sass = kern.sass(a, b, c)
    assert re.search(r"HMMA\.16816\.F32", sass)
    assert "LDSM.16.M88.4" in sass and "LDSM.16.MT88.4" in sass    # ldmatrix and ldmatrix.trans
    res = kern.resources(a, b, c)
    assert res.registers > 0 and res.spill_stores == 0
    assert kern.trace(a, b, c).ir.shared_bytes == 4 * 16 * 32 * 2 + 32 * 64 * 2
    assert "mma.sync.aligned.m16n8k16.row.col.f32" in kern.ptx(a, b, c)


def test_shared_tiles_are_aligned_for_their_swizzle():
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        tk.st(f32, 16, 16, swizzle=0)    # 1 KB, 16-byte alignment
        tk.st(bf16, 16, 16)              # 32-byte swizzle: 1024-byte alignment
        tk.sv(f32, 16)
    ir = k.trace(X64).ir
    offsets = sorted(ir.shared_offsets.values())
    assert offsets == [0, 1024, 1536]
    assert ir.shared_bytes == 1536 + 64


def test_semaphores_are_planned_after_the_tiles():
    """Semaphores (8 bytes each) take their words after every tile and vector, so that a swizzled tile declared
    after them does not wait for the next 1024-byte boundary."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        first = tk.st(bf16, 16, 64)                   # 2 KB, 1024-byte alignment
        ready = tk.semaphore(2)
        second = tk.st(bf16, 16, 64)
        tk.init_semaphore(ready[0], 1)
        tk.load(first, x, (0, 0))
        tk.load(second, x, (0, 0))
    ir = k.trace(X64).ir
    by_name = {v.name: offset for v, offset in ir.shared_offsets.items()}
    assert (by_name["first"], by_name["second"], by_name["ready"]) == (0, 2048, 4096)
    assert ir.shared_bytes == 4096 + 16


def test_runtime_loop_and_branch_codegen():
    @tk.kernel(warps=2)
    def k(x: tk.gl[f32, "R", 16], n: int, s: float):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.warp_id(), 0))
        for i in tk.range(1, n, 2):
            with tk.if_((i % 3 == 0) & (tk.lane_id() < 16)):
                tk.mul(t, t, s)
            with tk.else_():
                tk.add(t, t, i)
        tk.store(x, t, (tk.warp_id(), 0))
    x = torch.empty(32, 16)
    src = k.source(x, 3, 1.5)
    assert "for (int i = 1; i < n; i += 2) {" in src
    assert "if (i % 3 == 0 && laneid < 16) {" in src and "} else {" in src
    assert "tk::add(t, t, float(i));" in src and "tk::mul(t, t, s);" in src
    assert "int n, float s) {" in src


def test_a_lines_declarations_of_one_type_are_one_statement():
    """`a, b = tk.rt(...), tk.rt(...)`: one C++ declaration; another type, or another line, its own."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        a, b, c = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16), tk.rt(bf16, 16, 16)
        d = tk.rt(f32, 16, 16)
        tk.load(a, x, (0, 0))
        tk.copy(b, a)
        tk.copy(c, b)
        tk.copy(d, c)
        tk.store(x, d, (0, 0))
    body = k.source(torch.empty(16, 16)).split("// ---- end of prelude ----")[1]
    line = line_of(k.fn, "a, b, c =")
    assert re.search(rf"// test_trace_codegen\.py:{line}  .*\n    tk::rt<float, 1, 1, tk::row_l> a, b;\n"
                     r"    tk::rt<tk::bf16, 1, 1, tk::row_l> c;\n    // test_trace_codegen\.py:\d+  d = .*\n"
                     r"    tk::rt<float, 1, 1, tk::row_l> d;\n", body), body


def test_python_control_flow_unrolls_at_trace_time():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16], reps: tk.constexpr):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        for _ in range(reps):
            tk.exp(t, t)
        if reps > 2:
            tk.relu(t, t)
        tk.store(x, t, (0, 0))
    x = torch.empty(16, 16)
    assert k.ir(x, 3).count("exp %t, %t") == 3 and "relu" in k.ir(x, 3)
    assert "relu" not in k.ir(x, 1)


# -- errors name the user's line ---------------------------------------------------------

def test_shape_mismatch_names_the_user_line():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 32]):
        a, b = tk.rt(f32, 16, 32), tk.rt(f32, 32, 32)
        tk.add(a, a, b)
    with pytest.raises(tk.TraceError) as e:
        bad.trace(torch.empty(32, 32))
    assert f"test_trace_codegen.py:{line_of(bad.fn, 'tk.add(a, a, b)')}" in str(e.value)
    assert "16x32" in str(e.value) and "32x32" in str(e.value)
    assert "tk.add(a, a, b)" in str(e.value)                        # the offending source line is shown


def test_mma_layout_and_dtype_errors():
    @tk.kernel(warps=1)
    def bad_layout(x: tk.gl[f32, "R", 32]):
        a, b, c = tk.rt(bf16, 16, 16), tk.rt(bf16, 16, 16), tk.rt(f32, 16, 16)
        tk.mma_AB(c, a, b, c)
    with pytest.raises(tk.TraceError, match="b must be in col layout"):
        bad_layout.trace(torch.empty(32, 32))

    @tk.kernel(warps=1)
    def bad_dtype(x: tk.gl[f32, "R", 32]):
        a, b, c = tk.rt(bf16, 16, 16), tk.rt(fp16, 16, 16, "col"), tk.rt(f32, 16, 16)
        tk.mma_AB(c, a, b, c)
    with pytest.raises(tk.TraceError, match="must both be bf16 or both fp16; got a: rt<bf16, 16x16, row>, b: rt<fp16"):
        bad_dtype.trace(torch.empty(32, 32))


def test_vector_layout_error_suggests_col_vec():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 32]):
        t = tk.rt(f32, 16, 32)
        v = tk.rv(f32, 32, "align")
        tk.row_max(v, t)
    with pytest.raises(tk.TraceError, match=r"tk\.col_vec\(tile\)"):
        bad.trace(torch.empty(32, 32))


def test_runtime_value_in_python_control_flow_is_explained():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 32], n: int):
        if n > 3:
            pass
    with pytest.raises(tk.TraceError, match="tk.if_"):
        bad.trace(torch.empty(32, 32), 4)

    @tk.kernel(warps=1)
    def bad_range(x: tk.gl[f32, "R", 32], n: int):
        for _ in range(n):
            pass
    with pytest.raises(tk.TraceError, match="tk.range"):
        bad_range.trace(torch.empty(32, 32), 4)


def test_break_out_of_runtime_loop_is_an_error():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 32], n: int):
        for _ in tk.range(n):
            break
    with pytest.raises(tk.TraceError, match="cannot leave a tk.range loop"):
        bad.trace(torch.empty(32, 32), 4)


def test_shared_memory_over_subscription():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[bf16, "R", 64]):
        tk.st(bf16, 256, 256, count=2)
    with pytest.raises(tk.TraceError, match="shared memory over-subscribed"):
        bad.trace(X64)


def test_register_budget():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 256]):
        tk.rt(f32, 64, 256)
    with pytest.raises(tk.TraceError, match="registers per thread"):
        bad.trace(torch.empty(64, 256))


def test_out_of_range_tile_array_index():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[bf16, "R", 64]):
        s = tk.st(bf16, 16, 64, count=2)
        tk.load(s[2], x, (0, 0))
    with pytest.raises(tk.TraceError, match="out of range"):
        bad.trace(X64)


def test_tile_from_another_scope_is_rejected():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 16], n: int):
        for _ in tk.range(n):
            inner = tk.rt(f32, 16, 16)
            tk.zero(inner)
        tk.store(x, inner, (0, 0))
    with pytest.raises(tk.TraceError, match="outside the scope"):
        bad.trace(torch.empty(16, 16), 1)


@pytest.mark.parametrize("args,match", [
    ((torch.empty(256, 64, dtype=torch.float16), X64, 64), "dtype"),
    ((torch.empty(256, 64, 1, dtype=torch.bfloat16), X64, 64), "dims"),
    ((X64, torch.empty(128, 64, dtype=torch.bfloat16), 64), "dim 'R' is 256 elsewhere but 128"),
    ((X64.t(), X64, 64), "contiguous in its last dim"),
    ((torch.empty(1, 64, dtype=torch.bfloat16).expand(256, -1), X64, 64), "repeats its elements along dim 0"),
    ((X64, X64), "takes 3 arguments"),
    (("x", X64, 64), "must be a torch.Tensor"),
])
def test_bad_arguments_are_explained(args, match):
    with pytest.raises(tk.ArgumentError, match=match):
        softmax_rows.trace(*args)


def test_launch_without_gpu_or_with_cpu_tensors_fails_clearly(monkeypatch):
    from tkpy.runtime import gpu_available
    if gpu_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)    # which would run the launch on the CPU
    with pytest.raises(Exception, match="(?i)gpu|cuda"):
        softmax_rows[(1,)](X64, X64, 64)


def test_a_warp_barrier_right_after_another_is_left_out():
    """Nothing between two warp barriers (comments aside): the second orders nothing the first did not."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.warp_sync()
        tk.warp_sync()
        tk.load(t, x, (0, 0))
        tk.warp_sync()
        tk.store(x, t, (0, 0))
        tk.warp_sync()
    body = k.source(torch.empty(16, 16)).split("// ---- end of prelude ----")[1]
    assert body.count("__syncwarp();") == 3
    assert re.search(r"// test_trace_codegen\.py:\d+  tk\.warp_sync\(\)\n\s*__syncwarp\(\);\n"
                     r"\s*// test_trace_codegen\.py:\d+  tk\.load", body)          # (the second one's line too)


def test_nvrtc_error_maps_back_to_python_line(monkeypatch):
    import tkpy.codegen.emit as emit

    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.exp(t, t)
    monkeypatch.setitem(emit.OP_EMITTERS, "unary", lambda em, op: iter(["tk::no_such_op(t);"]))
    from tkpy.runtime import CompileError
    with pytest.raises(CompileError) as e:
        k.source(torch.empty(16, 16))
    assert f"test_trace_codegen.py:{line_of(k.fn, 'tk.exp(t, t)')}" in str(e.value)
    assert "tk::no_such_op(t);" in str(e.value)


def test_unsupported_combinations_raise_not_implemented():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        a, b = tk.st(f32, 16, 16), tk.st(f32, 16, 16)
        tk.load(a, b)
    with pytest.raises(NotImplementedError, match="load into"):
        k.trace(torch.empty(16, 16))


# -- the asynchronous protocol is checked at trace time --------------------------------------

def _tma_kernel(expect_tiles: int, init: bool = True, fence: bool = True, expect: bool = True):
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        s = tk.st(bf16, 64, 64, count=2)
        sem = tk.semaphore()
        t = tk.rt(bf16, 64, 64)
        if init:
            tk.init_semaphore(sem, 1)
        if expect:
            tk.tma.expect(sem, *[s[i] for i in range(expect_tiles)])
        tk.tma.load_async(s[0], x, (0, 0), sem)
        tk.tma.load_async(s[1], x, (1, 0), sem)
        tk.wait(sem, 0)
        tk.load(t, s[0])
        tk.store(s[1], t)
        if fence:
            tk.fence_proxy_async()
        tk.tma.store_async(x, s[1], (0, 0))
    return k


def test_matching_tma_protocol_passes():
    _tma_kernel(2).trace(X64)


def test_expect_bytes_must_match_the_loads():
    with pytest.raises(tk.TraceError, match="announces 8192 bytes on `sem` but the loads that complete on it deliver 16384"):
        _tma_kernel(1).trace(X64)


def test_load_without_expect_and_uninitialised_semaphores():
    with pytest.raises(tk.TraceError, match="no tk.tma.expect announces them"):
        _tma_kernel(2, expect=False).trace(X64)
    with pytest.raises(tk.TraceError, match="never initialised"):
        _tma_kernel(2, init=False).trace(X64)


def test_tma_store_of_generic_writes_needs_a_fence():
    with pytest.raises(tk.TraceError, match="fence_proxy_async"):
        _tma_kernel(2, fence=False).trace(X64)


def test_wait_that_nothing_signals():
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        sem = tk.semaphore()
        tk.init_semaphore(sem, 1)
        tk.wait(sem, 0)
    with pytest.raises(tk.TraceError, match="can never finish"):
        k.trace(X64)


def test_wgmma_result_read_before_wait():
    @tk.kernel(warps=4)
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[f32, "R2", 64]):
        a, b = tk.st(bf16, 64, 64), tk.st(bf16, 64, 64)
        acc = tk.rt(f32, 16, 64)
        tk.zero(acc)
        tk.warpgroup.mma_AB(acc, a, b)
        tk.warpgroup.store(y, acc, (0, 0))
    with pytest.raises(tk.TraceError, match="mma_async_wait"):
        k.trace(X64, torch.empty(64, 64))


def test_register_reallocation_must_fit():
    @tk.kernel(warps=12)
    def k(x: tk.gl[bf16, "R", 64]):
        with tk.if_(tk.warpgroup_id() == 0):
            tk.producer_registers(56)
        with tk.else_():
            tk.consumer_registers(240)
    with pytest.raises(tk.TraceError, match="need 68608 registers"):
        k.trace(X64)


def test_hopper_kernel_codegen_and_sass():
    from tkpy.kernels.gemm_ws import gemm_ws
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 512, dtype=torch.bfloat16)
    c = torch.empty(256, 512, dtype=torch.bfloat16)
    src = gemm_ws.source(a, b, c)
    assert "__launch_bounds__(384, 1)" in src                              # setmaxnreg needs the cap
    assert "const __grid_constant__ tk::CUtensorMap A_tma_64x64_sw128" in src
    assert "tk::warpgroup::mma_AB(acc, a[k % 4 * 2 + (warpid / 4 - 1)], b[k % 4]);" in src
    sass = gemm_ws.sass(a, b, c)
    for instr in ("HGMMA.64x256x16.F32.BF16", "UTMALDG.4D", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "USETMAXREG"):
        assert instr in sass
    assert gemm_ws.resources(a, b, c).spill_stores == 0


def test_arrival_counts_must_match_the_init():
    @tk.kernel(warps=8)
    def k(x: tk.gl[bf16, "R", 64]):
        sem = tk.semaphore()
        with tk.if_(tk.warp_id() == 0):
            tk.init_semaphore(sem, 4)
        tk.sync()
        with tk.if_(tk.warpgroup_id() == 1):     # warps 4..7: four arrivals, as initialised
            tk.arrive(sem)
        with tk.if_(tk.warp_id() == 0):
            tk.wait(sem, 0)
    k.trace(X64)

    @tk.kernel(warps=8)
    def bad(x: tk.gl[bf16, "R", 64]):
        sem = tk.semaphore()
        with tk.if_(tk.warp_id() == 0):
            tk.init_semaphore(sem, 1)
        tk.sync()
        with tk.if_(tk.warpgroup_id() == 1):
            tk.arrive(sem)
        with tk.if_(tk.warp_id() == 0):
            tk.wait(sem, 0)
    with pytest.raises(tk.TraceError, match="initialised for 1 arrivals per phase, but 4 warp-level arrivals"):
        bad.trace(X64)


def test_arrivals_on_an_element_named_by_the_warp_id_are_counted_per_element():
    """`sem[tk.warpgroup.id()]` arrived on by the first warp of each warpgroup: one arrival on each element (the
    index is evaluated per warp), not two on one element written "warpid / 4"; a second warp per warpgroup makes
    two on each, which the init's count of one rejects."""
    def kernel(arriving_warps):
        @tk.kernel(warps=8)
        def k(x: tk.gl[bf16, "R", 64]):
            sem = tk.semaphore(2)
            with tk.if_(tk.warp_id() == 0):
                tk.init_semaphore(sem[0], 1)
                tk.init_semaphore(sem[1], 1)
            tk.sync()
            with tk.if_(tk.warp_id() % 4 < arriving_warps):
                tk.arrive(sem[tk.warpgroup_id()])
            tk.wait(sem[tk.warpgroup_id()], 0)
        return k
    kernel(1).trace(X64)
    with pytest.raises(tk.TraceError, match="initialised for 1 arrivals per phase, but 2 warp-level arrivals"):
        kernel(2).trace(X64)


def test_arrivals_on_an_element_named_by_the_warp_id_and_a_variable_are_left_to_the_interpreter():
    """sem[2 * (i % 2) + warpgroup]: which element each warp reaches depends on the loop counter too, so the
    trace-time count does not lump the warps together (the interpreter checks every phase)."""
    @tk.kernel(warps=8)
    def k(x: tk.gl[bf16, "R", 64]):
        sem = tk.semaphore(4)
        with tk.if_(tk.warp_id() == 0):
            for e in range(4):
                tk.init_semaphore(sem[e], 1)
        tk.sync()
        for i in tk.range(2):
            with tk.if_(tk.warp_id() % 4 == 0):
                tk.arrive(sem[2 * (i % 2) + tk.warpgroup_id()])
            tk.wait(sem[2 * (i % 2) + tk.warpgroup_id()], 0)
    k.trace(X64)


def test_tma_store_sass_uses_utmastg():
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        s = tk.st(bf16, 64, 64)
        tk.tma.store_async(x, s, (0, 0))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait()
    sass = k.sass(X64)
    assert "UTMASTG" in sass


@pytest.mark.parametrize("strided", [False, True])
def test_5d_tensors_compile_to_5d_tma_and_shifted_plain_copies(strided):
    from test_gpu_hopper import tma_5d_kernel
    k = tma_5d_kernel()
    big = torch.empty(4, 3, 2, 128, 128, dtype=torch.bfloat16)
    x = big[::2] if strided else big[:2].contiguous()
    args = (x, *(torch.empty(2, 3, 2, 128, 128, dtype=torch.bfloat16) for _ in range(3)))
    src = k.source(*args)
    assert "x_outer_step = " + ("x_outer_stride" if strided else "(long long)6 * R * C") in src
    assert "x.ptr + (long long)(block_z / 6) * x_outer_step" in src
    ptx = k.ptx(*args)
    for op in ("cp.async.bulk.tensor.5d.shared::cluster.global", "cp.async.bulk.tensor.5d.global.shared::cta",
               "cp.async.bulk.prefetch.tensor.5d"):
        assert op in ptx
    assert "tensor.4d" not in ptx
    assert "tensor.5d" not in _tma_kernel(2).source(X64)     # kernels of up to 4 dims do not get the 5-d section


def test_5d_coordinates_and_6d_tensors_are_rejected_clearly():
    with pytest.raises(ValueError, match="1 to 5 dims"):
        tk.gl[bf16, 1, 2, 3, 4, 5, 6]

    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        t = tk.rt(bf16, 16, 64)
        tk.load(t, x, (0, 0, 0, 0, 0))
    with pytest.raises(tk.TraceError, match="5 coordinates need a 5-d global tensor"):
        k.trace(torch.empty(64, 64, dtype=torch.bfloat16))


def test_tensor_maps_are_prefetched_at_entry():
    """A kernel with TMA prefetches each tensor map's descriptor once, by one thread, before its body
    (UTMACCTL.PF in the SASS); a kernel without TMA gets nothing."""
    from tkpy.kernels import gemm_kernel
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 256, dtype=torch.bfloat16), \
        torch.empty(256, 256, dtype=torch.bfloat16)
    kernel = gemm_kernel.Matmul.kernel
    source = kernel.source(a, b, c)
    assert source.count("tk::tma::prefetch_map(&") == 3 and "if (threadIdx.x == 0) {" in source
    assert kernel.sass(a, b, c).count("UTMACCTL.PF") == 3

    @tk.kernel(warps=1)
    def plain(x: tk.gl[tk.f32, 16, 16]):
        t = tk.rt(tk.f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.store(x, t, (0, 0))
    assert "tk::tma::prefetch_map(&" not in plain.source(torch.empty(16, 16))


def test_global_strides_are_64_bit_products():
    """A global tensor's strides, built in the kernel from its dims, do not wrap at 2^31 elements."""
    @tk.kernel(warps=1, name="strides64")
    def k(x: tk.gl[tk.bf16, "D", "R", 64], y: tk.gl[tk.bf16, 16, 64]):
        t = tk.rt(tk.bf16, 16, 64)
        tk.load(t, x, (1, 0, 0))
        tk.store(y, t, (0, 0))
    src = k.source(torch.empty(2, 32, 64, dtype=torch.bfloat16), torch.empty(16, 64, dtype=torch.bfloat16))
    assert "x{x_ptr, 1, D, R, 64, (long long)D * R * 64, (long long)R * 64, 64}" in src
    assert "y{y_ptr, 1, 1, 16, 64, 1024, 1024, 64}" in src


@pytest.mark.parametrize("blocks_per_sm,bounds", [(None, "__launch_bounds__(416)"), (1, "__launch_bounds__(416, 1)"),
                                                  (2, "__launch_bounds__(416, 2)")])
def test_launch_bounds_state_the_blocks_an_sm_asked_for(blocks_per_sm, bounds):
    """blocks_per_sm stated (1 too) is __launch_bounds__'s minimum: ptxas then keeps the register file's share of a
    block (with only the thread count it may cap the registers lower, for a second block, and spill)."""
    @tk.kernel(warps=13, blocks_per_sm=blocks_per_sm)
    def k(x: tk.gl[f32, "R", 256]):
        v = tk.rv(f32, 256, "contig")
        tk.load(v, x, (tk.warp_id(), 0))
        tk.store(x, v * 2.0, (tk.warp_id(), 0))

    assert f'extern "C" __global__ void {bounds}' in k.source(torch.empty(13, 256))


def test_blocks_per_sm_is_what_an_sm_holds():
    """blocks_per_sm up to the SM's 64 resident warps (8 blocks of 8 warps: __launch_bounds__(256, 8), 32 registers
    a thread); past them, or not an int, a ValueError naming the most."""
    @tk.kernel(warps=8, blocks_per_sm=8)
    def k(x: tk.gl[f32, "R", 256]):
        v = tk.rv(f32, 256, "contig")
        tk.load(v, x, (tk.warp_id(), 0))
        tk.store(x, v * 2.0, (tk.warp_id(), 0))

    assert 'extern "C" __global__ void __launch_bounds__(256, 8)' in k.source(torch.empty(8, 256))
    for bad in (9, 0, True, 2.0):
        with pytest.raises(ValueError, match="blocks_per_sm must be an int from 1 to 8 for 8 warps a block"):
            tk.kernel(warps=8, blocks_per_sm=bad)(k.fn)
