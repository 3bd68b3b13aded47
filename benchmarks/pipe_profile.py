"""How busy each pipe of the SM is in tkpy's attention kernel and in SDPA's cuDNN and flash kernels (Nsight Compute).

    python3 benchmarks/pipe_profile.py B H N D causal(0/1) [key=value ...]

Profiles the last of the three launches of each kernel that benchmarks/profile_cases.py runs (tkpy: attention(),
or kernels.attention._launch with the options given; SDPA cuDNN; SDPA flash) with ncu's SpeedOfLight,
ComputeWorkloadAnalysis, SchedulerStats and InstructionStats sections, clocks left alone, and prints per kernel
its duration, TFLOP/s, SM clock, issue-slot use and every pipe's share of its peak (the tensor pipes, the XU that
runs MUFU.EX2, FMA, ALU, ...). Under ncu each launch runs alone on a cold L2 at the clock the GPU picks for it: the
figures compare kernels with one another, not with a sustained benchmark. With $OUT set, the raw metrics go to
$OUT/pipes_B_H_N_D_causal.csv. Needs ncu on the PATH (the GPU machine has it).
"""
from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "SchedulerStats", "InstructionStats")
KERNELS = "regex:attention_fwd|sdpa|flash_fwd"
DURATION, CLOCK = "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second"
ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
# a pipe's share of its peak: the cycles it is busy, or the instructions it executes
PIPE = re.compile(r"^sm__(pipe_\w+_cycles_active|inst_executed_pipe_\w+)\.avg\.pct_of_peak_sustained_active$")
SECONDS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
HERTZ = {"cycle/nsecond": 1e9, "cycle/usecond": 1e6, "cycle/second": 1.0, "ghz": 1e9, "mhz": 1e6, "hz": 1.0}
SHOWN = 1.0                         # pipe columns where some kernel reaches this many percent


def main(argv: list[str]) -> None:
    b, h, n, d, causal = (int(x) for x in argv[:5])
    options = argv[5:]
    script = Path(__file__).resolve().parent / "profile_cases.py"
    command = [sys.executable, str(script), "attention", *argv[:5], *options, "--flash"]
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report")
        sections = [arg for name in SECTIONS for arg in ("--section", name)]
        pipes = tensor_pipes()
        metrics = ["--metrics", ",".join(pipes)] if pipes else []
        subprocess.run(["ncu", "--clock-control", "none", "-k", KERNELS, *sections, *metrics, "-o", report,
                        *command], check=True, stdout=subprocess.DEVNULL)
        text = subprocess.run(["ncu", "-i", report + ".ncu-rep", "--page", "raw", "--csv"], check=True,
                              capture_output=True, text=True).stdout
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"pipes_{b}_{h}_{n}_{d}_{causal}.csv").write_text(text)
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    print(f"B{b} H{h} N{n} D{d} {'causal' if causal else 'non-causal'} {' '.join(options)}")
    print(table(*last_launches(text), flops))


def tensor_pipes() -> list[str]:
    """Every tensor pipe's busy share that this ncu knows for the GH100 (the sections need not name wgmma's)."""
    text = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], check=True, capture_output=True,
                          text=True).stdout
    names = sorted(set(re.findall(r"\bsm__pipe_tensor\w*_cycles_active\b", text)))
    return [name + ".avg.pct_of_peak_sustained_active" for name in names]


def last_launches(text: str) -> tuple[list[dict], dict]:
    """The raw page's rows, the last launch of each kernel name, and the units of its metrics (its second line)."""
    units, *rows = csv.DictReader(io.StringIO(text))
    last = {}
    for row in rows:
        last[row["Kernel Name"]] = row
    return list(last.values()), units


def number(row: dict, metric: str) -> float:
    value = row.get(metric, "").replace(",", "")
    try:
        return float(value)
    except ValueError:
        return float("nan")


def table(rows: list[dict], units: dict, flops: float) -> str:
    """Per kernel: its name (shortened), microseconds, TFLOP/s, GHz, issue slots busy and the busy pipes (%)."""
    pipes = sorted({m for row in rows for m in row if PIPE.match(m) and number(row, m) >= SHOWN})
    short = {m: PIPE.match(m).group(1).replace("_cycles_active", "").replace("inst_executed_", "inst_") for m in pipes}
    header = ["kernel", "us", "TFLOP/s", "GHz", "issue %", *short.values()]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in rows:
        seconds = number(row, DURATION) * SECONDS[units[DURATION]]
        hertz = number(row, CLOCK) * HERTZ[units[CLOCK].lower()]
        cells = [row["Kernel Name"][:48], f"{seconds * 1e6:.0f}", f"{flops / seconds / 1e12:.0f}",
                 f"{hertz / 1e9:.2f}", f"{number(row, ISSUE):.1f}", *(f"{number(row, m):.1f}" for m in pipes)]
        lines.append(" | ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
