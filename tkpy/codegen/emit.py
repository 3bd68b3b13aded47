"""IR -> one self-contained CUDA C++ translation unit.

Each statement is preceded by a comment naming the Python line it came from,
so the source reads side by side with the kernel and NVRTC errors map back.
"""
from __future__ import annotations

import functools
import hashlib
import linecache
import operator
from dataclasses import dataclass

from ..errors import UnsupportedError
from ..ir.core import Assign, Decl, For, GlobalVar, If, KernelIR, Let, Op, SharedRef, Var, walk
from ..ir.expr import DIVISOR_NAMES, PRODUCT_PRECEDENCE, UNARY_PRECEDENCE, BinOp, Expr, Sym, as_expr, render
from ..ir.printer import assignment_text
from ..tiles.dtypes import f32
from ..tiles.types import RT, RV, ST, SV, Semaphore
from .abi import Slot, element_ctype, tensor_maps
from . import divisors, timeline
from .prelude import fingerprint as prelude_fingerprint, prelude_for
from .prelude import debug as debug_cpp
from .debug import plan_for

SMEM_BASE = "smem"
BUILTIN_DECLS = [  # declared in the kernel's prologue when the body uses them
    *((f"block_{a}", f"const int block_{a} = blockIdx.{a};") for a in "xyz"),
    *((f"grid_{a}", f"const int grid_{a} = gridDim.{a};") for a in "xyz"),
    ("warpid", "const int warpid = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);  // warp-uniform"),
    ("laneid", "const int laneid = threadIdx.x % 32;"),
    ("cluster_rank", "const int cluster_rank = tk::cluster_rank();"),
]
SCOPE_THREADS = {"warp": ("32", "laneid"), "warpgroup": ("128", "threadIdx.x % 128")}
WARP_BARRIER = "__syncwarp();"
# A tk.range loop runs as written, one body a trip: Python's range is the unrolled loop. NVVM would otherwise unroll
# some by 2-4 with a remainder copy (NVRTC 13.5: the GEMM's producer 7 bodies, its consumer 3), more code for NVVM
# and ptxas to compile (the GEMM's cubin 1960 -> 1040 instructions) for no gain in a loop that waits on barriers.
RUNTIME_LOOP = "#pragma unroll 1"


@dataclass(frozen=True)
class KernelCode:
    """A kernel's C++ without the prelude (the kernel, and what debug mode or the timeline put beside it) and what
    chooses the prelude helpers it needs: what NVRTC compiles is `source()`, made on demand (choosing the helpers
    takes longer than emitting the kernel), and `identity` determines it."""

    code: str
    wgmma_variants: frozenset
    tma5: bool

    def source(self, prelude: str = "used") -> str:
        """The translation unit: the prelude helpers the code uses (`prelude="used"`, what is compiled) or the whole
        prelude (`prelude="full"`), then the code."""
        if prelude not in ("used", "full"):
            raise ValueError(f'prelude must be "used" or "full", got {prelude!r}')
        return prelude_for(self.code, self.wgmma_variants, self.tma5, full=prelude == "full") + self.code

    @functools.cached_property
    def identity(self) -> str:
        """A string that determines `source()` (the code, the prelude's inputs and the prelude itself): what the disk
        cache keys the compiled kernel by, so that a hit never chooses the prelude helpers."""
        return "tkpy-kernel-code:" + hashlib.sha256("\x1f".join(
            (prelude_fingerprint(), repr(sorted(self.wgmma_variants)), str(self.tma5), self.code)).encode()).hexdigest()


def kernel_code(kernel: KernelIR, slots: list[Slot]) -> KernelCode:
    """The kernel's C++ (KernelCode: the prelude it needs chosen when its source is asked for)."""
    variants = {(s.attrs["n"], s.attrs["dtype"] + (f"_{s.attrs['b_dtype']}" if "b_dtype" in s.attrs else ""),
                 s.attrs["a_regs"]) for s in walk(kernel.body) if isinstance(s, Op) and s.name == "wgmma"}
    tma5 = any(g.type.rank == 5 for g, _ in tensor_maps(kernel))
    recording = timeline.cpp(kernel.warps) if kernel.timeline else ""
    emitter = KernelEmitter(kernel, slots)
    body = emitter.emit()
    debugging = ""
    if emitter.debug is not None:   # debug mode (tkpy/runtime/debug.py): the bounded waits' helpers and sites
        debugging = debug_cpp.section(emitter.debug, kernel.debug.timeout_ns, debug_cpp.SLOTS,
                                      kernel.debug.prints(emitter.debug.warpgroups > 0))
    return KernelCode(recording + debugging + body, frozenset(variants), tma5)


