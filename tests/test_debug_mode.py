"""Debug mode for the GPU (tkpy/runtime/debug.py, tkpy/codegen/debug.py): with TKPY_DEBUG=1 or tk.kernel(debug=True)
every semaphore wait, tk.sync(), named barrier, warpgroup vote, cluster barrier and wgmma is bounded; a wait that
times out records itself in mapped host memory, prints a line and traps, and the launch raises tk.GpuTimeoutError
naming the wait and its Python line.

On the CPU: the debug build's C++ (the bounded waits, their sites' Python lines, the timeout) compiles for sm_90a
without spills; the normal build is byte-identical to the golden sources under tests/golden/ (taken before debug
mode existed) whether TKPY_DEBUG is unset, 0, or overridden by debug=False, and so is its SASS; debug and normal
builds never share a specialization; the host's error messages. On the GPU (each case in a fresh process, since a
trap leaves the CUDA context unusable): the issue's deadlock (one semaphore whose only arrive sits in a branch no
block takes) raises within 10 s naming `tk.wait(sem, 0)` and its line; a named barrier, a tk.sync() in a branch and
half a warpgroup's wgmma are named likewise; the golden kernels and the repo's GEMM and attention compute the same
results in debug mode; a kernel stuck where debug mode cannot bound it (setmaxnreg) is reported by the host.

    python -m pytest -q tests/test_debug_mode.py                    # CPU and (on a Hopper GPU) GPU tests
    TKPY_REGEN_GOLDEN=1 python -m pytest -q tests/test_debug_mode.py -k golden   # rewrite tests/golden/ (on purpose)
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time
import types
import warnings

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.codegen.debug import plan_for
from tkpy.runtime import debug as debug_mode

import debug_golden_kernels as golden
from gpu_util import on_gpu
from test_trace_codegen import line_of

TESTS = pathlib.Path(__file__).resolve().parent
GOLDEN_DIR = TESTS / "golden"
SWITCHES = ("TKPY_DEBUG", "TKPY_DEBUG_TIMEOUT_S", "TKPY_DEBUG_PRINTF", "TKPY_DEBUG_KERNEL_TIMEOUT_S",
            "TKPY_DEPENDENT_LAUNCH", "TKPY_TIMELINE")


@pytest.fixture
def plain_env(monkeypatch):
    """No tkpy switch set (the goldens were generated so)."""
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# -- kernels ------------------------------------------------------------------------------------------------------
@tk.kernel(warps=4, name="never_signalled")
def never_signalled(x: tk.gl[f32, 16, 16]):
    """The issue's deadlock: the semaphore's only arrive sits in a branch that no block of a 1-block grid takes."""
    sem = tk.semaphore()
    with tk.if_(tk.warp_id() == 0):
        tk.init_semaphore(sem, 1)
    tk.sync()
    with tk.if_((tk.warp_id() == 0) & (tk.block_idx.x == 7)):
        tk.arrive(sem)
    tk.wait(sem, 0)


@tk.kernel(warps=8, name="half_named_barrier")
def half_named_barrier(x: tk.gl[f32, 16, 16]):
    with tk.if_(tk.warp_id() < 4):
        tk.named_sync(1, 8)                  # only 4 of the 8 warps come


@tk.kernel(warps=4, name="sync_in_a_branch")
def sync_in_a_branch(x: tk.gl[f32, 16, 16]):
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (0, 0))
    with tk.if_(tk.warp_id() == 0):
        tk.sync()                            # warps 1-3 never get here
    tk.store(x, t, (0, 0))


@tk.kernel(warps=4, name="half_warpgroup_mma")
def half_warpgroup_mma(x: tk.gl[f32, 16, 16]):
    s = tk.st(bf16, 64, 64)
    acc = tk.rt(f32, 16, 64)
    ones = tk.rt(bf16, 16, 64)
    tk.one(ones)
    tk.store(s.subtile(16, 64, (tk.warp_id(), 0)), ones)
    tk.fence_proxy_async()
    tk.sync()
    with tk.if_(tk.warp_id() < 2):
        tk.warpgroup.mm_AB(acc, s, s)        # a warpgroup collective that half the warpgroup issues
        tk.warpgroup.mma_async_wait()


@tk.kernel(warps=12, name="greedy_consumers")
def greedy_consumers(x: tk.gl[f32, 16, 16]):
    with tk.if_(tk.warpgroup_id() > 0):
        tk.consumer_registers(232)           # the producer warpgroup never releases any: setmaxnreg blocks


@tk.kernel(warps=8, name="mixed_counts")
def mixed_counts(x: tk.gl[f32, 16, 16]):
    tk.named_sync(1, 8)
    with tk.if_(tk.warp_id() < 4):
        tk.named_sync(1, 4)                  # barrier 1 with another warp count: stays in hardware


@tk.kernel(warps=12, name="ranged_ids")
def ranged_ids(x: tk.gl[f32, 16, 16]):
    tk.warpgroup.sync(4 + tk.warpgroup.id())     # ids 4..6, 4 warps each
    tk.named_sync(2, 12)


@tk.kernel(warps=1, name="reads_past_the_end")
def reads_past_the_end(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
    """Block b copies rows 16b..16b+15: on a 2-block grid over 16 rows, block 1 reads past the end of x."""
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (tk.block_idx.x, 0))
    tk.store(y, t, (tk.block_idx.x, 0))


@tk.kernel(warps=4, name="stage_past_the_ring")
def stage_past_the_ring(x: tk.gl[f32, 64, 32], stage: int):
    """An index into an array of 2 shared tiles, and a window of one, at run-time values the host chooses."""
    ring = tk.st(f32, 64, 32, count=2)
    t = tk.rt(f32, 16, 32)
    tk.load(ring[stage], x, (0, 0), scope="block")
    tk.sync()
    tk.load(t, ring[0].subtile(16, 32, (stage, 0)))
    tk.store(x, t, (0, 0))


X = torch.zeros(16, 16)


def debug_build(kernel, *args, monkeypatch, timeout="2"):
    monkeypatch.setenv("TKPY_DEBUG", "1")
    monkeypatch.setenv("TKPY_DEBUG_TIMEOUT_S", timeout)
    return kernel.source(*args)


# -- the debug build ----------------------------------------------------------------------------------------------
def test_the_debug_build_bounds_the_wait_and_names_its_line(plain_env):
    src = debug_build(never_signalled, X, monkeypatch=plain_env)
    wait_line, sync_line = line_of(never_signalled.fn, "tk.wait(sem, 0)"), line_of(never_signalled.fn, "tk.sync()")
    body = src[src.index('extern "C" __global__'):]
    assert "tk::debug::wait(sem, 0, 1, 0);" in body and "tk::wait(" not in body
    assert "tk::debug::meet(&tkpy_debug_block, 0, 0);" in body and "__syncthreads();  // (hardware" in body
    assert ('/* site 1: semaphore */ "tkpy debug: kernel never_signalled, block (%u, %u, %u), warp %u: wait timed out '
            f'at test_debug_mode.py:{wait_line} `tk.wait(sem, 0)` on semaphore sem%.0d, phase parity %d after %u ms\\n"'
            ) in src
    assert f"test_debug_mode.py:{sync_line} `tk.sync()` on tk.sync() of all 4 warps" in src
    assert "constexpr u64 timeout_ns = 2000000000ull;" in src
    assert 'extern "C" __device__ int vprintf(const char*, const char*);' in src
    assert "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64" in src and "%%globaltimer" in src
    assert "__trap();" in src and "__threadfence_system();" in src
    sites = debug_mode.sites(never_signalled, X)
    assert [(s.kind, s.loc.line) for s in sites] == [("block barrier", sync_line), ("semaphore", wait_line)]


def test_every_kind_of_wait_has_its_bounded_form(plain_env):
    plain_env.setenv("TKPY_DEBUG", "1")
    k, args = golden.producer_consumer()
    src = k.source(*args)
    body = src[src.index('extern "C" __global__'):]
    assert "tk::debug::wait(&empty[stage], (i0 / 2 - 1) % 2, 1, stage);" in body
    assert "tk::debug::wait(&full[stage_1], kk / 2 % 2, 2, stage_1);" in body
    assert ("tk::debug::meet(&tkpy_debug_warpgroups[warpid / 4], 3, warpid / 4);" in body
            and body.index("tkpy_debug_warpgroups[warpid / 4], 3") < body.index("tk::warpgroup::mma_AB("))
    assert "tk::debug::meet(&tkpy_debug_named[1], 4, 1);" in body
    assert "tk::debug::named_arrive(&tkpy_debug_named[2]);" in body
    assert "seen = tk::debug::named_any(warpid == 0, &tkpy_debug_named[3], 3, 128, 5);" in body
    assert "constexpr unsigned int named_warps[16] = {1, 4, 4, 4, 1," in body
    assert "bar.sync" not in body and "tk::named_sync(" not in body and "tk::named_arrive(" not in body
    assert "constexpr bool print = false;" in src          # a wgmma kernel: no call, so ptxas keeps wgmma async
    k, args = golden.cluster_multicast()
    src = k.source(*args)
    body = src[src.index('extern "C" __global__'):]
    assert body.count("tk::debug::cluster_sync(tkpy_debug_cluster, tkpy_debug_cluster_syncs, ") == 2
    assert "tk::init_semaphore(&tkpy_debug_cluster[i], 2);" in body and "tk::fence_semaphore_init();  // visible to the cluster\n" in body
    assert "tk::cluster_sync();  // (hardware: every thread of the cluster is here)" in body
    assert "constexpr bool print = true;" in src


@pytest.mark.parametrize("name", sorted(golden.GOLDEN))
def test_debug_builds_compile_for_sm90a_without_spills(plain_env, name):
    plain_env.setenv("TKPY_DEBUG", "1")
    k, args = golden.GOLDEN[name]()
    res = k.resources(*args)
    assert res.found and res.spill_stores == 0 and res.spill_loads == 0, res
    assert not [w for w in res.warnings if "C7510" in w], res.warnings      # wgmma not serialized by a call
    assert "sm_90a" in k.ptx(*args) or ".target sm_90a" in k.ptx(*args)
    sass = k.sass(*args)
    assert "BPT.TRAP" in sass or "TRAP" in sass


def test_the_repos_kernels_compile_in_debug_mode_without_spills(plain_env):
    """The warp-specialized GEMM (TMA, semaphores, wgmma, named barriers) and the attention forward kernel."""
    plain_env.setenv("TKPY_DEBUG", "1")
    from tkpy.kernels.gemm_ws import gemm_ws
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 512, dtype=torch.bfloat16)
    c = torch.empty(256, 512, dtype=torch.bfloat16)
    gemm_ws.debug = True            # (its specializations of the normal build stay cached beside it)
    try:
        res = gemm_ws.resources(a, b, c)
        assert res.spill_stores == 0 and not [w for w in res.warnings if "C7510" in w], res
        assert "HGMMA.64x256x16.F32.BF16" in gemm_ws.sass(a, b, c)
    finally:
        gemm_ws.debug = None


def test_the_timeout_and_the_printf_switch_are_baked_in(plain_env):
    src = debug_build(never_signalled, X, monkeypatch=plain_env, timeout="0.25")
    assert "constexpr u64 timeout_ns = 250000000ull;" in src and "constexpr bool print = true;" in src
    plain_env.setenv("TKPY_DEBUG_PRINTF", "0")
    assert "constexpr bool print = false;" in never_signalled.source(X)
    plain_env.setenv("TKPY_DEBUG_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="TKPY_DEBUG_TIMEOUT_S must be a number of seconds"):
        never_signalled.source(X)


def test_named_barriers_that_cannot_be_mbarriers_stay_in_hardware_and_are_listed(plain_env):
    src = debug_build(mixed_counts, X, monkeypatch=plain_env)
    body = src[src.index('extern "C" __global__'):]
    assert "tk::named_sync(1, 256);" in body and "tk::named_sync(1, 128);" in body
    plan = plan_for(mixed_counts.trace(X).ir)
    assert plan.named is None and not plan.sites
    assert [u.op.loc.line for u in plan.unbounded] == [line_of(mixed_counts.fn, "tk.named_sync(1, 8)"),
                                                      line_of(mixed_counts.fn, "tk.named_sync(1, 4)")]
    assert "named barrier 1 is used with 8 and 4 warps" in plan.unbounded[0].why
    plan = plan_for(greedy_consumers.trace(X).ir)
    assert [u.why.split()[0] for u in plan.unbounded] == ["setmaxnreg.inc"]


def test_run_time_barrier_ids_take_the_counts_of_the_ids_they_can_name(plain_env):
    plan = plan_for(ranged_ids.trace(X).ir)
    assert plan.named == {4: 4, 5: 4, 6: 4, 2: 12} and not plan.unbounded
    src = debug_build(ranged_ids, X, monkeypatch=plain_env)
    assert "named_warps[16] = {1, 1, 12, 1, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1};" in src
    assert "tk::debug::meet(&tkpy_debug_named[4 + warpid / 4], 0, 4 + warpid / 4);" in src
    from test_named_arrive import take_turns_by_id       # ids from a run-time parameter: any id, all with 2 warps
    plan = plan_for(take_turns_by_id.trace(X, 5, 3).ir)
    assert plan.named == {i: 2 for i in range(16)}


# -- the normal build is unchanged --------------------------------------------------------------------------------
def golden_text(src: str) -> str:
    """What a golden file holds of a source: the sha256 of the whole (the prelude included) and the kernel after
    the prelude verbatim, so that a change shows as a readable diff of the kernel, or as a changed prelude hash."""
    kernel = src.split(PRELUDE_END, 1)[1]
    return f"// sha256 of the whole source: {hashlib.sha256(src.encode()).hexdigest()}\n{PRELUDE_END}{kernel}"


PRELUDE_END = "// ---- end of prelude ----"


@pytest.mark.parametrize("name", sorted(golden.GOLDEN))
@pytest.mark.parametrize("how", ["unset", "TKPY_DEBUG=0", "debug=False"])
def test_the_normal_build_is_byte_identical_to_the_golden_source(plain_env, name, how):
    path = GOLDEN_DIR / f"{name}.cu"
    k, args = golden.GOLDEN[name]()
    if how == "TKPY_DEBUG=0":
        plain_env.setenv("TKPY_DEBUG", "0")
    elif how == "debug=False":
        plain_env.setenv("TKPY_DEBUG", "1")        # the kernel's option wins over the environment
        k.debug = False
    src = k.source(*args)
    if os.environ.get("TKPY_REGEN_GOLDEN") == "1" and how == "unset":
        path.write_text(golden_text(src))
    assert golden_text(src) == path.read_text(), f"the normal build of {name} changed: diff it against {path}"
    assert "tk::debug::" not in src and "tkpy_debug" not in src and "vprintf" not in src


@pytest.mark.parametrize("name", sorted(golden.GOLDEN))
def test_the_normal_builds_sass_does_not_depend_on_the_switch(plain_env, name):
    k, args = golden.GOLDEN[name]()
    unset = k.sass(*args)
    k2, args = golden.GOLDEN[name]()
    k2.debug = False
    plain_env.setenv("TKPY_DEBUG", "1")
    assert k2.sass(*args) == unset
    plain_env.setenv("TKPY_DEBUG", "0")
    k3, args = golden.GOLDEN[name]()
    assert k3.sass(*args) == unset


def test_debug_and_normal_builds_have_their_own_specializations(plain_env):
    k, args = golden.softmax()
    normal = k.source(*args)
    plain_env.setenv("TKPY_DEBUG", "1")
    debug = k.source(*args)
    plain_env.setenv("TKPY_DEBUG_TIMEOUT_S", "1")
    debug_1s = k.source(*args)
    plain_env.delenv("TKPY_DEBUG")
    assert k.source(*args) == normal
    assert normal != debug != debug_1s and "tk::debug::meet(&tkpy_debug_block" in debug
    assert len(k._compiled) == 3
    keys = {key[2] for key in k._compiled}
    assert keys == {None, debug_mode.Settings(4_000_000_000), debug_mode.Settings(1_000_000_000)}
    assert k.trace(*args).ir.debug is None


# -- the host's reports (no GPU: a record filled by hand) ---------------------------------------------------------
class FakeRecord:
    def __init__(self, entries, bounds=()):
        self._entries, self._bounds = entries, list(bounds)

    def entries(self):
        return self._entries

    def bounds_entries(self):
        return self._bounds


def compiled_for(kernel, *args):
    return types.SimpleNamespace(lowered=types.SimpleNamespace(traced=kernel.trace(*args)))


def test_a_recorded_timeout_becomes_an_error_naming_the_wait_like_the_interpreters(plain_env):
    plain_env.setenv("TKPY_DEBUG", "1")
    plain_env.setenv("TKPY_DEBUG_TIMEOUT_S", "2")
    compiled = compiled_for(never_signalled, X)
    fault = types.SimpleNamespace(name="CUDA_ERROR_ILLEGAL_INSTRUCTION")
    record = FakeRecord([(1, (0, 0, 0), w, 0, 0, 2_000_400_000 + w) for w in (2, 0, 1, 3)])
    err = debug_mode._timeout_error(compiled, record, fault)
    assert isinstance(err, tk.GpuTimeoutError) and isinstance(err, tk.TkpyError)
    line = line_of(never_signalled.fn, "tk.wait(sem, 0)")
    text = str(err)
    assert text.startswith("a wait timed out on the GPU (debug mode: TKPY_DEBUG_TIMEOUT_S=2) in block (0, 0, 0) of "
                           "kernel never_signalled:\n")
    assert (f"  warp 2 waits at test_debug_mode.py:{line} `tk.wait(sem, 0)`\n"
            f"    on semaphore `sem` of block (0, 0, 0), waiting for its phase with parity 0 to complete: not done "
            f"after 2.0 s") in text
    assert "3 more warp(s) timed out too: block (0, 0, 0) warp 0 at test_debug_mode.py" in text
    assert "CUDA_ERROR_ILLEGAL_INSTRUCTION" in text and "end the process" in text
    assert (err.kernel, err.block, err.warp, err.loc.line, err.phase) == ("never_signalled", (0, 0, 0), 2, line, 0)
    # the interpreter names the same wait the same way
    with pytest.raises(tk.DeadlockError) as e:
        never_signalled.interpret[(1,)](X.clone())
    assert f"warp 0 waits at test_debug_mode.py:{line} `tk.wait(sem, 0)`\n    on semaphore `sem` of block (0, 0, 0)" \
        in str(e.value)
    assert debug_mode._timeout_error(compiled, FakeRecord([]), fault) is None


def test_the_debug_build_checks_its_accesses_before_making_them(plain_env):
    src = debug_build(reads_past_the_end, X, X, monkeypatch=plain_env)
    body = src[src.index("// kernel reads_past_the_end"):]
    assert ("    tk::debug::check_tile(x, 0, 0, block_x * 16, 0, 16, 16, false, 0);\n"
            "    tk::load(t, x, 0, 0, block_x * 16, 0);\n") in body
    assert "tk::debug::check_tile(y, 0, 0, block_x * 16, 0, 16, 16, false, 1);\n    tk::store(y, t," in body
    line = line_of(reads_past_the_end.fn, "tk.load(t, x")
    assert (f'/* check 0 */ "tkpy debug: kernel reads_past_the_end, block (%u, %u, %u), warp %u: out-of-bounds access '
            f'at test_debug_mode.py:{line} `tk.load(t, x, (tk.block_idx.x, 0))`, the 16 x 16 tile of `x`: %s '
            f'%lld..%lld, outside [0, %lld)\\n",') in src
    ring = debug_build(stage_past_the_ring, torch.zeros(64, 32), 1, monkeypatch=plain_env)
    body = ring[ring.index("// kernel stage_past_the_ring"):]
    assert "tk::debug::check_tile(x, 0, 0, 0, 0, 64, 32, false, 0);\n    tk::debug::check_index(stage, 2, 0, 5);" in body
    assert "tk::debug::check_index(stage, 4, 1, 2);" in body           # the window: 16-row band 0..3 of 64 rows
    plan = plan_for(stage_past_the_ring.trace(torch.zeros(64, 32), 1).ir)
    assert [(c.what, c.arrays) for c in plan.checks] == [
        ("the 64 x 32 tile of `x`", (("ring", 2),)),
        ("the 16 x 32 window of `ring` (64 x 32), in units of windows", ()),
        ("the 16 x 32 tile of `x`", ())]
    plain_env.delenv("TKPY_DEBUG")
    assert "tk::debug" not in stage_past_the_ring.source(torch.zeros(64, 32), 1)      # the normal build


def test_a_failed_bounds_check_becomes_an_error_naming_the_access(plain_env):
    plain_env.setenv("TKPY_DEBUG", "1")
    compiled = compiled_for(reads_past_the_end, X, X)
    fault = types.SimpleNamespace(name="CUDA_ERROR_ILLEGAL_INSTRUCTION")
    record = FakeRecord([], [(0, (1, 0, 0), 0, 2, 16, 31, 16)])
    err = debug_mode._bounds_error(compiled, record, fault)
    assert isinstance(err, tk.GpuBoundsError) and isinstance(err, tk.TkpyError)
    line = line_of(reads_past_the_end.fn, "tk.load(t, x")
    assert str(err) == (
        "an out-of-bounds access on the GPU (debug mode) in block (1, 0, 0) of kernel reads_past_the_end:\n"
        f"  warp 0 at test_debug_mode.py:{line} `tk.load(t, x, (tk.block_idx.x, 0))`\n"
        "    the 16 x 16 tile of `x`: row indices 16..31, outside [0, 16)\n"
        "The kernel stopped with __trap() (CUDA_ERROR_ILLEGAL_INSTRUCTION) before the access; the CUDA context "
        "cannot be used again: end the process.")
    assert (err.block, err.warp, err.loc.line, err.axis, err.first, err.last, err.limit) == \
        ((1, 0, 0), 0, line, 2, 16, 31, 16)
    assert debug_mode._bounds_error(compiled, FakeRecord([]), fault) is None
    compiled = compiled_for(stage_past_the_ring, torch.zeros(64, 32), 1)
    err = debug_mode._bounds_error(compiled, FakeRecord([], [(0, (0, 0, 0), 2, 5, 2, 2, 2)]), fault)
    assert "    index 2 into `ring`, an array of 2, outside [0, 2)\n" in str(err)


def test_reports_of_other_barriers(plain_env):
    plain_env.setenv("TKPY_DEBUG", "1")
    fault = types.SimpleNamespace(name="CUDA_ERROR_ILLEGAL_INSTRUCTION")
    cases = [(half_named_barrier, "tk.named_sync(1, 8)", (0, (0, 0, 0), 3, 1, 0, 4_100_000_000),
              "on named barrier 1: waiting for 8 warps to arrive"),
             (sync_in_a_branch, "tk.sync()", (0, (0, 0, 0), 0, 0, 0, 4_100_000_000),
              "on __syncthreads (tk.sync()): waiting for all 4 warps of block (0, 0, 0) to arrive"),
             (half_warpgroup_mma, "tk.warpgroup.mm_AB(acc, s, s)", (1, (0, 0, 0), 1, 0, 0, 4_100_000_000),
              "on the warpgroup MMA (warpgroup 0): every warp of the warpgroup must issue it")]
    for kernel, text, entry, wanted in cases:
        err = debug_mode._timeout_error(compiled_for(kernel, X), FakeRecord([entry]), fault)
        assert f"waits at test_debug_mode.py:{line_of(kernel.fn, text)} `{text}" in str(err), str(err)
        assert wanted in str(err)
    err = debug_mode._timeout_error(compiled_for(sync_in_a_branch, X), FakeRecord([cases[1][2]]), fault)
    assert f", inside the branch at test_debug_mode.py:{line_of(sync_in_a_branch.fn, 'with tk.if_')}" in str(err)


class FakeReady:
    """A loaded specialization whose launch "traps": launch_once is fine, the stream's sync fails."""

    def __init__(self):
        self.loaded = object()
        self.entry = (None, None, lambda device: 0x1234, 0, None, types.SimpleNamespace(kernel=self.loaded), ())
        self.launches = 0

    def launch_once(self, grid, args, slots, kernel):
        self.launches += 1


