"""`tk.Config`: one configuration for tk.autotune to try, in Triton's convention."""
from __future__ import annotations

from ..errors import ArgumentError
from ..frontend.context import user_loc

PLAIN = (int, float, bool, str, type(None))


class Config:
    """One configuration: `tk.Config(BLOCK=64, warps=8)` or, as Triton writes it, `tk.Config({"BLOCK": 64},
    warps=8)`.

    What it sets depends on what tk.autotune decorates: a `@tk.kernel`'s constexpr parameters and its options
    (warps, cluster, blocks_per_sm, fast_division); a template's (`@tk.lcf`, `@tk.lcsf`) decorator options (stages,
    consumer_warpgroups, cluster, group, producer_registers, ...); a factory function's parameters. A keyword is an
    option where the decorator has one of that name, else an argument; the dict holds arguments only (for a
    constexpr named like an option). Values are ints, floats, bools, strings, None or tuples of them: their repr
    is part of the disk cache's key, and the line that pins a winner."""

    def __init__(self, kwargs: dict | None = None, /, **keywords):
        self.loc = user_loc()
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ArgumentError(f"tk.Config takes a dict of arguments and keywords, got {kwargs!r}", self.loc)
        self.kwargs = dict(kwargs or {})
        self.keywords = keywords
        for name, value in {**self.kwargs, **keywords}.items():
            if not _plain(value):
                raise ArgumentError(f"tk.Config: `{name}` = {value!r}: values are ints, floats, bools, strings, None "
                                    "or tuples of them (their repr keys the disk cache of winners)", self.loc)

    def names(self) -> list[str]:
        return [*self.kwargs, *self.keywords]

    def __repr__(self) -> str:
        parts = [repr(self.kwargs)] if self.kwargs else []
        parts += [f"{k}={v!r}" for k, v in self.keywords.items()]
        return f"tk.Config({', '.join(parts)})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and (self.kwargs, self.keywords) == (other.kwargs, other.keywords)

    def __hash__(self) -> int:
        return hash(repr(self))


def _plain(value) -> bool:
    return isinstance(value, PLAIN) or isinstance(value, tuple) and all(_plain(v) for v in value)
