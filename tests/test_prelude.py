"""A kernel's source carries the prelude helpers it uses and no others (tkpy/codegen/prelude/helpers.py): the choice
by names, parameter types and argument kinds; the same kernel code as with the whole prelude; every helper compiling
with those it needs; a helper left out failing to compile at the user's line. CPU only (NVRTC, no GPU)."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.codegen.prelude import HELPERS, PRELUDE, hopper
from tkpy.codegen.prelude.helpers import Pool, helpers
from tkpy.kernels.row_softmax import softmax_rows
from tkpy.runtime import CompileError
from tkpy.runtime.nvrtc import BASE_OPTIONS, _run_nvrtc

from test_examples import kernel_and_args
from test_trace_codegen import line_of

X64 = torch.empty(256, 64, dtype=torch.bfloat16)
OPTIONS = ["-arch=sm_90a", *BASE_OPTIONS]


def chosen(pool_text: str, code: str) -> list[str]:
    """The helpers (their texts) of `pool_text`, C++ in namespace tk, that a kernel whose body is `code` needs."""
    pool = Pool(helpers(pool_text))
    needed = pool.needed(pool.references(f'extern "C" __global__ void k() {{\n{code}\n}}'))
    return [h.text for h in pool.members if h in needed]


OVERLOADS = """
struct rt { int x; };

struct rv { int x; };

struct gl { int x; };

void load(rt& dst, const gl& src, int r);

void load(rv& dst, const gl& src, int r);

