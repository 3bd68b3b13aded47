"""tkpy.kernels.tune on the GPU (skipped without one): matmul's tile rates and (over two candidates, one head dim)
attention's tiles re-measured and stored for this GPU, then read by the policies."""
from __future__ import annotations

import pytest
import torch

import gpu_util
from tkpy.kernels import attention_policy, gemm_policy, retune
from tkpy.tune import tables

pytestmark = gpu_util.requires_gpu


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TKPY_TUNED_TABLES", raising=False)
    monkeypatch.setattr(tables, "_loaded", {})


def test_tile_rates_are_measured_and_used_here():
    (table,) = retune.tune(["gemm.TILE_RATE"]).values()
    assert table.gpu == torch.cuda.get_device_name() and set(table.rows) == set(gemm_policy.WIDTHS)
    assert all(100 < rate < 2000 for rate in table.rows.values()) and "TFLOP/s" in table.evidence[256]
    where, rows = retune.in_use()["gemm.TILE_RATE"]
    assert where.startswith(table.gpu) and rows == table.rows


def test_attention_tiles_are_tuned_among_the_candidates(monkeypatch):
    monkeypatch.setattr(retune, "DIMS", (128,))
    monkeypatch.setitem(retune.CANDIDATES, "CONFIGS", (1024, False, ("kv", "stages"), [(128, 2), (64, 4)]))
    (table,) = retune.tune(["attention.CONFIGS"]).values()
    assert table.rows[128] in ((128, 2), (64, 4)) and "ms" in table.evidence[128]
    assert attention_policy.default_tiles(128, 2, False) == (*table.rows[128], None)
