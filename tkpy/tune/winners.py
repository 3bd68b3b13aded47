"""The winners' disk record: which configuration won for a key on a GPU, kept as a signed record in tkpy's cache
directory (tkpy.runtime.records: only what tkpy wrote is read back), so that a new process runs it without timing.

A record's key covers everything that could change the winner: tkpy's version, NVRTC's, the kernel's name and the
hash of its Python source, every configuration tried (in order), the tuning key's values and dtypes, and the GPU's
name and SM count. Its payload names the winner by position and by repr (both must match to be used), with the
milliseconds of each configuration as evidence.
"""
from __future__ import annotations

from .._version import __version__
from ..runtime import nvrtc_version, records
from .config import Config

KIND = "autotune"


def record_key(name: str, source_hash: str, configs: list[Config], key: tuple, gpu: tuple[str, int]) -> str:
    major, minor = nvrtc_version()
    return records.record_key(KIND, __version__, f"nvrtc-{major}.{minor}", name, source_hash,
                              "\x1f".join(map(repr, configs)), repr(key), gpu[0], str(gpu[1]))


def load(rkey: str, configs: list[Config]) -> Config | None:
    """The stored winner for `rkey`, if a verified record names one of `configs` by position and repr."""
    payload = records.load(KIND, rkey)
    if payload is None:
        return None
    index = payload.get("winner")
    if not isinstance(index, int) or not 0 <= index < len(configs) or payload.get("config") != repr(configs[index]):
        return None
    return configs[index]


def store(rkey: str, payload: dict) -> bool:
    return records.store(KIND, rkey, {**payload, "tkpy": __version__})


def lock(rkey: str):
    """Held while tuning `rkey`: processes tuning the same kernel, key and GPU at once tune it once."""
    return records.lock(KIND, rkey)
