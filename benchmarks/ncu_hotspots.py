"""Where a kernel's warps stall, instruction by instruction, from Nsight Compute's PC sampling.

    python3 benchmarks/ncu_hotspots.py REGEX [--top N] -- python3 benchmarks/profile_cases.py CASE...

Profiles the second launch of the kernels whose name matches REGEX (ncu, clocks left alone), then prints
the SASS instructions with the most warp-state samples, each with its top stall reasons, and a summary of
samples per opcode. Needs ncu on the PATH (the GPU machine has it).
"""
from __future__ import annotations

import collections
import csv
import io
import os
import subprocess
import sys
import tempfile


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    regex, top = options[0], int(options[options.index("--top") + 1]) if "--top" in options else 40
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report")
        subprocess.run(["ncu", "--clock-control", "none", "-k", f"regex:{regex}", "--launch-skip", "1",
                        "--launch-count", "1", "--section", "SourceCounters", "--section", "WarpStateStats",
                        "-o", report, *command], check=True, stdout=subprocess.DEVNULL)
        text = subprocess.run(["ncu", "-i", report + ".ncu-rep", "--page", "source", "--csv", "--print-source",
                               "sass"], check=True, capture_output=True, text=True).stdout
    if os.environ.get("OUT"):                      # the whole table, to study off the GPU machine
        with open(os.path.join(os.environ["OUT"], f"hotspots_{regex.strip('^$').replace('|', '_')}.csv"), "w") as f:
            f.write(text)
    rows = list(csv.DictReader(io.StringIO(text[text.index('"'):])))
    print("columns:", list(rows[0])[:60] if rows else None)
    if not rows:
        raise SystemExit("ncu printed no source rows")
    sample_col = next(c for c in rows[0] if c.startswith("Warp Stall Sampling (All"))
    reasons = [c for c in rows[0] if c.startswith("stall_") or c.endswith("(All Samples)") and c != sample_col]

    def number(x) -> float:
        try:
            return float(x.replace(",", ""))
        except (AttributeError, ValueError):
            return 0.0
    total = sum(number(r[sample_col]) for r in rows) or 1.0
    print(f"{len(rows)} SASS instructions, {total:.0f} warp samples; columns: {', '.join(reasons[:30])}")
    by_opcode = collections.Counter()
    for r in rows:
        by_opcode[r["Source"].split()[0] if r["Source"].split() else "?"] += number(r[sample_col])
    print("samples by opcode: " + ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in by_opcode.most_common(15)))
    hot = sorted(rows, key=lambda r: -number(r[sample_col]))[:top]
    for r in sorted(hot, key=lambda r: r["Address"]):
        stalls = sorted(((number(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c.replace('stall_', '')} {n:.0f}" for n, c in stalls if n)
        print(f"{r['Address']:>8} {100 * number(r[sample_col]) / total:5.1f}%  {r['Source'][:60]:<60} {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
