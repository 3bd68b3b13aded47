"""The installed package: a wheel built from this checkout, installed into a fresh virtual environment, imports
`tkpy.kernels` from any directory (and carries no top-level `kernels`, which would collide with Hugging Face's);
pyproject's package list names every package of the tree."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_lists_every_package():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tkpy").rglob("__init__.py")}
    assert set(config["packages"]) == found | {"tkpy.kernels"}
    assert config["package-dir"] == {"tkpy.kernels": "kernels"}


def test_checkout_has_no_top_level_kernels_package():
    """In a checkout the folder is importable only as tkpy.kernels; its old name says what to import."""
    with pytest.raises(ImportError, match="import tkpy.kernels"):
        __import__("kernels")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout's files (setuptools' in-tree build/ would keep stale modules)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, source, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".*venv*", ".whl", ".out", "benchmarks", "tests"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                           capture_output=True, text=True)
    if build.returncode and "setuptools" in build.stderr and ("No matching distribution" in build.stderr
                                                              or "connection" in build.stderr.lower()):
        pytest.skip("no package index to fetch the build backend (setuptools) from (e.g. the offline GPU machine)")
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("tkpy-*.whl")
    return path


def test_wheel_carries_the_kernels_as_tkpy_kernels(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {"tkpy/kernels/__init__.py", "tkpy/kernels/attention_forward.py", "tkpy/kernels/matmul_op.py",
            "tkpy/runtime/native_launch.c"} <= set(names)
    assert not [n for n in names if n.startswith(("kernels/", "examples/"))]     # examples/ is not a package


def test_wheel_in_a_fresh_venv_imports_from_any_directory(wheel, tmp_path):
    """`pip install` of the wheel into a new environment (its dependencies: this environment's, through a .pth
    file, so that nothing is downloaded), then the issue's import from an unrelated directory."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, text=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    import torch
    dependencies = {str(Path(torch.__file__).parent.parent), sysconfig.get_paths()["purelib"]}
    Path(site, "dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = ("import tkpy, tkpy.kernels\n"
              "from tkpy.kernels import attention, matmul, matmul_fp8, softmax, scaled_dot_product_attention\n"
              "import torch\n"
              "assert hasattr(torch.ops.tkpy, 'matmul')\n"
              "print(tkpy.__file__, tkpy.kernels.__file__)\n"
              "try:\n    import kernels\nexcept ImportError:\n    print('no top-level kernels')\n")
    result = subprocess.run([str(python), "-c", script], cwd=elsewhere, capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stderr
    tkpy_file, kernels_file = result.stdout.split("\n")[0].split()
    assert tkpy_file.startswith(site) and kernels_file == str(Path(site, "tkpy", "kernels", "__init__.py"))
    assert "no top-level kernels" in result.stdout
