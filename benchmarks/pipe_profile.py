"""How busy each pipe of the SM is in tkpy's attention kernel and in SDPA's cuDNN and flash kernels (Nsight Compute).

    python3 benchmarks/pipe_profile.py B H N D causal(0/1) [key=value ...]
    python3 benchmarks/pipe_profile.py attention_bwd B H N D causal(0/1)   (the backward's kernels: tkpy's, cuDNN's,
                                                                            flash's; TFLOP/s at 2.5x the forward's)
    python3 benchmarks/pipe_profile.py --csv pipes_B_H_N_D_causal.csv        (a report saved to $OUT before)

Profiles the last of the three launches of each kernel that benchmarks/profile_cases.py runs (tkpy: attention(), or
kernels.attention._launch with the options given; SDPA cuDNN; SDPA flash) with ncu's SpeedOfLight,
ComputeWorkloadAnalysis, SchedulerStats and InstructionStats sections, clocks left alone, and prints per kernel its
duration, TFLOP/s, SM clock, issue-slot use and the busy share of the pipes that matter here (PIPES: the tensor
pipe, the XU that runs MUFU.EX2, FMA, ALU, ...). Under ncu each launch runs alone on a cold L2 at the clock the GPU
picks for it: the figures compare kernels with one another, not with a sustained benchmark. With $OUT set, the raw
metrics go to $OUT/pipes_B_H_N_D_causal.csv. Needs ncu on the PATH (the GPU machine has it).
"""
from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ncu  # noqa: E402

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "SchedulerStats", "InstructionStats", "LaunchStats")
KERNELS = {"attention": "regex:attention_fwd|sdpa|flash_fwd", "attention_bwd": "regex:attention_bwd|bprop|flash_bwd"}
FLOPS = {"attention": 1.0, "attention_bwd": 2.5}     # relative to the forward's
DURATION, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
REGISTERS = "launch__registers_per_thread"
# (column, metric): each pipe's share of its peak, by the cycles it is busy or the instructions it executes. tensor
# counts wgmma and mma.sync alike, but mma.sync (flash's) runs at about half wgmma's rate on Hopper; xu is
# the MUFU (the exponentials) with the conversions; adu takes the barriers.
PIPES = (("tensor", "sm__pipe_tensor_cycles_active"), ("xu", "sm__inst_executed_pipe_xu"),
         ("fma", "sm__pipe_fma_cycles_active"), ("alu", "sm__pipe_alu_cycles_active"),
         ("adu", "sm__inst_executed_pipe_adu"), ("uniform", "sm__inst_executed_pipe_uniform"))
SECONDS = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0,
           "second": 1.0}
HERTZ = {"ghz": 1e9, "mhz": 1e6, "khz": 1e3, "hz": 1.0, "cycle/nsecond": 1e9, "cycle/usecond": 1e6,
         "cycle/second": 1.0}


def main(argv: list[str]) -> None:
    if argv[0] == "--csv":
        b, h, n, d, causal = (int(x) for x in Path(argv[1]).stem.split("_")[1:6])
        factor = FLOPS["attention_bwd" if Path(argv[1]).stem.endswith("_bwd") else "attention"]
        print(table(*last_launches(Path(argv[1]).read_text()), factor * flops_of(b, h, n, d, causal)))
        return
    what = argv.pop(0) if argv[0] in KERNELS else "attention"
    b, h, n, d, causal = (int(x) for x in argv[:5])
    options = argv[5:]
    script = Path(__file__).resolve().parent / "profile_cases.py"
    command = [sys.executable, str(script), what, *argv[:5], *options, "--flash"]
    sections = [arg for name in SECTIONS for arg in ("--section", name)]
    text = ncu.profile(["-k", KERNELS[what], *sections], command, ["--page", "raw"])
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"pipes_{b}_{h}_{n}_{d}_{causal}{'_bwd' if what != 'attention' else ''}.csv"
             ).write_text(text)
    print(f"{what} B{b} H{h} N{n} D{d} {'causal' if causal else 'non-causal'} {' '.join(options)}")
    print(table(*last_launches(text), FLOPS[what] * flops_of(b, h, n, d, causal)))


def flops_of(b: int, h: int, n: int, d: int, causal: int) -> float:
    """Attention's forward FLOPs, causal counted at half."""
    return 4 * b * h * n * n * d / (2 if causal else 1)


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
    """Per kernel: its name (shortened), microseconds, TFLOP/s, GHz, registers per thread, issue slots busy and the
    pipes (% of peak)."""
    header = ["kernel", "us", "TFLOP/s", "GHz", "regs", "issue %", *(name for name, _ in PIPES)]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in rows:
        seconds = number(row, DURATION) * SECONDS[units[DURATION].lower()]
        hertz = number(row, CLOCK) * HERTZ[units[CLOCK].lower()]
        cells = [row["Kernel Name"][:48], f"{seconds * 1e6:.0f}", f"{flops / seconds / 1e12:.0f}",
                 f"{hertz / 1e9:.2f}", f"{number(row, REGISTERS):.0f}", f"{number(row, ISSUE):.1f}",
                 *(f"{number(row, metric + '.avg.pct_of_peak_sustained_active'):.1f}" for _, metric in PIPES)]
        lines.append(" | ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
