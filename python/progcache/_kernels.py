"""Kernel caches in the shapes of pyptx (CacheKey, CacheEntry, CubinCache)
and tilelang (KernelCache.cached, a decorator), on progcache's stores.

Each cached kernel is ONE entry: named artifacts plus JSON metadata, written
atomically; there are no sidecar files and nothing is pickled. Keys are built
from typed values only: an unsupported type raises TypeError instead of being
stringified, and keyword order never matters.
"""

from __future__ import annotations

import functools
import inspect
import json
import marshal
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from . import _core, _integration
from ._caches import _cap, _config, _sharing, cap_root


# ---------------------------------------------------------------- typed values
#
# Key values are converted by the C++ core (progcache::KeyValue): None, bool,
# int (64-bit), float (exact bits, -0.0 != 0.0), str, bytes, lists/tuples and
# str-keyed dicts. Anything else raises TypeError instead of being
# stringified; "1" and 1 are different keys.


def _kwargs_items(template_kwargs: Any) -> dict:
    if isinstance(template_kwargs, dict):
        items = list(template_kwargs.items())
    else:
        items = [tuple(p) for p in template_kwargs]
    out: dict = {}
    for pair in items:
        if len(pair) != 2 or not isinstance(pair[0], str):
            raise TypeError("template_kwargs must be (name, value) pairs with str names, or a dict")
        name, value = pair
        if name in out:
            raise ValueError(f"template kwarg {name!r} given twice")
        out[name] = value
    return out


# ---------------------------------------------------------------- pyptx shape

class CacheKey:
    """Identifies one kernel specialisation: CacheKey(fn_id, template_kwargs,
    input_shapes, arch). ``hash()`` is pyptx's form: 32 hex digits of a
    SHA-256 digest; ``digest()`` is the whole 32-byte key the stores use."""

    __slots__ = ("fn_id", "template_kwargs", "input_shapes", "arch", "_digest")

    def __init__(self, fn_id: str, template_kwargs: Any = (), input_shapes: Any = (), arch: str = "") -> None:
        if not isinstance(fn_id, str) or not isinstance(arch, str):
            raise TypeError("fn_id and arch must be str")
        kwargs = _kwargs_items(template_kwargs)
        shapes = []
        for item in input_shapes:
            shape, dtype = item
            if not isinstance(dtype, str):
                raise TypeError(f"dtype names must be str, not {type(dtype).__name__}")
            dims = tuple(shape)
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
                raise TypeError("shape dimensions must be ints")
            shapes.append((dims, dtype))
        self.fn_id = fn_id
        self.template_kwargs = tuple(sorted(kwargs.items()))
        self.input_shapes = tuple(shapes)
        self.arch = arch
        self._digest = _core.kernel_key(fn_id, kwargs, [(list(s), d) for s, d in shapes], arch)

    def hash(self) -> str:
        """pyptx's form: the first 128 bits of the key as 32 hex digits."""
        return self._digest[:16].hex()

    def digest(self) -> bytes:
        """The whole key (32 bytes), under which the caches store the entry."""
        return self._digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CacheKey) and other._digest == self._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    def __repr__(self) -> str:
        return f"CacheKey({self.fn_id!r}, {self.template_kwargs!r}, {self.input_shapes!r}, {self.arch!r})"


@dataclass
class CacheEntry:
    """One cached compilation result."""
    key: CacheKey
    ptx_source: str
    cubin_bytes: Optional[bytes]
    metadata: dict = field(default_factory=dict)


def _meta_json(metadata: Any) -> str:
    try:
        return json.dumps(metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"metadata must be JSON-serialisable (progcache never pickles): {e}") from None


def _usable_config(who: str) -> Optional[dict]:
    """The configuration, or None (said once) when a setting is malformed:
    a default cache then works without its disk store."""
    try:
        return _config()
    except ValueError as e:
        _integration.warn_once(who, "config", f"the cache is not used ({e})")
        return None


