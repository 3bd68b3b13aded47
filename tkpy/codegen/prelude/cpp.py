"""Just enough of a C++ reader to tell which prelude helpers a kernel uses: tokens without comments and strings,
the names a helper declares at its top level, and the names a text refers to with, for a call, what it can tell
of each argument.

It reads the prelude's own regular style (and the generated kernels), not C++ at large: a declaration is a
`struct NAME`, a `typedef ... NAME;`, a `#define NAME` or a function `NAME(params)` outside any braces; a
reference is an identifier (or a `a::b::name` chain) that is not a member (after `.`, `->` or `::`); a variable's
kind is the head of the type it is declared with and the types its template arguments name (`rt` of `row_l` for
`const tk::rt<float, 1, 4, tk::row_l>& t`), known for the prelude's types and the built-in scalars.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_TOKEN = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*\#[^\n]*|[A-Za-z_]\w*"""
                    r"""|\.?\d[\w.]*|::|->|\S""", re.M | re.S)

# identifiers followed by `(` at the top level that do not name a declared function
_NOT_FUNCTIONS = {"alignas", "alignof", "asm", "decltype", "noexcept", "operator", "sizeof", "static_assert",
                  "__align__", "__launch_bounds__", "__cluster_dims__"}
_MEMBER_ACCESS = {".", "->", "::"}


@dataclass(frozen=True)
class Kind:
    """What the text tells of a variable's or a parameter's type: its head (`rt`) and, of each of its template
    arguments, the type it names (None: a value, a template parameter, a type that is no prelude struct):
    `Kind("rt", (None, None, None, "row_l"))` for `rt<float, 1, 4, row_l>`."""
    head: str
    args: tuple = ()

    def takes(self, arg: "Kind") -> bool:
        """Whether a parameter of this kind can take an argument of kind `arg`: the same head, and no template
        argument naming another type than the parameter's."""
        return self.head == arg.head and all(p is None or a is None or p == a for p, a in zip(self.args, arg.args))

    def known(self, structs: frozenset) -> "Kind":
        """The kind with only the prelude `structs` among its template arguments."""
        return Kind(self.head, tuple(a if a in structs else None for a in self.args))


# the kind of every built-in scalar (and CUDA's float2, and the prelude's typedefs of scalars): one another's
# arguments by conversion, never a prelude struct's
BUILTIN = Kind("builtin")
_SCALARS = {"bool", "char", "double", "float", "float2", "int", "long", "short", "unsigned", "u32", "u64", "void"}


def tokens(text: str) -> list[str]:
    """The tokens of `text`, comments and string literals left out; a preprocessor line is one token."""
    return [t for t in _TOKEN.findall(text) if t[0] not in "/\"'" or t == "/"]


def is_ident(t: str) -> bool:
    return t[0].isalpha() or t[0] == "_"


def is_directive(t: str) -> bool:
    return t.lstrip().startswith("#")


def brace_depth(toks: list[str]) -> int:
    """How many braces the tokens leave open."""
    return sum((t == "{") - (t == "}") for t in toks)


@dataclass(frozen=True)
class Declaration:
    """A name a helper declares: a struct, typedef or macro (`kind`), or a function, with the identifiers in its
    parameters' types (`param_types`; of a dependent `typename X<...>::member` only the member) and each
    parameter's Kind (`params`: BUILTIN for a scalar, None for a pointer or a dependent type; Pool keeps only the
    kinds of prelude structs, None for the others: template parameters). `names`: each parameter's name (None for
    an unnamed one or a pack), which in the function's body has the kind of the argument of the call that chose it,
    where that is known (the `D& d` of `exp(D& d, const S& s)` is a tile for `exp(t, t)` of a tile `t`); so have
    the template parameters its type's template arguments name (`generics`: `VL` of `rv<TV, N, VL>& dst` is
    `ortho_l` for an ortho vector), in the body's `VL{}`."""
    name: str
    kind: str                               # "struct", "typedef", "macro" or "function"
    param_types: frozenset = frozenset()
    params: tuple = ()
    required: int = 0                       # parameters without a default value
    variadic: bool = False
    names: tuple = ()
    generics: tuple = ()                    # each parameter's type's template arguments as written (None: no name)

    def takes(self, args: tuple) -> bool:
        """Whether a call with arguments of these kinds (None: unknown) can choose this function: as many
        arguments as it has parameters, and no argument of a kind its parameter cannot take."""
        if len(args) < self.required or (len(args) > len(self.params) and not self.variadic):
            return False
        return all(a is None or p is None or p.takes(a) for a, p in zip(args, self.params))


