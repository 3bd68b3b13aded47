"""Several simulated GPUs on the CPU: `tk.simulate_ranks(world, fn)` runs fn(rank) for every rank at once, each on a
thread of its own, as the processes of a multi-GPU job run (one per GPU); their kernels meet through the tensors of
their tk.PGLs (CPU tensors the ranks share: peer memory) and the signals between them (tk.signal, tk.wait_signal).

A rank's interpreter runs its launch until no warp can move. Where some warp then waits for a signal (which another
rank, or a later launch, may still give), the rank stalls: it sleeps until any signal is given anywhere and then
tries again. When every rank that has not finished is stalled, nothing can ever give the signals they wait for: each
of them raises tk.DeadlockError with every rank's report. A rank that raises counts as finished (the others then see
the deadlock its missing signals cause, unless they do not need them).

The interpreter's memory is sequentially consistent: what a signal releases is visible at once, so the model checks
the protocol (who waits for whom, and that the data is there when the wait returns), not the fences the GPU needs
(tk.signal and tk.wait_signal carry those).
"""
from __future__ import annotations

import threading

from ..errors import DeadlockError


class World:
    """The simulated ranks of one tk.simulate_ranks call: who is stalled, and a version counted up by each signal."""

    def __init__(self, size: int):
        self.size = size
        self.version = 0
        self._cond = threading.Condition()
        self._alive = size
        self._stalled: dict = {}           # rank -> its deadlock report
        self._failed: str | None = None

    def signalled(self) -> None:
        """A signal was given: every stalled rank tries again."""
        with self._cond:
            self.version += 1
            self._stalled.clear()
            self._cond.notify_all()

    def stall(self, rank: int, seen: int, report: str) -> None:
        """Rank `rank` cannot move (`report` says why) since version `seen`: return once a signal has been given
        since, or raise DeadlockError once every live rank is stalled."""
        with self._cond:
            if self.version == seen and self._failed is None:
                self._stalled[rank] = report
                self._check()
                while self.version == seen and self._failed is None:
                    self._cond.wait()
            if self._failed is not None:
                raise DeadlockError(self._failed)

    def leave(self) -> None:
        """A rank finished (or failed): the others may now all be stalled."""
        with self._cond:
            self._alive -= 1
            self._check()

    def _check(self) -> None:
        if self._stalled and len(self._stalled) >= self._alive and self._failed is None:
            self._failed = (f"deadlock across {self.size} simulated GPUs: every rank still running waits for a "
                            "signal that no rank can give\n" +
                            "\n".join(f"rank {r}: {text}" for r, text in sorted(self._stalled.items())))
            self._cond.notify_all()


class _Here(threading.local):
    world: World | None = None
    rank: int | None = None


_here = _Here()


def current() -> tuple:
    """(the World, this thread's rank) inside tk.simulate_ranks, else (None, None)."""
    return _here.world, _here.rank


def simulated_rank() -> int | None:
    """The rank this thread simulates inside tk.simulate_ranks, else None."""
    return _here.rank


def signalled() -> None:
    """Tell the simulated ranks (if any) that a signal was given."""
    world = _here.world
    if world is not None:
        world.signalled()


def simulate_ranks(world: int, fn) -> list:
    """Run fn(rank) for rank 0..world-1 at once, each on a thread of its own that tkpy's interpreter treats as one
    GPU of a group of `world` (see the module's docstring); returns their results in rank order, or raises the
    exception of the lowest rank that raised."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"simulate_ranks: world must be a positive int, got {world!r}")
    shared = World(world)
    results, errors = [None] * world, [None] * world

    def run(rank: int) -> None:
        _here.world, _here.rank = shared, rank
        try:
            results[rank] = fn(rank)
        except BaseException as e:          # noqa: BLE001 - re-raised below
            errors[rank] = e
        finally:
            shared.leave()
            _here.world = _here.rank = None

    threads = [threading.Thread(target=run, args=(r,), name=f"tkpy rank {r}") for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
