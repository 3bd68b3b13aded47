"""What the policy tests share (tests/test_attention_policy.py, tests/test_gemm_policy.py): a golden record of a
policy's choices in tests/golden/, compared with what the policy chooses now or written anew
(`python tests/test_<kernel>_policy.py --write`), and the check that each tuning table's rows carry their evidence."""
from __future__ import annotations

import json
import sys

import pytest


def check(path: str, got: dict) -> None:
    """The choices `got` (case -> choice) are the record's at `path`, case by case."""
    with open(path) as f:
        golden = json.load(f)
    assert got.keys() == golden.keys(), "the grid changed: regenerate the record (--write)"
    changed = {name: (golden[name], got[name]) for name in golden if golden[name] != got[name]}
    assert not changed, f"{len(changed)} choices changed, e.g. {list(changed.items())[:3]}"


def write_if_asked(path: str, current) -> None:
    """With `--write` on the command line, the record of current(monkeypatch) written to `path`."""
    if sys.argv[1:] != ["--write"]:
        return
    with pytest.MonkeyPatch.context() as mp:
        record = current(mp)
    with open(path, "w") as f:
        json.dump(record, f, indent=0, sort_keys=False)
        f.write("\n")
    print(len(record), "choices written to", path)


def check_evidence(policy) -> None:
    """policy.EVIDENCE names, for each tuning table of the policy, the measurement behind each of its rows (table ->
    key -> evidence; a scalar setting's, one string citing RESULTS.md); each of policy.SLOWER_VARIANTS (the
    variants that left the kernel) names the runs that measured it."""
    for table, rows in policy.EVIDENCE.items():
        values = getattr(policy, table)
        if isinstance(rows, dict):
            keys = values if isinstance(values, (set, dict)) else rows
            assert set(keys) == set(rows), table
            assert all(isinstance(e, str) and e for e in rows.values()), table
        else:
            assert isinstance(rows, str) and "RESULTS.md" in rows, table
    assert all("RESULTS.md run" in runs for runs in policy.SLOWER_VARIANTS.values())
