"""Policy tables tuned per GPU: rows of a kernel library's tables re-measured on one GPU model (tkpy.kernels.tune
does attention()'s and matmul()'s), kept as signed records in tkpy's cache directory under the GPU's name
(tkpy.runtime.records: only what tkpy wrote is read), and read back by the policy in place of its shipped rows
(`tuned_rows`). Nothing is tuned on a call: a table is only ever made by an explicit tuning run.

`TKPY_TUNED_TABLES=0`: no tuned rows are read (the shipped tables only, e.g. for a reproducible run). Without a
GPU, or under TKPY_INTERPRET=1, the shipped tables are used too.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from ..interpret import interpret_requested
from ..runtime import gpu_available, records

KIND = "tables"
ENV = "TKPY_TUNED_TABLES"


@dataclass(frozen=True)
class TunedTable:
    """A table's rows as tuned on `gpu`, each with its evidence (what was measured), and when."""

    name: str
    gpu: str
    rows: dict
    evidence: dict
    tuned: str


_loaded: dict = {}          # (table, gpu) -> TunedTable or None, read once per process
_names: dict = {}           # CUDA device index -> its name
_lock = threading.Lock()


def current_gpu() -> str | None:
    """The name of the GPU kernels launch on now (torch's current device), or None: no GPU, or the interpreter."""
    if interpret_requested() or not gpu_available():
        return None
    import torch

    index = torch.cuda.current_device()
    if index not in _names:
        _names[index] = torch.cuda.get_device_name(index)
    return _names[index]


def load_table(name: str, gpu: str | None = None) -> TunedTable | None:
    """The table `name` as tuned on `gpu` (default: current_gpu()), or None (none stored, TKPY_TUNED_TABLES=0)."""
    if os.environ.get(ENV, "1").strip() == "0":
        return None
    gpu = gpu or current_gpu()
    if gpu is None:
        return None
    with _lock:
        if (name, gpu) not in _loaded:
            _loaded[(name, gpu)] = _read(name, gpu)
        return _loaded[(name, gpu)]


def tuned_rows(name: str, shipped: dict) -> dict:
    """`shipped` with the rows tuned on the current GPU in place of its own (the shipped table where none are)."""
    table = load_table(name)
    return shipped if table is None else {**shipped, **table.rows}


def store_table(name: str, rows: dict, evidence: dict, gpu: str) -> TunedTable:
    """Keep `rows` (keys and values: ints, floats, strings or tuples of them) as table `name` tuned on `gpu`, each
    row's evidence a string; this process reads it from now on."""
    table = TunedTable(name, gpu, dict(rows), {k: evidence[k] for k in rows}, time.strftime("%Y-%m-%d %H:%M:%S"))
    records.store(KIND, _key(name, gpu), {"table": name, "gpu": gpu, "tuned": table.tuned,
                                          "rows": [[k, v, table.evidence[k]] for k, v in rows.items()]})
    with _lock:
        _loaded[(name, gpu)] = table
    return table


def _key(name: str, gpu: str) -> str:
    return records.record_key(KIND, name, gpu)


def _read(name: str, gpu: str) -> TunedTable | None:
    payload = records.load(KIND, _key(name, gpu))
    if payload is None or payload.get("table") != name or payload.get("gpu") != gpu:
        return None
    try:
        rows = {_tuple(k): _tuple(v) for k, v, _ in payload["rows"]}
        evidence = {_tuple(k): str(e) for k, _, e in payload["rows"]}
    except (TypeError, ValueError, KeyError):
        return None
    return TunedTable(name, gpu, rows, evidence, str(payload.get("tuned", "")))


def _tuple(value):
    """JSON's lists back as the tuples they were."""
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value
