"""Specialization records: a new process launches a kernel an earlier one compiled without tracing or lowering it.

A launch of a specialization new to the process traces the kernel (the attention template: 8 ms on the H200),
lowers it (3 ms) and finds its module in the disk cache by the code's identity: most of a warm process's 21 ms first
attention call (RESULTS.md run 292). So after a compile a signed record (tkpy.runtime.records, kind "specialization")
keeps the module's cache key, its code identity and what its launches need (LaunchFacts), keyed by what determines
the trace: the kernel's digest (frontend/digest.py: its function and what that reaches, its options and specs),
tkpy's files, the versions of tkpy, Python, torch and NVRTC, the specialization key (contiguity, constexprs) and the
environment switch the trace reads (TKPY_DEPENDENT_LAUNCH). A later process finds the record, loads the module and
launches; the IR and the source are made again only where asked for (`k.source(...)`, `k.ir(...)`), and the code's
identity is checked against the record's then (a mismatch warns and drops the record).

Not recorded: debug and timeline builds (their launches read the IR), undigestable kernels, constexprs that are not
digestable values. `TKPY_SPEC_RECORDS=0` keeps none and reads none (every new process traces, as before records;
for a kernel whose trace reads what the digest cannot see: a file, a clock, a random number), nor does
`TKPY_CACHE=0`.
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Optional

from .._version import __version__
from ..codegen.abi import Slot
from ..ir.passes import ALIGNMENT_SLACK
from ..runtime import cached_module, nvrtc_version, records, timeline
from ..runtime.dependent_launch import enabled as dependent_launch_enabled
from ..tiles import dtypes
from ..tiles.types import ST
from .._source_tree import tree_digest
from .digest import value_digest

KIND = "specialization"
ENV = "TKPY_SPEC_RECORDS"


@dataclass(frozen=True)
class LaunchFacts:
    """What launching a compiled specialization needs of its kernel: from its IR, or from its record."""

    threads: int
    cluster: Optional[tuple]
    dependent_launch: bool
    shared_bytes: int
    slots: tuple
    packed: bool            # every tensor contiguous: launches take the fast path
    debug: bool = False     # a debug build: every launch checked (runtime/debug.py)

    @classmethod
    def of(cls, ir, slots, contiguous: tuple) -> "LaunchFacts":
        return cls(ir.threads, ir.cluster, ir.dependent_launch, ir.shared_bytes, tuple(slots), all(contiguous),
                   ir.debug is not None)

    @property
    def dynamic_smem(self) -> int:
        return self.shared_bytes + (ALIGNMENT_SLACK if self.shared_bytes else 0)  # room to align the base


@dataclass(frozen=True)
class Found:
    """A record's module, loaded from the disk cache, with its facts and the code identity it was compiled from."""

    module: object
    facts: LaunchFacts
    identity: str


def record_key(kernel, key: tuple) -> Optional[str]:
    """The record key of `kernel`'s specialization `key` (Kernel._bind's), or None where it is not recorded."""
    contiguous, constexprs, debug = key
    if debug is not None or timeline.enabled() or not enabled():
        return None
    kernel_digest = kernel.digest
    if kernel_digest is None:
        return None
    constexpr_digest = value_digest(constexprs)
    if constexpr_digest is None:
        return None
    torch = sys.modules.get("torch")
    major, minor = nvrtc_version()
    return records.record_key(KIND, __version__, tree_digest(), sys.version, getattr(torch, "__version__", ""),
                              f"nvrtc-{major}.{minor}", f"pdl={dependent_launch_enabled()}", kernel_digest,
                              repr(contiguous), constexpr_digest)


def enabled() -> bool:
    """False when TKPY_SPEC_RECORDS is 0/false/no/off."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def find(rkey: Optional[str], contiguous: tuple, source) -> Optional[Found]:
    """The specialization recorded under `rkey` (record_key's; None: none), of tensors `contiguous` as its key says,
    its module loaded from the disk cache (`source()` makes the module's source if it is asked for), or None (no
    record, or its module is gone)."""
    payload = records.load(KIND, rkey) if rkey is not None else None
    if payload is None:
        return None
    try:
        facts = _facts(payload, contiguous)
        name, module_key, identity = payload["kernel"], payload["module"], payload["identity"]
    except (KeyError, TypeError, ValueError):
        return None
    module = cached_module(module_key, name, source)
    return Found(module, facts, identity) if module is not None else None


def keep(rkey: Optional[str], compiled) -> None:
    """Record a specialization just compiled (`compiled`: a Compiled with its Lowered) under `rkey` (record_key's;
    None: not recordable)."""
    if rkey is None:
        return
    f, lowered = compiled.facts, compiled.lowered
    records.store(KIND, rkey, {
        "kernel": compiled.module.kernel_name, "module": compiled.module.key, "identity": lowered.code.identity,
        "threads": f.threads, "cluster": list(f.cluster) if f.cluster else None, "dependent_launch": f.dependent_launch,
        "shared_bytes": f.shared_bytes, "slots": [_slot_json(s) for s in f.slots]})


def drop(rkey: Optional[str]) -> None:
    """Forget a record found stale (its code no longer the recorded one's)."""
    if rkey is not None:
        records.remove(KIND, rkey)


def stale_warning(kernel_name: str) -> None:
    warnings.warn(f"tkpy: the specialization record of {kernel_name} named a module whose code is not what the "
                  "kernel lowers to now (dropped; the next process traces it). A record's key missed something the "
                  "trace depends on: please report it", RuntimeWarning, stacklevel=3)


def _facts(payload: dict, contiguous: tuple) -> LaunchFacts:
    cluster = payload["cluster"]
    return LaunchFacts(int(payload["threads"]), tuple(cluster) if cluster else None, bool(payload["dependent_launch"]),
                       int(payload["shared_bytes"]), tuple(_slot(s) for s in payload["slots"]), all(contiguous))


def _slot_json(slot: Slot) -> list:
    source = list(slot.source)
    if source[0] == "tmap":
        st = source[2]
        source[2] = {"dtype": st.dtype.name, "rows": st.rows, "cols": st.cols, "swizzle": st.swizzle}
    return [slot.cname, slot.ctype, slot.kind, source]


def _slot(item: list) -> Slot:
    cname, ctype, kind, source = item
    if source[0] == "tmap":
        st = source[2]
        source = [source[0], source[1], ST(dtypes.BY_NAME[st["dtype"]], st["rows"], st["cols"], st["swizzle"])]
    return Slot(cname, ctype, kind, tuple(source))
