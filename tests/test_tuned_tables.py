"""Policy tables tuned per GPU (tkpy.tune.tables, tkpy.kernels.tune) on the CPU: a table stored for a GPU stands in
for the shipped rows there and only there (matmul's tile widths, attention's tiles), TKPY_TUNED_TABLES=0 and the
interpreter keep the shipped ones, an edited record is not read, and tuning refuses to run without a GPU. The tuning
itself times kernels: tests/test_tuned_tables_gpu.py."""
from __future__ import annotations

import json

import pytest

from tkpy.tune import tables
from tkpy.kernels import attention_policy, gemm_policy, retune


@pytest.fixture
def on(monkeypatch, tmp_path):
    """A cache directory of this test's, and `on(name)` making `name` the GPU kernels would launch on."""
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TKPY_TUNED_TABLES", raising=False)
    monkeypatch.setattr(tables, "_loaded", {})

    def gpu(name):
        monkeypatch.setattr(tables, "current_gpu", lambda: name)
        monkeypatch.setattr(retune, "current_gpu", lambda: name)
    return gpu


def test_a_tuned_table_stands_in_for_the_shipped_rows_on_its_gpu(on, monkeypatch):
    on("Fake H20")
    assert gemm_policy.block_n_for(4096, 4096, 78) == 256          # the H200's rates
    tables.store_table("gemm.TILE_RATE", {256: 100, 128: 100, 64: 500}, dict.fromkeys((256, 128, 64), "measured"),
                       "Fake H20")
    assert gemm_policy.block_n_for(4096, 4096, 78) == 64           # 64-wide tiles at 5x the rate now
    tables.store_table("attention.CONFIGS", {128: (96, 4)}, {128: "measured"}, "Fake H20")
    assert attention_policy.default_tiles(128, 2, False) == (96, 4, None)
    assert attention_policy.default_tiles(64, 2, False) == (*attention_policy.CONFIGS[64], None)   # not tuned: shipped
    assert retune.in_use()["attention.CONFIGS"][0].startswith("Fake H20 (")
    monkeypatch.setattr(tables, "_loaded", {})                    # a new process reads them from disk
    assert tables.load_table("gemm.TILE_RATE").rows == {256: 100, 128: 100, 64: 500}
    assert tables.load_table("attention.CONFIGS").evidence == {128: "measured"}
    monkeypatch.setenv("TKPY_TUNED_TABLES", "0")
    assert gemm_policy.block_n_for(4096, 4096, 78) == 256
    monkeypatch.delenv("TKPY_TUNED_TABLES")
    on("Fake H100")                                               # another GPU: the shipped tables
    assert gemm_policy.block_n_for(4096, 4096, 78) == 256 and retune.in_use()["gemm.TILE_RATE"][0] == "NVIDIA H200"
    on(None)                                                      # no GPU, or the interpreter
    assert attention_policy.default_tiles(128, 2, False) == (*attention_policy.CONFIGS[128], None)


def test_an_edited_record_is_not_read(on, monkeypatch, tmp_path):
    on("Fake H20")
    tables.store_table("gemm.TILE_RATE", {64: 500}, {64: "measured"}, "Fake H20")
    (path,) = tmp_path.rglob("tables/*/*.json")
    record = json.loads(path.read_text())
    record["payload"]["rows"][0][1] = 900
    path.write_text(json.dumps(record))
    monkeypatch.setattr(tables, "_loaded", {})
    assert tables.load_table("gemm.TILE_RATE") is None


def test_tuning_needs_a_gpu_and_known_tables(on):
    on(None)
    with pytest.raises(RuntimeError, match="needs a Hopper GPU"):
        retune.tune()
    with pytest.raises(ValueError, match="no table gemm.STAGES"):
        retune.tune(["gemm.STAGES"])