def generate(kernel: KernelIR, slots: list[Slot], prelude: str = "used") -> str:
    """The kernel's CUDA C++: the prelude helpers it uses (`prelude="used"`, what is compiled) or the whole prelude
    (`prelude="full"`), then what debug mode or the timeline add, then the kernel."""
    return kernel_code(kernel, slots).source(prelude)


def ctype_of(t) -> str:
    """C++ type of a tile or vector variable."""
    e = element_ctype(t.dtype)
    if isinstance(t, RT):
        return f"tk::rt<{e}, {t.height}, {t.width}, tk::{t.layout}_l>"
    if isinstance(t, RV):
        return f"tk::rv<{e}, {t.chunks}, tk::{t.layout}_l>"
    if isinstance(t, ST):
        return f"tk::st<{e}, {t.rows}, {t.cols}, {t.swizzle}>"
    if isinstance(t, SV):
        return f"tk::sv<{e}, {t.length}>"
    raise UnsupportedError(f"no C++ type for {t}")


def operand(a) -> str:
    if isinstance(a, SharedRef) and isinstance(a.type, Semaphore):
        return a.var.name if a.index is None else f"&{a.var.name}[{render(a.index)}]"
    if isinstance(a, SharedRef):
        return a.var.name if a.index is None else f"{a.var.name}[{render(a.index)}]"
    if isinstance(a, (Var, GlobalVar)):
        return a.name
    if isinstance(a, Expr):
        return render(a)
    raise TypeError(f"not an operand: {a!r}")


def float_operand(e: Expr) -> str:
    return render(e) if e.dtype == f32 else f"float({render(e)})"


def view_decl(v: Var) -> str:
    """A subtile: a reference to rows (or to base tiles of one 16-row band) of a register tile, or a shared
    tile addressed inside another (a shared vector's subvec: elements of another)."""
    t, base = v.type, operand(v.view.base)
    if isinstance(t, RT):
        if t.cols == v.view.base.type.cols:
            return f"auto& {v.name} = tk::subtile_inplace<{t.rows}>({base}, {render(v.view.row)});"
        return (f"auto& {v.name} = tk::subtile_inplace<{t.rows}, {t.cols}>({base}, {render(v.view.row)}, "
                f"{render(v.view.col)});")
    if isinstance(t, SV):
        return f"const auto {v.name} = tk::subvec<{t.length}>({base}, {render(v.view.col)});"
    return f"const auto {v.name} = tk::subtile<{t.rows}, {t.cols}>({base}, {render(v.view.row)}, {render(v.view.col)});"