def test_a_debug_launch_waits_for_its_stream_and_explains_its_failure(plain_env):
    from tkpy.runtime import driver
    from tkpy.runtime.errors import DriverError

    plain_env.setenv("TKPY_DEBUG", "1")
    plain_env.setenv("TKPY_DEBUG_TIMEOUT_S", "2")
    compiled, ready = compiled_for(never_signalled, X), FakeReady()
    record = FakeRecord([(1, (0, 0, 0), 3, 0, 0, 2_000_000_000)])
    record.clear = lambda: setattr(record, "cleared", True)
    plain_env.setitem(debug_mode._records, ready.loaded, record)
    plain_env.setattr(driver, "stream_is_capturing", lambda stream, device: False)
    waited = []

    def trapped(stream, limit, device):
        waited.append((stream, limit, device))
        raise DriverError("cuStreamQuery: CUDA_ERROR_ILLEGAL_INSTRUCTION (715)", code=715,
                          name="CUDA_ERROR_ILLEGAL_INSTRUCTION")
    plain_env.setattr(driver, "synchronize_stream", trapped)
    with pytest.raises(tk.GpuTimeoutError, match=r"warp 3 waits at test_debug_mode.py:\d+ `tk.wait\(sem, 0\)`") as e:
        debug_mode.launch(ready, (1, 1, 1), (X,), [], never_signalled, compiled)
    assert isinstance(e.value.__cause__, DriverError) and record.cleared and ready.launches == 1
    assert waited == [(0x1234, 30.0, 0)]
    record._entries = []                         # a failure no wait explains: the driver's error as it is
    with pytest.raises(DriverError, match="ILLEGAL_INSTRUCTION"):
        debug_mode.launch(ready, (1, 1, 1), (X,), [], never_signalled, compiled)
    plain_env.setattr(driver, "synchronize_stream", lambda stream, limit, device: False)
    with pytest.raises(tk.GpuTimeoutError, match="did not finish within 30 s"):
        debug_mode.launch(ready, (1, 1, 1), (X,), [], never_signalled, compiled)
    plain_env.setattr(driver, "synchronize_stream", lambda stream, limit, device: True)
    debug_mode.launch(ready, (1, 1, 1), (X,), [], never_signalled, compiled)
    plain_env.setattr(driver, "stream_is_capturing", lambda stream, device: True)
    plain_env.setattr(driver, "synchronize_stream", trapped)       # not called while capturing into a graph
    debug_mode.launch(ready, (1, 1, 1), (X,), [], never_signalled, compiled)
    assert ready.launches == 5


