"""benchmarks/timing.py's graph-replay timing on the CPU, against a stand-in for torch.cuda whose graphs
replay on a simulated clock: the graph grows until a replay lasts TARGET_REPLAY_MS (up to MAX_CALLS
calls), the warm-up runs outside the capture, and the result is the median time per call. Also: the attention
timeline script finds its anchors in the kernel source; gpu_check.py bundles its details."""
from __future__ import annotations

import contextlib
import re

import pytest
import torch

from benchmarks import timing

LAUNCH_MS = 0.004          # a graph launch's own cost on the simulated clock


class Clock:
    def __init__(self, per_call_ms: float):
        self.per_call_ms, self.now, self.capturing, self.calls, self.graphs = per_call_ms, 0.0, None, [], []

    def fn(self):
        self.calls.append(self.capturing)
        if self.capturing is not None:
            self.capturing.calls += 1


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(0.0)

    class Graph:
        def __init__(self):
            self.calls = 0
            clock.graphs.append(self)

        def replay(self):
            clock.now += LAUNCH_MS + self.calls * clock.per_call_ms

    @contextlib.contextmanager
    def graph(g):
        clock.capturing = g
        yield
        clock.capturing = None

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = clock.now

        def elapsed_time(self, end):
            return end.t - self.t

    class Stream:
        def wait_stream(self, other):
            pass

    for name, value in dict(CUDAGraph=Graph, graph=graph, Event=Event, Stream=Stream, current_stream=Stream,
                            stream=lambda s: contextlib.nullcontext(), synchronize=lambda: None).items():
        monkeypatch.setattr(torch.cuda, name, value)
    return clock


@pytest.mark.parametrize("per_call_ms", [0.007, 0.0001, 0.5, 20.0])
def test_median_per_call_from_replays_of_a_long_enough_graph(clock, per_call_ms):
    clock.per_call_ms = per_call_ms
    ms = timing.median_ms(clock.fn)
    assert clock.calls[:timing.WARMUP_CALLS] == [None] * timing.WARMUP_CALLS    # warm-up outside the capture
    assert all(c is not None for c in clock.calls[timing.WARMUP_CALLS:])        # then only captures
    last = clock.graphs[-1]
    assert last.calls == timing.MAX_CALLS or LAUNCH_MS + last.calls * per_call_ms >= timing.TARGET_REPLAY_MS
    assert ms == pytest.approx(per_call_ms + LAUNCH_MS / last.calls)
    assert len(clock.graphs) <= 3


def test_attention_kernel_carries_its_timeline_marks(monkeypatch):
    """With TKPY_TIMELINE=1 the default D128 kernel records the marks benchmarks/attention_timeline.py reads
    (the template's and the kernel's), and still compiles for sm_90a without spills."""
    import torch

    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    from tkpy.kernels import attention_config as att_config
    from tkpy.runtime import timeline
    monkeypatch.setenv(timeline.ENV, "1")
    att._attention.cache_clear()
    try:
        q = torch.empty(1, 1, 256, 128, dtype=torch.bfloat16)
        lse = torch.empty(1, 1, policy.lse_rows(256, 2))
        kernel = att._attention(att_config.AttentionConfig(128, att_config.DTYPES[q.dtype], False)).kernel
        args = (q, q, q, q, lse, 0.1)
        labels = timeline.labels_of(kernel.trace(*args).ir)
        for label in ("step: wait for the stage", "S issued", "P V issued", "S arrived", "softmax: row max",
                      "softmax: exponentials", "softmax: row sums", "P V done", "O rescaled, P converted"):
            assert label in labels
        assert kernel.resources(*args).spill_stores == 0
    finally:
        att._attention.cache_clear()         # no kernel traced with the timeline stays cached


def test_exp2_benchmark_forms_compile_to_what_they_time():
    """benchmarks/bench_exp2.py's kernels compile for sm_90a; each form has the MUFU.EX2 / F2FP count it claims:
    none by the polynomial alone, the packed forms two MUFU ops per pair, the conversion forms one F2FP per pair."""
    from benchmarks.bench_exp2 import FORMS, source
    from tkpy.runtime import compile_cuda
    from tkpy.runtime.disasm import sass

    counts = {}
    for name in FORMS:
        text = sass(compile_cuda(source(name), "bench").cubin, line_info=False)
        counts[name] = (len(re.findall(r"MUFU\.EX2", text)), len(re.findall(r"F2FP\.BF16", text)))
    assert counts["poly_8of8"][0] == 0 < counts["poly_4of8"][0] < counts["mufu_f32"][0]
    assert counts["mufu_f16x2"][0] == counts["mufu_f32"][0]            # the packed ex2 is two MUFU ops
    assert counts["cvt_bf16x2"] == (0, counts["mufu_and_cvt"][1]) and counts["cvt_bf16x2"][1] > 0


