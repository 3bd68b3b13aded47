"""Small signed JSON records in the cache directory: autotuning's winners, the kernels' tuned tables, NVRTC's version.

A record lives at ``<cache root>/<kind>/<key[:2]>/<key>.json`` (`kind`: "autotune", "tables", "nvrtc"), `key` a sha256 of
what the caller says determines it (:func:`record_key`). It is trusted as the compiled modules are (cache.py):
written atomically by this user into the private cache directory, with an HMAC-SHA256 under the directory's key
file; a file that is not ours, is writable by others, does not parse or whose MAC does not match is a miss, never
an error. ``TKPY_CACHE=0`` (or no safe directory) keeps nothing: every load is a miss, every store a no-op.
"""
from __future__ import annotations

import contextlib
import hmac
import json
from pathlib import Path

from . import cache

FORMAT = 1


def record_key(*parts: str) -> str:
    """sha256 (hex) of the length-prefixed `parts`, with the record format."""
    return cache.digest(*(p.encode() for p in (f"tkpy-record-v{FORMAT}", *parts)))


def _path(kind: str, key: str) -> Path | None:
    r = cache.root()
    return None if r is None else r / kind / key[:2] / f"{key}.json"


def _mac(secret: bytes, kind: str, key: str, payload: bytes) -> str:
    return cache.mac(secret, b"tkpy-record", kind.encode(), key.encode(), payload)


def load(kind: str, key: str) -> dict | None:
    """The payload stored under (kind, key) by :func:`store`, or None (no record, no cache, or not verified)."""
    path = _path(kind, key)
    if path is None:
        return None
    raw = cache.read_owned(path)
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        payload = record["payload"]
        body = json.dumps(payload, sort_keys=True).encode()
        ok = record.get("format") == FORMAT and hmac.compare_digest(
            record["mac"], _mac(cache.secret_key(path.parents[2]), kind, key, body))
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return payload if ok and isinstance(payload, dict) else None


def store(kind: str, key: str, payload: dict) -> bool:
    """Write `payload` (JSON-able) under (kind, key), replacing any record there; False (never raises on I/O) where
    there is no usable cache."""
    path = _path(kind, key)
    if path is None:
        return False
    body = json.dumps(payload, sort_keys=True).encode()
    try:
        cache.private_dir(path.parent)
        record = {"format": FORMAT, "payload": payload, "mac": _mac(cache.secret_key(path.parents[2]), kind, key, body)}
        cache.atomic_write(path, json.dumps(record, sort_keys=True, indent=1).encode())
        return True
    except OSError:
        return False


def remove(kind: str, key: str) -> None:
    """Delete the record (kind, key) if there is one (never raises on I/O)."""
    path = _path(kind, key)
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def lock(kind: str, key: str):
    """Held while making the record (kind, key): concurrent processes make it once (no lock without a cache)."""
    path = _path(kind, key)
    if path is None:
        yield
        return
    with contextlib.suppress(OSError):
        cache.private_dir(path.parent)
    with cache.file_lock(path.with_suffix(".lock")):
        yield


__all__ = ["load", "lock", "record_key", "remove", "store"]