def test_a_kernel_past_the_hosts_limit_lists_its_unbounded_waits(plain_env):
    plain_env.setenv("TKPY_DEBUG", "1")
    err = debug_mode._still_running_error(compiled_for(greedy_consumers, X), 30)
    line = line_of(greedy_consumers.fn, "tk.consumer_registers(232)")
    assert "kernel greedy_consumers did not finish within 30 s (TKPY_DEBUG_KERNEL_TIMEOUT_S)" in str(err)
    assert f"test_debug_mode.py:{line} `tk.consumer_registers(232)" in str(err) and "setmaxnreg.inc" in str(err)
    plain_env.setenv("TKPY_DEBUG_KERNEL_TIMEOUT_S", "3")
    assert debug_mode.kernel_timeout_s(debug_mode.Settings(2_000_000_000)) == 9.0
    plain_env.setenv("TKPY_DEBUG_KERNEL_TIMEOUT_S", "0")
    assert debug_mode.kernel_timeout_s(debug_mode.Settings(2_000_000_000)) == 0.0


def test_the_record_layout_matches_the_cpp(plain_env):
    src = debug_build(never_signalled, X, monkeypatch=plain_env)
    assert ("struct tkpy_debug_slot { unsigned int valid, site, block_x, block_y, block_z, warp; int index, phase; "
            "unsigned long long waited_ns; long long first, last, limit; };") in src
    assert debug_mode.SLOT.size == 64 and f"constexpr u32 record_slots = {debug_mode.SLOTS};" in src