def declarations(toks: list[str]) -> list[tuple[int, Declaration]]:
    """(token index of the name, declaration) of each name declared outside any braces (a template
    specialization, `struct NAME<...>` or `NAME<...>(`, declares none: see `extension`)."""
    out, depth, parens, i = [], 0, 0, 0
    while i < len(toks):
        t = toks[i]
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
        elif depth == 0 and is_directive(t):
            m = re.match(r"\s*#\s*define\s+(\w+)", t)
            if m:
                out.append((i, Declaration(m.group(1), "macro")))
        elif depth == 0 and parens == 0 and t in ("struct", "class"):
            j = i + 1
            if toks[j] == "alignas":                  # struct alignas(64) NAME
                j = _closing(toks, j + 1) + 1
            if is_ident(toks[j]) and (j + 1 == len(toks) or toks[j + 1] != "<"):
                out.append((j, Declaration(toks[j], "struct")))
            i = j
        elif depth == 0 and parens == 0 and t == "typedef":
            j = i
            while toks[j] != ";":
                j += 1
            out.append((j - 1, Declaration(toks[j - 1], "typedef")))
            i = j
        elif (depth == 0 and parens == 0 and is_ident(t) and t not in _NOT_FUNCTIONS
              and i + 1 < len(toks) and toks[i + 1] == "(" and (i == 0 or toks[i - 1] not in
                                                                        _MEMBER_ACCESS | {"operator"})):
            end = _closing(toks, i + 1)
            out.append((i, _function(t, toks[i + 2:end])))
            i = end
        elif depth == 0 and t in ("(", ")"):
            parens += 1 if t == "(" else -1
        i += 1
    return out


def extension(toks: list[str]) -> Optional[tuple[Optional[str], frozenset]]:
    """What a text that declares no name adds to the names of others, if it is one of these at its top level:
    a template specialization, `template <...> struct NAME<ARGS> ...` or `template <...> ... NAME<ARGS>(...)`
    (`packed_of<bf16>`, `from_float<bf16>`, `vec_word<T, true>`): (NAME, the identifiers of ARGS); an operator
    function, `... operator/(PARAMS) ...`: (None, the identifiers of its parameters' types)."""
    for i, t in enumerate(toks):
        if t == "operator" and "(" in toks[i + 2:i + 4]:
            start = toks.index("(", i + 2)
            return None, _function("operator", toks[start + 1:_closing(toks, start)]).param_types
        if t in ("{", ";"):
            break
    if toks[:2] != ["template", "<"]:
        return None
    i = _closing(toks, 1, "<>") + 1
    while i < len(toks) and toks[i] not in ("{", ";", "("):
        if is_ident(toks[i]) and i + 1 < len(toks) and toks[i + 1] == "<" and toks[i - 1] not in _MEMBER_ACCESS:
            end = _closing(toks, i + 1, "<>")
            if toks[i - 1] in ("struct", "class") or (end + 1 < len(toks) and toks[end + 1] == "("):
                return toks[i], frozenset(t for t in toks[i + 2:end] if is_ident(t))
            i = end
        i += 1
    return None


def _closing(toks: list[str], open_at: int, brackets: str = "()") -> int:
    """The index of the token that closes the bracket at `open_at` (`(` or, with brackets="<>", a template's `<`)."""
    level = 0
    for j in range(open_at, len(toks)):
        level += (toks[j] == brackets[0]) - (toks[j] == brackets[1])
        if level == 0:
            return j
    raise ValueError(f"unbalanced {brackets} in a prelude helper")


def _function(name: str, param_toks: list[str]) -> Declaration:
    params = _split(param_toks, angles=True) if param_toks else []
    found, kinds, names, generics, required = set(), [], [], [], 0
    for param in params:
        at = next((i for i, t in enumerate(param) if t not in ("const", "volatile")), None)
        named = None if at is None else _param_name(param, at)
        dependent = None                       # the bracket level of a `typename X<...>::member` being read
        level = 0
        for i, t in enumerate(param):
            level += (t in ("(", "<")) - (t in (")", ">"))
            if t == "=" and level == 0:
                break
            if t == "typename" and dependent is None:
                dependent = level
            elif dependent is not None:
                if is_ident(t) and level == dependent and param[i - 1] == "::":
                    dependent = None
            elif is_ident(t) and i != named:
                found.add(t)
        required += not any(t == "=" for t in param)
        pointer = "*" in param or "(" in param              # (a literal 0 converts to a pointer)
        kind = None if at is None or pointer or param[at] == "typename" else _kind(param, at)
        kinds.append(kind)
        names.append(None if named is None or "." in param else param[named])
        generics.append(kind.args if kind is not None and "." not in param else ())
    variadic = any(t == "." for t in param_toks)
    return Declaration(name, "function", frozenset(found), tuple(kinds), required, variadic, tuple(names),
                       tuple(generics))


