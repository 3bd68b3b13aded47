"""`tkpy.kernels` in a source checkout.

The repository keeps its kernels in the top-level folder `kernels/`; an installed tkpy (a wheel, `pip install .`)
carries that folder as the package `tkpy/kernels/`. Run from a checkout without an install (`PYTHONPATH=.`),
`tkpy/` has no `kernels/` beside its modules, so this finder maps exactly the name `tkpy.kernels` to the checkout's
`kernels/` folder; its submodules are then found through the package's `__path__` as usual. Nothing else is
mapped: a bare top-level `kernels` is never made importable (it would collide with Hugging Face's `kernels`).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
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


def expose_kernels(package_dir: str) -> None:
    """Map `tkpy.kernels` to the checkout's `kernels/` when tkpy runs from a checkout (`package_dir` is tkpy's
    folder); an installed tkpy has its own `kernels/` and needs nothing."""
    here = Path(package_dir)
    folder = here.parent / "kernels"
    if (here / "kernels").is_dir() or not (folder / "__init__.py").is_file() \
            or not (here.parent / "pyproject.toml").is_file():
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CheckoutKernels)]
    sys.meta_path.insert(0, _CheckoutKernels(folder))   # first: the kernels beside the tkpy imported, whatever
                                                        # else (another checkout's editable install) maps the name