# -- on the GPU, each in a fresh process --------------------------------------------------------------------------
def run_child(code: str, timeout: float = 120, **env) -> tuple[str, float]:
    """Run `code` in a fresh Python (tests/ importable) with tkpy's switches `env`; (its output, seconds)."""
    full_env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), full_env.get("PYTHONPATH", "")])
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return done.stdout + done.stderr, time.monotonic() - start


DEADLOCK_CHILD = """
    import os, sys, time
    import torch, tkpy as tk
    import test_debug_mode as t
    kernel = getattr(t, {name!r})
    x = torch.zeros(16, 16, device="cuda")
    kernel.resources(x)                      # traced and compiled before the clock starts
    start = time.monotonic()
    try:
        kernel[(1,)](x)
        print("NO ERROR")
    except Exception as e:                   # a GpuTimeoutError, or anything else for the test to show
        print(f"ELAPSED {{time.monotonic() - start:.2f}}")
        print(f"RAISED {{type(e).__name__}}")
        print(e)
    sys.stdout.flush()
    __import__("ctypes").CDLL(None).fflush(None)   # the device printf's C stdio buffer
    os._exit(0)                              # the trapped context: no teardown
"""


def run_deadlock(name: str, **env) -> tuple[str, float]:
    out, _ = run_child(DEADLOCK_CHILD.format(name=name), TKPY_DEBUG="1", TKPY_DEBUG_TIMEOUT_S="2", **env)
    m = re.search(r"ELAPSED ([0-9.]+)", out)
    assert m and "RAISED GpuTimeoutError" in out, out
    return out, float(m.group(1))