class KernelEmitter:
    def __init__(self, kernel: KernelIR, slots: list[Slot]):
        self.k = kernel
        self.slots = slots
        self.lines: list[str] = []
        self.depth = 1
        self._last_loc = None
        self.mark_ids = {label: i for i, label in enumerate(timeline.labels_of(kernel))} if kernel.timeline else None
        self.debug = plan_for(kernel) if kernel.debug is not None else None   # debug mode's plan (codegen/debug.py)

    # -- structure ---------------------------------------------------------
    def emit(self) -> str:
        k = self.k
        # setmaxnreg only takes effect under a register cap at entry: blocks_per_sm blocks an SM (one by default)
        reallocates = any(isinstance(s, Op) and s.name == "setmaxnreg" for s in walk(k.body))
        stated = reallocates or k.blocks_per_sm > 1 or k.blocks_per_sm_stated
        bounds = f"{k.threads}, {k.blocks_per_sm}" if stated else f"{k.threads}"
        cluster = f" __cluster_dims__({', '.join(map(str, k.cluster))})" if k.cluster else ""
        head = f'extern "C" __global__ void __launch_bounds__({bounds}){cluster}'
        about = f"// kernel {k.name}, traced from {k.loc.short}: {k.warps} warps"
        fits = len(head) + 2 + len(about) <= LINE_WIDTH
        self.lines += [f"{head}  {about}"] if fits else [about, head]
        self.lines += signature(k.name, [f"{s.ctype} {s.cname}" for s in self.slots])
        prologue_at = len(self.lines)
        if k.shared_bytes:
            self.line("extern __shared__ __align__(16) unsigned char tk_dynamic_smem[];")
            self.line(f"unsigned char* const {SMEM_BASE} = tk::align_up(tk_dynamic_smem, 1024);"
                      "  // swizzled tiles need 1024-byte alignment")
        maps = [s.cname for s in self.slots if s.kind == "blob128"]
        if maps:     # as CUTLASS does: the first TMA of each map then finds its descriptor cached
            self.line("if (threadIdx.x == 0) {  // the tensor maps' descriptors, fetched ahead of their first use")
            for name in maps:
                self.line(f"    tk::tma::prefetch_map(&{name});")
            self.line("}")
        if k.dependent_launch:   # tkpy/runtime/dependent_launch.py
            self.line("tk::launch_dependents();  // the next kernel on the stream may start its blocks as ours finish")
            self.line("tk::wait_for_previous_kernel();  // global memory only once the previous kernel's writes show")
        if k.timeline:           # tkpy/codegen/timeline.py
            for text in timeline.kernel_state(k.warps):
                self.line(text)
        if self.debug is not None:   # debug mode: the mbarriers that stand in for hardware barriers (codegen/debug.py)
            for text in debug_cpp.prologue(self.debug):
                self.line(text)
        gl_decls_at = len(self.lines)
        self.body_with_divisors(k.body)
        body_text = "\n".join(self.lines[gl_decls_at:])
        views = [self._gl_decl(p) for p in k.params   # tensors only TMA touches need no view
                 if isinstance(p, GlobalVar) and has_word(body_text, p.name)]
        self.lines[gl_decls_at:gl_decls_at] = ["    " + v for v in views]
        self.lines.append("}")
        body = "\n".join(self.lines[prologue_at:])
        for name, decl in reversed(BUILTIN_DECLS):
            if has_word(body, name):
                self.lines.insert(prologue_at, "    " + decl)
        return "\n".join(self.lines) + "\n"

    def body_with_divisors(self, body) -> None:
        """The kernel's top-level statements, each divisor (codegen/divisors.py) made right after the last of them
        that its value needs, and the divisions by it rendered as such."""
        planned = divisors.plan(self.k) if self.k.fast_division else divisors.Divisors()
        token = DIVISOR_NAMES.set(planned.names)
        try:
            for position, s in enumerate([None, *body], start=-1):
                if s is not None:
                    self.block([s])
                for text in planned.declared_after(position):
                    self.line(text)
        finally:
            DIVISOR_NAMES.reset(token)

    def line(self, text: str) -> None:
        indented = "    " * self.depth + text
        if text == WARP_BARRIER and self._last_statement() == indented:
            return        # a warp barrier right after another (an arrival after a wait's): one orders as much
        self.lines.append(indented)

    def _last_statement(self) -> str | None:
        """The last line emitted that is not a comment."""
        return next((line for line in reversed(self.lines) if not line.lstrip().startswith("//")), None)

    def origin(self, loc, what: str) -> None:
        """A `// file.py:LINE  source` comment, once per Python line; `// [lcf] lcf.py:LINE  source` where a block
        template's own code made the statement (not the user's methods it calls)."""
        if loc == self._last_loc:
            return
        self._last_loc = loc
        src = linecache.getline(loc.file, loc.line).strip()
        mark = f"[{loc.template}] " if loc.template else ""
        self.line(f"// {mark}{loc.short}  {src or what}")

    def block(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, Decl):
                before = len(self.lines)
                self.origin(s.loc, "declare")
                self.debug_checks(s)
                text = self._decl(s.var)
                if len(self.lines) == before and self._joins(text):   # `m, s = tk.col_vec(t), tk.col_vec(t)`
                    self.lines[-1] = self.lines[-1][:-1] + ", " + s.var.name + ";"
                else:
                    self.line(text)
            elif isinstance(s, Let):
                self.origin(s.loc, "let")
                ctype = "float" if s.value.dtype == f32 else "bool" if s.value.dtype.name == "bool" else "int"
                self.line(f"{'' if s.mutable else 'const '}{ctype} {s.sym.name} = {render(s.value)};")
            elif isinstance(s, Assign):
                self.origin(s.loc, "assign")
                self.line(assignment_text(s) + ";")
            elif isinstance(s, Op):
                if s.name == "mark" and self.mark_ids is None:      # a timeline mark, recording off: no code
                    continue
                before = len(self.lines)
                self.origin(s.loc, s.name)
                commented = len(self.lines) > before
                emitter = OP_EMITTERS.get(s.name)
                if emitter is None:
                    raise UnsupportedError(f"no code generator for op `{s.name}`", s.loc)
                self.debug_checks(s)
                for text in emitter(self, s):
                    self.line(text)
                if commented and len(self.lines) == before + 1:    # nothing but its line's comment: its only
                    self.lines.pop()                               # statement, a warp barrier, went into the one
                    self._last_loc = None                          # before it
            elif isinstance(s, For):
                self.origin(s.loc, "for")
                v = s.var.name
                self.line(RUNTIME_LOOP)
                self.line(f"for (int {v} = {render(s.start)}; {v} < {render(s.stop)}; {v} += {render(s.step)}) {{")
                self._nested(s.body)
                self.line("}")
            elif isinstance(s, If):
                self.origin(s.loc, "if")
                self.line(f"if ({render(s.cond)}) {{")
                self._nested(s.then)
                if s.orelse:
                    self.line("} else {")
                    self._nested(s.orelse)
                self.line("}")

    def debug_checks(self, stmt) -> None:
        """Debug mode: the bounds checks of `stmt`'s memory accesses (codegen/debug.py), before it."""
        if self.debug is not None:
            for text in self.debug.checks_of(stmt):
                self.line(text)

    def _nested(self, stmts) -> None:
        self.depth += 1
        self._last_loc = None
        self.block(stmts)
        self.depth -= 1
        self._last_loc = None

    # -- declarations ------------------------------------------------------
    def _joins(self, text: str) -> bool:
        """Whether a register tile's or vector's declaration `text` (`type name;`) can name its variable in the
        declaration just emitted of the same Python line, of the same type."""
        if not text.startswith(("tk::rt<", "tk::rv<")) or not self.lines:
            return False
        ctype = text.rsplit(" ", 1)[0]
        return self.lines[-1].startswith("    " * self.depth + ctype + " ") and self.lines[-1].endswith(";")

    def _decl(self, v: Var) -> str:
        t = v.type
        if v.view is not None:
            return view_decl(v)
        if isinstance(t, (RT, RV)):
            return f"{ctype_of(t)} {v.name};"
        offset = self.k.shared_offsets[v]
        if isinstance(t, Semaphore):
            return f"tk::semaphore* const {v.name} = reinterpret_cast<tk::semaphore*>({SMEM_BASE} + {offset});"
        if isinstance(t, (ST, SV)):
            if v.count > 1:
                return f"const tk::st_array<{ctype_of(t)}, {v.count}> {v.name}{{{SMEM_BASE} + {offset}}};"
            return f"const {ctype_of(t)} {v.name}{{{SMEM_BASE} + {offset}}};"
        raise UnsupportedError(f"declaring {t} is not supported yet", v.loc)

    def _gl_decl(self, g: GlobalVar) -> str:
        dims = [g.dim(a) for a in range(4)]
        b, d, r, c = (as_expr(x) for x in dims)
        if g.contiguous:
            stride_text = ", ".join(wide_product(f) for f in ((d, r, c), (r, c), (c,)))
        else:
            stride_text = ", ".join(f"{g.name}_{l}_stride" for l in ("batch", "depth", "row"))
        dims_text = ", ".join(render(x) for x in (b, d, r, c))
        decl = (f"const tk::gl<{element_ctype(g.type.dtype)}> {g.name}{{{g.name}_ptr, {dims_text}, {stride_text}}};"
                f"  // {g.type}")
        if g.type.rank == 5:   # the view is of outer index 0; accesses shift it by the outer coordinate
            outer = wide_product((b, d, r, c)) if g.contiguous else f"{g.name}_outer_stride"
            decl += f"\n    const long long {g.name}_outer_step = {outer};"
        return decl