def _param_name(param: list[str], head: int) -> Optional[int]:
    """The index of the name a parameter declares: its last identifier outside template brackets after its type's
    head (None if unnamed)."""
    name, level = None, 0
    for i, t in enumerate(param):
        if t == "=" and level == 0:
            break
        level += (t == "<") - (t == ">")
        if i > head and level == 0 and is_ident(t) and t not in ("const", "volatile"):
            name = i
    return name


def _split(toks: list[str], angles: bool) -> list[list[str]]:
    """A parameter or argument list's items: split at the commas outside parentheses, braces, brackets and (with
    `angles`) template brackets."""
    out, level = [[]], 0
    opening, closing = ("(", "{", "[", "<") if angles else ("(", "{", "["), (")", "}", "]", ">") if angles else (
        ")", "}", "]")
    for t in toks:
        level += (t in opening) - (t in closing)
        if t == "," and level == 0:
            out.append([])
        else:
            out[-1].append(t)
    return out


@dataclass(frozen=True)
class Reference:
    """A name the text refers to: `path` as written (`("tk", "tma", "load_async")`, `("lane",)`) in namespace
    `scope`; for a call, `args` (each argument's kind where it is a variable of a known kind or a literal, else
    None; None for the whole when the call's arguments cannot be told apart), `called` whether it is a call (only a
    call can mean a function: a parameter named `fill` does not call tk::fill; the prelude takes no function's
    address). A `member` reference is a name after `.`, `->` or a type's `::` (`t.get(0, 1)`, `S::bytes`): it may
    mean a member of any struct, and no declaration of a namespace."""
    scope: str
    path: tuple
    called: bool
    args: Optional[tuple] = None
    member: bool = False

    def lookups(self) -> list[tuple[str, str]]:
        """The (namespace, name) declarations it may mean: its name, qualified by the rest of its path, in its
        scope or any namespace around it (ordinary lookup; as all of the prelude's types live in tk, the
        namespaces argument-dependent lookup adds are among these); none for a member."""
        if self.member:
            return []
        *qualifier, name = self.path
        parts = self.scope.split("::") if self.scope else []
        return [("::".join(parts[:n] + qualifier), name) for n in range(len(parts), -1, -1)]


def references(toks: list[str], structs: frozenset, scope: str = "", skip: frozenset = frozenset(),
               known: Optional[dict] = None, types: Optional[dict] = None) -> set:
    """The References of the text, members' among them (but for the tokens at the indices in `skip`: the names of
    its own declarations), the kinds of its variables read from their declarations with the `structs` named, but
    for the parameters in `known` (name -> kind) of its first top-level declaration, which have those kinds; a
    template parameter in `types` (name -> prelude struct) names that struct (`VL{}` an ortho_l)."""
    out = set()
    opened: list[tuple[int, str]] = []          # (brace depth inside, enclosing scope) per namespace opened
    kinds: dict = dict(known or {})             # variable -> kind, within one top-level declaration
    pending = set(kinds)                        # known parameters, until the body of the declaration
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t == "namespace" and i + 2 < len(toks) and toks[i + 2] == "{":
            depth += 1
            opened.append((depth, scope))
            scope = f"{scope}::{toks[i + 1]}" if scope else toks[i + 1]
            i += 3
            continue
        if t == "{":
            if depth == len(opened):            # a top-level declaration's body: its parameters are declared
                pending.clear()
            depth += 1
        elif t == "}":
            if opened and opened[-1][0] == depth:
                scope = opened.pop()[1]
            depth -= 1
            if depth == len(opened):            # the end of a top-level declaration: its variables go
                kinds = {}
        elif is_ident(t) and i not in skip and i > 0 and toks[i - 1] in _MEMBER_ACCESS:
            out.add(Reference(scope, (t,), _call_args(toks, i + 1) is not None, member=True))
        elif is_ident(t) and i not in skip:
            path = [t]
            while i + 2 < len(toks) and toks[i + 1] == "::" and is_ident(toks[i + 2]):
                i += 2
                path.append(toks[i])
            _declare(toks, i, structs, kinds, pending)
            call = _call_args(toks, i + 1)
            out.add(Reference(scope, tuple(path), call is not None,
                              None if call is None else _arg_kinds(call, kinds, types or {})))
        i += 1
    return out