@on_gpu
def test_the_issues_deadlock_raises_within_10_s_naming_the_wait():
    out, elapsed = run_deadlock("never_signalled")
    line = line_of(never_signalled.fn, "tk.wait(sem, 0)")
    assert elapsed < 10, out
    assert "a wait timed out on the GPU (debug mode: TKPY_DEBUG_TIMEOUT_S=2) in block (0, 0, 0) of kernel " \
           "never_signalled" in out
    assert f"waits at test_debug_mode.py:{line} `tk.wait(sem, 0)`" in out
    assert "on semaphore `sem` of block (0, 0, 0), waiting for its phase with parity 0 to complete" in out
    if f"tkpy debug: kernel never_signalled" not in out:      # printf after a trap: up to the driver
        warnings.warn(f"the device's printf line did not show in the output:\n{out}")


@on_gpu
@pytest.mark.parametrize("name,text,wanted", [
    ("half_named_barrier", "tk.named_sync(1, 8)", "on named barrier 1: waiting for 8 warps to arrive"),
    ("sync_in_a_branch", "tk.sync()", "on __syncthreads (tk.sync()): waiting for all 4 warps"),
    ("half_warpgroup_mma", "tk.warpgroup.mm_AB(acc, s, s)", "on the warpgroup MMA (warpgroup 0)")])