LINE_WIDTH = 120


def has_word(text: str, word: str) -> bool:
    r"""Whether `word` occurs in `text` as a whole word, as re.search(rf"\b{word}\b", text) says (a word character
    being what str.isalnum() or "_" is), found by str.find: re steps through a kernel's ~40 KB a character at a
    time, ~0.2 ms a word found late or not at all, 2 ms of an attention kernel's lowering."""
    end = len(text)
    at = text.find(word)
    while at >= 0:
        after = at + len(word)
        if (at == 0 or not _word_char(text[at - 1])) and (after == end or not _word_char(text[after])):
            return True
        at = text.find(word, at + 1)
    return False


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def signature(name: str, params: list[str]) -> list[str]:
    """`name(params) {`, the parameters filling lines of up to LINE_WIDTH characters (the next ones indented)."""
    lines, current = [], f"{name}("
    for n, p in enumerate(params):
        piece = p + (", " if n + 1 < len(params) else ") {")
        if len(current + piece.rstrip()) > LINE_WIDTH and not current.endswith(("(", "    ")):
            lines.append(current.rstrip())
            current = "    "
        current += piece
    return lines + [current if params else current + ") {"]


def wide_product(factors) -> str:
    """C++ for a product of a global tensor's dims that does not wrap at 2^31 (a stride of a tensor of more elements
    than an int counts): its leftmost factor cast to long long so that every multiplication is 64-bit, e.g.
    `(long long)H * N * 128`; a constant or a single dim as it is."""
    product = functools.reduce(operator.mul, factors)

    def is_product(e):
        return isinstance(e, BinOp) and e.op == "*"

    def widened(e):          # (a right operand that is itself a product is widened in its own parentheses)
        if is_product(e):
            right = f"({widened(e.b)})" if is_product(e.b) else render(e.b, PRODUCT_PRECEDENCE)
            return f"{widened(e.a)} * {right}"
        return f"(long long){render(e, UNARY_PRECEDENCE)}"
    return widened(product) if is_product(product) else render(product)


