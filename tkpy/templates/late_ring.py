"""The late ring of the LCF template (lcf.py): a second ring, of `late_stages` stages, for inputs a step uses one
step after it loads them (attention's V: step k computes S_k = Q K_k^T and O += P_{k-1} V_{k-1}). The class declares

    late_inputs = dict(v=shared(bf16, 176, 128))     # the tiles of one late stage, as `inputs`
    load_late(g, task, inp, k, sem)  (producer) TMA step k's late inputs into `inp`, completing on `sem`;
                                called for every step right after load(..., k, ...), once the late stage is
                                free (each ring waits for its own stages)
    compute(st, inp, k, prev)   (required) `inp` is step k's stage of the first ring, `prev` the late stage of
                                step k-1 (for k > 0 only: guard its use with tk.if_(k > 0)), `inp.late` the late
                                stage of step k itself (e.g. on the last step, tk.if_(k == st.iters - 1))

Reading a late tile (`prev.v`, `inp.late.v`) waits for its stage to arrive at that point of the code, so a step
does not wait for its late inputs before it issues what needs only the first ring's. Releases, per lcf.py's
wgmma accounting: when compute leaves no MMA in flight (wait for them in compute), step k's stage of the first
ring and the late stage of step k-1 are released as soon as step k's compute returns, so a first-ring stage is
held for one step only; otherwise (with stages >= 2 and late_stages >= 3) a step later, once only step k+1's
MMAs are pending, or, with fewer stages, after a wait for every MMA. The late stage of a task's last step is
released after that step (the template waits for its arrival first, read or not). Per-task step counts,
split-K, persistent loops, clusters (each block releases both rings' stages to every block of the cluster),
LCSF and a finish block (over the first ring) work as without. late_stages: 2..8 (step k reads the late stages
of steps k-1 and k), default `stages`; both rings must fit in shared memory (a TraceError says how many stages
of either would fit with the other's as given).
"""
from __future__ import annotations

from .. import ops as tk
from ..frontend.context import current
from ..frontend.control import if_, let, range as tk_range
from .common import StageTiles, element


class LateRing:
    """The late ring's part of pipeline.Pipeline (a mixin: the pipeline's arrays, semaphores, template and user)."""

    def late_stage_of(self, position, what: str = "late") -> tuple:
        """(stage, phase) of the late ring at ring position `position` (>= 0 where used)."""
        n = self.t.late_stages
        return let(position % n, f"{what}_stage"), let(position // n % 2, f"{what}_phase")

    def late_view(self, position, what: str) -> "LateStage":
        """The consumers' view of the late stage at ring position `position`: its tiles wait for it where read."""
        s, phase = self.late_stage_of(position, what)
        return LateStage(self.late_arrays, self.t.late_inputs, s, element(self.late_arrived, s), phase)

    def release_late(self, position) -> None:
        """Release the late stage at ring position `position`, once it has arrived: compute may not have read
        it (a stage is refilled only after its last load completed)."""
        s, phase = self.late_stage_of(position, "late_done")
        tk.wait(element(self.late_arrived, s), phase)
        self.release(s, self.late_finished)

    def load_late(self, task, it, k) -> None:
        """The producer: step k's late inputs, into the late stage of ring position `it` once it is free."""
        s, phase = self.late_stage_of(it)
        with if_(it >= self.t.late_stages):
            tk.wait(element(self.late_finished, s), 1 - phase)     # the stage's previous round was consumed
        self.user.load_late(self.g, task, StageTiles(self.late_arrays, self.t.late_inputs, s), k,
                            element(self.late_arrived, s))


    def late_steps(self, st, n, base) -> None:
        """A task's steps with late inputs. Step k waits for its early stage, then computes with it (`inp`), the
        late stage of step k-1 (`prev`) and its own (`inp.late`), the late tiles waited for where read. Once
        step k's MMAs are done, its early stage and the late stage of step k-1 are released: after compute if
        it leaves none in flight, otherwise (keeping them in flight, with 2+ stages and 3+ late stages) after
        step k+1's compute, once only that step's commit groups are pending. The task's last late stage is
        released after its last step."""
        t, user, stages = self.t, self.user, self.t.stages
        for k in tk_range(n):
            it, s, phase = self.stage_of(base, k)
            tk.mark("step: wait for the stage")
            tk.wait(element(self.arrived, s), phase)
            tk.mark("step: stage arrived")
            own = self.late_view(it, "late")
            prev = self.late_view(it + 2 * t.late_stages - 1, "late_previous")    # it - 1 (for k > 0)
            body = current().blocks[-1]
            before = len(body)
            self.compute(st, k, EarlyStage(self.arrays, t.inputs, s, own), prev)
            tk.mark("step: computed")
            groups = sum(1 for op in body[before:] if getattr(op, "name", None) == "wgmma")
            in_flight = bool(current().pending_wgmma)
            holds = in_flight and stages > 1 and t.late_stages > 2
            if not holds:
                if in_flight:                  # too few stages to keep them in flight: done before release
                    tk.warpgroup.mma_async_wait()
                self.release(s)
                with if_(k > 0):
                    self.release_late(it - 1)
                continue
            with if_(k > 0):                   # step k-1's MMAs are done: its early stage, and the late one of k-2
                tk.warpgroup.mma_async_wait(groups)
                self.release((it - 1) % stages)
                with if_(k > 1):
                    self.release_late(it - 2)
        if holds:
            tk.warpgroup.mma_async_wait()

        def last():
            if holds:
                self.release((base + n - 1) % stages)
                with if_(n > 1):
                    self.release_late(base + n - 2)
            self.release_late(base + n - 1)
        if self.per_task:
            with if_(n > 0):                    # a task of no steps has no last stage
                last()
        else:
            last()


class LateStage(StageTiles):
    """A stage of the late ring as compute sees it: reading one of its tiles (`prev.v`, `inp.late.v`) waits, at
    that point of the code, for the stage to have arrived."""

    def __init__(self, arrays: dict, specs: dict, stage, arrived, phase):
        super().__init__(arrays, specs, stage)
        self._arrived, self._phase = arrived, phase

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        tk.wait(self._arrived, self._phase)
        return super().__getattr__(name)

    def tiles(self) -> list:
        tk.wait(self._arrived, self._phase)
        return super().tiles()


class EarlyStage(StageTiles):
    """A stage of the input ring as compute sees it with late inputs: `inp.late` is the same step's late stage."""

    def __init__(self, arrays: dict, specs: dict, stage, late: LateStage):
        super().__init__(arrays, specs, stage)
        self.late = late
