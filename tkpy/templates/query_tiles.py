"""Query-tile tasks for attention-like LCF classes: a base class whose methods lay out the tasks and their steps.

A task is `groups` consumer warpgroups' 64 query rows each, of one column (e.g. a (batch, head) pair), and its
steps are key tiles of `kv` rows. The class derives from `QueryTiles.of(groups, kv, causal, cluster)` (cluster:
the template's); its queries are `g.Q`'s rows and its columns `g.Q.depth` (3-dim Q: columns,
rows, head dim), its keys `g.K`'s rows (override query_rows / key_rows / columns otherwise). It gets:

    tasks(g)               the query tiles, rounded up to whole clusters, and the columns
    unit(g, task, wg)      warpgroup wg's (default: the caller's) first query row / 64; causal: the padding of a
                           partial tile goes before row 0 (negative units), where rows see the fewest keys
    iters(g, task)         the key tiles some row of the task sees (causal, top-left: keys j <= query i)
    warpgroup_steps(st)    the caller's steps: none for padding rows; causal, none past its rows' diagonal

so the template's consumers skip a warpgroup's steps that its rows do not need (passing on its turn).
"""
from __future__ import annotations

from .. import ops as tk
from ..ir.expr import call, cdiv

ROWS = 64                     # query rows of a consumer warpgroup


class QueryTiles:
    groups, kv, causal, cluster = 2, 128, False, 1     # (no annotations: a template's are its parameters)

    @classmethod
    def of(cls, groups: int, kv: int, causal: bool = False, cluster: int = 1) -> type:
        """A base class of `groups` consumer warpgroups, key tiles of `kv` rows, causal or not, in clusters."""
        return type(cls.__name__, (cls,), dict(groups=groups, kv=kv, causal=causal, cluster=cluster))

    def query_rows(self, g):
        return g.Q.rows

    def key_rows(self, g):
        return g.K.rows

    def columns(self, g):
        return g.Q.depth

    def tasks(self, g):
        tiles = cdiv(self.query_rows(g), ROWS * self.groups)
        return cdiv(tiles, self.cluster) * self.cluster, self.columns(g)

    def unit(self, g, task, wg=None):
        padding = self.tasks(g)[0] * self.groups - cdiv(self.query_rows(g), ROWS) if self.causal else 0
        return task.row * self.groups + (tk.warpgroup.id() if wg is None else wg) - padding

    def iters(self, g, task):
        if not self.causal:
            return cdiv(self.key_rows(g), self.kv)
        last = call("min", self.unit(g, task, self.groups) * ROWS, self.query_rows(g))    # past the task's last row
        return cdiv(call("max", 0, last), self.kv)

    def warpgroup_steps(self, st):
        first_row = self.unit(st.g, st.task) * ROWS
        if self.causal:                                 # (padding rows are before row 0: they see no key)
            return call("min", st.iters, cdiv(call("max", 0, first_row + ROWS), self.kv))
        return call("max", 0, call("min", 1, self.query_rows(st.g) - first_row)) * st.iters
