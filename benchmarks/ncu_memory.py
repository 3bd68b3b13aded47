"""Why a memory-bound kernel falls short of the copy: Nsight Compute's counters for tkpy's memory-bound ops
(profile_cases.py's memory cases), a copy of the same bytes beside them.

    python3 benchmarks/ncu_memory.py [OP:DIR[:ROWSxWIDTH][:compile] ...] [--rows R --width W]
        OP: profile_cases.MEMORY_OPS; DIR: fwd, bwd (cross_entropy: fwd, f+b); default: every op each way; a case's
        own shape over --rows/--width; compile: torch.compile's kernels for the case instead of tkpy's (the peer)
    python3 benchmarks/ncu_memory.py --gaps memory_bound.json [--below 0.9]
        every case of a bench_memory_bound.py table below that fraction of the copy or behind torch.compile: tkpy's
        kernels, and compile's where it is ahead (gap_cases)

For each kernel of each case (its last launch): GPU time, the DRAM bytes read and written and the rate, DRAM
throughput as ncu rates it (% of the peak it sustains), issue slots used (% of the SMs' peak while active: near
100, the kernel is bound by its instruction count, not by memory), warp instructions per 16 bytes of DRAM traffic,
achieved and theoretical occupancy, registers a thread, block size and waves, L2 hit rate, and the warps' top stall
reasons (cycles a warp waits per issued instruction).
Writes $OUT/ncu_memory.json where OUT is set. Needs ncu on the PATH (the GPU machine has it).
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ncu  # noqa: E402
from benchmarks.profile_cases import MEMORY_OPS  # noqa: E402

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum",
           "sm__inst_issued.avg.pct_of_peak_sustained_active")
KERNELS = "regex:^(?!.*distribution_)"       # not randn's kernels (the inputs')
COLUMNS = {"us": ("gpu__time_duration.sum", "usecond"), "read MB": ("dram__bytes_read.sum", "Mbyte"),
           "write MB": ("dram__bytes_write.sum", "Mbyte"),
           "dram %": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "%"),
           "issue %": ("sm__inst_issued.avg.pct_of_peak_sustained_active", "%"),
           "inst/16B": ("smsp__inst_executed.sum", "inst"),
           "occ %": ("sm__warps_active.avg.pct_of_peak_sustained_active", "%"),
           "theor. %": ("sm__maximum_warps_per_active_cycle_pct", "%"), "regs": ("launch__registers_per_thread", ""),
           "block": ("launch__block_size", ""), "waves": ("launch__waves_per_multiprocessor", ""),
           "L2 hit %": ("lts__t_sector_hit_rate.pct", "%")}
SCALES = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0,
          "Gbyte": 1e3, "Tbyte": 1e6}                # ncu's units -> the columns' (us, MB)


def default_cases() -> list[str]:
    return [f"{op}:{d}" for op in MEMORY_OPS for d in (("fwd",) if op == "copy" else
                                                      ("fwd", "f+b") if op == "cross_entropy" else ("fwd", "bwd"))]


def case_of(case: str, rows: int, width: int) -> tuple:
    """(op, direction, rows, width, implementation) of OP:DIR[:ROWSxWIDTH][:compile]."""
    op, direction, *rest = case.split(":")
    impl = "compile" if rest and rest[-1] == "compile" else "tkpy"
    shape = [part for part in rest if part != "compile"]
    if shape:
        rows, width = (int(n) for n in shape[0].split("x"))
    return op, direction, rows, width, impl


def gap_cases(table_rows: list[dict], below: float = 0.9) -> list[str]:
    """The cases of bench_memory_bound.py's rows (its JSON) where tkpy's GB/s is below `below` of the copy or below
    torch.compile's, the latter with their compile twins (the peer's kernels beside tkpy's)."""
    directions = {"forward": "fwd", "backward": "bwd", "forward+backward": "f+b"}
    cases = []
    for r in table_rows:
        compiled = r.get("compile")
        if not (r["tkpy"] < below * r["copy"] or compiled and r["tkpy"] < compiled):
            continue
        op = r["op"].replace(" ", "_")
        case = f"{op}:{directions[r['direction']]}" + ("" if op == "rotary" else f":{r['rows']}x{r['width']}")
        cases += [case] + ([f"{case}:compile"] if compiled and r["tkpy"] < compiled else [])
    return cases