class CubinCache:
    """Process-local memory plus optional disk persistence (one atomic entry
    per key under ``cache_dir``, default ``$PYPTX_CACHE_DIR``, else
    ``<progcache root>/pyptx``, capped by ``$PROGCACHE_MAX_SIZE``, 10 GiB by
    default). Thread-safe. With ``$PROGCACHE_DISABLE`` set it holds nothing."""

    def __init__(self, cache_dir: Union[str, os.PathLike, None] = None, enable_disk: bool = True, *,
                 sharing: Optional[str] = None) -> None:
        self._lock = threading.Lock()
        self._memory: dict[bytes, CacheEntry] = {}
        self._asked = threading.local()  # this thread's last test that read the disk (its get counts nothing more)
        self.errors = 0  # failures of the disk store that were turned into misses
        cfg = _usable_config("CubinCache")
        self._disabled = cfg is not None and cfg["disabled"]  # a malformed setting leaves memory in use
        configured = cache_dir is None and os.environ.get("PYPTX_CACHE_DIR") is None
        if cache_dir is None:
            cache_dir = (os.environ.get("PYPTX_CACHE_DIR")
                         or os.path.join(cfg["dir"] if cfg is not None else "", _core.COMPANION_STORES["pyptx"]))
        self.cache_dir = os.fspath(cache_dir)
        self._disk = None
        if cfg is None or not enable_disk or self._disabled:
            return
        # Capped, signed and shared as the configuration says, like the
        # program caches.
        try:
            self._disk = _core.open_file_store(self.cache_dir, cfg["max_size_bytes"], cfg["max_entries"],
                                               cfg["fsync"], cfg["hmac_key"], _sharing(sharing, cfg),
                                               compression=cfg["compression_level"], signing_keys=cfg["signing_keys"],
                                               cap_root=cap_root(self.cache_dir, cfg))
        except (OSError, RuntimeError) as e:
            if not configured:
                raise  # a directory the caller named: theirs to fix
            # The configured root cannot be used: memory only, said once.
            _integration.warn_once("CubinCache", "unusable", f"the disk cache is not used ({e}); memory only")

    def __contains__(self, key: CacheKey) -> bool:
        """pyptx's membership test: memory, then disk. (The program caches
        have none, as in cuda.core: there, check-then-read races other
        processes; here a False only costs a compile.)"""
        return self._get(key, asking=True) is not None

    def get(self, key: CacheKey) -> Optional[CacheEntry]:
        return self._get(key, asking=False)

    def _get(self, key: CacheKey, *, asking: bool) -> Optional[CacheEntry]:
        """``asking``: a membership test. pyptx tests, then gets: the pair is
        one lookup, counted once, by whichever of the two read the store (a
        test answered by memory counts nothing; the get after a test that
        read the disk counts nothing more)."""
        if self._disabled:
            return None
        h = key.digest()
        # The get right after this thread's test of the same key, which read
        # the disk (and so counted the lookup), counts nothing more.
        counted = getattr(self._asked, "digest", None) == h
        self._asked.digest = None
        with self._lock:
            e = self._memory.get(h)
        if e is not None:
            if self._disk is not None and not asking and not counted:
                # Served from this instance's copy of a disk entry: a hit in
                # the root's statistics all the same.
                try:
                    self._disk.count_copy_hit()
                except (OSError, RuntimeError):
                    pass
            return e
        if self._disk is None:
            return None
        found = self._disk.get_entry(h)
        if found is None:
            return None
        meta_json, artifacts = found
        # The entry is on disk, maybe written by someone else: anything not of
        # the shape put() writes is a miss, never an exception.
        try:
            meta = json.loads(meta_json)
            arts = dict(artifacts)
            if not isinstance(meta, dict) or meta.get("fn_id") != key.fn_id or "ptx" not in arts:
                return None
            ptx = arts["ptx"].decode("utf-8")
        except (ValueError, TypeError):
            return None
        e = CacheEntry(key, ptx, arts.get("cubin"), meta.get("metadata", {}))
        with self._lock:
            self._memory[h] = e
        if asking:
            self._asked.digest = h  # the disk counted this lookup's hit
        return e

    def put(self, entry: CacheEntry) -> None:
        if not isinstance(entry, CacheEntry):
            raise TypeError("put() takes a CacheEntry")
        if self._disabled:
            return
        h = entry.key.digest()
        meta = _meta_json({"fn_id": entry.key.fn_id, "arch": entry.key.arch, "metadata": entry.metadata})
        self._asked.digest = None  # a get after this put is a lookup of its own
        with self._lock:
            self._memory[h] = entry
        if self._disk is not None:
            arts = [("ptx", entry.ptx_source.encode("utf-8"))]
            if entry.cubin_bytes is not None:
                arts.append(("cubin", bytes(entry.cubin_bytes)))
            try:
                self._disk.put_entry(h, meta, arts)
            except (OSError, RuntimeError):  # a full disk: the entry stays in memory, the next process compiles
                self.errors += 1

    def clear(self, *, disk: bool = False) -> None:
        with self._lock:
            self._memory.clear()
        self._asked.digest = None
        if disk and self._disk is not None:
            self._disk.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._memory)


