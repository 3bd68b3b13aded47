"""Just enough of a C++ reader to tell which prelude helpers a kernel uses: tokens without comments and strings,
the names a helper declares at its top level, and the names a text refers to with, for a call, what it can tell
of each argument.

It reads the prelude's own regular style (and the generated kernels), not C++ at large: a declaration is a
`struct NAME`, a `typedef ... NAME;`, a `#define NAME` or a function `NAME(params)` outside any braces; a
reference is an identifier (or a `a::b::name` chain) that is not a member (after `.`, `->` or `::`); a variable's
kind is the head of the type it is declared with (`rt` for `const tk::rt<float, 1, 4, tk::row_l>& t`), known
for the prelude's types and the built-in scalars.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_TOKEN = re.compile(r"""
      (?P<space>\s+)
    | (?P<comment>//[^\n]*|/\*.*?\*/)
    | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
    | (?P<directive>^[ \t]*\#[^\n]*)
    | (?P<ident>[A-Za-z_]\w*)
    | (?P<number>\.?\d[\w.]*)
    | (?P<op>::|->|.)
""", re.X | re.S | re.M)

# identifiers followed by `(` at the top level that do not name a declared function
_NOT_FUNCTIONS = {"alignas", "alignof", "asm", "decltype", "noexcept", "operator", "sizeof", "static_assert",
                  "__align__", "__launch_bounds__", "__cluster_dims__"}
_MEMBER_ACCESS = {".", "->", "::"}
# the kind of every built-in scalar (and CUDA's float2, and the prelude's typedefs of scalars): one another's
# arguments by conversion, never a prelude struct's
BUILTIN = "builtin"
_SCALARS = {"bool", "char", "double", "float", "float2", "int", "long", "short", "unsigned", "u32", "u64", "void"}


@dataclass(frozen=True)
class Token:
    kind: str      # "ident", "number", "op" or "directive" (a preprocessor line)
    text: str


def tokens(text: str) -> list[Token]:
    """The tokens of `text`, comments and string literals left out."""
    return [Token(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)
            if m.lastgroup not in ("space", "comment", "string")]


def brace_depth(text: str) -> int:
    """How many braces `text` leaves open (those in comments and strings not counted)."""
    return sum((t.text == "{") - (t.text == "}") for t in tokens(text))


@dataclass(frozen=True)
class Declaration:
    """A name a helper declares: a struct, typedef or macro (`kind`), or a function, with the identifiers in its
    parameters' types (`param_types`; of a dependent `typename X<...>::member` only the member) and each
    parameter's kind (`params`: the head of its type, BUILTIN for a scalar, None for a dependent type; Pool keeps
    only the heads that are prelude structs, None for the others: template parameters)."""
    name: str
    kind: str                               # "struct", "typedef", "macro" or "function"
    param_types: frozenset = frozenset()
    params: tuple = ()
    required: int = 0                       # parameters without a default value
    variadic: bool = False

    def takes(self, args: tuple) -> bool:
        """Whether a call with arguments of these kinds (None: unknown) can choose this function: as many
        arguments as it has parameters, and no argument of a kind its parameter cannot take."""
        if len(args) < self.required or (len(args) > len(self.params) and not self.variadic):
            return False
        return all(a is None or p is None or a == p for a, p in zip(args, self.params))


def declarations(toks: list[Token]) -> list[tuple[int, Declaration]]:
    """(token index of the name, declaration) of each name declared outside any braces (a template
    specialization, `struct NAME<...>` or `NAME<...>(`, declares none: it extends the primary template's
    helper)."""
    out, depth, parens, i = [], 0, 0, 0
    while i < len(toks):
        t = toks[i]
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
        elif depth == 0 and t.kind == "directive":
            m = re.match(r"\s*#\s*define\s+(\w+)", t.text)
            if m:
                out.append((i, Declaration(m.group(1), "macro")))
        elif depth == 0 and parens == 0 and t.text in ("struct", "class"):
            j = i + 1
            if toks[j].text == "alignas":                  # struct alignas(64) NAME
                j = _closing(toks, j + 1) + 1
            if toks[j].kind == "ident" and (j + 1 == len(toks) or toks[j + 1].text != "<"):
                out.append((j, Declaration(toks[j].text, "struct")))
            i = j
        elif depth == 0 and parens == 0 and t.text == "typedef":
            j = i
            while toks[j].text != ";":
                j += 1
            out.append((j - 1, Declaration(toks[j - 1].text, "typedef")))
            i = j
        elif (depth == 0 and parens == 0 and t.kind == "ident" and t.text not in _NOT_FUNCTIONS
              and i + 1 < len(toks) and toks[i + 1].text == "(" and (i == 0 or toks[i - 1].text not in
                                                                        _MEMBER_ACCESS | {"operator"})):
            end = _closing(toks, i + 1)
            out.append((i, _function(t.text, toks[i + 2:end])))
            i = end
        elif depth == 0 and t.text in ("(", ")"):
            parens += 1 if t.text == "(" else -1
        i += 1
    return out


def _closing(toks: list[Token], open_at: int) -> int:
    """The index of the `)` that closes the `(` at `open_at`."""
    level = 0
    for j in range(open_at, len(toks)):
        level += (toks[j].text == "(") - (toks[j].text == ")")
        if level == 0:
            return j
    raise ValueError("unbalanced parentheses in a prelude helper")


def _function(name: str, param_toks: list[Token]) -> Declaration:
    params = _split(param_toks, angles=True) if param_toks else []
    found, kinds, required = set(), [], 0
    for param in params:
        dependent = None                       # the bracket level of a `typename X<...>::member` being read
        level = 0
        for i, t in enumerate(param):
            level += (t.text in ("(", "<")) - (t.text in (")", ">"))
            if t.text == "=" and level == 0:
                break
            if t.text == "typename" and dependent is None:
                dependent = level
            elif dependent is not None:
                if t.kind == "ident" and level == dependent and param[i - 1].text == "::":
                    dependent = None
            elif t.kind == "ident":
                found.add(t.text)
        required += not any(t.text == "=" for t in param)
        head = next((t.text for t in param if t.text not in ("const", "volatile")), None)
        kinds.append(BUILTIN if head in _SCALARS else None if head == "typename" else head)
    variadic = any(t.text == "." for t in param_toks)
    return Declaration(name, "function", frozenset(found), tuple(kinds), required, variadic)


def _split(toks: list[Token], angles: bool) -> list[list[Token]]:
    """A parameter or argument list's items: split at the commas outside parentheses, braces, brackets and (with
    `angles`) template brackets."""
    out, level = [[]], 0
    opening, closing = ("(", "{", "[", "<") if angles else ("(", "{", "["), (")", "}", "]", ">") if angles else (
        ")", "}", "]")
    for t in toks:
        level += (t.text in opening) - (t.text in closing)
        if t.text == "," and level == 0:
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
    address)."""
    scope: str
    path: tuple
    called: bool
    args: Optional[tuple] = None

    def lookups(self) -> list[tuple[str, str]]:
        """The (namespace, name) declarations it may mean: its name, qualified by the rest of its path, in its
        scope or any namespace around it (ordinary lookup; as all of the prelude's types live in tk, the
        namespaces argument-dependent lookup adds are among these)."""
        *qualifier, name = self.path
        parts = self.scope.split("::") if self.scope else []
        return [("::".join(parts[:n] + qualifier), name) for n in range(len(parts), -1, -1)]


