"""cuda.core-compatible program caches backed by progcache's C++ core.

The contract is cuda.core's ``ProgramCacheResource``: a bytes-in / bytes-out
mapping keyed by ``bytes`` or ``str`` (a ``str`` is its UTF-8 bytes, so
``"k"`` and ``b"k"`` are one entry), with ``__getitem__`` (KeyError on a
miss), ``__setitem__``, ``__delitem__``, ``__len__``, ``get``, ``update``,
``clear``, ``close`` and the context-manager form, and deliberately no
``__contains__`` (check-then-read races other processes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from . import _core

KeyLike = Union[bytes, str]


def _key(key: Any) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"cache keys are bytes or str, not {type(key).__name__}")


def _value(value: Any) -> bytes:
    """bytes, bytearray, memoryview, or an object with ``.code`` (cuda.core's
    ObjectCode); a path-backed code (str or os.PathLike) is read now."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    code = getattr(value, "code", None)
    if code is not None:
        if isinstance(code, (bytes, bytearray, memoryview)):
            return bytes(code)
        if isinstance(code, (str, os.PathLike)):
            with open(code, "rb") as f:
                return f.read()
        raise TypeError(f"{type(value).__name__}.code is {type(code).__name__}, not bytes or a path")
    raise TypeError(
        f"cache values are bytes, bytearray, memoryview or an ObjectCode, not {type(value).__name__}")


def _sharing(value: Optional[str]) -> str:
    if value is None:
        value = os.environ.get("PROGCACHE_SHARING", "private")
    if value not in ("private", "group"):
        raise ValueError(f"sharing must be 'private' or 'group', not {value!r}")
    return value


def _cap(value: Any, name: str = "max_size_bytes") -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive (or None for unbounded), got {value}")
    return value


class _ProgramCache:
    """Shared mapping behaviour; subclasses provide _get/_put/_del/_clear/_len."""

    _closed = False

    def __getitem__(self, key: KeyLike) -> bytes:
        value = self._get(_key(key))
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: KeyLike, default: Optional[bytes] = None) -> Optional[bytes]:
        value = self._get(_key(key))
        return default if value is None else value

    def __setitem__(self, key: KeyLike, value: Any) -> None:
        self._put(_key(key), _value(value))

    def __delitem__(self, key: KeyLike) -> None:
        if not self._del(_key(key)):
            raise KeyError(key)

    def update(self, items: Union[Mapping, Iterable], /) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        for key, value in pairs:
            self[key] = value

    def __len__(self) -> int:
        return self._len()

    def clear(self) -> None:
        self._clear()

    def close(self) -> None:
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Membership tests are refused on purpose (see the module docstring).
    __contains__ = None  # type: ignore[assignment]


class InMemoryProgramCache(_ProgramCache):
    """Process-local LRU capped by the sum of stored payload sizes.

    A hit returns the very ``bytes`` object that was stored: no copy.
    Thread-safe.
    """

    def __init__(self, *, max_size_bytes: Optional[int] = None) -> None:
        self._mem = _core.MemoryCache(_cap(max_size_bytes))
        self._get = self._mem.get
        self._put = self._mem.put
        self._del = self._mem.erase
        self._len = self._mem.__len__
        self._clear = self._mem.clear

    def __getitem__(self, key: KeyLike) -> bytes:  # the hot path, kept short
        value = self._mem.get(key if type(key) is bytes else _key(key))
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: KeyLike, default: Optional[bytes] = None) -> Optional[bytes]:
        value = self._mem.get(key if type(key) is bytes else _key(key))
        return default if value is None else value

    @property
    def size_bytes(self) -> int:
        return self._mem.size_bytes()


class _StoreCache(_ProgramCache):
    """A mapping over a C++ Store handle (file, redis or tiered)."""

    def _bind(self, store) -> None:
        self._store = store
        self._get = store.get
        self._put = store.put
        self._del = store.erase
        self._len = store.count
        self._clear = store.clear

    def stats(self) -> dict:
        return dict(self._store.stats())

    @property
    def max_size_bytes(self) -> Optional[int]:
        """The byte cap the disk tier enforces, as the library applied it
        (None: no cap, or no disk tier)."""
        return self._store.max_size_bytes()

    def close(self) -> None:
        if not self._closed:
            self._store.close()
        super().close()