void load(rt& dst, const rv& src);
"""
RT, RV, GL = "struct rt { int x; };", "struct rv { int x; };", "struct gl { int x; };"
RT_GL, RV_GL, RT_RV = ("void load(rt& dst, const gl& src, int r);", "void load(rv& dst, const gl& src, int r);",
                       "void load(rt& dst, const rv& src);")


def test_a_call_gets_the_overloads_its_arguments_can_take():
    """By the kinds of its arguments (the types their variables are declared with) and their number."""
    assert chosen(OVERLOADS, "tk::rt t; const tk::gl x{}; tk::load(t, x, 0);") == [RT, GL, RT_GL]
    assert chosen(OVERLOADS, "tk::rt t; tk::rv v; const tk::gl x{}; tk::load(v, x, 0);") == [RT, RV, GL, RV_GL]
    assert chosen(OVERLOADS, "tk::rt t; tk::rv v; const tk::gl x{}; tk::load(t, v);") == [RT, RV, GL, RT_RV]
    # an argument of no known kind (an expression) may be anything: every overload of as many parameters
    assert chosen(OVERLOADS, "tk::rt t[2]; tk::rv v; tk::gl x; tk::load(t[0], x, 0);") == [RT, RV, GL, RT_GL, RV_GL]


def test_an_overload_needs_the_types_its_parameters_name():
    """An overload on a type the source does not have cannot be chosen (fp8's store with no fp8 tile), and one
    on a type it has is there even for a call whose arguments say nothing."""
    pool_text = """
template <typename T> struct st { int x; };

struct e4m3 { char x; };

template <typename T, typename S> void store(const st<T>& dst, const S& src);

template <typename S> void store(const st<e4m3>& dst, const S& src);
"""
    assert len(chosen(pool_text, "const tk::st<float> s{}; tk::store(s, 1.0f);")) == 2
    assert len(chosen(pool_text, "const tk::st<tk::e4m3> s{}; tk::store(s, 1.0f);")) == 4


def test_only_calls_need_functions_and_declarations_are_no_references():
    """A variable named like a helper function does not pull it in; a helper's own declaration of a name does not
    pull in the other overloads of the name."""
    pool_text = """
void fill(float* p, float v);

void fill(int* p, int v);

void load(float* p, float fill);
"""
    assert chosen(pool_text, "float v[4]; tk::load(v, 0.0f);") == ["void load(float* p, float fill);"]
    assert len(chosen(pool_text, "float v[4]; tk::fill(v, 0.0f);")) == 2


def test_headings_stand_above_the_first_helper_used_under_them():
    pool = Pool(helpers("// ---- one ----\n\nvoid a();\n\n// ---- two ----\n\nvoid b();\n\nvoid c();\n"))
    text = pool.text(pool.needed(pool.references("tk::c();")))
    assert "// ---- two ----\nvoid c();" in text and "one" not in text and "void b" not in text


def test_a_paragraph_that_declares_nothing_is_refused():
    with pytest.raises(ValueError, match="declares nothing"):
        helpers("template <> struct packed_of<int> { typedef int type; };")


def test_the_softmax_source_carries_only_the_helpers_it_uses():
    used, full = softmax_rows.source(X64, X64, 64), softmax_rows.source(X64, X64, 64, prelude="full")
    kernel = used.split("// ---- end of prelude ----")[1]
    assert kernel == full.split("// ---- end of prelude ----")[1]
    assert PRELUDE.split("\n", 1)[1] in full                     # every helper, the kernel's wgmma wrappers besides
    for name in ("load_masked", "store_masked", "row_max", "sub_row", "struct rt", "struct rv", "struct gl",
                 "launch_dependents"):
        assert name in used
    for name in ("mma16816", "ldmatrix_x4", "struct semaphore", "load_vec", "struct fp16", "namespace tma", "wgmma",
                 "struct divisor", "swap_layout"):
        assert name not in used
    assert len(used.splitlines()) < 380 < 1300 < len(full.splitlines())
    with pytest.raises(ValueError, match="prelude must be"):
        softmax_rows.source(X64, X64, 64, prelude="none")


def _entry(ptx: str) -> str:
    """The kernel's PTX without its debug line records (the prelude moves the source lines)."""
    body = ptx[ptx.index(".entry"):]
    return "\n".join(line for line in body.splitlines() if not re.match(r"\s*\.(loc|file)\b", line))


@pytest.mark.parametrize("name", ["softmax", "gemm"])
def test_the_helpers_used_make_the_same_kernel_as_the_whole_prelude(name):
    """The PTX of the kernel (its .entry; the whole prelude also defines unused constants) is the same from the
    source with the helpers it uses as from the source with the whole prelude."""
    kernel, args = kernel_and_args(name)
    used, full = kernel.source(*args), kernel.source(*args, prelude="full")
    assert len(used) < len(full) / 2
    assert _entry(_run_nvrtc(used, kernel.name, OPTIONS, "sm_90a")[1]) == \
        _entry(_run_nvrtc(full, kernel.name, OPTIONS, "sm_90a")[1])


def test_every_helper_compiles_with_the_helpers_it_needs():
    """Each helper alone with what it needs (those it names outside its templates' dependent calls, which only an
    instantiation checks: the kernels' own compiles do) is a translation unit NVRTC compiles."""
    members = [*HELPERS, *hopper.wgmma_helpers({(64, "bf16", False), (64, "fp8e4m3", True)}), *hopper.TMA5_HELPERS]
    pool = Pool(members)
    for h in pool.members:
        if h.heading:
            continue
        text = pool.text(pool.needed(pool.uses(h)) | {h})
        _run_nvrtc(text + 'extern "C" __global__ void k() {}\n', "k", OPTIONS, "sm_90a")


def test_a_missing_helper_fails_to_compile_at_the_users_line(monkeypatch):
    """A helper the choice left out (here on purpose) is a compile error, which names the Python line whose code
    instantiates the helper that needed it."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.exp(t, t)
    needed = Pool.needed
    monkeypatch.setattr(Pool, "needed", lambda self, uses: {h for h in needed(self, uses)
                                                            if "void unary_map(" not in h.text})
    with pytest.raises(CompileError) as e:
        k.source(torch.empty(16, 16))
    assert "unary_map" in str(e.value) and f"from test_prelude.py:{line_of(k.fn, 'tk.exp(t, t)')}" in str(e.value)
