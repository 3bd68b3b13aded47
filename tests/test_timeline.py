"""Timeline marks (tk.mark, tkpy/runtime/timeline.py): nothing without TKPY_TIMELINE; with it, one record per
mark and warp, read back and summed into phases (the GPU test skips without a Hopper GPU)."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.runtime import timeline

from gpu_util import on_gpu


def marked_kernel(with_marks: bool = True):
    """Two warps per block; marks before and after a load, in a loop of 3, after the store."""
    mark = tk.mark if with_marks else (lambda label: None)

    @tk.kernel(warps=2, name="marked" if with_marks else "unmarked")
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        mark("start")
        tk.load(t, x, (tk.block_idx.x * 2 + tk.warp_id(), 0))
        mark("loaded")
        for _ in tk.range(3):
            tk.exp2(t, t)
            mark("exp2")
        tk.store(x, t, (tk.block_idx.x * 2 + tk.warp_id(), 0))
        mark("stored")
    return k


def code(source: str) -> list[str]:
    """The kernel's statements, without comments and the kernel's name."""
    body = source.split("// ---- end of prelude ----")[1]
    return [line.split("//")[0].rstrip() for line in body.splitlines()
            if line.split("//")[0].strip() and "__global__" not in line and not line.strip().startswith(("marked", "unmarked"))]


def test_marks_generate_nothing_without_the_timeline(monkeypatch):
    monkeypatch.delenv(timeline.ENV, raising=False)
    x = torch.randn(64, 16)
    marked, plain = marked_kernel(), marked_kernel(False)
    assert "mark[label=loaded]" in marked.ir(x)
    assert "TKPY_MARK" not in marked.source(x) and timeline.BUFFER not in marked.source(x)
    assert code(marked.source(x)) == code(plain.source(x))


def test_marks_record_in_order_of_first_appearance_and_compile(monkeypatch):
    monkeypatch.setenv(timeline.ENV, "1")
    x = torch.randn(64, 16)
    k = marked_kernel()
    source = k.source(x)
    assert [int(i) for i in re.findall(r"TKPY_MARK\((\d+)\);", source)] == [0, 1, 2, 3]
    assert f"__device__ unsigned long long {timeline.BUFFER}[{timeline.BLOCKS * 2 * timeline.RECORDS}];" in source
    assert timeline.labels_of(k.trace(x).ir) == ["start", "loaded", "exp2", "stored"]
    assert k.resources(x).spill_stores == 0
    y = x * 0.25                                  # (exp2 three times over grows fast)
    want = torch.exp2(torch.exp2(torch.exp2(y.double())))
    k.interpret[(2,)](y)                          # the interpreter ignores marks
    assert torch.allclose(y.double(), want, rtol=1e-5)


@pytest.mark.parametrize("label", ["", "a\nb", "x" * 65, 3])
def test_mark_labels_are_short_strings(label):
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, 16, 16]):
        tk.mark(label)
    with pytest.raises(tk.TraceError, match="short one-line string"):
        k.ir(torch.empty(16, 16))


def test_more_labels_than_a_record_holds_is_an_error(monkeypatch):
    monkeypatch.setenv(timeline.ENV, "1")

    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, 16, 16]):
        for i in range(timeline.MAX_LABELS + 1):
            tk.mark(f"m{i}")
    with pytest.raises(tk.UnsupportedError, match="at most 256 distinct mark labels"):
        k.source(torch.empty(16, 16))


def test_phases_and_table_from_records():
    recs = {(0, 0): [(100, "a"), (150, "b"), (400, "a"), (470, "b")], (0, 1): [(10, "a"), (90, "b")]}
    assert timeline.phases(recs) == {("a", "b"): [50, 70, 80], ("b", "a"): [250]}
    lines = timeline.table(recs).splitlines()
    assert lines[1].split() == ["b", "->", "a", "1", "250", "250"]      # most total cycles first
    assert lines[2].split() == ["a", "->", "b", "3", "70", "80"]


@on_gpu
def test_records_on_the_gpu(monkeypatch):
    """Every warp of the first BLOCKS blocks records its marks in program order, at increasing cycles."""
    monkeypatch.setenv(timeline.ENV, "1")
    blocks = timeline.BLOCKS + 2
    x = torch.randn(blocks * 32, 16, device="cuda")
    k = marked_kernel()
    k[(blocks,)](x)
    timeline.reset(k)
    k[(blocks,)](x)
    recs = timeline.records(k)
    assert sorted(recs) == [(b, w) for b in range(timeline.BLOCKS) for w in range(2)]
    for marks in recs.values():
        assert [label for _, label in marks] == ["start", "loaded", "exp2", "exp2", "exp2", "stored"]
        cycles = [c for c, _ in marks]
        assert cycles == sorted(cycles) and len(set(cycles)) == len(cycles)
