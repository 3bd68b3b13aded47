"""On-disk (and in-process) cache of compiled CUDA modules.

Layout: ``$TKPY_CACHE_DIR`` (default ``~/.cache/tkpy``) / ``<key[:2]>`` /
``<key>.cubin``, ``<key>.ptx``, ``<key>.json`` (kernel name, log, compile
seconds, a MAC), ``<key>.lock``, and texts made later from the cubin
(``<key>.sass.json``: its disassembly, with a MAC); the native launcher lives in
``native/``.

The cache runs only what tkpy wrote. The directory must be ours and writable
by no one else (we create it 0700; a shared sticky one like /tmp gets a
private ``tkpy-<uid>`` subdirectory); anything else is refused with a warning,
and the default directory, else no disk cache, is used. An entry is loaded
only if every file is a regular file we own that no one else can write and the
HMAC-SHA256 in its metadata (key: the 0600 ``key`` file, made once per
directory) matches; anything else is a miss that is recompiled and atomically
overwritten (temporary file, fsync, ``os.replace``). ``entry_lock`` makes
concurrent processes compile a key once.

``TKPY_CACHE=0`` disables both the disk cache and the in-process memo (every
``compile_cuda`` call then runs NVRTC: useful when debugging the compiler).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile
from pathlib import Path

#: Bump whenever the key's inputs or the on-disk layout change meaning.
CACHE_FORMAT_VERSION = 2
KEY_FILE = "key"

log = logging.getLogger("tkpy.cache")
_keys: dict[Path, bytes] = {}   # the secret key of each directory, read once per process
_warned: set[str] = set()


def cache_enabled() -> bool:
    return os.environ.get("TKPY_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """The configured cache directory (what :func:`root` verifies before use)."""
    env = os.environ.get("TKPY_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tkpy"


# --------------------------------------------------------------------------- private directories


def _makedirs(path: Path) -> None:
    """Create the missing components of `path` with mode 0700."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, 0o700)


def _why_unsafe(path: Path) -> str | None:
    """Why another user could change what is in `path` (resolved), or None: its parents must be root's
    or ours and writable by no one else unless sticky; `path` must be our directory, writable only by us."""
    uid = os.getuid()
    for p in reversed(path.parents):
        st = os.lstat(p)
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, uid)
                or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX)):
            return f"another user can replace its parent {p}"
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return "other users can write to it"
    return None


def private_dir(path: Path | str) -> Path:
    """`path` (created 0700 where missing), or its ``tkpy-<uid>`` subdirectory where `path` is a shared
    sticky directory such as /tmp; PermissionError (saying why) where another user could change it."""
    path = Path(os.path.realpath(Path(path).expanduser()))
    _makedirs(path)
    st = os.lstat(path)
    if st.st_mode & stat.S_ISVTX and st.st_mode & 0o002 and st.st_uid in (0, os.getuid()):
        path = path / f"tkpy-{os.getuid()}"
        _makedirs(path)
    why = _why_unsafe(path)
    if why:
        raise PermissionError(f"{path}: {why}")
    return path


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        log.warning("%s", msg)


def root() -> Path | None:
    """The verified private cache directory, or None (``TKPY_CACHE=0``, or no safe one: logged once)."""
    if not cache_enabled():
        return None
    candidates = [cache_dir()]
    with contextlib.suppress(RuntimeError):      # no home directory
        candidates.append(Path.home() / ".cache" / "tkpy")
    for d in dict.fromkeys(candidates):
        try:
            return private_dir(d)
        except OSError as e:
            _warn_once(f"tkpy: not using the cache directory {d}: {e}")
    _warn_once("tkpy: no private cache directory; compiling without a disk cache")
    return None


# --------------------------------------------------------------------------- trusted files