@pytest.mark.parametrize("causal", [False, True])
def test_attention_loads_variants_compile(causal):
    """benchmarks/attention_loads.py's changes apply to the default D128 kernels' generated source (one match each)
    and compile for sm_90a; a split-ring kernel (D64's default) is refused by name, not silently left as is."""
    import torch

    from benchmarks import attention_loads
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    from tkpy.kernels import attention_config as att_config
    from tkpy.runtime import compile_cuda

    q, lse = torch.empty(1, 2, 256, 128, dtype=torch.bfloat16), torch.empty(1, 2, policy.lse_rows(256, 2))
    args = [q, q, q, q, lse, 0.1] + ([0] if causal else [])
    kernel = att._attention(att_config.AttentionConfig(128, att_config.DTYPES[q.dtype], causal)).kernel
    source = kernel.source(*args)
    assert attention_loads.stages_of(source) == policy.CONFIGS[128][1]
    for name, change in attention_loads.VARIANTS.items():
        changed = change(source, policy.CONFIGS[128][1])
        assert (changed == source) == (name == "as is")
        assert compile_cuda(changed, kernel.name).resources.spill_stores == 0
    q64 = torch.empty(1, 2, 256, 64, dtype=torch.bfloat16)
    split = att._attention(att_config.AttentionConfig(64, att_config.DTYPES[q64.dtype], causal, consumer_warpgroups=3,
                                                       split_kv=True)).kernel
    with pytest.raises(ValueError, match="not a one-ring producer"):
        attention_loads.first_stages(split.source(q64, q64, q64, q64, lse, 0.1, *([0] if causal else [])))


def test_attention_timeline_arguments():
    """benchmarks/attention_timeline.py's arguments: a shape (default B16 H16 N4096 D128), --causal, and _launch
    options as key=value (ints, True/False)."""
    from benchmarks.attention_timeline import parse
    assert parse([]) == ([16, 16, 4096, 128], False, {})
    assert parse(["4", "8", "1024", "64", "--causal", "q_preload=True", "stages=4", "pingpong=False"]) == (
        [4, 8, 1024, 64], True, {"q_preload": True, "stages": 4, "pingpong": False})


def test_attention_timeline_task_switches():
    """task_switches: the span from a task's last "step: computed" to the next task's first one, against the
    spans between steps within a task, and the switch's phases in order."""
    from benchmarks.attention_timeline import task_switches

    def task(t0):       # a task of three steps of 100 cycles, its start at t0, its finish 40 after the last step
        marks = [(t0, "task start")]
        for k in range(3):
            marks += [(t0 + 10 + 100 * k, "step: wait for the stage"), (t0 + 100 + 100 * k, "step: computed")]
        return marks + [(t0 + 340, "task finish")]
    recs = {(0, 0): task(0) + task(400) + task(800), (0, 4): task(5)}
    text = task_switches(recs)
    # 300 (last step's end) -> 500 (next first step's end): 200, twice; steps within tasks: 100, 2 per task
    assert text.startswith("task switch: 200 cycles from a task's last step's end to the next task's first step's "
                           "end (2 switches), a step mid-task 100 (8 steps)")
    assert text.splitlines()[1:] == ["  step: computed -> task finish: 40", "  task finish -> task start: 60",
                                     "  task start -> step: wait for the stage: 10",
                                     "  step: wait for the stage -> step: computed: 90"]
    assert task_switches({(0, 0): task(0)}).startswith("task switches: none recorded")


def test_bench_attention_skips_variants_the_kernel_refuses(monkeypatch):
    """bench_attention.runnable: a variant runs where its head dim is configured and the kernel takes the case
    (cluster pairs: an even number of query tiles) and its tiles fit in shared memory, checked before any launch."""
    import torch

    from benchmarks.bench_attention import launch_options, runnable
    from tkpy.kernels import attention_forward as att
    from tkpy.kernels import attention_policy as policy
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    monkeypatch.setattr(att, "multiprocessors", lambda tensor: 132)

    def args(n, causal, name):
        q = torch.empty(1, 2, n, 128, dtype=torch.bfloat16)
        options, lse = launch_options(name, 128, torch.empty(1, 2, policy.lse_rows(n, 3)))
        return (q, q, q, torch.empty_like(q), lse, causal, None), options
    assert runnable(*args(256, False, "cluster2"))
    assert runnable(*args(256, True, "cluster2"))
    assert not runnable(*args(300, False, "cluster2"))          # 3 query tiles
    assert runnable(*args(300, True, "default"))
    assert args(300, True, "default")[0][4] is None and args(300, True, "with lse")[0][4] is not None
    assert launch_options("max first", 256, None) == (None, None)                     # not configured for D256
    assert not runnable(args(256, False, "default")[0], None)
    wide = torch.empty(1, 2, 1024, 192, dtype=torch.bfloat16)                        # stages that leave Q no room
    assert not runnable((wide,) * 4 + (None, False, None), dict(split_kv=True, kv=96, stages=3, late_stages=2))
    assert runnable((wide,) * 4 + (None, False, None), dict(split_kv=True, kv=96, stages=2, late_stages=2))


