"""The torch work and the tkpy launches of a call, for the tests that pin an op to its kernels (cross-entropy's,
the norms'): `with Calls(monkeypatch) as calls: ...` records the torch operators run outside tkpy's kernel launches
(`calls.ops`, by name) and the names of the tkpy kernels launched, in order (`calls.launches`; interpreter launches,
TKPY_INTERPRET=1)."""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from tkpy.interpret.launch import Interpreted

ALLOCATIONS_AND_VIEWS = {"empty", "new_empty", "view", "slice", "select", "alias", "detach", "_reshape_alias"}


class Calls(TorchDispatchMode):
    """The torch operators a call runs (outside tkpy's kernel launches) and the tkpy kernels it launches (their
    names, in order)."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.ops, self.launches, self.inside = [], [], False
        run_flat = Interpreted.run_flat

        def counted(interpreted, grid, args):
            self.launches.append(interpreted.kernel.name)
            self.inside = True
            try:
                run_flat(interpreted, grid, args)
            finally:
                self.inside = False
        monkeypatch.setattr(Interpreted, "run_flat", counted)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside:
            self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))