def test_other_deadlocks_name_their_barrier(name, text, wanted):
    out, elapsed = run_deadlock(name)
    kernel = globals()[name]
    assert elapsed < 10, out
    assert f"waits at test_debug_mode.py:{line_of(kernel.fn, text)} `{text}" in out and wanted in out, out


BOUNDS_CHILD = """
    import os, sys
    import torch, tkpy as tk
    import test_debug_mode as t
    if {name!r} == "reads_past_the_end":
        x = torch.randn(16, 16, device="cuda")
        launch = lambda: t.reads_past_the_end[(2,)](x, torch.empty_like(x))
    else:
        x = torch.randn(64, 32, device="cuda")
        launch = lambda: t.stage_past_the_ring[(1,)](x, {stage})
    try:
        launch()
        torch.cuda.synchronize()
        print("NO ERROR")
    except Exception as e:
        print(f"RAISED {{type(e).__name__}}")
        print(e)
    sys.stdout.flush()
    __import__("ctypes").CDLL(None).fflush(None)   # the device printf's C stdio buffer
    os._exit(0)
"""


@on_gpu
@pytest.mark.parametrize("name,stage,text,wanted", [
    ("reads_past_the_end", None, "tk.load(t, x", "the 16 x 16 tile of `x`: row indices 16..31, outside [0, 16)"),
    ("stage_past_the_ring", 2, "tk.load(ring[stage]", "index 2 into `ring`, an array of 2, outside [0, 2)"),
    ("stage_past_the_ring", 4, "tk.load(ring[stage]", "index 4 into `ring`, an array of 2, outside [0, 2)")])
