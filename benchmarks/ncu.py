"""Nsight Compute for the profiling scripts (pipe_profile.py, ncu_hotspots.py): profile a command into a temporary
report, clocks left alone, and read one page of it back as CSV. Needs ncu on the PATH (the GPU machine has it)."""
from __future__ import annotations

import os
import subprocess
import tempfile


def profile(ncu_options: list[str], command: list[str], page: list[str]) -> str:
    """The CSV text of `page` (ncu -i's options, e.g. ["--page", "raw"]) of the report that `ncu_options` (kernel
    filter, sections, launches) take of `command`."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report")
        subprocess.run(["ncu", "--clock-control", "none", *ncu_options, "-o", report, *command], check=True,
                       stdout=subprocess.DEVNULL)
        return subprocess.run(["ncu", "-i", report + ".ncu-rep", *page, "--csv"], check=True, capture_output=True,
                              text=True).stdout