# Op name -> function(emitter, op) yielding C++ statements; filled by the codegen.ops_* modules.
OP_EMITTERS: dict = {}


def emits(*names):
    """Register a function as the code generator of the IR ops `names`."""
    def register(fn):
        for name in names:
            if name in OP_EMITTERS:
                raise ValueError(f"two code generators for op {name!r}")
            OP_EMITTERS[name] = fn
        return fn
    return register


def tile_coord(tile, coord, outer: bool = True) -> str:
    """Element coordinates (b, d, row, col) of a coordinate in units of `tile`; a 5-d coordinate
    starts with its outer index unless `outer` is false (then gl_view has taken it)."""
    t = tile.type
    *o, b, d, r, c = coord
    return ", ".join(render(x) for x in ((*o,) if outer else ()) + (b, d, r * t.rows, c * t.cols))


def gl_view(g, coord) -> str:
    """The gl a plain (non-TMA) copy at `coord` uses: `g` itself, or for a 5-d coordinate the view
    of `g` shifted to its outer index."""
    if len(coord) == 4:
        return g.name
    n = g.name
    return (f"tk::gl<{element_ctype(g.type.dtype)}>{{{n}.ptr + (long long)({render(coord[0])}) * {n}_outer_step, "
            f"{n}.batch, {n}.depth, {n}.rows, {n}.cols, {n}.batch_stride, {n}.depth_stride, {n}.row_stride}}")


def scope_threads(em: "KernelEmitter", scope: str) -> tuple[str, str]:
    """(thread count, thread index) of a cooperative scope, as C++ text."""
    if scope == "block":
        return str(em.k.threads), "threadIdx.x"
    return SCOPE_THREADS[scope]