def _hmac_key() -> str:
    path = os.environ.get("PROGCACHE_HMAC_KEY_FILE")
    if not path:
        return ""
    with open(path, "rb") as f:
        key = f.read().rstrip(b"\r\n")
    if len(key) < 16:
        raise ValueError(f"PROGCACHE_HMAC_KEY_FILE: key in {path!r} is shorter than 16 bytes")
    return key.decode("latin-1")


class FileStreamProgramCache(_StoreCache):
    """A directory shared safely by every process of the host.

    ``path`` defaults to ``$PROGCACHE_DIR``, else ``$XDG_CACHE_HOME/progcache``,
    else ``~/.cache/progcache``. ``max_size_bytes`` caps the directory (None,
    the default, is no cap, as in cuda.core); entries are evicted least
    recently used first. ``durability`` is "none" (default; survives process
    crashes) or "fsync" (also power loss; default from
    ``$PROGCACHE_DURABILITY``). ``sharing`` is "private" (default) or "group"
    (a group-writable root a team shares; default from ``$PROGCACHE_SHARING``).
    """

    def __init__(self, path: Union[str, os.PathLike, None] = None, *, max_size_bytes: Optional[int] = None,
                 durability: Optional[str] = None, sharing: Optional[str] = None) -> None:
        root = os.fspath(path) if path is not None else _core.default_cache_root()
        self.path = root
        if durability is None:
            durability = os.environ.get("PROGCACHE_DURABILITY", "none")
        if durability not in ("none", "fsync"):
            raise ValueError(f"durability must be 'none' or 'fsync', not {durability!r}")
        self._bind(_core.open_file_store(root, _cap(max_size_bytes), None, durability == "fsync", _hmac_key(),
                                         _sharing(sharing)))


class RedisProgramCache(_StoreCache):
    """The Redis tier alone: ``urls`` is one ``redis://`` URL or several
    (keys are sharded across them)."""

    def __init__(self, urls: Union[str, Iterable[str]], *, read_only: bool = False) -> None:
        if not _core.HAVE_REDIS:
            raise RuntimeError("this progcache was built without the Redis tier")
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls or not all(isinstance(u, str) for u in urls):
            raise TypeError("urls must be a redis:// URL or a list of them")
        self._bind(_core.open_redis_store(urls, bool(read_only), _hmac_key()))


class TieredProgramCache(_StoreCache):
    """Memory → disk → Redis. Lower-tier hits fill the tiers above; writes go
    to memory and disk at once and to Redis in the background (flushed on
    close)."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, *, urls: Union[str, Iterable[str], None] = None,
                 max_size_bytes: Optional[int] = None, memory_size_bytes: Optional[int] = 256 << 20,
                 read_only: bool = False, sharing: Optional[str] = None) -> None:
        if urls is None:
            urls = [u for u in os.environ.get("PROGCACHE_REMOTE", "").split(",") if u]
        urls = [urls] if isinstance(urls, str) else list(urls)
        if urls and not _core.HAVE_REDIS:
            raise RuntimeError("this progcache was built without the Redis tier")
        root = os.fspath(path) if path is not None else _core.default_cache_root()
        self.path = root
        self._bind(_core.open_tiered_store(_cap(memory_size_bytes, "memory_size_bytes"), root,
                                           _cap(max_size_bytes), urls, bool(read_only), _hmac_key(),
                                           _sharing(sharing)))


def _register_with_cuda_core() -> bool:
    """Registers the caches as virtual subclasses of cuda.core's
    ProgramCacheResource so ``Program.compile(..., cache=...)`` accepts them.
    Returns False when cuda.core is not importable."""
    try:
        from cuda.core.utils import ProgramCacheResource  # type: ignore
    except Exception:  # cuda.core absent, or unusable without a driver
        return False
    for cls in (InMemoryProgramCache, FileStreamProgramCache, RedisProgramCache, TieredProgramCache):
        ProgramCacheResource.register(cls)
    return True
