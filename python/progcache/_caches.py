"""cuda.core-compatible program caches backed by progcache's C++ core.

The contract is cuda.core's ``ProgramCacheResource``: a bytes-in / bytes-out
mapping keyed by ``bytes`` or ``str`` (a ``str`` is its UTF-8 bytes, so
``"k"`` and ``b"k"`` are one entry), with ``__getitem__`` (KeyError on a
miss), ``__setitem__``, ``__delitem__``, ``__len__``, ``get``, ``update``,
``clear``, ``close`` and the context-manager form, and deliberately no
``__contains__`` (check-then-read races other processes).
"""

from __future__ import annotations

import errno
import importlib.abc
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, Union

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
            try:
                with open(code, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                # cuda.core's phrase, for callers who match on it.
                raise FileNotFoundError(errno.ENOENT, "cannot store path-backed ObjectCode in cache: the file "
                                        "no longer exists", os.fspath(code)) from None
        raise TypeError(f"{type(value).__name__}.code is {type(code).__name__}, not bytes or a path")
    raise TypeError("cache values must be bytes-like or ObjectCode (bytes, bytearray, memoryview or an object "
                    f"with .code), not {type(value).__name__}")


def _config(root: Optional[str] = None) -> dict:
    """The configuration as the library resolves it for every front end (the
    CLI's variables, parser and errors: ValueError naming a bad variable).
    Read at each cache's construction. ``root``: a cache directory of the
    caller's own, resolved as the CLI's ``--dir`` (its settings file, not
    the configured root's)."""
    return _core.resolve_config(root)


# "Not given": the configuration decides (cuda.core's default where the
# environment says nothing).
_UNSET: Any = object()


def _sharing(value: Optional[str], config: Optional[dict] = None) -> str:
    if value is None:
        value = (config or _config())["sharing"]
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


class _ProgramCache(_core.CacheFront):
    """Shared mapping behaviour; subclasses provide _get/_put/_del/_clear/_len
    and bind their backend with ``_front_bind``. ``cache[key]``, the hot
    path, is ``_core.CacheFront.__getitem__``: the key as ``_key`` makes it,
    the backend's get, KeyError(key) on a miss, with no Python frame."""

    _closed = False
    # The backend's operations, bound by each subclass.
    _get: Callable[[bytes], Optional[bytes]]
    _put: Callable[[bytes, bytes], None]
    _del: Callable[[bytes], bool]
    _len: Callable[[], int]
    _clear: Callable[[], None]

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
        super().__init__()
        self._mem = _core.MemoryCache(_cap(max_size_bytes))
        self._front_bind(self._mem)
        self._get = self._mem.get
        self._put = self._mem.put
        self._del = self._mem.erase
        self._len = self._mem.__len__
        self._clear = self._mem.clear

    def get(self, key: KeyLike, default: Optional[bytes] = None) -> Optional[bytes]:
        value = self._mem.get(key if type(key) is bytes else _key(key))
        return default if value is None else value

    @property
    def size_bytes(self) -> int:
        return self._mem.size_bytes()

    def stats(self) -> dict:
        """This cache's hits, misses, hit_rate, puts, evictions, entries,
        bytes_stored, bytes_read, bytes_written and sampled lookup and put
        times (get_p50_ns, ...): the fields every progcache cache reports."""
        return dict(self._mem.stats())


class _StoreCache(_ProgramCache):
    """A mapping over a C++ Store handle (file, redis or tiered)."""

    def _bind(self, store) -> None:
        self._front_bind(store)
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


def _hmac_key(config: Optional[dict] = None) -> bytes:
    """PROGCACHE_HMAC_KEY_FILE's key, as bytes (b"" when unset)."""
    return (config or _config())["hmac_key"]


class _NullStore:
    """What a cache binds to when PROGCACHE_DISABLE is set: every read
    misses, writes are dropped, and the cache directory is never touched."""

    def get(self, key: bytes) -> None:
        return None

    def put(self, key: bytes, value: bytes) -> None:
        return None

    def get_entry(self, key: bytes) -> None:
        return None

    def put_entry(self, key: bytes, metadata: str, artifacts: list) -> None:
        return None

    def erase(self, key: bytes) -> bool:
        return False

    def count(self) -> int:
        return 0

    def clear(self) -> None:
        return None

    def stats(self) -> dict:
        return {}

    def max_size_bytes(self) -> None:
        return None

    def root(self) -> str:
        return ""

    def close(self) -> None:
        return None


class FileStreamProgramCache(_StoreCache):
    """A directory shared safely by every process of the host.

    Settings not given come from the library's configuration, as for the
    CLI: ``path`` from ``$PROGCACHE_DIR`` (else ``$XDG_CACHE_HOME/progcache``,
    else ``~/.cache/progcache``); ``max_size_bytes`` from
    ``$PROGCACHE_MAX_SIZE`` when set, else None, no cap, as in cuda.core (an
    explicit None is no cap whatever the environment says); the entry cap from
    ``$PROGCACHE_MAX_ENTRIES``; ``durability`` ("none" survives process
    crashes, "fsync" power loss too) from ``$PROGCACHE_DURABILITY``;
    ``sharing`` ("private", or "group" for a group-writable root a team
    shares) from ``$PROGCACHE_SHARING``; entries are signed with
    ``$PROGCACHE_HMAC_KEY_FILE``'s key. With ``$PROGCACHE_DISABLE`` set the
    cache holds nothing and its directory is not touched. Entries are evicted
    least recently used first.
    """

    def __init__(self, path: Union[str, os.PathLike, None] = None, *, max_size_bytes: Optional[int] = _UNSET,
                 durability: Optional[str] = None, sharing: Optional[str] = None) -> None:
        super().__init__()
        # A directory of the caller's own is resolved as the CLI's --dir:
        # its own settings file (progcache.conf there), not the root's.
        cfg = _config(os.fspath(path) if path is not None else None)
        root = cfg["dir"]
        self.path = root
        if durability is None:
            durability = "fsync" if cfg["fsync"] else "none"
        if durability not in ("none", "fsync"):
            raise ValueError(f"durability must be 'none' or 'fsync', not {durability!r}")
        cap = _configured_cap(max_size_bytes, cfg)
        sharing = _sharing(sharing, cfg)
        if cfg["disabled"]:
            self._bind(_NullStore())
            return
        self._bind(_core.open_file_store(root, cap, cfg["max_entries"], durability == "fsync", cfg["hmac_key"],
                                         sharing, compression=cfg["compression_level"],
                                         signing_keys=cfg["signing_keys"],
                                         # A cap of the caller's own bounds this cache alone; the
                                         # configured one, every store of the root together.
                                         cap_root=cap_root(root, cfg) if max_size_bytes is _UNSET else ""))


def cap_root(path: Union[str, os.PathLike], cfg: dict) -> str:
    """The configured root when ``path`` is it or one of its companion
    stores: every store of a root shares one cap (the library adds their
    counters and evicts across them). "" for a directory of its own."""
    root = os.path.abspath(cfg["dir"])
    p = os.path.abspath(os.fspath(path))
    if p == root or any(p == os.path.join(root, sub) for sub in _core.COMPANION_STORES.values()):
        return root
    return ""


def _configured_cap(value: Any, cfg: dict) -> Optional[int]:
    """An explicit cap (None: none); not given: the configured one when the
    environment or a settings file sets it, else none (cuda.core's
    default)."""
    if value is _UNSET:
        return cfg["max_size_bytes"] if cfg["sources"].get("PROGCACHE_MAX_SIZE") != "default" else None
    return _cap(value)


def _check_schemes(urls: list) -> None:
    """RuntimeError, before anything is opened, for a URL whose backend this
    build lacks (the library's scheme table says which it has)."""
    for u in urls:
        scheme = u.split("://", 1)[0] if isinstance(u, str) and "://" in u else ""
        if scheme in ("redis", "redis+unix") and scheme not in _core.REMOTE_SCHEMES:
            raise RuntimeError("this progcache was built without the Redis tier")


class RedisProgramCache(_StoreCache):
    """The Redis tier alone: ``urls`` is one ``redis://`` URL or several
    (keys are sharded across them). The password for URLs that carry none
    comes from ``$PROGCACHE_REMOTE_PASSWORD_FILE`` (or
    ``$PROGCACHE_REMOTE_PASSWORD``); ``read_only`` not given comes from
    ``$PROGCACHE_READONLY``."""

    def __init__(self, urls: Union[str, Iterable[str]], *, read_only: Optional[bool] = None) -> None:
        super().__init__()
        if not _core.HAVE_REDIS:
            raise RuntimeError("this progcache was built without the Redis tier")
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls or not all(isinstance(u, str) for u in urls):
            raise TypeError("urls must be a redis:// URL or a list of them")
        cfg = _config()
        if cfg["disabled"]:
            self._bind(_NullStore())
            return
        ro = cfg["read_only"] if read_only is None else bool(read_only)
        self._bind(_core.open_remote_store(urls, ro, cfg["hmac_key"], cfg["remote_password"],
                                           compression=cfg["remote_compression_level"],
                                           signing_keys=cfg["signing_keys"]))


class TieredProgramCache(_StoreCache):
    """Memory → disk → Redis. Lower-tier hits fill the tiers above; writes go
    to memory and disk at once and to Redis in the background (flushed on
    close). Settings not given come from the configuration as for
    FileStreamProgramCache; ``urls`` from ``$PROGCACHE_REMOTE`` (its password
    from ``$PROGCACHE_REMOTE_PASSWORD_FILE``), ``read_only`` from
    ``$PROGCACHE_READONLY``."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, *, urls: Union[str, Iterable[str], None] = None,
                 max_size_bytes: Optional[int] = _UNSET, memory_size_bytes: Optional[int] = 256 << 20,
                 read_only: Optional[bool] = None, sharing: Optional[str] = None) -> None:
        super().__init__()
        cfg = _config()
        if urls is None:
            urls = list(cfg["remote_urls"])
        urls = [urls] if isinstance(urls, str) else list(urls)
        _check_schemes(urls)
        root = os.fspath(path) if path is not None else cfg["dir"]
        self.path = root
        cap = _configured_cap(max_size_bytes, cfg)
        memory = _cap(memory_size_bytes, "memory_size_bytes")
        sharing = _sharing(sharing, cfg)
        if cfg["disabled"]:
            self._bind(_NullStore())
            return
        ro = cfg["read_only"] if read_only is None else bool(read_only)
        self._bind(_core.open_tiered_store(memory, root, cap, urls, ro, cfg["hmac_key"], sharing, cfg["max_entries"],
                                           cfg["fsync"], cfg["remote_password"],
                                           compression=cfg["compression_level"],
                                           remote_compression=cfg["remote_compression_level"],
                                           signing_keys=cfg["signing_keys"]))


_CACHE_CLASSES = (InMemoryProgramCache, FileStreamProgramCache, RedisProgramCache, TieredProgramCache)
_registered = False


def _register(resource: Any) -> None:
    global _registered
    for cls in _CACHE_CLASSES:
        resource.register(cls)
    _registered = True


class _RegisterWhenImported(importlib.abc.MetaPathFinder):
    """Registers the caches the moment cuda.core.utils is imported.

    Importing cuda.core takes about 200 ms (it loads CUDA bindings); a
    progcache user who never touches cuda.core must not pay it, and one who
    does gets the registration before any code can see the module. The
    finder stays in sys.meta_path (changing that list during an import can
    make another thread's import skip a finder) and answers nothing once the
    caches are registered; a probe (importlib.util.find_spec) or a failed
    import leaves it armed for the next import."""

    def __init__(self):
        self._busy = threading.local()

    def find_spec(self, name, path, target=None):
        if name != "cuda.core.utils" or _registered or getattr(self._busy, "on", False):
            return None
        self._busy.on = True  # the real finders locate the module; this one stands aside
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.on = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return None  # the import goes on as if this finder were not here
        run = loader.exec_module

        def exec_and_register(module):
            run(module)
            resource = getattr(module, "ProgramCacheResource", None)
            if resource is not None:
                try:
                    _register(resource)
                except Exception:  # never cuda.core's import that fails for progcache
                    pass

        loader.exec_module = exec_and_register
        return spec


def _register_with_cuda_core(import_now: bool) -> bool:
    """Registers the caches as virtual subclasses of cuda.core's
    ProgramCacheResource so ``Program.compile(..., cache=...)`` accepts them:
    at once when cuda.core.utils is loaded (or `import_now`), else when it
    is imported. Returns whether they are registered now; False when
    cuda.core is not importable."""
    if _registered:
        return True
    if import_now or "cuda.core.utils" in sys.modules:
        try:
            from cuda.core.utils import ProgramCacheResource  # type: ignore
        except Exception:  # cuda.core absent, or unusable without a driver
            return False
        _register(ProgramCacheResource)
        return True
    if not any(isinstance(f, _RegisterWhenImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterWhenImported())
    return False