def test_an_out_of_bounds_access_raises_naming_it(name, stage, text, wanted):
    out, _ = run_child(BOUNDS_CHILD.format(name=name, stage=stage), TKPY_DEBUG="1")
    kernel = globals()[name]
    assert "RAISED GpuBoundsError" in out, out
    assert f"at test_debug_mode.py:{line_of(kernel.fn, text)} `{text}" in out and wanted in out, out
    if "out-of-bounds access at test_debug_mode.py" not in out:      # the device's printf line
        warnings.warn(f"the device's printf line did not show in the output:\n{out}")


@on_gpu
def test_in_bounds_accesses_pass_their_checks():
    out, _ = run_child(BOUNDS_CHILD.format(name="stage_past_the_ring", stage=1), TKPY_DEBUG="1")
    assert "NO ERROR" in out, out


@on_gpu
def test_a_kernel_stuck_where_debug_mode_cannot_bound_it_is_reported_by_the_host():
    code = """
        import os, sys, time
        import torch, tkpy as tk
        import test_debug_mode as t
        x = torch.zeros(16, 16, device="cuda")
        t.greedy_consumers.resources(x)
        start = time.monotonic()
        try:
            t.greedy_consumers[(1,)](x)
            print("NO ERROR")
        except Exception as e:
            print(f"ELAPSED {time.monotonic() - start:.2f}")
            print(f"RAISED {type(e).__name__}")
            print(e)
        sys.stdout.flush()
        __import__("ctypes").CDLL(None).fflush(None)   # the device printf's C stdio buffer
        os._exit(0)                          # the kernel still runs: the driver ends it with the process
    """
    out, seconds = run_child(code, timeout=180, TKPY_DEBUG="1", TKPY_DEBUG_TIMEOUT_S="1",
                             TKPY_DEBUG_KERNEL_TIMEOUT_S="3")
    if "NO ERROR" in out:
        pytest.skip("setmaxnreg did not block on this GPU/driver")
    assert "RAISED GpuTimeoutError" in out, out
    assert "kernel greedy_consumers did not finish within 7 s" in out and "setmaxnreg.inc" in out, out


