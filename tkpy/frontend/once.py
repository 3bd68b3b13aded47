"""Values made once per key, however many threads ask at once."""
from __future__ import annotations

import threading


class Once:
    """`get(cache, key, make)`: `cache[key]`, made by `make()` once however many threads ask at once: a lock per
    (cache, key), so threads making other keys meanwhile are not held up. RLocks: a make() that asks for its own
    key again gets whatever that recursion does (e.g. the nested-trace error), not a deadlock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._key_locks: dict = {}

    def get(self, cache: dict, key, make):
        value = cache.get(key)
        if value is None:
            with self._lock:
                lock = self._key_locks.setdefault((id(cache), key), threading.RLock())
            with lock:
                value = cache.get(key)
                if value is None:
                    value = cache[key] = make()
        return value
