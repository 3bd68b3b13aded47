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
from tkpy.codegen.prelude.helpers import HEAD_FULL, HEAD_USED, Method, Pool, helpers
from tkpy.kernels.row_softmax import softmax_rows
from tkpy.runtime import CompileError
from tkpy.runtime.nvrtc import BASE_OPTIONS, _run_nvrtc

from test_examples import kernel_and_args
from test_trace_codegen import line_of

X64 = torch.empty(256, 64, dtype=torch.bfloat16)
OPTIONS = ["-arch=sm_90a", *BASE_OPTIONS]


def chosen(pool_text: str, code: str) -> list[str]:
    """The helpers (their texts, with the methods chosen) of `pool_text`, C++ in namespace tk, that a kernel whose
    body is `code` needs."""
    pool = Pool(helpers(pool_text))
    needed = pool.needed(pool.references(f'extern "C" __global__ void k() {{\n{code}\n}}'))
    return [h.shown(needed) for h in pool.members if h in needed]


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
    """A section's banner (`// ---- ...`) after a blank line, another heading without one; the first namespace
    opened says what the prelude is."""
    pool = Pool(helpers("// ---- one ----\n\nvoid a();\n\n// ---- two ----\n\nvoid b();\n\nvoid c();\n\n"
                        "// three\n\nvoid d();\n"))
    text = pool.text(pool.needed(pool.references("tk::a(); tk::c(); tk::d();")))
    assert text == (f"namespace tk {{  {HEAD_USED}\n// ---- one ----\nvoid a();\n\n// ---- two ----\nvoid c();\n"
                    "// three\nvoid d();\n}  // namespace tk\n// ---- end of prelude ----\n")
    assert pool.text().startswith(f"namespace tk {{  {HEAD_FULL}\n")


def test_a_paragraphs_helpers_are_its_declarations_shown_together():
    """Each declaration of a paragraph (with the comment above it) is chosen on its own; those chosen stand one
    after another, paragraphs too (the comment above each paragraph sets it apart)."""
    pool = Pool(helpers("// a\nvoid a();\nvoid b();\n// c, over\n// two lines\nvoid c() {\n}\n\nvoid d();\n\n"
                        "void e();\n"))
    assert [h.text for h in pool.members] == ["// a\nvoid a();", "void b();", "// c, over\n// two lines\nvoid c() {\n}",
                                              "void d();", "void e();"]
    text = pool.text(pool.needed(pool.references("tk::a(); tk::c(); tk::d(); tk::e();")))
    assert "// a\nvoid a();\n// c, over\n// two lines\nvoid c() {\n}\nvoid d();\nvoid e();\n}" in text


def test_a_helper_that_could_never_be_chosen_is_refused():
    with pytest.raises(ValueError, match="declares nothing"):
        helpers('static_assert(sizeof(int) == 4, "int");')
    with pytest.raises(ValueError, match="a specialization of packed_of, which no prelude helper declares"):
        Pool(helpers("template <> struct packed_of<int> { typedef int type; };"))
    with pytest.raises(ValueError, match="an operator on no prelude type"):
        Pool(helpers("__device__ int operator/(int n, float v) { return n; }"))


SPECIALIZED = """
template <typename L> struct shape;

struct row_l {};
template <> struct shape<row_l> { static constexpr int n = 2; };

struct col_l {};
template <> struct shape<col_l> { static constexpr int n = 4; };
"""
SHAPE, ROW_L, ROW_SHAPE = ("template <typename L> struct shape;", "struct row_l {};",
                           "template <> struct shape<row_l> { static constexpr int n = 2; };")


def test_a_specialization_comes_with_its_primary_and_the_types_it_names():
    assert chosen(SPECIALIZED, "tk::row_l r;") == [ROW_L]                    # no shape<...> named: none of its
    assert chosen(SPECIALIZED, "int n = tk::shape<tk::row_l>::n;") == [SHAPE, ROW_L, ROW_SHAPE]


def test_an_operator_comes_with_the_types_it_takes():
    pool_text = """
struct divisor { int d; };

__device__ int operator/(int n, const divisor& v) { return n / v.d; }

struct other { int x; };
"""
    assert chosen(pool_text, "tk::other o;") == ["struct other { int x; };"]
    assert len(chosen(pool_text, "const tk::divisor v{3}; int q = 7 / v;")) == 2


