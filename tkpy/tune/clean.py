"""`first_clean(names, make, args, clean)`: the first of some kernels that compiles clean, the verdict kept on disk.

A policy that prefers one kernel and falls back to the next where it spills under the NVRTC at hand (attention's
divisors and cluster pairs, kernels/attention_policy.py clean_choices) finds out by compiling them in turn, and a
new process did all that again on a warm disk cache: each candidate traced, lowered and looked up (attention's D128
default is the third of its candidates under NVRTC 13.5; on the H200 a warm first call's traces, lowerings and
lookups took 22 of its 31 ms, RESULTS.md run 291). The verdict is a signed record
(tkpy.runtime.records) keyed by tkpy's and NVRTC's versions, the test (`clean`, by name)
and the candidates' kernel names in order; it names the clean one by position, name and its compiled module's cache
key. A new process compiles that candidate alone (its launch needs it compiled anyway) and takes the verdict where
the module's key is the recorded one (the same code, prelude and NVRTC) and `clean` accepts it again; anything else
compiles the candidates in turn and records what it finds. Not checked again: that the candidates before it are
still not clean, which only a change to their code alone (a checkout between versions) could undo. The verdict only
ever chooses among kernels that compute the same, for speed, as an autotuning winner does (tune/winners.py).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional, Sequence

from .._version import __version__
from ..runtime import SpillWarning, nvrtc_version, records

KIND = "clean"


def compiles_clean(candidate, args) -> bool:
    """Whether `candidate` (a tk.Kernel, or a block template: its .kernel) compiles for `args` without register
    spills and with its wgmma asynchronous (no ptxas "Performance Loss" warning); compiled by NVRTC or found in the
    disk cache, a spill not warned about."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpillWarning)
        r = _kernel(candidate).resources(*args)
    return not r.spills and not any("Performance Loss" in w for w in r.warnings)


def first_clean(names: Sequence[str], make: Callable, args, clean: Callable = compiles_clean) -> Optional[object]:
    """The first of some candidates that `clean(candidate, args)` accepts, or None: candidate i is `make(i)` (a
    tk.Kernel, or a block template: its .kernel, either taking `args`), its kernel named `names[i]`, made only where
    it is tried. In a new process, the one an earlier process found, where its compiled module is the same and
    `clean` accepts it (the module docstring); else each in turn."""
    if not names:
        return None
    major, minor = nvrtc_version()
    rkey = records.record_key(KIND, __version__, f"nvrtc-{major}.{minor}", _name_of(clean), *names)
    payload = records.load(KIND, rkey)
    at = payload.get("index") if payload is not None else None
    if isinstance(at, int) and 0 <= at < len(names) and payload.get("name") == names[at]:
        candidate = _made(make, at, names)
        if clean(candidate, args) and _key(candidate, args) == payload.get("key"):
            return candidate
    for at in range(len(names)):
        candidate = _made(make, at, names)
        if clean(candidate, args):
            records.store(KIND, rkey, {"index": at, "name": names[at], "key": _key(candidate, args)})
            return candidate
    return None


def _made(make: Callable, at: int, names: Sequence[str]):
    candidate = make(at)
    if _kernel(candidate).name != names[at]:
        raise ValueError(f"tk.tune.first_clean: candidate {at} is kernel {_kernel(candidate).name!r}, not "
                         f"{names[at]!r} as its name says")
    return candidate


def _name_of(clean: Callable) -> str:
    """The test's name in the record's key, with its line where it has code (a stand-in a test passes, a lambda,
    never reads or writes the verdicts of another test)."""
    code = getattr(clean, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(clean, '__module__', '')}.{getattr(clean, '__qualname__', repr(clean))} {where}"


def _kernel(candidate):
    return getattr(candidate, "kernel", candidate)


def _key(candidate, args) -> str:
    """The disk-cache key of the candidate's compiled module (compiled already: from memory)."""
    return _kernel(candidate).compile(*args).module.key
