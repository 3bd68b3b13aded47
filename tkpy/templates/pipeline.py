"""The trace of an LCF kernel (lcf.py's template; LCSF's extends it, lcsf.py): the stage ring and its semaphores, the
producer's loop over the block's tasks and their steps, the consumers' (setup, start, compute, finish), and the
template's parts on either side (late_ring.py, task_inputs.py, step_outputs.py, warpgroups.py)."""
from __future__ import annotations

from .. import ops as tk
from ..frontend.context import as_users, current
from ..frontend.control import assign, block_idx, grid_dim, if_, else_, let, range as tk_range, var, warp_id
from ..ir.expr import Const, Sym, as_expr, call
from .common import Namespace, StageTiles, Task, declare_aliased, declare_ring, element
from .late_ring import LateRing
from .schedule import SplitK
from .warpgroups import Turns

FINISH_BARRIER = 15      # the named barrier on which the consumers meet before a finish block is written


class Pipeline(LateRing):
    """One trace of an LCF kernel: the stage ring, its semaphores, the producer and consumer loops."""

    def __init__(self, template, g):                  # (template: lcf.LCF)
        self.t, self.g, self.user = template, g, template.user
        self.per_task = template.per_task_iters or template.scheduler.splits_k

    def trace(self) -> None:
        t, user, g = self.t, self.user, self.g
        ctx = current()               # the statements the template's own code makes are marked as its, and the
        ctx.template, ctx.template_loc = t.kind.lower(), t.loc        # kernel's origin is the user's class
        stages, consumers, blocks = t.stages, t.consumers, t.cluster
        self.arrays = declare_ring(t.inputs, stages)
        if t.late_inputs:
            self.late_arrays = declare_ring(t.late_inputs, t.late_stages)
        if t.finish_block:
            self.fin = StageTiles(declare_aliased(t.finish_block, next(iter(self.arrays.values())),
                                                  t.finish_offsets), t.finish_block, 0)
        self.declare_buffers()
        self.step_ring = t.step_outputs.declare() if t.step_outputs else None
        self.arrived, self.finished = tk.semaphore(stages), tk.semaphore(stages)
        self.arrived.name, self.finished.name = "arrived", "finished"
        if t.late_inputs:
            self.late_arrived, self.late_finished = tk.semaphore(t.late_stages), tk.semaphore(t.late_stages)
            self.late_arrived.name, self.late_finished.name = "late_arrived", "late_finished"
        if t.finish_block:
            self.finish_done = tk.semaphore()
            self.finish_done.name = "finish_done"
        self.declare_semaphores()
        with if_(warp_id() == 0):
            for s in range(stages):
                tk.init_semaphore(element(self.arrived, s), 1)
                tk.init_semaphore(element(self.finished, s), 4 * consumers * blocks)   # blocks share a release
            for s in range(t.late_stages):
                tk.init_semaphore(element(self.late_arrived, s), 1)
                tk.init_semaphore(element(self.late_finished, s), 4 * consumers * blocks)
            if t.finish_block:
                tk.init_semaphore(self.finish_done, 4 * consumers)
            if self.step_ring:
                self.step_ring.init()
            self.init_semaphores()
        tk.cluster.sync() if blocks > 1 else tk.sync()

        with as_users(user.tasks):
            self.row_tiles, self.col_tiles = (let(x, n) for x, n in zip(user.tasks(g), ("row_tiles", "col_tiles")))
        if hasattr(user, "constants"):
            with as_users(user.constants):
                for name, value in user.constants(g).items():
                    if hasattr(g, name):
                        raise TypeError(f"constants(g): `{name}` is already a parameter of the kernel")
                    setattr(g, name, let(value, name))
        if t.cluster_along == "rows":                    # a cluster takes `blocks` rows of tiles
            self.bands = self.row_tiles // blocks, self.col_tiles
        else:                                            # ... or `blocks` columns
            self.bands = self.row_tiles, self.col_tiles // blocks
        bands = self.bands[0] * self.bands[1]
        if t.scheduler.splits_k:
            self.tiles = let(bands, "tile_groups")
            splits = as_expr(t.scheduler.splits(g))
            self.splits = splits if isinstance(splits, (Const, Sym)) else let(splits, "splits")
            self.groups = let(self.tiles * self.splits, "task_groups")
        else:
            self.groups = let(bands, "task_groups")
        with as_users(user.iters):
            self.iters = None if t.per_task_iters else let(user.iters(g), "iters")
        if not hasattr(user, "order"):
            self.order = t.scheduler.bind(*self.bands)
        self.rank = tk.cluster.rank() if blocks > 1 else as_expr(0)
        self.first = block_idx.x // blocks
        self.step = grid_dim.x // blocks if t.persistent else self.groups

        producer_registers, consumer_registers = t.registers
        with if_(tk.warpgroup_id() == consumers):                      # the producer
            if producer_registers is not None:
                tk.producer_registers(producer_registers)
            with if_(warp_id() == 4 * consumers):
                self.producer()
            if self.step_ring:
                self.step_ring.storer(self, 4 * consumers + 1)
            self.other_producer_warps()
        with else_():                                                    # the consumers
            if consumer_registers is not None:
                tk.consumer_registers(consumer_registers)
            self.consumers()
        if blocks > 1:
            tk.cluster.sync()          # no block leaves while its peers may still signal or fill it

    # -- what LCSF adds -----------------------------------------------------------------------------------
    def declare_buffers(self) -> None:
        """Shared buffers declared after the input ring."""

    def declare_semaphores(self) -> None:
        """Semaphores declared after `arrived` and `finished`."""

    def init_semaphores(self) -> None:
        """Their initialisation, by warp 0."""

    def other_producer_warps(self) -> None:
        """Work for the producer warpgroup's other warps (LCSF: the storer)."""

    def compute(self, st, k, inp, *prev) -> None:
        """The class's compute of step k, on the warpgroup's steps up to its last (warpgroup_steps); past it the
        warpgroup only passes on its turn."""
        if not self.t.skips:
            return self.user.compute(st, inp, k, *prev)
        with if_(k <= st.last_step):
            self.user.compute(st, inp, k, *prev)
        with else_():
            if self.t.turns:
                st.turns.skip()

    def finish(self, st, task, index) -> None:
        if self.t.task_inputs:
            self.t.task_inputs.before_finish(st)
        if not self.t.finish_block:
            self.user.finish(self.g, st, task)
            return
        tk.named_sync(FINISH_BARRIER, 4 * self.t.consumers)      # every consumer is done with the stages
        self.user.finish(self.g, st, task, self.fin)
        tk.arrive(self.finish_done)

    # -- tasks and the ring ---------------------------------------------------------------------------------
    def task_at(self, index) -> Task:
        """This block's task of `index`."""
        t, g, blocks, rank = self.t, self.g, self.t.cluster, self.rank
        loop_index = index
        if t.persistent:
            index = t.scheduler.dealt(index, self.step, self.groups)
        split, splits = 0, 1
        if t.scheduler.splits_k:
            split, splits, index = let(index // self.tiles, "split"), self.splits, let(index % self.tiles, "tile")
        if hasattr(self.user, "order"):
            row, col = self.user.order(g, index, *self.bands)        # of bands of `blocks` rows (or columns)
        else:
            row, col = self.order(index)
        within = rank
        if blocks > 1 and t.per_task_iters:              # the blocks' tasks may differ in steps: rotate
            within = (rank + self.local(loop_index)) % blocks
        if t.cluster_along == "rows":
            row = row * blocks + within
        else:
            col = col * blocks + within
        with as_users(getattr(self.user, "order", None)):
            row, col = let(row, "task_row"), let(col, "task_col")
        return Task(index * blocks + rank, row, col, rank, split, splits)

    def local(self, index):
        """How many tasks this block ran before task `index`."""
        return (index - self.first) // self.step

    def steps_of(self, task, index, ring) -> tuple:
        """(steps of this task, ring position of its first step); sets task.k0 under split-K."""
        if not self.per_task:
            return self.iters, let(self.local(index), "local") * self.iters
        total = self.user.iters(self.g, task) if self.t.per_task_iters else self.iters
        if self.t.scheduler.splits_k:
            first, end = SplitK.share(total, task.split, task.splits)
            task.k0 = let(first, "k0")
            total = end - task.k0
        with as_users(self.user.iters if self.t.per_task_iters else None):
            return let(total, "iters"), ring

    def cluster_steps(self, task, n):
        """The most steps of the tasks of `task`'s cluster (this block's `n` among them): the steps the producers
        load and each block's stages go through. `n` itself without per-task step counts."""
        t, blocks = self.t, self.t.cluster
        if blocks == 1 or not t.per_task_iters:
            return n
        most = n
        for peer in range(1, blocks):               # the band's other rows (or columns)
            row, col = task.row, task.col
            if t.cluster_along == "rows":
                row = row - row % blocks + (row + peer) % blocks
            else:
                col = col - col % blocks + (col + peer) % blocks
            other = Task(task.index, row, col, (task.rank + peer) % blocks, task.split, task.splits)
            most = call("max", most, self.user.iters(self.g, other))
        return let(most, "cluster_iters")

    def skip_steps(self, n, most, base) -> None:
        """The cluster's steps n .. most-1, past this block's task: their stages (filled by the peers' loads,
        with multicast, or by this block's own) are waited for and released in both rings, no compute."""
        if most is n:
            return
        for k in tk_range(n, most):
            it, s, phase = self.stage_of(base, k)
            tk.wait(element(self.arrived, s), phase)
            self.release(s)
            if self.t.late_inputs:
                self.release_late(it)

    def stage_of(self, base, k) -> tuple:
        it = let(base + k, "it")
        return it, let(it % self.t.stages, "stage"), let(it // self.t.stages % 2, "phase")

    def release(self, stage, semaphores=None) -> None:
        """This warp is done with `stage` (of the input ring, or of the ring whose `finished` semaphores are
        `semaphores`): tell every block of the cluster (they may refill it). The peers are told with a CTA-scope
        release, as the local arrive is: the warp only read the stage, so no cluster-scope release (a GPU-wide
        memory barrier per arrival) is needed."""
        finished = element(self.finished if semaphores is None else semaphores, stage)
        tk.arrive(finished)
        for peer in range(1, self.t.cluster):
            tk.cluster.arrive(finished, (self.rank + peer) % self.t.cluster, scope="cta")

    def stage(self, s) -> StageTiles:
        return StageTiles(self.arrays, self.t.inputs, s)

    # -- the roles ----------------------------------------------------------------------------------------------
    def producer(self) -> None:
        ring = var(0, "ring") if self.per_task else None             # steps of the tasks before this one
        # The finishes of this block's tasks the producer has waited for. A stage the finish block overlaps
        # may hold any earlier task's finish; the producer can run several tasks ahead (tasks of few steps),
        # and a wait by parity only tells the latest phase from the one before, so it waits for every earlier
        # finish in order.
        finishes = var(0, "finishes_waited") if self.t.finish_block else None
        for index in tk_range(self.first, self.groups, self.step):
            task = self.task_at(index)
            n, base = self.steps_of(task, index, ring)
            n = self.cluster_steps(task, n)
            for k in tk_range(n):
                it, s, phase = self.stage_of(base, k)
                with if_(it >= self.t.stages):
                    tk.wait(element(self.finished, s), 1 - phase)   # the stage's previous round was consumed
                if self.t.finish_block:
                    with if_(s >= self.t.first_aliased_stage):
                        local = self.local(index)
                        for done in tk_range(finishes, local):
                            tk.wait(self.finish_done, done % 2)
                        assign(finishes, local)
                self.user.load(self.g, task, self.stage(s), k, element(self.arrived, s))
                if self.t.late_inputs:
                    self.load_late(task, it, k)
            if self.per_task:
                ring += n                                # (the cluster's steps)

    def consumers(self) -> None:
        t, user, stages = self.t, self.user, self.t.stages
        st = Namespace()
        st.g = self.g                  # the kernel's parameters, for compute() and friends
        if t.task_inputs:
            t.task_inputs.declare(st)
        if self.step_ring:
            self.step_ring.attach(st)
        user.setup(st)
        if t.turns:
            st.turns = Turns(t.consumers)
            st.turn = st.turns.turn
            st.turns.begin()
        ring = var(0, "ring") if self.per_task else None
        for index in tk_range(self.first, self.groups, self.step):
            task = self.task_at(index)
            n, base = self.steps_of(task, index, ring)
            most = self.cluster_steps(task, n)
            st.task, st.iters = task, n
            st.next_task = lambda following=index + self.step: self.task_at(following)
            st.has_next_task = lambda following=index + self.step: following < self.groups
            tk.mark("task start")        # (timeline marks: tkpy/runtime/timeline.py; no code otherwise)
            if t.task_inputs:
                t.task_inputs.begin_task(st, task)
            if hasattr(user, "start"):
                user.start(st, task)
            with as_users(user.warpgroup_steps if t.skips else None):
                st.last_step = let(user.warpgroup_steps(st) - 1, "last_step") if t.skips else n - 1
            if t.late_inputs:
                self.late_steps(st, n, base)
                self.skip_steps(n, most, base)
                if self.per_task:
                    ring += most
                tk.mark("task finish")
                self.finish(st, task, index)
                continue
            for k in tk_range(n):
                it, s, phase = self.stage_of(base, k)
                tk.mark("step: wait for the stage")
                tk.wait(element(self.arrived, s), phase)
                tk.mark("step: stage arrived")
                body = current().blocks[-1]
                before = len(body)
                if t.uses_previous:        # released below, once this step's MMAs are done with it
                    self.compute(st, k, self.stage(s), self.stage(let((it + stages - 1) % stages, "previous")))
                else:
                    self.compute(st, k, self.stage(s))
                tk.mark("step: computed")
                # The commit groups step k surely makes: its MMAs outside runtime branches and loops (a
                # lower bound, so the wait below may wait longer than needed, never too little).
                groups = sum(1 for op in body[before:] if getattr(op, "name", None) == "wgmma")
                in_flight = bool(current().pending_wgmma)     # (the wait below may hide it from
                holds = (in_flight or t.uses_previous) and stages > 1   # the tracer, but runs only for k > 0)
                if not holds:
                    if in_flight:              # one stage: its MMAs must be done before it is refilled
                        tk.warpgroup.mma_async_wait()
                    self.release(s)
                    continue
                # Keep step k's MMAs in flight (and its inputs, which step k+1 sees as `prev`): with only
                # their `groups` commit groups pending, step k-1's have read their stage, now released.
                with if_(k > 0):
                    if in_flight:
                        tk.warpgroup.mma_async_wait(groups)
                    self.release((it - 1) % stages)
            if holds:
                if in_flight:
                    tk.warpgroup.mma_async_wait()
                if self.per_task:
                    with if_(n > 0):                    # a task of no steps has no last stage
                        self.release((base + n - 1) % stages)
                else:
                    self.release((base + n - 1) % stages)
            self.skip_steps(n, most, base)
            if self.per_task:
                ring += most
            tk.mark("task finish")
            self.finish(st, task, index)
        if t.turns:
            st.turns.end()
        if hasattr(user, "done"):
            user.done(st)