METHODS = """
template <typename T> struct vec {
    T data[2];
    // one value
    __device__ T get(int k) const { return data[k]; }
    __device__ void set(int k, T v) { data[k] = v; }
    template <typename F> __device__ void set_all(F f) {
        set(0, f(0));
        set(1, f(1));
    }
    __device__ vec& operator+=(const vec& o) { return *this; }
};
"""


def test_a_method_comes_where_a_text_carried_names_it():
    """A struct's member function that nothing carried names, after `.`, `->`, `::` or inside the struct, is left
    out with the comment above it (no other text can call it); a constructor or an operator stays."""
    assert chosen(METHODS, "tk::vec<float> v; v.get(0);") == ["""template <typename T> struct vec {
    T data[2];
    // one value
    __device__ T get(int k) const { return data[k]; }
    __device__ vec& operator+=(const vec& o) { return *this; }
};"""]
    pool = Pool(helpers(METHODS))
    text = pool.text(pool.needed(pool.references("tk::vec<float> v; v.set_all([](int k) { return 1.0f; });")))
    assert "set_all" in text and "void set(" in text and "get" not in text and "one value" not in text
    assert [m.name for m in pool.members[0].methods] == ["get", "set", "set_all"]


KINDS = """
struct row_l {};

struct col_l {};

template <typename L> struct rt { int x; };

template <typename L> struct rv { int x; };

void load(rt<row_l>& t);

void load(rt<col_l>& t);

void load(rv<row_l>& v);

template <typename D> void copy(D& d) { load(d); }
"""
LOAD_ROW, LOAD_COL, LOAD_RV = "void load(rt<row_l>& t);", "void load(rt<col_l>& t);", "void load(rv<row_l>& v);"


def test_a_kind_knows_the_types_its_template_arguments_name():
    """A row-layout tile's load, not the col-layout one's, though both layouts are in the source."""
    got = chosen(KINDS, "tk::rt<tk::row_l> a; tk::rt<tk::col_l> b; tk::load(a);")
    assert LOAD_ROW in got and LOAD_COL not in got and LOAD_RV not in got
    got = chosen(KINDS, "tk::rt<tk::row_l> a; tk::rt<tk::col_l> b; tk::load(b);")
    assert LOAD_COL in got and LOAD_ROW not in got


def test_a_parameter_has_the_kind_of_the_argument_of_the_call_that_chose_the_function():
    """copy(D& d) of a col-layout tile loads a col-layout tile; of an unknown argument, any it can."""
    got = chosen(KINDS, "tk::rt<tk::row_l> a; tk::rt<tk::col_l> b; tk::rv<tk::row_l> v; tk::copy(b);")
    assert LOAD_COL in got and LOAD_ROW not in got and LOAD_RV not in got
    got = chosen(KINDS, "tk::rt<tk::row_l> a[2]; tk::rv<tk::row_l> v; tk::copy(a[0]);")
    assert LOAD_ROW in got and LOAD_RV in got and LOAD_COL not in got       # (no col_l in the source)


def test_the_softmax_source_carries_only_the_helpers_it_uses():
    used, full = softmax_rows.source(X64, X64, 64), softmax_rows.source(X64, X64, 64, prelude="full")
    kernel = used.split("// ---- end of prelude ----")[1]
    assert kernel == full.split("// ---- end of prelude ----")[1]
    assert PRELUDE.split("\n", 1)[1] in full                     # every helper, the kernel's wgmma wrappers besides
    for name in ("load_masked", "store_masked", "row_max", "sub_row", "struct rt", "struct rv", "struct gl",
                 "launch_dependents"):
        assert name in used
    for name in ("mma16816", "ldmatrix_x4", "struct semaphore", "load_vec", "struct fp16", "namespace tma", "wgmma",
                 "struct divisor", "swap_layout",
                 # what a kernel of fp32 row-layout tiles and ortho vectors does not use: the other layouts and
                 # their code, the vectors' unary_map, 64-bit words
                 "col_l", "align_l", "naive_l", "contig_l", "void unary_map(rv", "u64"):
        assert name not in used
    assert len(used.splitlines()) < 300 < 1300 < len(full.splitlines())
    with pytest.raises(ValueError, match="prelude must be"):
        softmax_rows.source(X64, X64, 64, prelude="none")