def references(toks: list[Token], structs: frozenset, scope: str = "", skip: frozenset = frozenset()) -> set:
    """The References of the text (but for the tokens at the indices in `skip`: the names of its own
    declarations), the kinds of its variables read from their declarations with the `structs` named."""
    out = set()
    opened: list[tuple[int, str]] = []          # (brace depth inside, enclosing scope) per namespace opened
    kinds: dict = {}                            # variable -> kind, within one top-level declaration
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t.text == "namespace" and i + 2 < len(toks) and toks[i + 2].text == "{":
            depth += 1
            opened.append((depth, scope))
            scope = f"{scope}::{toks[i + 1].text}" if scope else toks[i + 1].text
            i += 3
            continue
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            if opened and opened[-1][0] == depth:
                scope = opened.pop()[1]
            depth -= 1
            if depth == len(opened):            # the end of a top-level declaration: its variables go
                kinds = {}
        elif t.kind == "ident" and i not in skip and (i == 0 or toks[i - 1].text not in _MEMBER_ACCESS):
            path = [t.text]
            while i + 2 < len(toks) and toks[i + 1].text == "::" and toks[i + 2].kind == "ident":
                i += 2
                path.append(toks[i].text)
            _declare(toks, i, structs, kinds)
            call = _call_args(toks, i + 1)
            out.add(Reference(scope, tuple(path), call is not None,
                              None if call is None else _arg_kinds(call, kinds)))
        i += 1
    return out


def _declare(toks: list[Token], i: int, structs: frozenset, kinds: dict) -> None:
    """If toks[i] heads the type of a variable's declaration (`T<...> & name` followed by `;`, `{`, `=`, `,`, `)`
    or `[`), the variable's kind; a variable declared twice with two kinds (shadowing) becomes unknown."""
    head = toks[i].text
    if head not in structs and head not in _SCALARS:
        return
    j = i + 1
    if j < len(toks) and toks[j].text == "<":
        level = 0
        while j < len(toks):
            level += (toks[j].text == "<") - (toks[j].text == ">")
            if level == 0 or toks[j].text in (";", "{", "}"):
                break
            j += 1
        j += 1
    pointer = False
    while j < len(toks) and toks[j].text in ("&", "*", "const", "volatile"):
        pointer |= toks[j].text == "*"
        j += 1
    if (j + 1 < len(toks) and toks[j].kind == "ident" and toks[j + 1].text in (";", "{", "=", ",", ")", "[")
            and not pointer):
        kind = BUILTIN if head in _SCALARS else head
        name = toks[j].text
        kinds[name] = kind if kinds.get(name, kind) == kind else None


def _call_args(toks: list[Token], j: int) -> Optional[list[list[Token]]]:
    """The arguments of a call whose name ends before toks[j] (after template arguments, if any), or None if it
    is no call."""
    if j < len(toks) and toks[j].text == "<":          # explicit template arguments, or a comparison
        level = 0
        while j < len(toks):
            level += (toks[j].text == "<") - (toks[j].text == ">")
            if toks[j].text in (";", "{", "}") or level < 0:
                return None
            if level == 0:
                break
            j += 1
        j += 1
    if j >= len(toks) or toks[j].text != "(":
        return None
    end = _closing(toks, j)
    return _split(toks[j + 1:end], angles=False) if end > j + 1 else []


def _arg_kinds(args: list[list[Token]], kinds: dict) -> Optional[tuple]:
    """Each argument's kind: a variable's, BUILTIN for a literal, None where not known; None for all if the
    arguments hold a `<` (a comparison or template arguments: the commas may not split them)."""
    if any(t.text == "<" for arg in args for t in arg):
        return None
    out = []
    for arg in args:
        if len(arg) == 1 and (arg[0].kind == "number" or arg[0].text in ("true", "false")):
            out.append(BUILTIN)
        elif len(arg) == 1 and arg[0].kind == "ident":
            out.append(kinds.get(arg[0].text))
        else:
            out.append(None)
    return tuple(out)