def profile_case(case: str, rows: int, width: int) -> list[dict]:
    """One row per kernel name the case launched (its last launch)."""
    op, direction, rows, width, impl = case_of(case, rows, width)
    command = [sys.executable, str(Path(__file__).with_name("profile_cases.py")), "memory", op, direction, str(rows),
               str(width), impl]
    options = [opt for s in SECTIONS for opt in ("--section", s)] + ["--metrics", ",".join(METRICS), "-k", KERNELS,
                                                                     "--launch-count", "200"]
    text = ncu.profile(options, command, ["--page", "raw"])
    table = list(csv.reader(io.StringIO(text)))
    header, units, launches = table[0], dict(zip(table[0], table[1])), table[2:]
    kernels: dict[str, dict] = {}
    for launch in launches:
        values = dict(zip(header, launch))
        kernels[values["Kernel Name"]] = values
    return [summarize(case, name, values, units) for name, values in kernels.items()]


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


def summarize(case: str, name: str, values: dict, units: dict) -> dict:
    """The COLUMNS of one launch in their units; inst/16B: warp instructions per 16 bytes of DRAM traffic."""
    row = {"case": case, "kernel": name}
    for column, (metric, _) in COLUMNS.items():
        row[column] = _number(values.get(metric, "nan")) * SCALES.get(units.get(metric, ""), 1.0)
    moved = row["read MB"] + row["write MB"]
    row["GB/s"] = moved / row["us"] * 1e3
    row["inst/16B"] = row["inst/16B"] / (moved * 1e6 / 16) if moved else float("nan")
    stalls = {k[len(STALL_PREFIX):-len(STALL_SUFFIX)]: _number(v) for k, v in values.items()
              if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX) and "not_issued" not in k}
    row["stalls"] = dict(sorted(((k, v) for k, v in stalls.items() if v == v), key=lambda kv: -kv[1])[:3])
    return row


def table(rows: list[dict]) -> str:
    lines = [f"{'case':<22} {'kernel':<44} " + " ".join(f"{c:>8}" for c in ("GB/s", *COLUMNS)) + "  top stalls"]
    for r in rows:
        lines.append(f"{r['case']:<22} {r['kernel'][:44]:<44} " + " ".join(
            f"{r[c]:8.1f}" for c in ("GB/s", *COLUMNS)) + "  " + ", ".join(f"{k} {v:.1f}" for k, v in r["stalls"].items()))
    return "\n".join(lines)


def main(argv: list[str]) -> list[dict]:
    rows_, width = 16384, 4096
    if "--rows" in argv:
        rows_ = int(argv[argv.index("--rows") + 1])
    if "--width" in argv:
        width = int(argv[argv.index("--width") + 1])
    if "--gaps" in argv:
        below = float(argv[argv.index("--below") + 1]) if "--below" in argv else 0.9
        cases = gap_cases(json.loads(Path(argv[argv.index("--gaps") + 1]).read_text()), below)
        print(f"{len(cases)} cases: {' '.join(cases)}", flush=True)
    else:
        cases = [a for a in argv if ":" in a] or default_cases()
    rows = []
    for case in cases:
        try:
            found = profile_case(case, rows_, width)
        except Exception as error:                       # one case's failure must not cost the others
            print(f"{case}: {error}", flush=True)
            continue
        print(table(found), flush=True)
        rows += found
    print("\n" + table(rows))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "ncu_memory.json").write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
