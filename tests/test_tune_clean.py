"""tk.tune.first_clean: the first of some kernels that compiles without spills, the verdict kept in a signed record,
so that a new process on a warm disk cache compiles (finds) the chosen kernel alone; what makes it look at every
candidate again (the chosen kernel's module changed, the test rejects it, another test, no disk cache). NVRTC runs
here (no GPU): two kernels that spill under a 32-register cap, one that does not."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.frontend import kernel as kernel_module
from tkpy.runtime import clear_memo

from test_runtime import _isolated_cache  # noqa: F401 - autouse: each test its own empty disk cache and memo

NAMES = ["clean_test_128", "clean_test_64", "clean_test_16"]     # 16 x 128 and 16 x 64 rows spill, 16 x 16 do not


def softmax_rows(cols: int, name: str):
    """Softmax of 16 x `cols` rows a warp, 32 warps a block and 2 blocks an SM: at most 32 registers a thread."""
    @tk.kernel(warps=32, blocks_per_sm=2, name=name)
    def k(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"]):
        t = tk.rt(f32, 16, cols)
        m = tk.col_vec(t)
        row = tk.block_idx.x * 32 + tk.warp_id()
        tk.load(t, x, (row, 0))
        tk.row_max(m, t)
        tk.sub_row(t, t, m)
        tk.exp(t, t)
        tk.row_sum(m, t)
        tk.div_row(t, t, m)
        tk.store(y, t, (row, 0))
    return k


def a_process(cols=(128, 64, 16)) -> list:
    """The candidates as a new process has them: kernels of their own (nothing made), no module in memory."""
    clear_memo()
    return [softmax_rows(c, name) for c, name in zip(cols, NAMES)]


ARGS = (torch.empty(1024, 128), torch.empty(1024, 128))


def first(kernels, clean=tk.tune.compiles_clean):
    return tk.tune.first_clean([k.name for k in kernels], lambda i: kernels[i], ARGS, clean)


@pytest.fixture
def made(monkeypatch):
    """The names of the kernels whose specialization was made (compiled, or found: from its record or by a trace)."""
    names = []
    make = kernel_module.Kernel._made
    monkeypatch.setattr(kernel_module.Kernel, "_made", lambda self, *a: names.append(self.name) or make(self, *a))
    return names


def test_a_new_process_compiles_the_clean_kernel_alone(made):
    kernels = a_process()
    assert not tk.tune.compiles_clean(kernels[0], ARGS) and first(kernels) is kernels[2]
    assert made == NAMES
    made.clear()
    kernels = a_process()
    assert first(kernels) is kernels[2] and made == NAMES[2:]


def test_a_changed_kernel_or_one_rejected_now_makes_a_new_scan(made):
    first(a_process())
    made.clear()
    kernels = a_process(cols=(128, 16, 16))     # clean_test_64 now clean, clean_test_16 as it was: the verdict holds
    assert first(kernels) is kernels[2] and made == NAMES[2:]
    made.clear()
    kernels = [*a_process()[:2], softmax_rows(32, NAMES[2])]     # the recorded kernel's code changed: another module
    assert first(kernels) is kernels[2] and made == [NAMES[2], *NAMES[:2]]
    made.clear()
    rejected = set()

    def clean(kernel, args):
        return kernel.name not in rejected and tk.tune.compiles_clean(kernel, args)
    first(a_process(), clean)
    rejected.add(NAMES[2])
    made.clear()
    assert first(a_process(), clean) is None and made == NAMES[:2]     # (the rejected one is not compiled)


def test_a_stand_in_test_has_verdicts_of_its_own(made):
    first(a_process())
    kernels = a_process()
    with pytest.warns(tk.SpillWarning):         # (what the stand-in takes is compiled as it would run)
        assert first(kernels, lambda kernel, args: True) is kernels[0]
    assert first(kernels) is kernels[2]


def test_without_a_disk_cache_every_process_scans(made, monkeypatch):
    monkeypatch.setenv("TKPY_CACHE", "0")
    first(a_process())
    made.clear()
    first(a_process())
    assert made == NAMES


def test_a_candidate_of_another_name_is_refused():
    kernels = a_process()
    with pytest.raises(ValueError, match="candidate 0 is kernel 'clean_test_128', not 'other'"):
        tk.tune.first_clean(["other", *NAMES[1:]], lambda i: kernels[i], ARGS)