_global_lock = threading.Lock()
_global_cache: Optional[CubinCache] = None


def get_global_cache() -> CubinCache:
    """The process-wide CubinCache (created on first use)."""
    global _global_cache
    with _global_lock:
        if _global_cache is None:
            _global_cache = CubinCache()
        return _global_cache


def set_global_cache(cache: CubinCache) -> None:
    global _global_cache
    if not isinstance(cache, CubinCache):
        raise TypeError("set_global_cache() takes a CubinCache")
    with _global_lock:
        _global_cache = cache


# ---------------------------------------------------------------- tilelang shape

@dataclass
class CachedKernel:
    """A compiled kernel's named artifacts (e.g. "kernel.cubin", "host.cu"),
    its JSON metadata, and whether it came from the cache."""
    artifacts: dict
    metadata: dict
    from_cache: bool
    key: str


def _builder_name(func: Any) -> str:
    """A builder's name as a person knows it (module.qualname; a tilelang
    PrimFunc's global symbol), for `progcache ls`: never keyed."""
    qualname = getattr(func, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{getattr(func, '__module__', '?')}.{qualname}"
    try:
        symbol = func.attrs["global_symbol"]
    except Exception:
        symbol = None
    return str(symbol) if symbol else type(func).__name__


def _function_identity(func: Callable) -> tuple[str, bytes]:
    """Qualified name and source, both key fields, so editing the function
    invalidates its entries (keying by name alone served stale binaries).
    The library's KeyBuilder hashes them; nothing is hashed here."""
    name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    try:
        src = inspect.getsource(func).encode("utf-8")
    except (OSError, TypeError):
        # No source (exec, REPL): the marshalled code object covers the
        # bytecode and its constants.
        code = getattr(func, "__code__", None)
        src = marshal.dumps(code) if code is not None else repr(func).encode()
    return name, src


# tilelang's names for a kernel's files (tilelang.autotuner.param, and the
# attributes of tilelang.cache.KernelCache): a builder may name its artifacts
# with them. tilelang 0.1.15 writes parameters as JSON (params.json) where
# older releases pickled them (params.pkl); progcache never unpickles.
DEVICE_KERNEL_PATH = "device_kernel.cu"
HOST_KERNEL_PATH = "host_kernel.cu"
EXECUTABLE_PATH = "executable.so"
KERNEL_LIB_PATH = "kernel_lib.so"
KERNEL_CUBIN_PATH = "kernel.cubin"
KERNEL_PY_PATH = "kernel.py"
PARAMS_PATH = "params.json"

_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


def _is_prim_func(func: Any) -> bool:
    """Whether func is a TVM PrimFunc (what tilelang compiles), without
    importing TVM: one can only exist once TVM is imported."""
    for mod in ("tvm.tirx", "tvm.tir"):
        m = sys.modules.get(mod)
        cls = getattr(m, "PrimFunc", None) if m is not None else None
        if isinstance(cls, type) and isinstance(func, cls):
            return True
    return False


def _given(value: Any, default: Any) -> bool:
    return not (value is default or (type(value) is type(default) and value == default))


class KernelCache:
    """Compile-or-load for multi-artifact kernels, with single-flight: threads
    of a process share one build; processes of a host serialise on a per-key
    lock file and look again before building.

    ``cached()`` takes tilelang's arguments. Given a tilelang PrimFunc it
    compiles with tilelang and returns tilelang's JITKernel, each kernel one
    entry of this cache's store; given any other callable it runs that
    builder (or ``build``), which returns named artifacts."""

    #: tilelang's class attribute; cached() resolves "auto" as tilelang does.
    execution_backend = "tvm_ffi"

    def __init__(self, cache_dir: Union[str, os.PathLike, None] = None, *, max_size_bytes: Optional[int] = None,
                 sharing: Optional[str] = None, lock_timeout_s: float = 600.0) -> None:
        cfg = _usable_config("KernelCache")
        configured = cache_dir is None
        if cache_dir is None:  # a companion store of the root: progcache stats/prune/clear see it
            cache_dir = os.path.join(cfg["dir"] if cfg is not None else "", _core.COMPANION_STORES["kernels"])
        self.cache_dir = os.fspath(cache_dir)
        self._sharing = _sharing(sharing, cfg) if cfg is not None else "private"
        self._signed = cfg is not None and _integration.signed(cfg)
        # With PROGCACHE_DISABLE (or a configuration that does not resolve)
        # every call builds and nothing is stored.
        self._disabled = cfg is None or cfg["disabled"]
        self._store: Any = None
        if cfg is not None and not self._disabled:
            try:
                self._store = _core.open_file_store(
                    self.cache_dir, cfg["max_size_bytes"] if max_size_bytes is None else _cap(max_size_bytes),
                    cfg["max_entries"], cfg["fsync"], cfg["hmac_key"], self._sharing,
                    compression=cfg["compression_level"], signing_keys=cfg["signing_keys"],
                    # A cap of the caller's own bounds this cache alone.
                    cap_root=cap_root(self.cache_dir, cfg) if max_size_bytes is None else "")
            except (OSError, RuntimeError) as e:
                if not configured:
                    raise  # a directory the caller named: theirs to fix
                _integration.warn_once("KernelCache", "unusable", f"the cache is not used ({e}); every call builds")
                self._disabled = True
        self._locks_dir = os.path.join(self.cache_dir, "locks")
        self._lock_timeout_s = lock_timeout_s
        self._flights = _core.Flights()
        self._memory_lock = threading.Lock()
        self._lookups = threading.local()  # .missed: this thread's last load was a counted miss
        self._memory: dict = {}  # tilelang kernels this instance loaded or compiled
        self.builds = 0  # builds run by this process (observable in tests)
        self.errors = 0  # failures of the cache that were turned into misses

    def key_of(self, func: Callable, args: tuple, kwargs: dict, target: str) -> str:
        """The key (64 hex digits) of one build: the function's identity and
        the typed arguments, through the library's KeyBuilder."""
        name, source = _function_identity(func)
        # schema 2: the entry's metadata names the builder (for `progcache ls`)
        # and holds the build's own metadata under "metadata".
        fields = [("schema", 2), ("func", name), ("func_source", source), ("args", list(args)),
                  ("kwargs", dict(kwargs)), ("target", target)]
        return _core.typed_key("tilelang-kernel", fields).hex()

    def _load(self, key: str) -> Optional[CachedKernel]:
        # Anything that is not what cached() writes is a miss, never an exception.
        raw = self._store.get_entry(key.encode())
        self._lookups.missed = raw is None  # a miss the store counted
        decoded = _integration.decode(raw)
        if decoded is None:
            return None
        meta, artifacts = decoded
        if meta.get("kind") != "kernel" or "metadata" not in meta:
            return None  # not what _build writes
        # The rule for code (trust.h): host code (a shared library, an
        # object, Python) from a store others can write only when signed.
        if (self._sharing == "group" and not self._signed
                and any(_core.classify_artifact(n, d) == "host" for n, d in artifacts)):
            _integration.warn_once("KernelCache", "group-host",
                                   "a group-shared store without signed entries holds host code (a shared library, "
                                   "an object or Python): it is not loaded from there; builds run instead (set "
                                   "PROGCACHE_HMAC_KEY_FILE to share it)")
            return None
        return CachedKernel(dict(artifacts), meta["metadata"], True, key)

    def cached(self, func: Any = None, out_idx: Any = _UNSET, *args: Any, target: Any = "auto",
               target_host: Any = None, execution_backend: str = "auto", verbose: bool = False,
               pass_configs: Optional[dict] = None, compile_flags: Any = None, build: Optional[Callable] = None,
               **kwargs: Any) -> Any:
        """tilelang's ``cached(func, out_idx, *args, target, target_host,
        execution_backend, verbose, pass_configs, compile_flags)``.

        - ``func`` a tilelang PrimFunc: returns tilelang's JITKernel, compiled
          on a miss exactly as tilelang's own cache would (its key, plus the
          nvcc and host compiler identity), stored as one entry.
        - any other callable: returns a CachedKernel of the named artifacts
          that ``build(func, *args, target=..., **kwargs)`` (default:
          ``func(*args, **kwargs)``) returns, or (artifacts, metadata). Here
          ``out_idx`` is simply the builder's first argument, and the tilelang
          keywords given are passed on (and keyed) like any other."""
        if func is None:
            raise TypeError("cached() needs the function to compile (a tilelang PrimFunc or a builder)")
        if _is_prim_func(func):
            if build is not None or kwargs:
                raise TypeError("cached() of a tilelang PrimFunc takes tilelang's arguments only; unexpected: "
                                + ", ".join(sorted(["build"] * (build is not None) + list(kwargs))))
            from . import tilelang as _tilelang  # says what to install when tilelang is missing
            return _tilelang._cached_in(self, func, None if out_idx is _UNSET else out_idx, args, target=target,
                                        target_host=target_host, execution_backend=execution_backend,
                                        verbose=verbose, pass_configs=pass_configs, compile_flags=compile_flags)
        if out_idx is not _UNSET:
            args = (out_idx,) + args
        for name, value, default in (("target_host", target_host, None), ("execution_backend", execution_backend, "auto"),
                                     ("verbose", verbose, False), ("pass_configs", pass_configs, None),
                                     ("compile_flags", compile_flags, None)):
            if _given(value, default):
                kwargs[name] = value
        key = self.key_of(func, args, kwargs, target)
        if self._disabled:
            return self._build(func, args, kwargs, target, build, key, store=False)
        hit = self._load(key)
        if hit is not None:
            return hit
        return self._single_flight(key, lambda: self._load(key), self._missed(),
                                   lambda: self._build(func, args, kwargs, target, build, key, store=True))

    def _missed(self) -> bool:
        """Whether this thread's last load was a miss the store counted."""
        return bool(getattr(self._lookups, "missed", False))

    def _single_flight(self, key: str, load: Callable[[], Any], missed: bool, build: Callable[[], Any],
                       reload: bool = True) -> Any:
        """Threads of this process share one build (the library's flight
        table); a thread that waited looks in the store, where the leader's
        result now is, and takes the leader's own otherwise. ``missed``: the
        caller's lookup before this was a miss the store counted (taken back
        if a look again finds the entry)."""
        def lead() -> Any:
            hit = self._look_again(key, load, missed)
            return hit if hit is not None else self._build_locked(key, load, missed, build)

        result, led = self._flights.run(key, lead)
        if not led and reload:
            hit = self._look_again(key, load, missed)
            if hit is not None:
                return hit
        return result

    def _look_again(self, key: str, load: Callable[[], Any], missed: bool) -> Any:
        """A load after this call's counted miss: only where the disk holds
        the entry now, so a build counts one miss, not one per look; found
        (another process or thread built it meanwhile), the earlier miss is
        taken back: the call counts once, as the hit it ended as."""
        if self._store is not None and not self._store.disk_has(key.encode()):
            return None
        hit = load()
        if hit is not None and missed and self._store is not None:
            try:
                self._store.uncount_miss()
            except Exception:
                self.errors += 1
        return hit

    def _build_locked(self, key: str, load: Callable[[], Any], missed: bool, build: Callable[[], Any]) -> Any:
        """Builds under the library's per-key lock file, so processes of the
        host build a key once; a process looks again once it holds the lock. A
        lock that cannot be taken (timeout, unwritable directory) never stops
        the build, as in compile()."""
        try:
            lock = _core.LockFile(self._locks_dir, key, self._lock_timeout_s, self._sharing == "group")
        except Exception:  # a timeout, or a lock directory or file that cannot be used
            return build()
        try:
            # Look again under the lock, waited or not: a process that
            # stored the key between this one's miss and its lock leaves no
            # wait behind (seen as a second build of one key by 4 processes).
            hit = self._look_again(key, load, missed)
            if hit is not None:
                return hit
            return build()
        finally:
            lock.release()

    def _build(self, func: Callable, args: tuple, kwargs: dict, target: str, build: Optional[Callable], key: str,
               *, store: bool) -> CachedKernel:
        result = build(func, *args, target=target, **kwargs) if build else func(*args, **kwargs)
        self.builds += 1
        artifacts, metadata = result if isinstance(result, tuple) else (result, {})
        if not isinstance(artifacts, dict) or not artifacts:
            raise TypeError("a kernel build must return a non-empty dict of named artifacts")
        arts = []
        for name, data in artifacts.items():
            if isinstance(data, str):
                data = data.encode("utf-8")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"artifact {name!r} is {type(data).__name__}, not bytes or str")
            arts.append((str(name), bytes(data)))
        meta = _meta_json(metadata)
        if store:
            # The builder's name, so that `progcache ls` shows what built it.
            entry_meta = json.dumps({"kind": "kernel", "name": _builder_name(func),
                                     "metadata": json.loads(meta)}, sort_keys=True)
            try:
                self._store.put_entry(key.encode(), entry_meta, arts)
            except (OSError, RuntimeError):  # the build succeeded; a failed store costs only a later miss
                self.errors += 1
        return CachedKernel(dict(arts), json.loads(meta), False, key)

    def clear_cache(self) -> None:
        """Removes every kernel this cache holds, in memory and on disk;
        nothing outside its own directory is touched."""
        with self._memory_lock:
            self._memory.clear()
        if self._store is not None:
            self._store.clear()

    def __len__(self) -> int:
        return 0 if self._store is None else self._store.count()


_default_kernel_cache: Optional[KernelCache] = None


def cached(cache: Optional[KernelCache] = None, *, target: str = "auto"):
    """Decorator: ``@progcache.cached()`` on a builder that returns named
    artifacts (or (artifacts, metadata)) makes each call compile-or-load."""

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> CachedKernel:
            global _default_kernel_cache
            kc = cache
            if kc is None:
                if _default_kernel_cache is None:
                    _default_kernel_cache = KernelCache()
                kc = _default_kernel_cache
            return kc.cached(func, *args, target=target, **kwargs)

        return inner

    return wrap
