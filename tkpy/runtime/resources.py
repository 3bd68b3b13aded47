"""Parse the ``ptxas -v`` report that NVRTC appends to its log.

With ``-Xptxas=-v`` the NVRTC program log contains, per entry function::

    ptxas info    : Compiling entry function 'add1' for 'sm_90a'
    ptxas info    : Function properties for add1
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, ...

The exact tail of the "Used" line differs across ptxas versions (older ones
add ``N bytes cmem[0]``; 13.x drops it), so every field is matched on its own.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from .errors import SpillWarning

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_REGS_RE = re.compile(r"Used (\d+) registers")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_STACK_RE = re.compile(r"(\d+) bytes stack frame")
_SPILL_ST_RE = re.compile(r"(\d+) bytes spill stores")
_SPILL_LD_RE = re.compile(r"(\d+) bytes spill loads")


@dataclass(frozen=True)
class Resources:
    """Per-kernel resource usage reported by ptxas (all sizes in bytes).

    ``found`` is False when the log had no ptxas section for the kernel
    (e.g. the module came from a cache entry without a verbose log); the
    numeric fields are then all zero.
    """

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_static: int = 0
    barriers: int = 0
    warnings: tuple[str, ...] = ()
    found: bool = False

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def summary(self) -> str:
        if not self.found:
            return "resources: unknown (no ptxas report)"
        s = (
            f"{self.registers} regs, {self.shared_static} B static smem, "
            f"{self.barriers} barriers, {self.stack_frame} B stack"
        )
        if self.spills:
            s += f", SPILLS: {self.spill_stores} B stored / {self.spill_loads} B loaded"
        else:
            s += ", no spills"
        if self.warnings:
            s += f", {len(self.warnings)} ptxas warning(s)"
        return s


def _section_for(log: str, kernel_name: str) -> str | None:
    """Text of the log belonging to ``kernel_name``'s entry function."""
    matches = list(_ENTRY_RE.finditer(log))
    for i, m in enumerate(matches):
        if m.group(1) == kernel_name:
            end = matches[i + 1].start() if i + 1 < len(matches) else len(log)
            return log[m.start() : end]
    if len(matches) == 1 and not kernel_name:
        return log[matches[0].start() :]
    return None


def _int(rx: re.Pattern[str], text: str) -> int:
    m = rx.search(text)
    return int(m.group(1)) if m else 0


def parse_ptxas_log(log: str, kernel_name: str) -> Resources:
    """Extract ``kernel_name``'s resource usage from an NVRTC/ptxas log."""
    warns = tuple(   # warnings, and the notes that the assembler serialized wgmma ("Performance Loss")
        line.strip()
        for line in log.splitlines()
        if "ptxas" in line and ("warning" in line.lower() or "performance loss" in line.lower())
    )
    sec = _section_for(log, kernel_name)
    if sec is None:
        return Resources(warnings=warns)
    return Resources(
        registers=_int(_REGS_RE, sec),
        spill_stores=_int(_SPILL_ST_RE, sec),
        spill_loads=_int(_SPILL_LD_RE, sec),
        stack_frame=_int(_STACK_RE, sec),
        shared_static=_int(_SMEM_RE, sec),
        barriers=_int(_BARRIERS_RE, sec),
        warnings=warns,
        found=True,
    )


def warn_on_spills(res: Resources, kernel_name: str, *, stacklevel: int = 2) -> bool:
    """Issue a :class:`SpillWarning` if ptxas spilled; returns whether it did."""
    if not res.spills:
        return False
    warnings.warn(
        f"tkpy kernel '{kernel_name}' spills registers: {res.spill_stores} bytes "
        f"spill stores, {res.spill_loads} bytes spill loads ({res.registers} registers "
        f"used, {res.stack_frame} B stack frame). Spilled kernels are usually much "
        f"slower; reduce live tiles or per-warpgroup register pressure.",
        SpillWarning,
        stacklevel=stacklevel + 1,
    )
    return True


__all__ = ["Resources", "parse_ptxas_log", "warn_on_spills"]