CORRECT_CHILD = """
    import os, sys
    import torch, tkpy as tk
    import debug_golden_kernels as g
    torch.manual_seed(0)
    # golden_ws: c = a @ b through TMA, semaphores, wgmma, named barriers and a vote
    k, _ = g.producer_consumer()
    a = torch.randn(64, 256, device="cuda").bfloat16()
    b = torch.randn(256, 64, device="cuda").bfloat16()
    c = torch.full((64, 64), float("nan"), device="cuda")
    k[(1,)](a, b, c)
    ref = a.double() @ b.double()
    print("WS", float((c.double() - ref).norm() / ref.norm()))
    # golden_cluster: rank 0 multicasts a tile to both blocks
    k, _ = g.cluster_multicast()
    x = torch.randn(3 * 64, 64, device="cuda").bfloat16()
    y = torch.full((6 * 64, 64), float("nan"), device="cuda").bfloat16()
    k[(6,)](x, y)
    print("CLUSTER", bool(torch.equal(y.view(3, 2, 64, 64), x.view(3, 1, 64, 64).expand(-1, 2, -1, -1))))
    # golden_softmax
    k, _ = g.softmax()
    x = torch.randn(256, 64, device="cuda").bfloat16()
    y = torch.empty_like(x)
    k[(4,)](x, y)
    ref = torch.exp(x.float() - x.float().amax(1, keepdim=True))
    print("SOFTMAX", float((y.float() - ref).abs().max()))
    # the repo's GEMM and attention, all of whose kernels are debug builds here
    from tkpy.kernels.gemm_ws import matmul
    a, b = torch.randn(256, 128, device="cuda").bfloat16(), torch.randn(128, 512, device="cuda").bfloat16()
    ref = a.double() @ b.double()
    print("GEMM", float((matmul(a, b).double() - ref).norm() / ref.norm()))
    from tkpy.kernels import attention
    q, kk, v = (torch.randn(1, 2, 256, 64, device="cuda").bfloat16() for _ in range(3))
    o = attention(q, kk, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float(), is_causal=True)
    print("ATTENTION", float((o.float() - ref).norm() / ref.norm()))
    # named barriers and votes as mbarriers: two warps taking turns (static and run-time ids), a warpgroup vote
    import test_named_arrive as na, test_atomic as ta
    y = torch.full((16, 16), float("nan"), device="cuda")
    na.take_turns[(1,)](y, 4)
    turns = bool(torch.equal(y.cpu(), na.expected_turns(4)))
    na.take_turns_by_id[(1,)](y, 5, 3)
    print("TURNS", turns and bool(torch.equal(y.cpu(), na.expected_turns(5))))
    flags = torch.full((1, 128, 16), float("nan"), device="cuda")
    ta.vote_any[(1,)](flags, 6)
    print("VOTE", flags[0, ::16, 0].tolist() == [float(6 // 4 == w // 4) for w in range(8)])
    print("DEBUG", k.trace(x, torch.empty_like(x)).ir.debug is not None and na.take_turns.trace(y, 4).ir.debug is not None)
    sys.stdout.flush()
    __import__("ctypes").CDLL(None).fflush(None)   # the device printf's C stdio buffer
    os._exit(0)
"""


@on_gpu
def test_debug_builds_compute_what_normal_builds_do():
    out, _ = run_child(CORRECT_CHILD, timeout=600, TKPY_DEBUG="1")
    values = dict(re.findall(r"^([A-Z]+) (\S+)$", out, re.M))
    assert values.get("DEBUG") == "True", out
    assert float(values["WS"]) < 1e-2 and values["CLUSTER"] == "True" and float(values["SOFTMAX"]) < 2e-2, out
    assert float(values["GEMM"]) < 1e-2 and float(values["ATTENTION"]) < 2e-2, out
    assert values["TURNS"] == "True" and values["VOTE"] == "True", out
