"""The README and docs/ as a newcomer meets them: the README's first kernel runs as written on the CPU (the
interpreter) and prints its CUDA; every repository path the README and docs/ name exists; every doc the README
links to exists."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:tkpy|kernels|tests|benchmarks|examples|docs)/[\w/.*-]+)`")


def first_kernel() -> str:
    """The README's first ```python block under "Your first kernel"."""
    section = README.split("## Your first kernel", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_first_kernel_runs_on_the_cpu_as_written(tmp_path):
    script = tmp_path / "first.py"
    script.write_text(first_kernel())
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TKPY_CACHE_DIR": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tk::row_max(m, t);" in done.stdout and "__global__" in done.stdout


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
