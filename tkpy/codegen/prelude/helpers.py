"""The prelude as helpers, and the choice of those a kernel uses.

A helper is one declaration of the prelude's C++ at its top level, with the comment lines above it: a type, a
function, a template specialization, a few preprocessor lines. The prelude is written in paragraphs (the text
between blank lines outside braces) of related helpers, which a kernel's source shows one after another, less the
helpers it does not use, in a dense style that an expert still reads at a glance: a body of one statement on the
line of its head or the next (`{ return ...; }`), a short struct's data members on one line, `_Pragma("unroll")` on
the line of the loop it unrolls, comments where they say why. It carries the helpers its code refers to by name,
then those that these refer to, and so on (`Pool.needed`): what NVRTC compiles is the kernel and its helpers only.

Overloads make that choice subtle: a call chooses among all the declarations of its name, so leaving one out
could make a call silently choose another. A declaration is therefore left out only where no call can choose it:
- a function no reference calls (a variable named `fill` is no call of tk::fill);
- an overload whose parameters name prelude types that are not in the source (`store(const st<fp8e4m3, ...>&,
  const rt<...>&)` without fp8e4m3, st or rt): no argument can have them;
- an overload a call cannot take: another number of arguments, or an argument whose kind (what the type a
  variable is declared with tells: its head and the prelude types its template arguments name, `rt` of `row_l` for
  `tk::rt<float, 1, 4, tk::row_l> t`; cpp.py) its parameter's type cannot be (`load(rt<TD, H, W, col_l>&, ...)`
  or `load(rv<...>&, ...)` for that `t`): the prelude's types convert neither into one another nor to scalars. A
  parameter has, in the function's body, the kind of the argument of the call that chose the function (`D& d` of
  `tk::exp`, the layout of `rv<TD, N, L>& dst`), so `exp(t, t)` of a tile calls the tiles' unary_map only;
- a specialization (`packed_of<bf16>`, `vec_shape<ortho_l>`) whose primary template is not chosen, or whose
  template arguments name prelude types that are not in the source (one that names none, `vec_word<T, true>`,
  comes with its primary); an operator (`operator/` of a divisor) whose parameters name such types;
- a struct's member function (a Method: rv's set_pair, st's ptr) that no text carried names, after `.`, `->` or
  `::` or inside the struct: a member is no candidate of any other call. Constructors and operators stay.
Hence the rules for writing the prelude: no implicit conversions between its types (no conversion operators,
explicit constructors); an overload names the prelude types it takes in its parameter list (not only through a
`typename X<...>::type`), so that a layout's or a dtype's code is an overload of its own (`load` of a row-layout
tile, of a col-layout one); a primary template whose specializations are chosen apart from it is left
undefined, so that a missing specialization fails to compile instead of falling back to the primary; and a member
function stands on lines of its own (with its comment above it), so that it can be left out.

A paragraph of comments only is a heading: it is kept above the first chosen helper under it, after a blank line
where it is a section's banner (`// ---- ... ----`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from . import cpp

HEAD_USED = "// tkpy's prelude: the helpers this kernel uses (NVRTC has no headers; prelude=\"full\": all of them)"
HEAD_FULL = "// tkpy's prelude: every device helper (NVRTC has no headers)"
BANNER = "// ----"           # a heading that starts so opens a section: a blank line above it
TAIL = "// ---- end of prelude ----\n"


@dataclass(frozen=True, eq=False)
class Method:
    """A member function of a struct helper (not a constructor or an operator), written on `lines` of its text (the
    comment lines above it with it): carried only where a text carried names it (`v.set_pair(...)`, `S::offset(r,
    c)`, `set(c, k, a)` inside the struct), as no other can call it. Its tokens and the index of its name's."""
    name: str
    namespace: str
    lines: range
    tokens: tuple
    name_token: int


@dataclass(frozen=True, eq=False)
class Helper:
    """A declaration of the prelude: its C++ `text` inside `namespace`, its tokens (but for its `methods`') and the
    names it declares (with the indices of their tokens, which are no references), or for a specialization or an
    operator what it `extends` (cpp.extension)."""
    text: str
    namespace: str
    tokens: tuple
    declares: tuple
    extends: Optional[tuple] = None
    methods: tuple = ()

    @property
    def heading(self) -> bool:
        return not self.tokens

    def shown(self, chosen: Optional[set] = None) -> str:
        """Its text with the methods that are `chosen` (all when None)."""
        if chosen is None or not self.methods:
            return self.text
        left_out = {n for m in self.methods if m not in chosen for n in m.lines}
        return "\n".join(line for n, line in enumerate(self.text.split("\n")) if n not in left_out)

    @property
    def name_tokens(self) -> frozenset:
        """The indices of the tokens that name its declarations."""
        return frozenset(i for i, _ in self.declares)


