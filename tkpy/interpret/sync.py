"""What blocked warps wait for: the `Wait` protocol and bar.sync-style barriers.

A semantics function that must block returns a `Wait`. The scheduler resumes
the warp once `ready()` is true; when no warp of a block can move, it raises
DeadlockError listing each blocked warp's `describe()` (barrier, phase, who
arrived). Semaphores (mbarriers), TMA transaction counts and wgmma groups are
further `Wait` kinds, kept per block with `Block.sync_object`.
"""
from __future__ import annotations

from ..errors import InterpretError


class Wait:
    """A condition a blocked warp waits on."""

    def ready(self) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        """The barrier, its phase and its progress, for deadlock reports."""
        raise NotImplementedError


class Barrier:
    """A hardware barrier (`bar.sync id, threads`; id 0 with every warp is __syncthreads): completes each
    time `expected` warps have arrived, then starts its next phase.

    `one_site`: every warp of a phase must arrive from the same Python line; CUDA leaves a
    __syncthreads reached from different places undefined, so it is reported rather than matched.
    `across_blocks`: the warps come from several blocks (a cluster barrier), so reports name their blocks.
    """

    def __init__(self, name: str, expected: int, one_site: bool, across_blocks: bool = False):
        self.name = name
        self.expected = expected
        self.one_site = one_site
        self.across_blocks = across_blocks
        self.phase = 0
        self.arrived: list = []    # (warp index, or name across blocks; loc) of this phase
        self.votes: list = []      # (warp, its predicate, the variable the OR goes into) of this phase's bar.red

    def arrive(self, warp, vote: tuple | None = None) -> Wait:
        """Count `warp` towards this phase; `vote` (predicate, variable name): bar.red.or, whose OR of every
        warp's predicate goes into each voter's variable when the phase completes."""
        self.arrived.append((warp.name if self.across_blocks else warp.index, warp.loc))
        if vote is not None:
            self.votes.append((warp, *vote))
        wait = _PhaseWait(self, self.phase)
        if len(self.arrived) == self.expected:
            self._complete()
        return wait

    def _complete(self) -> None:
        sites = {loc for _, loc in self.arrived}
        if self.one_site and len(sites) > 1:
            where = "; ".join(f"warp {w} at {loc.short}" for w, loc in sorted(self.arrived, key=lambda a: a[0]))
            raise InterpretError(f"{self.name}: the warps of the block reached it from different lines ({where}); "
                                 "every warp must reach the same barrier", self.arrived[-1][1])
        if self.votes and len(self.votes) != len(self.arrived):
            raise InterpretError(f"{self.name}: {len(self.votes)} of the {len(self.arrived)} warps of one phase voted "
                                 "(bar.red) and the others synced or arrived; every warp of a phase must vote",
                                 self.arrived[-1][1])
        verdict = any(flag for _, flag, _ in self.votes)
        for warp, _, name in self.votes:
            warp.env[name] = verdict
        self.votes = []
        self.arrived = []
        self.phase += 1


class _PhaseWait(Wait):
    def __init__(self, barrier: Barrier, phase: int):
        self.barrier, self.phase = barrier, phase

    def ready(self) -> bool:
        return self.barrier.phase > self.phase

    def describe(self) -> str:
        b = self.barrier
        who = ", ".join(str(w) for w in sorted(w for w, _ in b.arrived))   # (in any warp order, the same text)
        plural = "s" if len(b.arrived) > 1 else ""
        return f"{b.name} (phase {self.phase}): {len(b.arrived)} of {b.expected} warps arrived (warp{plural} {who})"