def open_owned(path: Path, *, private: bool = False) -> int | None:
    """A read-only descriptor of `path` if it is a regular file we own that no one else can write
    (`private`: nor read); None otherwise. Checked on the open descriptor, so a swapped path cannot pass."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (0o077 if private else 0o022):
        os.close(fd)
        return None
    return fd


def read_owned(path: Path, *, private: bool = False) -> bytes | None:
    """The bytes of `path` if :func:`open_owned` accepts it, else None."""
    fd = open_owned(path, private=private)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _temp_file(path: Path, data: bytes) -> str:
    """A new 0600 file beside `path` holding `data`, on disk (fsync); the caller renames it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` at once: a reader sees the old file or the new one, never a part."""
    tmp = _temp_file(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read_key(path: Path) -> bytes | None:
    key = read_owned(path, private=True)
    return key if key is not None and len(key) == 32 else None


def secret_key(directory: Path) -> bytes:
    """This user's HMAC key for the private `directory`: its ``key`` file (0600), made once."""
    path = Path(directory) / KEY_FILE
    key = _keys.get(path)
    if key is None:
        key = _read_key(path)
        if key is None:
            tmp = _temp_file(path, secrets.token_bytes(32))
            try:
                os.link(tmp, path)             # creates it only where no other process did meanwhile
            except FileExistsError:
                if _read_key(path) is None:    # a broken key file in our own directory: replace it
                    os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            key = _read_key(path)
            if key is None:
                raise PermissionError(f"{path}: cannot make a private key file")
        _keys[path] = key
    return key


def mac(key: bytes, *parts: bytes) -> str:
    """HMAC-SHA256 of length-prefixed `parts` (hex)."""
    return _digest(hmac.new(key, digestmod=hashlib.sha256), parts)


def digest(*parts: bytes) -> str:
    """sha256 (hex) of length-prefixed `parts`."""
    return _digest(hashlib.sha256(), parts)


def _digest(h, parts) -> str:
    for b in parts:
        h.update(len(b).to_bytes(8, "little"))  # length-prefix: no ambiguity
        h.update(b)
    return h.hexdigest()


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive flock on `path` (created 0600) for the block, so one process at a time makes
    what it guards; where the lock file cannot be made, no lock (the writes are atomic anyway)."""
    fd = None
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)     # releases the lock


# --------------------------------------------------------------------------- compiled modules


def cache_key(
    identity: str,
    kernel_name: str,
    options: tuple[str, ...],
    nvrtc_version: tuple[int, int],
    arch: str,
) -> str:
    """sha256 over everything that determines the compiled output; `identity` is the source, or a string that
    determines it (a tkpy kernel's KernelCode.identity, so that a hit needs no source)."""
    parts = (
        f"tkpy-cache-v{CACHE_FORMAT_VERSION}",
        f"nvrtc-{nvrtc_version[0]}.{nvrtc_version[1]}",
        arch,
        kernel_name,
        "\x1f".join(options),
        identity,
    )
    return digest(*(p.encode() for p in parts))


def _paths(key: str, root_dir: Path) -> tuple[Path, Path, Path]:
    d = root_dir / key[:2]
    return d / f"{key}.cubin", d / f"{key}.ptx", d / f"{key}.json"


def _entry_mac(secret: bytes, key: str, kernel_name: str, cubin: bytes, ptx: bytes, log_text: str) -> str:
    return mac(secret, b"tkpy-entry", key.encode(), kernel_name.encode(), cubin, ptx, log_text.encode())


@contextlib.contextmanager
def entry_lock(key: str):
    """Held while compiling and writing `key`'s entry: concurrent processes compile it once."""
    r = root()
    if r is None:
        yield
        return
    lock = r / key[:2] / f"{key}.lock"
    with contextlib.suppress(OSError):
        _makedirs(lock.parent)
    with file_lock(lock):
        yield


def store(
    key: str,
    *,
    kernel_name: str,
    cubin: bytes,
    ptx: str,
    log: str,
    compile_seconds: float,
) -> bool:
    """Write an entry; returns False (never raises) if there is no usable cache."""
    r = root()
    if r is None:
        return False
    cubin_p, ptx_p, meta_p = _paths(key, r)
    try:
        ptx_b = ptx.encode()
        meta = {
            "format": CACHE_FORMAT_VERSION,
            "kernel_name": kernel_name,
            "log": log,
            "compile_seconds": compile_seconds,
            "mac": _entry_mac(secret_key(r), key, kernel_name, cubin, ptx_b, log),
        }
        _makedirs(cubin_p.parent)
        atomic_write(cubin_p, cubin)
        atomic_write(ptx_p, ptx_b)
        atomic_write(meta_p, json.dumps(meta).encode())  # last: marks the entry complete
        return True
    except OSError:
        return False


def load(key: str) -> dict | None:
    """Return ``{kernel_name, cubin, ptx, log, compile_seconds}`` or None on miss.

    Anything not verified as ours (owner, mode, MAC) or not well-formed is a miss
    (the caller recompiles and overwrites it).
    """
    r = root()
    if r is None:
        return None
    cubin_p, ptx_p, meta_p = _paths(key, r)
    try:
        raw = read_owned(meta_p)
        meta = json.loads(raw) if raw is not None else None
        if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT_VERSION:
            return None
        name, log_text, secs, tag = (meta.get(k) for k in ("kernel_name", "log", "compile_seconds", "mac"))
        if not (isinstance(name, str) and isinstance(log_text, str) and isinstance(tag, str)
                and isinstance(secs, (int, float)) and not isinstance(secs, bool)):
            return None
        cubin, ptx = read_owned(cubin_p), read_owned(ptx_p)
        if cubin is None or ptx is None:
            return None
        if not hmac.compare_digest(tag, _entry_mac(secret_key(r), key, name, cubin, ptx, log_text)):
            return None
        return {
            "kernel_name": name,
            "cubin": cubin,
            "ptx": ptx.decode(),
            "log": log_text,
            "compile_seconds": float(secs),
        }
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- texts made from an entry


def _text_path(key: str, kind: str, root_dir: Path) -> Path:
    return root_dir / key[:2] / f"{key}.{kind}.json"


def _text_mac(secret: bytes, key: str, kind: str, text: bytes) -> str:
    return mac(secret, b"tkpy-text", key.encode(), kind.encode(), text)


def store_text(key: str, kind: str, text: str) -> bool:
    """Keep `text`, made from entry `key`'s cubin (kind "sass": its disassembly), beside the entry, under the same
    trust as the entry (our file, a MAC); False (never raises) if there is no usable cache."""
    r = root()
    if r is None:
        return False
    path = _text_path(key, kind, r)
    try:
        data = {"format": CACHE_FORMAT_VERSION, "text": text, "mac": _text_mac(secret_key(r), key, kind, text.encode())}
        _makedirs(path.parent)
        atomic_write(path, json.dumps(data).encode())
        return True
    except OSError:
        return False


def load_text(key: str, kind: str) -> str | None:
    """The text store_text kept for entry `key`, or None: a miss where anything is not verified as ours."""
    r = root()
    if r is None:
        return None
    try:
        raw = read_owned(_text_path(key, kind, r))
        data = json.loads(raw) if raw is not None else None
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT_VERSION:
            return None
        text, tag = data.get("text"), data.get("mac")
        if not (isinstance(text, str) and isinstance(tag, str)):
            return None
        if not hmac.compare_digest(tag, _text_mac(secret_key(r), key, kind, text.encode())):
            return None
        return text
    except (OSError, ValueError):
        return None


def entry_paths(key: str) -> dict[str, Path]:
    """Where an entry lives (for users who want to inspect the cubin/ptx)."""
    cubin_p, ptx_p, meta_p = _paths(key, root() or cache_dir())
    return {"cubin": cubin_p, "ptx": ptx_p, "meta": meta_p}


__all__ = [
    "CACHE_FORMAT_VERSION",
    "cache_enabled",
    "cache_dir",
    "cache_key",
    "digest",
    "entry_lock",
    "entry_paths",
    "load",
    "load_text",
    "private_dir",
    "root",
    "store",
    "store_text",
]
