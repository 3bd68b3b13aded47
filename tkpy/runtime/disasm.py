"""SASS disassembly of a CUBIN with nvdisasm (host-only; no GPU needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from . import cache
from .errors import TkpyRuntimeError

_INSTALL_HINT = "pip install nvidia-cuda-nvdisasm"


@lru_cache(maxsize=1)
def find_nvdisasm() -> str | None:
    """Locate nvdisasm: cuda-pathfinder, then pip wheels' ``nvidia/cu*/bin``, then PATH."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility  # cuda-pathfinder >= 1.4-ish

        p = find_nvidia_binary_utility("nvdisasm")
        if p:
            return str(p)
    except Exception:  # older pathfinder without it, or its own lookup failed
        pass
    for entry in sys.path:
        nv = Path(entry) / "nvidia"
        if not nv.is_dir():
            continue
        for cand in sorted(nv.glob("cu*/bin/nvdisasm"), reverse=True) + [nv / "cuda_nvdisasm" / "bin" / "nvdisasm"]:
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return shutil.which("nvdisasm")


def _nvdisasm() -> str:
    p = find_nvdisasm()
    if p is None:
        raise TkpyRuntimeError(f"nvdisasm not found; {_INSTALL_HINT} (or put a CUDA toolkit's bin on PATH)")
    return p


_FILE_LINE_RE = re.compile(r'^(\s*)//## File "[^"]*", line (\d+)(.*)$')


def sass(cubin: bytes, *, line_info: bool = True, source: str | None = None, timeout: float = 120.0) -> str:
    """Disassemble ``cubin`` to SASS text (``nvdisasm -c [-g]``).

    With ``line_info`` the text carries ``//## File "...", line N`` comments
    (the module must be compiled with ``-lineinfo``, which compile_cuda does).
    If ``source`` (the generated CUDA source) is given, each such comment gets
    the generated line's ``// file.py:LINE  op`` marker appended, so SASS can
    be read against the user's Python code.
    """
    exe = _nvdisasm()
    fd, path = tempfile.mkstemp(suffix=".cubin", prefix="tkpy_")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        args = [exe, "-c"] + (["-g"] if line_info else []) + [path]
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 and line_info:
            # -g fails on cubins without line tables in some versions; retry plain.
            r = subprocess.run([exe, "-c", path], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise TkpyRuntimeError(f"nvdisasm failed (rc={r.returncode}): {r.stderr.strip()}")
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    text = r.stdout
    if source is not None and line_info:
        text = annotate_with_python_lines(text, source)
    return text


def module_sass(module) -> str:
    """The SASS (with line info) of a CompiledModule, disassembled once per cubin: from the disk cache beside the
    cubin's entry (cache.load_text: only what tkpy wrote), else by nvdisasm, then kept there. The caller keeps it
    in memory (Compiled.sass)."""
    text = cache.load_text(module.key, "sass")
    if text is None:
        text = sass(module.cubin)
        cache.store_text(module.key, "sass", text)
    return text


def annotate_with_python_lines(sass_text: str, source: str) -> str:
    """Append the nearest ``// file.py:LINE`` marker to nvdisasm line comments."""
    from .nvrtc import find_python_origin

    src_lines = source.splitlines()
    out = []
    for line in sass_text.splitlines():
        m = _FILE_LINE_RE.match(line)
        if m:
            origin = find_python_origin(src_lines, int(m.group(2)))
            if origin is not None:
                loc, op = origin
                line = f"{line}   <- {loc}" + (f" {op}" if op else "")
        out.append(line)
    return "\n".join(out) + ("\n" if sass_text.endswith("\n") else "")


__all__ = ["sass", "module_sass", "find_nvdisasm", "annotate_with_python_lines"]