def helpers(text: str, namespace: str = "tk") -> list[Helper]:
    """`text`, C++ written inside `namespace` (which it does not open), as helpers: one a declaration."""
    out, lines = [], []
    for line in text.strip("\n").split("\n") + [""]:
        if line.strip() or not lines:
            lines += [line] if line.strip() else []
            continue
        if cpp.brace_depth(cpp.tokens("\n".join(lines))):      # a blank line inside braces: read on
            lines.append(line)
            continue
        out += [_helper("\n".join(piece), namespace) for piece in _declarations(lines)]
        lines = []
    return out


def _declarations(lines: list[str]) -> list[list[str]]:
    """A paragraph's lines, one list a declaration with the comment lines above it: a declaration ends on a line
    that closes it (`;` or `}` outside braces and parentheses, `#endif` or `#define` outside `#if`)."""
    out, current, depth, conditional = [], [], 0, 0
    for line in lines:
        current.append(line)
        toks = cpp.tokens(line)
        for t in toks:
            if cpp.is_directive(t):
                word = t.lstrip("# \t").split()[0] if t.lstrip("# \t") else ""
                conditional += word in ("if", "ifdef", "ifndef") or -(word == "endif")
            depth += (t in "({") - (t in ")}")
        ends = toks and (toks[-1] in (";", "}") or cpp.is_directive(toks[-1]))
        if ends and depth == 0 and conditional == 0:
            out.append(current)
            current = []
    if current:                      # comment lines after the last declaration: its own
        if out:
            out[-1] += current
        else:
            out.append(current)
    return out


def _helper(text: str, namespace: str) -> Helper:
    methods = tuple(_methods(text, namespace))
    lines = text.split("\n")
    toks = cpp.tokens("\n".join(line for n, line in enumerate(lines) if not any(n in m.lines for m in methods)))
    declares = tuple(cpp.declarations(toks))
    extends = None if declares or not toks else cpp.extension(toks)
    if toks and not declares and extends is None:
        raise ValueError(f"a prelude helper that declares nothing would never be chosen:\n{text}")
    if "namespace" in toks:
        raise ValueError(f"a prelude helper is written inside its namespace ({namespace}), opening none:\n{text}")
    return Helper(text, namespace, tuple(toks), declares, extends, methods)


def _methods(text: str, namespace: str) -> list[Method]:
    """The member functions of a struct helper written on lines of their own (with the comment lines above them)
    in its body; not a constructor (it declares the struct's own name) or an operator, which no name calls."""
    toks = cpp.tokens(text)
    head = toks[:toks.index("{")] if "{" in toks else toks
    if "struct" not in head and "class" not in head:
        return []
    struct = next((d.name for _, d in cpp.declarations(toks) if d.kind == "struct"), None)
    out, depth, start = [], 0, None
    for n, line in enumerate(text.split("\n")):
        line_toks = cpp.tokens(line)
        if depth == 1 and start is None:
            start = n                        # a member's first line (or the first of the comments above it)
        depth += cpp.brace_depth(line_toks)
        if start is None or not line_toks:
            continue
        if depth < 1:                        # the struct's closing line: no member
            break
        if depth == 1 and line_toks[-1] in (";", "}"):
            member = cpp.tokens("\n".join(text.split("\n")[start:n + 1]))
            functions = [(i, d) for i, d in cpp.declarations(member) if d.kind == "function"]
            if len(functions) == 1 and functions[0][1].name != struct and "=" not in member[:functions[0][0]]:
                i, d = functions[0]
                out.append(Method(d.name, namespace, range(start, n + 1), tuple(member), i))
            start = None
    return out