@pytest.mark.parametrize("n", range(1, 8))
def test_balanced_orders_give_every_function_every_predecessor_alike(n):
    """timing.balanced_orders: each order a permutation of n, every ordered pair adjacent equally often."""
    from collections import Counter

    from benchmarks.timing import balanced_orders
    orders = balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    pairs = Counter((order[i], order[i + 1]) for order in orders for i in range(n - 1))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) <= 1


def test_pipe_profile_table_takes_each_kernels_last_launch_in_its_units():
    """benchmarks/pipe_profile.py's table from ncu's raw CSV (its second line the units): the last launch of each
    kernel, microseconds and TFLOP/s from the duration's unit, the clock from its own, its registers per thread and
    its PIPES columns."""
    from benchmarks.pipe_profile import PIPES, last_launches, table
    pipes = [metric + ".avg.pct_of_peak_sustained_active" for _, metric in PIPES]
    text = "\n".join([
        '"ID","Kernel Name","gpu__time_duration.sum","gpc__cycles_elapsed.avg.per_second","launch__registers_per_thread",'
        '"smsp__issue_active.avg.pct_of_peak_sustained_active",' + ",".join(f'"{m}"' for m in pipes),
        '"","","ms","Ghz","register/thread","%",' + ",".join('"%"' for _ in pipes),
        '"0","attention_fwd_d64","2.0","1.60","168","30.0",' + ",".join(f'"{i}"' for i in range(len(pipes))),
        '"1","attention_fwd_d64","1.0","1.75","168","31.5",' + ",".join(f'"{10 * i}.5"' for i in range(len(pipes))),
        '"2","flash_fwd_kernel","1,500.0","1.70","255","40.1",' + ",".join('"1,000"' for _ in pipes)])
    rows, units = last_launches(text)
    lines = table(rows, units, flops=2e12).splitlines()
    assert lines[0].split(" | ") == ["kernel", "us", "TFLOP/s", "GHz", "regs", "issue %", *(name for name, _ in PIPES)]
    assert lines[2].split(" | ") == ["attention_fwd_d64", "1000", "2000", "1.75", "168", "31.5",
                                     *(f"{10 * i}.5" for i in range(len(pipes)))]
    assert lines[3].split(" | ") == ["flash_fwd_kernel", "1500000", "1", "1.70", "255", "40.1",
                                     *("1000.0" for _ in pipes)]


def test_power_clock_table_gives_work_per_clock_against_flash():
    """benchmarks/power_clock.py's table: each kernel's TFLOP/s per GHz of its own clock, and both ratios to flash."""
    from benchmarks.power_clock import table
    row = {"b": 4, "h": 16, "n": 16384, "d": 64, "causal": False,
           "tkpy": {"tflops": 520.0, "mhz": 1600.0, "watts": 699.0, "per_ghz": 325.0},
           "cudnn": {"tflops": 460.0, "mhz": 1700.0, "watts": 690.0, "per_ghz": 460 / 1.7},
           "flash": {"tflops": 300.0, "mhz": 1875.0, "watts": 650.0, "per_ghz": 160.0}}
    lines = table([row]).splitlines()
    assert lines[2].split(" | ") == ["4 16 16384 64 no", "tkpy", "520", "1600", "699", "325", "1.73", "2.03"]
    assert lines[4].split(" | ")[-2:] == ["1.00", "1.00"]


def test_gpu_check_bundles_its_details(tmp_path):
    """gpu_check.py leaves the pytest log, its JSON report and the plots beside one details.zip of the rest: the
    device returns at most 8 files."""
    import zipfile

    from benchmarks.gpu_check import bundle_details
    for name in ("pytest.log", "gpu_check.json", "attention.png", "junit.xml", "attention.json", "gemm.json"):
        (tmp_path / name).write_text(name)
    bundle_details(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.png", "details.zip", "gpu_check.json",
                                                          "pytest.log"]
    with zipfile.ZipFile(tmp_path / "details.zip") as bundle:
        assert sorted(bundle.namelist()) == ["attention.json", "gemm.json", "junit.xml"]
        assert bundle.read("junit.xml") == b"junit.xml"
