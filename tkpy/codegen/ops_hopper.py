"""Code generators of the Hopper ops: semaphores, TMA, wgmma, fences, named barriers, setmaxnreg.

Single-issue ops (semaphore updates, TMA) run on lane 0 of the calling warp;
arrivals first __syncwarp so that the whole warp's work precedes them.
"""
from __future__ import annotations

from ..ir.expr import render
from .abi import tensor_map_name
from .debug import semaphore_index
from .emit import WARP_BARRIER, emits, operand, tile_coord

LANE0 = "if (laneid == 0) "


@emits("sem_init")
def emit_sem_init(em, op):
    yield f"{LANE0}tk::init_semaphore({operand(op.args[0])}, {op.attrs['arrivals']});"
    if em.k.cluster:
        yield f"{LANE0}tk::fence_semaphore_init();  // visible to the cluster's async proxy"


@emits("sem_arrive_remote")
def emit_sem_arrive_remote(em, op):
    sem, cta = op.args
    fn = "arrive_remote_cta" if op.attrs.get("scope") == "cta" else "arrive_remote"    # the release's scope
    yield WARP_BARRIER
    yield f"{LANE0}tk::{fn}({operand(sem)}, {render(cta)}, {op.attrs['count']});"


@emits("cluster_sync")
def emit_cluster_sync(em, op):
    if em.debug is not None:   # debug mode (codegen/debug.py): two mbarriers a block, bounded
        yield f"tk::debug::cluster_sync(tkpy_debug_cluster, tkpy_debug_cluster_syncs, {em.debug.site(op).index});"
        return
    yield "tk::cluster_sync();"


@emits("sem_arrive")
def emit_sem_arrive(em, op):
    yield WARP_BARRIER
    yield f"{LANE0}tk::arrive({operand(op.args[0])}, {op.attrs['count']});"


@emits("sem_expect")
def emit_sem_expect(em, op):
    sem, nbytes = op.args
    yield f"{LANE0}tk::expect_bytes({operand(sem)}, {render(nbytes)});"


@emits("sem_wait")
def emit_sem_wait(em, op):
    sem, phase = op.args
    if em.debug is not None:   # debug mode (codegen/debug.py): bounded, reporting its site
        yield (f"tk::debug::wait({operand(sem)}, {render(phase)}, {em.debug.site(op).index}, "
               f"{semaphore_index(op)});")
        return
    yield f"tk::wait({operand(sem)}, {render(phase)});"


@emits("tma_load")
def emit_tma_load(em, op):
    tile, g, coord, sem = op.args[:4]
    where = f"{operand(tile)}, &{tensor_map_name(g, tile.type)}, {tile_coord(tile, coord)}, {operand(sem)}"
    if len(op.args) == 5:
        yield f"{LANE0}tk::tma::load_async_multicast({where}, {render(op.args[4])});"
    else:
        yield f"{LANE0}tk::tma::load_async({where});"


@emits("tma_store")
def emit_tma_store(em, op):
    g, tile, coord = op.args
    add = "true" if op.attrs["add"] else "false"
    yield (f"{LANE0}tk::tma::store_async<{add}>(&{tensor_map_name(g, tile.type)}, {operand(tile)}, "
           f"{tile_coord(tile, coord)});")


@emits("tma_prefetch")
def emit_tma_prefetch(em, op):
    tile, g, coord = op.args
    yield f"{LANE0}tk::tma::prefetch({operand(tile)}, &{tensor_map_name(g, tile.type)}, {tile_coord(tile, coord)});"


@emits("tma_store_commit")
def emit_tma_store_commit(em, op):
    yield f"{LANE0}tk::tma::store_commit_group();"


@emits("tma_store_wait")
def emit_tma_store_wait(em, op):
    fn = "store_async_read_wait" if op.attrs["read_only"] else "store_async_wait"
    yield f"{LANE0}tk::tma::{fn}<{op.attrs['pending']}>();"
    yield WARP_BARRIER


WGMMA_NAMES = {(False, True): "AB", (False, False): "ABt", (True, True): "AtB", (True, False): "AtBt"}


@emits("wgmma")
def emit_wgmma(em, op):
    d, a, b = op.args
    name = ("mma_" if op.attrs["accumulate"] else "mm_") + WGMMA_NAMES[(op.attrs["trans_a"], op.attrs["trans_b"])]
    if em.debug is not None:   # debug mode: the warpgroup meets first (bounded), so that its wgmma waits cannot hang
        yield (f"tk::debug::meet(&tkpy_debug_warpgroups[warpid / 4], {em.debug.site(op).index}, warpid / 4);"
               f"  // the warpgroup's 4 warps issue this wgmma")
    yield f"tk::warpgroup::{name}({operand(d)}, {operand(a)}, {operand(b)});"


@emits("wgmma_wait")
def emit_wgmma_wait(em, op):
    yield f"tk::wgmma_wait<{op.attrs['pending']}>();"
    for acc in op.args:      # the accumulators it retires (fencing one a wgmma still writes would copy it mid-flight)
        yield f"tk::register_fence({operand(acc)});"


@emits("fence_proxy_async")
def emit_fence_proxy_async(em, op):
    yield "tk::fence_proxy_async();"


def _debug_named(em) -> bool:
    """Debug mode with the kernel's named barriers as mbarriers (codegen/debug.py)."""
    return em.debug is not None and em.debug.named is not None


@emits("named_sync")
def emit_named_sync(em, op):
    if _debug_named(em):
        yield f"tk::debug::meet(&tkpy_debug_named[{render(op.args[0])}], {em.debug.site(op).index}, {render(op.args[0])});"
        return
    yield f"tk::named_sync({render(op.args[0])}, {op.attrs['threads']});"


@emits("named_arrive")
def emit_named_arrive(em, op):
    if _debug_named(em):
        yield f"tk::debug::named_arrive(&tkpy_debug_named[{render(op.args[0])}]);"
        return
    yield f"tk::named_arrive({render(op.args[0])}, {op.attrs['threads']});"


@emits("warpgroup_any")
def emit_warpgroup_any(em, op):
    result, condition, barrier = op.args
    if _debug_named(em):
        b = render(barrier)
        yield (f"{result.name} = tk::debug::named_any({render(condition)}, &tkpy_debug_named[{b}], {b}, "
               f"{op.attrs['threads']}, {em.debug.site(op).index});")
        return
    yield f"{result.name} = tk::named_any({render(condition)}, {render(barrier)}, {op.attrs['threads']});"


@emits("threadfence")
def emit_threadfence(em, op):
    yield "tk::threadfence();"


@emits("atomic_add")
def emit_atomic_add(em, op):
    result, g, *coord, value = op.args
    yield f"{result.name} = tk::warp_atomic_add({g.name}.at({', '.join(render(c) for c in coord)}), {render(value)});"


@emits("warpgroup_any_greater")
def emit_warpgroup_any_greater(em, op):
    result, vec, threshold, barrier = op.args
    if _debug_named(em):
        b = render(barrier)
        yield (f"{result.name} = tk::debug::named_any(tk::any_greater({operand(vec)}, {render(threshold)}), "
               f"&tkpy_debug_named[{b}], {b}, {op.attrs['threads']}, {em.debug.site(op).index});")
        return
    yield (f"{result.name} = tk::named_any(tk::any_greater({operand(vec)}, {render(threshold)}), {render(barrier)}, "
           f"{op.attrs['threads']});")


@emits("setmaxnreg")
def emit_setmaxnreg(em, op):
    fn = "increase_registers" if op.attrs["increase"] else "decrease_registers"
    yield f"tk::{fn}<{op.attrs['registers']}>();"
