"""On-disk (and in-process) cache of compiled CUDA modules.

Layout: ``$TKPY_CACHE_DIR`` (default ``~/.cache/tkpy``) / ``<key[:2]>`` /
``<key>.cubin``, ``<key>.ptx`` and ``<key>.json`` (log, compile seconds,
kernel name, cubin sha256). Every file is written to a temporary name in the
same directory and then ``os.replace``-d, so a reader never sees a partial
file and concurrent processes writing the same entry are harmless (they write
identical bytes). The ``.json`` file is written last and carries the cubin's
hash, so a reader that finds it can trust the cubin next to it; anything
inconsistent is treated as a miss.

``TKPY_CACHE=0`` disables both the disk cache and the in-process memo (every
``compile_cuda`` call then runs NVRTC: useful when debugging the compiler).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

#: Bump whenever the key's inputs or the on-disk layout change meaning.
CACHE_FORMAT_VERSION = 1


def cache_enabled() -> bool:
    return os.environ.get("TKPY_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    env = os.environ.get("TKPY_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tkpy"


def cache_key(
    source: str,
    kernel_name: str,
    options: tuple[str, ...],
    nvrtc_version: tuple[int, int],
    arch: str,
) -> str:
    """sha256 over everything that determines the compiled output."""
    h = hashlib.sha256()
    for part in (
        f"tkpy-cache-v{CACHE_FORMAT_VERSION}",
        f"nvrtc-{nvrtc_version[0]}.{nvrtc_version[1]}",
        arch,
        kernel_name,
        "\x1f".join(options),
        source,
    ):
        b = part.encode()
        h.update(len(b).to_bytes(8, "little"))  # length-prefix: no ambiguity
        h.update(b)
    return h.hexdigest()


def _paths(key: str, root: Path | None = None) -> tuple[Path, Path, Path]:
    d = (root or cache_dir()) / key[:2]
    return d / f"{key}.cubin", d / f"{key}.ptx", d / f"{key}.json"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store(
    key: str,
    *,
    kernel_name: str,
    cubin: bytes,
    ptx: str,
    log: str,
    compile_seconds: float,
) -> bool:
    """Write an entry; returns False (never raises) if the cache is unwritable."""
    cubin_p, ptx_p, meta_p = _paths(key)
    meta = {
        "format": CACHE_FORMAT_VERSION,
        "kernel_name": kernel_name,
        "log": log,
        "compile_seconds": compile_seconds,
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "cubin_size": len(cubin),
    }
    try:
        cubin_p.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(cubin_p, cubin)
        _atomic_write(ptx_p, ptx.encode())
        _atomic_write(meta_p, json.dumps(meta).encode())  # last: marks entry complete
        return True
    except OSError:
        return False


def load(key: str) -> dict | None:
    """Return ``{kernel_name, cubin, ptx, log, compile_seconds}`` or None on miss.

    Any unreadable or inconsistent entry is a miss (the caller recompiles and
    overwrites it).
    """
    cubin_p, ptx_p, meta_p = _paths(key)
    try:
        meta = json.loads(meta_p.read_bytes())
        if meta.get("format") != CACHE_FORMAT_VERSION:
            return None
        cubin = cubin_p.read_bytes()
        if len(cubin) != meta["cubin_size"] or hashlib.sha256(cubin).hexdigest() != meta["cubin_sha256"]:
            return None
        ptx = ptx_p.read_text()
        return {
            "kernel_name": meta["kernel_name"],
            "cubin": cubin,
            "ptx": ptx,
            "log": meta["log"],
            "compile_seconds": float(meta["compile_seconds"]),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def entry_paths(key: str) -> dict[str, Path]:
    """Where an entry lives (for users who want to inspect the cubin/ptx)."""
    cubin_p, ptx_p, meta_p = _paths(key)
    return {"cubin": cubin_p, "ptx": ptx_p, "meta": meta_p}


__all__ = [
    "CACHE_FORMAT_VERSION",
    "cache_enabled",
    "cache_dir",
    "cache_key",
    "store",
    "load",
    "entry_paths",
]
