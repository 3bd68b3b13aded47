"""What the attention kernel's K/V loads cost: the kernel attention() runs against cuDNN, with its producer's loads
changed in the generated CUDA (an upper bound, not a kernel: the outputs of the changed kernels are wrong).

    PYTHONPATH=. python3 benchmarks/attention_loads.py [LOADS...] [--rounds R]     (default: every LOADS, 3 rounds)

LOADS: "as is"; "first stages" -- each block loads its first task's first `stages` stages, later steps arrive on
their barrier with no bytes (stale tiles); "K only" -- V likewise, K loaded (half the bytes); "same tile" -- every step
loads key tile 0 of its head (as many bytes, always in the L2). Each variant runs in its own process (the patch hooks
the compile step of that process), timed against cuDNN in interleaved rounds (bench_attention.py's compare).
RESULTS.md runs 87-88: without the loads the D128 kernel ran 1.04-1.09x cuDNN instead of 0.86-0.94x.
Covers the kernels whose producer issues one `expect_bytes` and the K and V loads per step (one ring: D128, D256,
and D64 with 2 consumer warpgroups); the split-ring kernels are refused by the patch's check.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [(16, 16, 4096, 128, False), (16, 16, 4096, 128, True), (4, 16, 16384, 128, False),
         (16, 16, 1024, 128, False)]
EXPECT = re.compile(r"if \(laneid == 0\) tk::expect_bytes\(&arrived\[stage\], (\d+)\);")
LOAD = r"if \(laneid == 0\) (tk::tma::load_async\({}\[stage\])"
FIRST = "const bool load_ = i0 == block_x && i1 < {stages};"   # the producer's task and step counters


def first_stages(source: str, stages: int = 3) -> str:
    source = _sub(EXPECT, FIRST.format(stages=stages) + r" if (laneid == 0) tk::expect_bytes(&arrived[stage], "
                  r"load_ ? \1 : 0);", source)
    for tile in ("k", "v"):
        source = _sub(LOAD.format(tile), r"if (laneid == 0 && load_) \1", source)
    return source


def k_only(source: str, stages: int = 3) -> str:
    source = _sub(EXPECT, FIRST.format(stages=stages) + r" if (laneid == 0) tk::expect_bytes(&arrived[stage], "
                  r"load_ ? \1 : \1 / 2);", source)
    return _sub(LOAD.format("v"), r"if (laneid == 0 && load_) \1", source)


def same_tile(source: str, stages: int = 3) -> str:
    return _sub(re.compile(r"i1 \* \d+, 0, &arrived\[stage\]"), "0, 0, &arrived[stage]", source, count=2)


VARIANTS = {"as is": lambda source, stages=3: source, "first stages": first_stages, "K only": k_only,
            "same tile": same_tile}


def _sub(pattern, replacement: str, source: str, count: int = 1) -> str:
    out, n = re.subn(pattern, replacement, source)
    if n != count:
        what = getattr(pattern, "pattern", pattern)
        raise ValueError(f"attention_loads: the generated source has {n} matches of {what!r}, not {count}: not a "
                         "one-ring producer this script knows")
    return out


def patched(variant: str) -> None:
    """Hook this process's compile step so that every kernel compiles with VARIANTS[variant]'s change."""
    import tkpy.frontend.kernel as kernel
    change, compile_ = VARIANTS[variant], kernel.Lowered.compile

    def compile(self):
        self.source = change(self.source, stages_of(self.source))
        return compile_(self)
    kernel.Lowered.compile = compile


def stages_of(source: str) -> int:
    """The stage count of a generated attention kernel: the length of its array of K tiles."""
    return int(re.search(r"tk::st_array<tk::st<[^>]*>, (\d+)> k\{", source).group(1))


def measure(variant: str, rounds: int) -> None:
    """The kernel attention() runs, changed by `variant`, against cuDNN on CASES (bench_attention's compare)."""
    from benchmarks.bench_attention import compare
    patched(variant)
    print(f"\nloads: {variant}")
    compare(["default"], rounds, CASES, saved_as=f"attention_loads_{variant.replace(' ', '_')}.json")


def main(argv: list[str]) -> None:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    names = [a for i, a in enumerate(argv) if a != "--rounds" and (i == 0 or argv[i - 1] != "--rounds")]
    if "--one" in names:                        # (a child process: one variant)
        measure(names[names.index("--one") + 1], rounds)
        return
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown loads {unknown}; known: {', '.join(VARIANTS)}")
    for name in names or VARIANTS:
        subprocess.run([sys.executable, __file__, "--one", name, "--rounds", str(rounds)], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
