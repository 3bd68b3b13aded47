"""The README and docs/ as a newcomer meets them: the README's code blocks (its first kernel runs as written on the
CPU, in the interpreter, and prints the CUDA the README shows; `python -m tkpy.kernels` prints the softmax demo's
source, under 200 lines, and compiles it; the quick subset's files exist; the PyTorch block runs as written on a
GPU); every repository path the README and docs/ name exists; every doc the README links to exists; the
contributing guide's layout names every module of kernels/, examples/, benchmarks/ and the prelude."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from gpu_util import on_gpu
from tkpy.kernels.row_softmax import softmax_rows

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:tkpy|kernels|tests|benchmarks|examples|docs)/[\w/.*-]+)`")


def block(heading: str, language: str = "python") -> str:
    """The README's first ```language block under `heading`."""
    section = README.split(heading, 1)[1]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def first_kernel() -> str:
    return block("## Your first kernel")


def plain_env(tmp_path) -> dict:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TKPY_CACHE_DIR": str(tmp_path / "cache"),
            "HOME": str(tmp_path)}


def test_the_first_kernel_runs_on_the_cpu_as_written(tmp_path):
    """...and prints the CUDA whose lines the README shows (saved as first.py, the file those lines name)."""
    script = tmp_path / "first.py"
    script.write_text(first_kernel())
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=plain_env(tmp_path),
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "__global__" in done.stdout and block("## Your first kernel", "cpp") in done.stdout


def test_the_demo_command_prints_the_softmax_source_and_compiles_it(tmp_path):
    """`python -m tkpy.kernels` without a GPU: the softmax demo's CUDA (softmax_rows, bf16 rows of 64), under 200
    lines, then its compile (and its backward's, and the wide rows' kernels) to sm_90a cubins."""
    assert "python -m tkpy.kernels" in block("Then the two commands", "bash")
    env = {**plain_env(tmp_path), "TKPY_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}     # (no GPU, on one too)
    done = subprocess.run([sys.executable, "-m", "tkpy.kernels"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    source, _, compiled = done.stdout.partition("// ---- end of prelude ----\n")
    kernel = compiled.split("\n\n// No Hopper GPU found")[0]
    x = torch.empty(1024, 64, dtype=torch.bfloat16)
    assert source + _ + kernel + "\n" == softmax_rows.source(x, x, 64)
    assert len((source + _ + kernel).splitlines()) < 200
    assert "// No Hopper GPU found: compiled softmax_rows to an sm_90a cubin" in done.stdout


def test_the_quick_subset_is_stated_and_its_files_exist():
    """The README's first screen says how long the suite takes and names a quick subset of test files."""
    first_screen = README.split("## Your first kernel")[0]
    assert re.search(r"python -m pytest -q +# the tests: about \d+ minutes on two CPU cores", first_screen)
    quick = re.search(r"A quick subset, about a minute: `python -m pytest -q ([^`]+)`", first_screen)
    files = quick.group(1).split()
    assert files and all((ROOT / f).is_file() for f in files), files


@on_gpu
def test_the_pytorch_block_runs_as_written_on_a_gpu(tmp_path):
    script = tmp_path / "ops.py"
    script.write_text(block("## PyTorch: the kernels as torch operators"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TKPY_INTERPRET": "0"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        for path in PATH.findall(doc.read_text()):
            pattern = path.rstrip(".")
            if not (any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()):
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_the_readme_links_to_docs_that_exist():
    links = re.findall(r"\]\(((?:docs|benchmarks)/[^)]+)\)", README)
    assert len(links) >= 6
    assert all((ROOT / link).exists() for link in links), links


def test_the_contributing_layout_names_every_module():
    """docs/contributing.md's layout table names each module of kernels/, examples/ and benchmarks/ in its folder's
    row, and its guide to adding an op each area module of the prelude."""
    text = (ROOT / "docs" / "contributing.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}
    missing = [f"{folder}{path.stem}" for folder in ("kernels/", "examples/", "benchmarks/")
               for path in sorted((ROOT / folder).glob("*.py"))
               if path.stem != "__init__" and not re.search(rf"`{path.stem}(\.py)?`", rows[folder])]
    guide = text.split("4. **Codegen**", 1)[1].split("5. **", 1)[0]
    missing += [f"tkpy/codegen/prelude/{path.name}" for path in sorted((ROOT / "tkpy/codegen/prelude").glob("*.py"))
                if path.stem not in ("__init__", "helpers", "cpp", "debug") and f"`{path.name}`" not in guide]
    assert not missing, f"docs/contributing.md does not name {missing}"
