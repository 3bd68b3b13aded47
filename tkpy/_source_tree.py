"""`tkpy.kernels` in a source checkout, and the digest of tkpy's files.

The repository keeps its kernels in the top-level folder `kernels/`; an installed tkpy (a wheel, `pip install .`)
carries that folder as the package `tkpy/kernels/`. Run from a checkout without an install (`PYTHONPATH=.`),
`tkpy/` has no `kernels/` beside its modules, so this finder maps exactly the name `tkpy.kernels` to the checkout's
`kernels/` folder; its submodules are then found through the package's `__path__` as usual. Nothing else is
mapped: a bare top-level `kernels` is never made importable (it would collide with Hugging Face's `kernels`).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

NAME = "tkpy.kernels"


class _CheckoutKernels:
    """A meta-path finder for the one name `tkpy.kernels`, read from `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        return importlib.util.spec_from_file_location(NAME, self.folder / "__init__.py",
                                                      submodule_search_locations=[str(self.folder)])


def kernels_folder(package_dir: str) -> Path | None:
    """The checkout's `kernels/` where tkpy runs from a checkout (`package_dir` is tkpy's folder), else None (an
    installed tkpy has its own `kernels/`)."""
    here = Path(package_dir)
    folder = here.parent / "kernels"
    if (here / "kernels").is_dir() or not (folder / "__init__.py").is_file() \
            or not (here.parent / "pyproject.toml").is_file():
        return None
    return folder


def expose_kernels(package_dir: str) -> None:
    """Map `tkpy.kernels` to the checkout's `kernels/` when tkpy runs from a checkout; an installed tkpy has its own
    `kernels/` and needs nothing."""
    folder = kernels_folder(package_dir)
    if folder is None:
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CheckoutKernels)]
    sys.meta_path.insert(0, _CheckoutKernels(folder))   # first: the kernels beside the tkpy imported, whatever
                                                        # else (another checkout's editable install) maps the name


@functools.cache
def tree_digest() -> str:
    """sha256 (hex) of tkpy's files (its folder, and the checkout's kernels/ where `tkpy.kernels` comes from there):
    paths, sizes and modification times, what Python's own bytecode cache checks. Made once a process (~1.5 ms;
    `import tkpy` starts it on a thread): part of the key of what tkpy records about its own code
    (frontend/spec_records.py)."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for top in filter(None, (package, kernels_folder(str(package)))):
        _add_files(h, top, top.name + "/")
    return h.hexdigest()


def _add_files(h, folder, prefix: str) -> None:
    with os.scandir(folder) as found:
        entries = sorted(found, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__" and not entry.name.startswith("."):
                _add_files(h, entry.path, f"{prefix}{entry.name}/")
        else:
            st = entry.stat()
            h.update(f"{prefix}{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
