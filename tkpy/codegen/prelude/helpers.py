"""The prelude as helpers, and the choice of those a kernel uses.

A helper is one paragraph of the prelude's C++ (the text between blank lines outside braces): a type, a function
and its overloads, a few one-line wrappers. A kernel's source carries the helpers its code refers to by name,
then those that these refer to, and so on (`Pool.needed`): what NVRTC compiles is the kernel and its helpers only.

Overloads make that choice subtle: a call chooses among all the declarations of its name, so leaving one out
could make a call silently choose another. A declaration is therefore left out only where no call can choose it:
- a function no reference calls (a variable named `fill` is no call of tk::fill);
- an overload whose parameters name prelude types that are not in the source (`store(const st<fp8e4m3, ...>&,
  const rt<...>&)` without fp8e4m3, st or rt): no argument can have them;
- an overload a call cannot take: another number of arguments, or an argument whose kind (the type a variable is
  declared with: `rt`, `gl`, a scalar; cpp.py) its parameter's type is not (`load(rt<...>&, const gl<...>&, ...)`
  for a call `load(t, x, ...)` with `tk::rv<...> t`): the prelude's types convert neither into one another nor to
  scalars.
Hence the rules for writing the prelude: no implicit conversions between its types (no conversion operators,
explicit constructors); an overload names the prelude types it takes in its parameter list (not only through a
`typename X<...>::type`); and a primary template whose specializations live in other helpers is left undefined,
so that a missing specialization fails to compile instead of falling back to the primary.

A paragraph of comments only is a heading: it is kept above the first chosen helper under it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import cpp

HEAD_USED = ("// ---- tkpy prelude: the header-free device helpers this kernel uses (NVRTC ships no headers; "
             "k.source(..., prelude=\"full\") shows them all) ----")
HEAD_FULL = "// ---- tkpy prelude: header-free device helpers (NVRTC ships no headers) ----"
TAIL = "// ---- end of prelude ----\n"


@dataclass(frozen=True, eq=False)
class Helper:
    """A paragraph of the prelude: its C++ `text` inside `namespace`, its tokens and the names it declares (with
    the indices of their tokens, which are no references)."""
    text: str
    namespace: str
    tokens: tuple
    declares: tuple

    @property
    def heading(self) -> bool:
        return not self.tokens

    @property
    def name_tokens(self) -> frozenset:
        """The indices of the tokens that name its declarations."""
        return frozenset(i for i, _ in self.declares)


def helpers(text: str, namespace: str = "tk") -> list[Helper]:
    """`text`, C++ written inside `namespace` (which it does not open), as helpers: one a paragraph."""
    out, lines = [], []
    for line in text.strip("\n").split("\n") + [""]:
        if line.strip() or not lines:
            lines += [line] if line.strip() else []
            continue
        paragraph = "\n".join(lines)
        toks = cpp.tokens(paragraph)
        if cpp.brace_depth(toks):                   # a blank line inside braces: read on
            lines.append(line)
            continue
        out.append(_helper(paragraph, toks, namespace))
        lines = []
    return out


def _helper(text: str, toks: list, namespace: str) -> Helper:
    declares = tuple(cpp.declarations(toks))
    if toks and not declares:
        raise ValueError(f"a prelude paragraph that declares nothing would never be chosen:\n{text}")
    if "namespace" in toks:
        raise ValueError(f"a prelude helper is written inside its namespace ({namespace}), opening none:\n{text}")
    return Helper(text, namespace, tuple(toks), declares)


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
                known = tuple(p if p in self.structs or p == cpp.BUILTIN else None for p in d.params)
                key = ("" if d.kind == "macro" else h.namespace, d.name)
                self.declared.setdefault(key, []).append((h, replace(d, params=known), d.param_types & self.structs))
        self._uses: dict = {}          # helper -> its references, read when it is first chosen

    def uses(self, helper: Helper) -> frozenset:
        """The references of `helper`'s text (but for its declarations' own names)."""
        refs = self._uses.get(helper)
        if refs is None:
            refs = self._uses[helper] = frozenset(cpp.references(list(helper.tokens), self.structs,
                                                                 helper.namespace, helper.name_tokens))
        return refs

    def references(self, code: str) -> frozenset:
        """The cpp.References of a kernel's `code`."""
        return frozenset(cpp.references(cpp.tokens(code), self.structs))

    def needed(self, uses: frozenset) -> set:
        """The helpers that code with these references needs, transitively."""
        chosen, types, seen = set(), set(), set()
        waiting = []      # (helper, parameter types) of declarations references may mean, whose helper is not chosen

        def want(refs):
            for ref in refs:
                for key in ref.lookups():
                    if (key, ref.called, ref.args) in seen:
                        continue
                    seen.add((key, ref.called, ref.args))
                    for helper, d, requires in self.declared.get(key, ()):
                        if d.kind != "function" or ref.called and (ref.args is None or d.takes(ref.args)):
                            waiting.append((helper, requires))
        want(uses)
        progress = True
        while progress:               # until no waiting declaration has its parameter types in the source
            progress = False
            for helper, requires in list(waiting):
                if helper not in chosen and requires <= types:
                    chosen.add(helper)
                    types |= {d.name for _, d in helper.declares if d.kind == "struct"}
                    want(self.uses(helper))
                    progress = True
            waiting = [w for w in waiting if w[0] not in chosen]
        return chosen

    def text(self, chosen: set | None = None) -> str:
        """The prelude of the `chosen` helpers (all when None), in prelude order, each in its namespace and after a
        blank line (but for one-line helpers after one another), each heading above the first chosen helper under
        it."""
        out, current, heading, previous = [HEAD_FULL if chosen is None else HEAD_USED], [], None, ""
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
            if common == len(target) and (heading is not None or "\n" in h.text + previous):
                out.append("")
            if heading is not None:
                out.append(heading.text)
                heading = None
            out.append(h.text)
            current, previous = target, h.text
        out += [f"}}  // namespace {name}" for name in reversed(current)]
        return "\n".join(out) + "\n" + TAIL
