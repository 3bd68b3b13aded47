"""Which NVRTC this environment compiles with, known without loading the library.

Loading NVRTC (cuda.bindings' module and a dlopen of libnvrtc, about 100 MB) takes 10-20 ms, much of a warm first
call, which needs only NVRTC's version (for the disk cache's key). So each process that loads it records the version
in the cache directory (records.py: a signed record, only ours is read), with the library file it came from, and a
later process takes the version from there without loading anything, where the same things choose the library (the
interpreter; the site-packages directories, whose modification times change when pip installs or removes a package;
the variables cuda-pathfinder reads; the system loader's cache) and the file is unchanged (size, modification time,
inode). Anything else, or no disk cache, is a miss: the library is loaded and recorded.
"""
from __future__ import annotations

import os
import site
import sys

from . import records

KIND = "nvrtc"
ENV_VARS = ("CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX", "LD_LIBRARY_PATH")
LOADER_CACHE = "/etc/ld.so.cache"


def _stamp(path: str) -> list | None:
    """What changes when the file or directory at `path` does (or None: there is none)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def _environment_key() -> str:
    """The record's key: what chooses the library that cuda-bindings loads (cuda-pathfinder's search: site-packages,
    conda, CUDA_PATH / CUDA_HOME, the system's loader)."""
    parts = [sys.executable, sys.prefix, repr(_stamp(LOADER_CACHE))]
    parts += [f"{name}={os.environ.get(name, '')}" for name in ENV_VARS]
    sites = list(site.getsitepackages()) + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    parts += [f"{path}:{_stamp(path)}" for path in sites]
    return records.record_key(KIND, *parts)


def recorded() -> tuple[int, int] | None:
    """The version recorded by the last process of this environment that loaded NVRTC, if its library file is
    unchanged; None otherwise."""
    payload = records.load(KIND, _environment_key())
    if payload is None:
        return None
    try:
        version, library, stamp = payload["version"], payload["library"], payload["stamp"]
        if _stamp(library) != stamp:
            return None
        major, minor = version
    except (KeyError, TypeError, ValueError):
        return None
    return int(major), int(minor)


def record(version: tuple[int, int]) -> None:
    """Record `version` with the library file cuda-bindings loaded it from (cuda-pathfinder's, already loaded;
    nothing is recorded where that cannot be told)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        library = os.path.realpath(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:       # noqa: BLE001 - an older cuda-pathfinder, a library it did not load: no record
        return
    stamp = _stamp(library)
    if stamp is not None:
        records.store(KIND, _environment_key(), {"version": list(version), "library": library, "stamp": stamp})


__all__ = ["record", "recorded"]
