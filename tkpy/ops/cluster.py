"""`tk.cluster`: blocks launched together as a cluster (@tk.kernel(cluster=...)) and what they share."""
from __future__ import annotations

from ..frontend.context import current
from ..ir.expr import Expr, Sym
from ..tiles.dtypes import i32
from ._checks import emit, fail, scalar
from .sync_async import semaphore_ref

CLUSTER_RANK = Sym("cluster_rank", i32)


def _require_cluster(what: str) -> None:
    if current().cluster is None:
        fail(f"{what} needs a kernel launched in clusters: @tk.kernel(..., cluster=(2, 1, 1))")


def rank() -> Expr:
    """This block's rank in its cluster (0 .. blocks per cluster - 1)."""
    _require_cluster("tk.cluster.rank()")
    return CLUSTER_RANK


def sync():
    """Barrier over every thread of every block in the cluster (also orders shared-memory accesses)."""
    _require_cluster("tk.cluster.sync()")
    return emit("cluster_sync")


SCOPES = ("cluster", "cta")


def arrive(sem, cta, count: int = 1, *, scope: str = "cluster"):
    """Arrive on semaphore `sem` of the block with cluster rank `cta` (once per calling warp).

    The arrival releases this warp's earlier memory accesses at `scope`: "cluster" (the default) makes
    its writes visible to the warps of block `cta` that wait on `sem` (e.g. data it stored into their
    shared memory); "cta" orders them as a local tk.arrive does, which is enough to hand back a buffer
    this warp has finished reading (a consumed input stage that a peer refills, as CUTLASS's and
    ThunderKittens' pipelines do) and saves the GPU-wide memory barrier (MEMBAR.ALL.GPU) that a
    cluster-scope release compiles to."""
    _require_cluster("tk.cluster.arrive()")
    if not isinstance(count, int) or count < 1:
        fail(f"cluster.arrive: count must be a positive int, got {count!r}")
    if scope not in SCOPES:
        fail(f"cluster.arrive: scope must be one of {SCOPES}, got {scope!r}")
    return emit("sem_arrive_remote", semaphore_ref(sem, "cluster.arrive"), scalar(cta, "cluster.arrive rank"),
                count=count, **({} if scope == "cluster" else dict(scope=scope)))