class Pool:
    """Helpers in prelude order (a helper may use those before it), indexed by the names they declare."""

    def __init__(self, members: list[Helper]):
        self.members = members
        self.structs = frozenset(d.name for h in members for _, d in h.declares if d.kind == "struct")
        # (namespace, name) -> (helper, declaration with its parameter kinds made prelude structs or None, the
        # prelude types its parameters name) of each declaration of the name; macros know no namespace
        self.declared: dict[tuple[str, str], list[tuple[Helper, cpp.Declaration, frozenset]]] = {}
        for h in members:
            for _, d in h.declares:
                known = tuple(p.known(self.structs) if p is not None and (p.head in self.structs or p == cpp.BUILTIN)
                              else None for p in d.params)
                key = ("" if d.kind == "macro" else h.namespace, d.name)
                self.declared.setdefault(key, []).append((h, replace(d, params=known), d.param_types & self.structs))
        # helper -> (specialization, the prelude types its template arguments name) of each specialization of a
        # template it declares; (operator, the prelude types its parameters name) of each operator
        self.specializations: dict[Helper, list[tuple[Helper, frozenset]]] = {}
        self.operators: list[tuple[Helper, frozenset]] = []
        for h in members:
            if h.extends is None:
                continue
            name, identifiers = h.extends
            if name is None:
                if not identifiers & self.structs:
                    raise ValueError(f"an operator on no prelude type:\n{h.text}")
                self.operators.append((h, identifiers & self.structs))
                continue
            primaries = [p for key in cpp.Reference(h.namespace, (name,), False).lookups()
                         for p, _, _ in self.declared.get(key, ())]
            if not primaries:
                raise ValueError(f"a specialization of {name}, which no prelude helper declares, would never be "
                                 f"chosen:\n{h.text}")
            for p in primaries:
                self.specializations.setdefault(p, []).append((h, identifiers & self.structs))
        self._uses: dict = {}          # (helper, binding) -> its references, read when first chosen so

    def uses(self, helper: Helper, binding: tuple = ()) -> frozenset:
        """The references of `helper`'s text (but for its declarations' own names), its parameters and template
        parameters of the `binding` ((name, kind) and (name, struct) pairs) of those kinds and structs."""
        refs = self._uses.get((helper, binding))
        if refs is None:
            known = {name: kind for name, kind in binding if isinstance(kind, cpp.Kind)}
            types = {name: struct for name, struct in binding if isinstance(struct, str)}
            refs = self._uses[(helper, binding)] = frozenset(cpp.references(
                list(helper.tokens), self.structs, helper.namespace, helper.name_tokens, known, types))
        return refs

    def method_uses(self, method: Method) -> frozenset:
        """The references of a method's text (but for its own name)."""
        refs = self._uses.get(method)
        if refs is None:
            refs = self._uses[method] = frozenset(cpp.references(
                list(method.tokens), self.structs, method.namespace, frozenset({method.name_token})))
        return refs

    def references(self, code: str) -> frozenset:
        """The cpp.References of a kernel's `code`."""
        return frozenset(cpp.references(cpp.tokens(code), self.structs))

    def needed(self, uses: frozenset) -> set:
        """The helpers that code with these references needs, transitively, and the methods of theirs named."""
        chosen, types, seen, read = set(), set(), set(), set()
        # (helper, parameter types, binding) of declarations references may mean (and operators, which any
        # expression on their types may call), whose references with that binding are not yet read
        waiting = [(h, requires, ()) for h, requires in self.operators]
        names, methods = set(), []          # the names referred to; the methods of chosen structs not yet chosen

        def want(refs):
            for ref in refs:
                names.add(ref.path[-1])
                for key in ref.lookups():
                    if (key, ref.called, ref.args) in seen:
                        continue
                    seen.add((key, ref.called, ref.args))
                    for helper, d, requires in self.declared.get(key, ()):
                        if d.kind != "function" or ref.called and (ref.args is None or d.takes(ref.args)):
                            waiting.append((helper, requires, _binding(d, ref.args)))
        want(uses)
        progress = True
        while progress:               # until no waiting declaration has its parameter types in the source
            progress = False
            for helper, requires, binding in list(waiting):
                if (helper, binding) not in read and requires <= types:
                    read.add((helper, binding))
                    if helper not in chosen:
                        chosen.add(helper)
                        types |= {d.name for _, d in helper.declares if d.kind == "struct"}
                        waiting += [(s, arguments, ()) for s, arguments in self.specializations.get(helper, ())]
                        methods += helper.methods
                    want(self.uses(helper, binding))
                    progress = True
            for m in [m for m in methods if m.name in names]:
                methods.remove(m)
                chosen.add(m)
                want(self.method_uses(m))
                progress = True
            waiting = [w for w in waiting if (w[0], w[2]) not in read]
        return chosen

    def text(self, chosen: set | None = None) -> str:
        """The prelude of the `chosen` helpers with their chosen methods (all when None), in prelude order, each in
        its namespace, one after another; each heading above the first chosen helper under it, a section's banner
        after a blank line. The first namespace opened says what the prelude is."""
        out, current, heading = [], [], None
        for h in self.members:
            if h.heading:
                heading = h
                continue
            if chosen is not None and h not in chosen:
                continue
            target = h.namespace.split("::")
            common = 0
            while common < min(len(current), len(target)) and current[common] == target[common]:
                common += 1
            out += [f"}}  // namespace {name}" for name in reversed(current[common:])]
            out += [f"namespace {name} {{" for name in target[common:]]
            if len(out) == len(target) - common:
                out[0] += "  " + (HEAD_FULL if chosen is None else HEAD_USED)
            if heading is not None:
                apart = common == len(target) and heading.text.startswith(BANNER)
                out += ["", heading.text] if apart else [heading.text]
                heading = None
            out.append(h.shown(chosen))
            current = target
        out += [f"}}  // namespace {name}" for name in reversed(current)]
        return "\n".join(out) + "\n" + TAIL


def _binding(d: cpp.Declaration, args: Optional[tuple]) -> tuple:
    """What a call with arguments of these kinds tells of a function's body: (parameter, kind) pairs, and (template
    parameter, prelude struct) pairs of the template arguments of its parameters' types (one of two structs: none)."""
    if args is None:
        return ()
    variables = {name: kind for name, kind in zip(d.names, args) if name is not None and kind is not None}
    types: dict = {}
    for generics, kind in zip(d.generics, args):
        for name, struct in zip(generics, kind.args if kind is not None else ()):
            if name is not None and struct is not None:
                types[name] = struct if types.get(name, struct) == struct else None
    return tuple(sorted(variables.items(), key=lambda pair: pair[0])) + tuple(
        sorted((name, struct) for name, struct in types.items() if struct is not None))
