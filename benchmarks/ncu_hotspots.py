"""Where a kernel's warps stall, instruction by instruction, from Nsight Compute's PC sampling.

    python3 benchmarks/ncu_hotspots.py REGEX [--top N] -- python3 benchmarks/profile_cases.py CASE...
    python3 benchmarks/ncu_hotspots.py --csv hotspots_NAME.csv [N]     (a table saved to $OUT before)

Profiles the second launch of the kernels whose name matches REGEX (ncu, clocks left alone), then prints
the SASS instructions with the most warp-state samples, each with its top stall reasons, and a summary of
samples per opcode. Needs ncu on the PATH (the GPU machine has it).
"""
from __future__ import annotations

import collections
import csv
import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import ncu  # noqa: E402


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    regex, top = options[0], int(options[options.index("--top") + 1]) if "--top" in options else 40
    text = ncu.profile(["-k", f"regex:{regex}", "--launch-skip", "1", "--launch-count", "1", "--section",
                        "SourceCounters", "--section", "WarpStateStats"], command,
                       ["--page", "source", "--print-source", "sass"])
    if os.environ.get("OUT"):                      # the whole table, to study off the GPU machine
        with open(os.path.join(os.environ["OUT"], f"hotspots_{regex.strip('^$').replace('|', '_')}.csv"), "w") as f:
            f.write(text)
    report_text(text, top)


def report_text(text: str, top: int) -> None:
    """Print the hot instructions of ncu's source-page CSV (its first line names the kernel)."""
    rows = list(csv.DictReader(io.StringIO(text[text.index("\n") + 1:])))
    if not rows:
        raise SystemExit("ncu printed no source rows")
    sample_col = next(c for c in rows[0] if c.startswith("Warp Stall Sampling (All"))
    reasons = [c for c in rows[0] if c.startswith("stall_") and not c.endswith("(Not Issued)")]

    def number(x) -> float:
        try:
            return float(x.replace(",", ""))
        except (AttributeError, ValueError):
            return 0.0
    total = sum(number(r[sample_col]) for r in rows) or 1.0
    print(f"{len(rows)} SASS instructions, {total:.0f} warp samples")
    per_reason = {c: sum(number(r[c]) for r in rows) for c in reasons}
    print("samples by reason: " + ", ".join(f"{c.replace('stall_', '')} {100 * n / total:.1f}%"
                                             for c, n in sorted(per_reason.items(), key=lambda x: -x[1])[:10]))
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
    if sys.argv[1] == "--csv":                      # a CSV saved by an earlier run
        report_text(open(sys.argv[2]).read(), int(sys.argv[3]) if len(sys.argv) > 3 else 40)
    else:
        main(sys.argv[1:])