def declared(source: str) -> list[str]:
    """The names the prelude of a kernel's source declares, in order (a specialization as `name<its types>`)."""
    prelude = source.split("// ---- end of prelude ----")[0]
    inside = prelude.split("namespace tk {", 1)[1].rsplit("}  // namespace tk", 1)[0]
    out = []
    for h in helpers(inside):
        out += [d.name for _, d in h.declares] or ([f"{h.extends[0]}<{','.join(sorted(h.extends[1]))}>"]
                                                   if h.extends else [])
    return out


def test_the_softmax_demos_source_is_its_kernel_and_the_helpers_it_uses():
    """`python -m tkpy.kernels` prints softmax_rows' source: under 200 lines (197, 168 of them prelude; 294 with a
    parameter a line, blank lines between paragraphs and looser helpers, 336 while rv's unused members came along and
    each op wrote out its register loops, 361 when whole paragraphs of helpers were chosen; the whole prelude is some
    1700 lines); the softmax example's kernel, which needs no bounds checks, 163. These are its helpers: fp32 and
    bf16, the dependent launch's calls (every kernel is launched so by default), one tile layout and one vector
    layout, the loop over a tile's registers, the named ops it calls and the maps, reduction and broadcast under
    them, the masked copies and the unmasked ones they call for whole tiles."""
    x = torch.empty(1024, 64, dtype=torch.bfloat16)
    source = softmax_rows.source(x, x, 64)
    assert declared(source) == [
        "u32", "INFINITY", "packed_of", "packed_of<float>", "to_float", "to_float2", "from_float", "from_float<float>",
        "from_float2", "from_float2<float2>", "bf16", "bf16_2", "packed_of<bf16>", "to_float", "to_float2",
        "from_float<bf16>", "from_float2<bf16_2>", "lane", "launch_dependents", "wait_for_previous_kernel", "row_l",
        "ortho_l", "vec_shape", "vec_shape<ortho_l>", "frag_pos", "frag_row", "frag_col", "frag_pos<row_l>", "rt",
        "for_each_reg", "vec_word", "vec_word<T,true>", "rv", "gl", "load_pair", "store_pair", "load", "store",
        "op_exp2", "op_exp", "op_add", "op_sub", "op_div", "op_max", "op_sum", "apply", "apply", "unary_map",
        "reduce_part", "reduce_lanes", "reduce", "broadcast_at", "broadcast", "exp", "row_max", "row_sum", "sub_row",
        "div_row", "in_bounds", "load_masked", "store_masked"]
    assert "set_pair" not in source and "set_all" not in source       # rv's members that nothing here calls
    assert len(source.splitlines()) <= 197 < 200
    assert [line.strip().split("  ")[0] for line in source.splitlines() if line.startswith("    // row_softmax")] == [
        f"// row_softmax.py:{n}" for n in range(32, 41)]                   # each of the user's lines above its code
    example, args = kernel_and_args("softmax")
    assert len(example.source(*args).splitlines()) <= 163
    gemm, args = kernel_and_args("gemm")     # (451 lines when whole paragraphs were chosen; its 4 loops' pragmas: 324)
    assert len(gemm.source(*args).splitlines()) <= 324


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
    """Each helper alone (with all its methods) with what it needs (those it names outside its templates' dependent
    calls, which only an instantiation checks: the kernels' own compiles do) is a translation unit NVRTC reads
    without an error (a missing name is an error of the front end: syntax only, the fast way)."""
    members = [*HELPERS, *hopper.wgmma_helpers({(64, "bf16", False), (64, "fp8e4m3", True)}), *hopper.TMA5_HELPERS]
    pool = Pool(members)
    for h in pool.members:
        if h.heading:
            continue
        uses = pool.uses(h).union(*(pool.method_uses(m) for m in h.methods))
        text = pool.text(pool.needed(uses) | {h, *h.methods})
        _run_nvrtc(text + 'extern "C" __global__ void k() {}\n', "k", [*OPTIONS, "-fdevice-syntax-only"], "sm_90a")


def test_a_missing_helper_fails_to_compile_at_the_users_line(monkeypatch):
    """A helper the choice left out (here on purpose) is a compile error, which names the Python line whose code
    instantiates the helper that needed it."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.exp(t, t)
    needed = Pool.needed
    monkeypatch.setattr(Pool, "needed", lambda self, uses: {
        h for h in needed(self, uses) if isinstance(h, Method) or "void unary_map(" not in h.text})
    with pytest.raises(CompileError) as e:
        k.source(torch.empty(16, 16))
    assert "unary_map" in str(e.value) and f"from test_prelude.py:{line_of(k.fn, 'tk.exp(t, t)')}" in str(e.value)
