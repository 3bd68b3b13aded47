"""Semaphores (mbarriers) as the PTX ISA defines them, and the TMA bytes that complete on them.

An mbarrier counts, per phase, pending arrivals (reset to its init count) and a
transaction count of bytes: `expect` raises it, each TMA delivery lowers it, and
it may dip below zero when bytes arrive before their expect. A phase completes
when both reach zero; the barrier then starts the next phase. A wait on phase
parity P (`mbarrier.try_wait.parity`) returns once the current phase's parity
differs from P, i.e. the phase with parity P, the current or the one just
before, has completed.

A TMA load's bytes are written at once but stay in flight (memory.SharedMemory)
until the phase they completed on has completed and some warp has waited on it:
reading them earlier is reported, as is a delivery that finds the phase its
issuer announced already completed (the expect was too small).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InterpretError
from .sync import Wait


class Semaphore:
    """One mbarrier of one block, named as the kernel names it (`full[2]`)."""

    def __init__(self, name: str, block: str):
        self.name = name
        self.block = block
        self.count = None          # arrivals per phase; None until tk.init_semaphore

    def init(self, count: int) -> None:
        self.count = count
        self.pending = count       # arrivals the current phase still needs
        self.expected = 0          # bytes announced in the current phase
        self.received = 0          # bytes delivered in the current phase
        self.completed = 0         # phases completed: the current phase's number
        self.acquired = -1         # the latest phase some warp's wait has returned for
        self.last_expect = None    # (loc, bytes) of the latest expect, for error messages
        self.announced: dict = {}  # warp -> the phase of its latest expect

    def arrive(self, count: int, loc) -> None:
        if count > self.pending:
            raise InterpretError(f"{count} arrival(s) on semaphore `{self.name}`, whose phase {self.completed} "
                                 f"awaits only {self.pending} more of its {self.count}: more warps arrive than "
                                 "tk.init_semaphore counted", loc)
        self.pending -= count
        self._complete_if_done()

    def expect(self, nbytes: int, warp, loc) -> None:
        """mbarrier.arrive.expect_tx: announce `nbytes` of this phase's transactions, then arrive once."""
        self.expected += nbytes
        self.last_expect = (loc, nbytes)
        self.announced[warp] = self.completed
        self.arrive(1, loc)

    def deliver(self, nbytes: int, issuer, loc) -> int:
        """complete_tx of a TMA load issued by warp `issuer`: the phase number its bytes complete on."""
        phase = self.completed
        announced = self.announced.get(issuer)
        if announced is not None and announced < phase:
            raise InterpretError(f"TMA delivered {nbytes} bytes to a semaphore whose phase already completed: "
                                 f"`{self.name}` phase {announced}, {self._expect_was()}", loc)
        remaining = self.expected - self.received
        if self.pending == 0 and 0 < remaining < nbytes:
            raise InterpretError(f"TMA delivered {nbytes} bytes to semaphore `{self.name}`, whose phase {phase} "
                                 f"awaited only {remaining} more: the phase completes early and the other "
                                 f"{nbytes - remaining} bytes arrive on a phase that already completed; "
                                 f"{self._expect_was()}", loc)
        self.received += nbytes
        self._complete_if_done()
        return phase

    def wait(self, parity: int) -> "PhaseWait":
        return PhaseWait(self, parity)

    def progress(self) -> str:
        """The current phase's arrivals and (if any are involved) transaction bytes, for reports."""
        bytes_ = f", {self.received} of {self.expected} expected bytes" if self.expected or self.received else ""
        return f"{self.count - self.pending} of {self.count} arrivals{bytes_}"

    def _complete_if_done(self) -> None:
        if self.pending == 0 and self.received == self.expected:
            self.completed += 1
            self.pending, self.expected, self.received = self.count, 0, 0

    def _expect_was(self) -> str:
        loc, nbytes = self.last_expect
        return f"the expect at {loc.short} announced {nbytes} bytes, fewer than the TMA loads after it deliver"


class PhaseWait(Wait):
    """mbarrier.try_wait.parity: ready once the semaphore's current phase parity differs from `parity`.
    Readiness acquires the phase just completed (its TMA bytes land)."""

    def __init__(self, sem: Semaphore, parity: int):
        self.sem, self.parity = sem, parity

    def ready(self) -> bool:
        sem = self.sem
        if sem.completed % 2 == self.parity:
            return False
        sem.acquired = max(sem.acquired, sem.completed - 1)
        return True

    def describe(self) -> str:
        sem = self.sem
        return (f"semaphore `{sem.name}` of {sem.block}, waiting for its phase {sem.completed} (parity "
                f"{self.parity}) to complete: {sem.progress()}")


@dataclass(frozen=True)
class Transfer:
    """The bytes one TMA load wrote into one block: they land once the phase they completed on has completed
    and a warp has waited on it."""

    sem: Semaphore
    phase: int
    loc: object
    tile: str

    def landed(self) -> bool:
        return self.sem.acquired >= self.phase

    def describe(self) -> str:
        sem = self.sem
        if sem.completed <= self.phase:
            state = f"which has not completed ({sem.progress()})"
        else:
            state = "which has completed, but no warp has waited on it (tk.wait)"
        return (f"the TMA load into `{self.tile}` at {self.loc.short} completes on semaphore `{sem.name}` in its "
                f"phase {self.phase}, {state}")