def _kind(toks: list[str], i: int) -> Kind:
    """The kind of the type whose head is toks[i] (BUILTIN for a scalar)."""
    if toks[i] in _SCALARS:
        return BUILTIN
    if i + 1 >= len(toks) or toks[i + 1] != "<":
        return Kind(toks[i])
    args = []
    for arg in _split(toks[i + 2:_closing(toks, i + 1, "<>")], angles=True):
        names = arg[::2]                          # `tk::row_l`: tk, row_l (the `::` between)
        qualified = all(is_ident(t) for t in names) and all(t == "::" for t in arg[1::2])
        args.append(names[-1] if arg and qualified else None)
    return Kind(toks[i], tuple(args))


def _declare(toks: list[str], i: int, structs: frozenset, kinds: dict, pending: set) -> None:
    """If toks[i] heads the type of a variable's declaration (`T<...> & name` followed by `;`, `{`, `=`, `,`, `)`
    or `[`), the variable's kind (but for the first declaration of a `pending` name, a parameter whose kind is
    known); a variable declared twice with two kinds (shadowing) becomes unknown."""
    head = toks[i]
    if head not in structs and head not in _SCALARS:
        return
    j = i + 1
    if j < len(toks) and toks[j] == "<":
        level = 0
        while j < len(toks):
            level += (toks[j] == "<") - (toks[j] == ">")
            if level == 0 or toks[j] in (";", "{", "}"):
                break
            j += 1
        j += 1
    pointer = False
    while j < len(toks) and toks[j] in ("&", "*", "const", "volatile"):
        pointer |= toks[j] == "*"
        j += 1
    if (j + 1 < len(toks) and is_ident(toks[j]) and toks[j + 1] in (";", "{", "=", ",", ")", "[")
            and not pointer):
        kind = _kind(toks, i).known(structs)
        name = toks[j]
        if name in pending:
            pending.discard(name)
            return
        kinds[name] = kind if kinds.get(name, kind) == kind else None


def _call_args(toks: list[str], j: int) -> Optional[list[list[str]]]:
    """The arguments of a call whose name ends before toks[j] (after template arguments, if any), or None if it
    is no call."""
    if j < len(toks) and toks[j] == "<":          # explicit template arguments, or a comparison
        level = 0
        while j < len(toks):
            level += (toks[j] == "<") - (toks[j] == ">")
            if toks[j] in (";", "{", "}") or level < 0:
                return None
            if level == 0:
                break
            j += 1
        j += 1
    if j >= len(toks) or toks[j] != "(":
        return None
    end = _closing(toks, j)
    return _split(toks[j + 1:end], angles=False) if end > j + 1 else []


def _arg_kinds(args: list[list[str]], kinds: dict, types: dict) -> Optional[tuple]:
    """Each argument's kind: a variable's, BUILTIN for a literal, a struct's for `T{}` of a template parameter T
    that `types` names, None where not known; None for all if the arguments hold a `<` outside brackets (a
    comparison or template arguments: the commas may not split them; a lambda's body, in braces, may compare)."""
    if any(t == "<" and level == 0 for arg in args for t, level in zip(arg, _levels(arg))):
        return None
    out = []
    for arg in args:
        if len(arg) == 1 and (arg[0][0].isdigit() or arg[0] in ("true", "false")):
            out.append(BUILTIN)
        elif len(arg) == 1 and is_ident(arg[0]):
            out.append(kinds.get(arg[0]))
        elif len(arg) == 3 and arg[1:] == ["{", "}"] and arg[0] in types:
            out.append(Kind(types[arg[0]]))
        else:
            out.append(None)
    return tuple(out)


def _levels(toks: list[str]) -> list[int]:
    """Each token's depth inside parentheses, braces and brackets."""
    out, level = [], 0
    for t in toks:
        level -= t in (")", "}", "]")
        out.append(level)
        level += t in ("(", "{", "[")
    return out
