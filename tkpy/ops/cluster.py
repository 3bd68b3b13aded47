"""`tk.cluster`: blocks launched together as a cluster (@tk.kernel(cluster=...)) and what they share."""
from __future__ import annotations

from ..frontend.context import current
from ..frontend.control import CLUSTER_RANK
from ..ir.expr import Expr
from ._checks import emit, fail, scalar
from .scalar_memory import store_scalar_remote
from .sync_async import semaphore_ref
from .vector_reduce import group_reduce, merge_softmax as _merge_softmax, merge_variance as _merge_variance



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


def store(dst, value, index, rank=None, sem=None):
    """Element `index` of the f32 shared vector `dst` in the block of cluster rank `rank` (None: every block of the
    cluster) = value (a runtime scalar), through distributed shared memory: made visible to the other blocks' warps
    by a tk.cluster.sync(), or (with a semaphore `sem`) asynchronous, its 4 bytes completing on the target block's
    `sem` (see tkpy/ops/scalar_memory.py)."""
    _require_cluster("tk.cluster.store()")
    return store_scalar_remote(dst, value, index, rank, sem)


def sum(*vectors, warps: int | None = None, name: str = "sum"):  # noqa: A001 - tk.cluster.sum, as tk.sum
    """The sum of every element of each register vector over warps w, w + 1, ..., w + warps - 1 (w a multiple of
    `warps`; default every warp) of every block of the cluster: a float runtime scalar per vector, the same in each
    of those warps (e.g. a row split over the cluster's blocks, `warps` warps a block; a float scalar instead of a
    vector is its warp's partial). Every warp of every block
    calls it: each warp's partial goes into every block's scratch (distributed shared memory) and the cluster
    barrier meets them (tkpy/ops/vector_reduce.py)."""
    return group_reduce("sum", vectors, "cluster", warps, name)


def amax(*vectors, warps: int | None = None, name: str = "max"):
    """The largest element of each vector over the cluster's groups of warps (see tk.cluster.sum)."""
    return group_reduce("max", vectors, "cluster", warps, name)


def amin(*vectors, warps: int | None = None, name: str = "min"):
    """The smallest element of each vector over the cluster's groups of warps (see tk.cluster.sum)."""
    return group_reduce("min", vectors, "cluster", warps, name)


def merge_softmax(m, s, *sums, warps: int | None = None, name: str = "softmax"):
    """The softmax statistics (the max M and the sum of exp(x - M)) of a row split over the cluster's groups of warps
    (see tk.cluster.sum), from each warp's max m and sum s of exp(x - m), and up to two more sums, in one exchange
    (see tk.block.merge_softmax)."""
    return _merge_softmax(m, s, "cluster", warps, name, sums)


def merge_variance(total, centered, count, *, warps: int | None = None, name: str = "moments"):
    """The mean and M2 (the sum of squared deviations from it) of a row split over the cluster's groups of warps
    (see tk.cluster.sum), from each warp's sum, centred sum of squares and count, in one exchange (see
    tk.block.merge_variance)."""
    return _merge_variance(total, centered, count, "cluster", warps, name)
