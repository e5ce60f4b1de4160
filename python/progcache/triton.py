"""progcache for Triton: a cache manager Triton (PyPI ``triton`` 3.x) selects with
one variable::

    TRITON_CACHE_MANAGER=progcache.triton:CacheManager

or in code, ``progcache.triton.enable()`` (which sets
``triton.knobs.cache.manager_class``). What it changes, against Triton's own
FileCacheManager (docs/triton.md has the figures):

- A kernel's whole group (source, IRs, PTX, cubin, metadata) is ONE progcache
  entry: published atomically, checksummed, signed when signing is on, counted
  under the byte cap, and carried by every tier of the configuration (disk,
  and Redis with ``PROGCACHE_REMOTE``). It lives in ``<progcache root>/triton``.
- Triton and PyTorch read the files of a group by path, so a hit materialises
  the group in Triton's own layout under ``TRITON_CACHE_DIR`` (a new directory
  appears whole, by one rename) and later lookups answer from that copy, after
  checking each file's stat identity against the record written with it: a
  file missing, cut short or replaced is never served; the entry is asked
  again. The remote tier is asked only when nothing local has the group.
- Processes that meet the same new kernel at once compile it once: the first
  holds a per-key lock (the library's, with its bounded wait) from its miss to
  its ``put_group``; the others wait, then read what it stored.
- Any failure of the cache (a damaged entry, a full disk, a dead Redis, an
  unusable ``PROGCACHE_DIR``, a malformed ``PROGCACHE_REMOTE``) is a miss,
  said once, and Triton compiles as if there were no cache.
  ``PROGCACHE_DISABLE=1`` compiles every kernel, whatever is on disk.
- Host code (the ``cuda_utils`` and launcher ``.so`` modules Triton builds
  and imports) is served only where the library's rule for code allows
  (trust.h): the private store, or stores whose entries are signed; never
  from a group-shared root or a remote tier without signing.
- ``TRITON_CACHE_DIR`` is trusted only as a private cache root is (owner,
  mode, every directory above it); where it fails, kernels are laid out in a
  private directory of the process instead, and the user is told once.

Where this manager is Triton's, ``triton_key()`` is also memoised (unless
``PROGCACHE_TRITON_WARM_START=0`` or ``enable(warm_start=False)``): the SHA-256 of Triton's own sources and its
``libtriton.so`` that every process computes before any cache is asked, under a
manifest of the stat identities of every file and directory it read.
"""

from __future__ import annotations

import abc
import json
import os
import re
import tempfile
import threading
import weakref
from typing import Any, Dict, List, Optional, Union

try:
    import triton  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from triton import knobs as _knobs  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from triton.runtime import cache as _tcache  # type: ignore[import-untyped, import-not-found, unused-ignore]
except ImportError as _e:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "progcache.triton needs Triton 3.2 or newer (PyPI 'triton'): pip install 'triton>=3.2'. "
        f"Importing it failed: {_e}") from None

from . import _core, _integration, _kernel_dirs

_MIN_TRITON = (3, 2)


def _triton_version() -> tuple:
    m = re.match(r"(\d+)\.(\d+)", getattr(triton, "__version__", ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


if (_triton_version() < _MIN_TRITON or _triton_version()[0] != 3 or not hasattr(_tcache, "CacheManager")
        # On the class: reading the knob itself would import this module again.
        or "manager_class" not in vars(type(getattr(_knobs, "cache", None)))):
    raise ImportError(f"progcache.triton supports Triton 3.x from 3.2 (PyPI 'triton>=3.2,<4'); this is Triton "
                      f"{getattr(triton, '__version__', '?')}. pip install 'triton>=3.2,<4'")

# Bump when the entry's layout or metadata changes: older entries then miss.
_SCHEMA = 1
_GROUP_PREFIX = "__grp__"
_STAMP_KEY = "progcache"
# The library's bounded wait for another process's compile of the same key
# (CompileOptions::lock_timeout): past it, the waiter compiles too.
LOCK_TIMEOUT_S = 600.0


# ------------------------------------------------------------------ the store

_STORE = _integration.StoreState("triton", compressed=True)
# No memory tier: Triton keeps the kernels it loaded, and a second lookup of a
# group in one process is answered by the materialised copy. Disk, then the
# remote tier when PROGCACHE_REMOTE names one.


def reset() -> None:
    """Forgets the resolved configuration and closes the store (flushing
    remote writes); the next lookup resolves and opens them again."""
    _STORE.reset()
    _DIRS.reset()


def stats() -> Dict[str, Union[int, float, None]]:
    """The store's counters (hits, misses, errors per tier) plus ``errors``:
    failures of this module that were turned into misses."""
    return _STORE.stats()


_get = _STORE.get
_put = _STORE.put
_safe_name = _integration.safe_name
_identity = _integration.identity
_write_atomic = _integration.write_atomic
_rmtree = _integration.rmtree
_env_flag = _integration.env_flag


_DIRS = _kernel_dirs.KernelDirs("triton", "TRITON_CACHE_DIR")


def _fallback_path(name: str, data: bytes) -> str:
    """Where a file goes when TRITON_CACHE_DIR cannot take it (full disk, no
    permission): a private temporary directory removed at exit, so Triton
    still gets a path to read and the compile still succeeds."""
    d = tempfile.mkdtemp(dir=_DIRS.private_base())
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _host_code(name: str) -> bool:
    """A file Triton imports or loads as host code (its ``.so`` modules)."""
    return _core.classify_artifact(name, b"") == "host"


def _entry_key(kind: str, triton_key: str, name: str) -> bytes:
    return _core.typed_key("triton-" + kind, [("schema", _SCHEMA), ("key", triton_key), ("name", name)])


# Per-key compile locks this process holds: name -> (thread, finalizer, lock).
_held_lock = threading.Lock()
_held: Dict[str, tuple] = {}


def _release_held(name: str, lock: Any) -> None:
    with _held_lock:
        if name in _held and _held[name][2] is lock:
            del _held[name]
    lock.release()


def _release_own(name: str) -> None:
    """Releases the lock this thread took for ``name`` in an earlier
    get_group whose compile never reached put_group: waiting on it would
    wait on itself."""
    with _held_lock:
        prior = _held.get(name)
    if prior is not None and prior[0] == threading.get_ident():
        prior[1]()


# ------------------------------------------------------------ the manager

# The metaclass named is the base's own (Triton's CacheManager is an ABC):
# Triton ships no type information, so without it a type checker would take
# the metaclass for `type`.
class CacheManager(_tcache.CacheManager, metaclass=abc.ABCMeta):
    """Triton's cache manager contract on progcache's store. Triton makes one
    per compile (``key`` is its kernel hash in base32); ``override`` and
    ``dump`` managers are directories of Triton's debugging tools, not
    caches, and are served by Triton's own FileCacheManager unchanged."""

    def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
        self.key = key
        self._files: Optional[_tcache.FileCacheManager] = None
        if override or dump:
            self._files = _tcache.FileCacheManager(key, override=override, dump=dump)
            self.cache_dir = self._files.cache_dir
            return
        base = _knobs.cache.dir
        if not base:
            raise RuntimeError("Could not create or locate cache dir")
        # With PROGCACHE_DISABLE nothing is looked up, and what Triton writes
        # goes to a private directory: TRITON_CACHE_DIR is not touched.
        # An unusable configuration is the same: nothing is served, not even
        # a copy under TRITON_CACHE_DIR.
        st = _STORE.get_state()
        self._disabled = st.disabled or st.failed is not None
        self.cache_dir = os.path.join(_DIRS.private_base() if self._disabled else _DIRS.base(base), key)
        self._group_mode = False
        self._pending: Dict[str, bytes] = {}
        self._lock: Any = None
        self._release: Any = None

    # ---- Triton's contract

    def get_file(self, filename: str) -> Optional[str]:
        if self._files is not None:
            return self._files.get_file(filename)
        path = os.path.join(self.cache_dir, filename)
        if filename in self._pending or (self._group_mode and os.path.exists(path)):
            return path  # a file this compile just wrote (Triton's USE_IR_LOC reads it back)
        if self._disabled or not _safe_name(filename):
            return None
        found = _get(_entry_key("file", self.key, filename), host_code=_host_code(filename))
        if found is None:
            return None
        meta, arts = self._decode(found, "file", filename)
        if meta is None or len(arts) != 1 or arts[0][0] != filename:
            return None
        try:
            with open(path, "rb") as f:
                if f.read() == arts[0][1]:
                    return path
        except OSError:
            pass
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            return _write_atomic(self.cache_dir, filename, arts[0][1])
        except OSError:
            _STORE.get_state().errors += 1
            return None

    def put(self, data, filename: str, binary=True) -> str:
        if self._files is not None:
            return self._files.put(data, filename, binary=binary)
        if not isinstance(data, bytes):
            data = str(data).encode("utf-8")
        try:
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            path = _write_atomic(self.cache_dir, filename, data)
        except OSError:
            _STORE.get_state().errors += 1
            path = _fallback_path(filename, data)
        if self._group_mode:
            # A child of the group put_group will name: stored with it, as one entry.
            self._pending[filename] = data
        elif _safe_name(filename):
            # A file of its own (a launcher's .so, autotuning results): Triton
            # asked get_file for it and missed, so it is stored by itself.
            _put(_entry_key("file", self.key, filename), self._meta("file", filename, [filename]),
                 [(filename, data)])
        return path

    def get_group(self, filename: str) -> Optional[Dict[str, str]]:
        if self._files is not None:
            return self._files.get_group(filename)
        self._group_mode = True
        if self._disabled or not _safe_name(filename):
            return None
        paths = self._local_group(filename)
        if paths is not None:
            _STORE.count_copy_hit()  # served from the materialised copy: a hit all the same
            return paths
        paths = self._stored_group(filename)
        if paths is not None:
            return paths
        missed = _STORE.missed()  # the lookup above was a miss the store counted
        # A miss: this process compiles. Others that miss the same key now
        # wait on the lock until put_group (or this manager's end) releases it.
        s = _STORE.get_state()
        if s.store is None:
            return None
        name = _entry_key("group", self.key, filename).hex()
        _release_own(name)
        try:
            lock = _core.LockFile(os.path.join(s.root, "locks"), name, LOCK_TIMEOUT_S, s.sharing == "group")
        except Exception:  # a timeout, or a lock directory that cannot be used: compile unlocked
            return None
        # Look again under the lock, waited or not: a process that stored the
        # group between this one's miss and its lock leaves no wait behind.
        # The miss was counted once already: a look that finds nothing now
        # counts nothing more.
        paths = self._local_group(filename)
        if paths is not None:
            _STORE.count_copy_hit()
        else:
            paths = self._stored_group(filename, again=True)
        if paths is not None:
            # Served after all (another process compiled it meanwhile): the
            # lookup counts once, as the hit it ended as.
            if missed:
                _STORE.uncount_miss()
            lock.release()
            return paths
        self._lock = lock
        # Released when put_group stores the group, or when Triton drops this
        # manager without one (its compile raised), or when this thread asks
        # for the same group again (its compile raised and the manager was
        # kept alive: an exception held by a notebook or a future).
        self._release = weakref.finalize(self, _release_held, name, lock)
        with _held_lock:
            _held[name] = (threading.get_ident(), self._release, lock)
        return None

    def put_group(self, filename: str, group: Dict[str, str]) -> str:
        if self._files is not None:
            return self._files.put_group(filename, group)
        try:
            return self._put_group(filename, group)
        finally:
            if self._release is not None:
                self._release()
                self._release = None
                self._lock = None

    # ---- internals

    def _meta(self, kind: str, name: str, children: List[str]) -> dict:
        return {"kind": kind, "schema": _SCHEMA, "key": self.key, "name": name, "children": sorted(children),
                "triton": triton.__version__}

    def _decode(self, found, kind: str, name: str):
        """(metadata, artifacts) of an entry read back, or (None, []) when it
        is not what this manager writes for (kind, key, name) with this
        Triton: a foreign or old entry is a miss."""
        meta_json, arts = found
        try:
            meta = json.loads(meta_json)
        except ValueError:
            return None, []
        names = [a[0] for a in arts]
        if (not isinstance(meta, dict) or meta.get("kind") != kind or meta.get("schema") != _SCHEMA
                or meta.get("key") != self.key or meta.get("name") != name
                or meta.get("triton") != triton.__version__ or meta.get("children") != sorted(names)
                or len(set(names)) != len(names) or not all(_safe_name(n) for n in names)):
            return None, []
        return meta, arts

    def _put_group(self, filename: str, group: Dict[str, str]) -> str:
        children: List[tuple] = []
        complete = _safe_name(filename)
        for child, path in group.items():
            data = self._pending.get(child)
            if data is None:
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    complete = False
                    break
            if not _safe_name(child):
                complete = False
                break
            children.append((child, data))
        if complete:
            children.sort()
            _put(_entry_key("group", self.key, filename), self._meta("group", filename, [c for c, _ in children]),
                 children)
        try:
            return self._write_stamp(self.cache_dir, filename, dict(group))
        except OSError:
            _STORE.get_state().errors += 1
            return _fallback_path(_GROUP_PREFIX + filename, json.dumps({"child_paths": group}).encode())

    def _write_stamp(self, directory: str, filename: str, child_paths: Dict[str, str]) -> str:
        """The group file in Triton's format (``child_paths``), plus the stat
        identity of each child as it is now in ``directory``; written last,
        by a rename, so a lookup trusts the children only as they were."""
        mine = [c for c, p in child_paths.items() if os.path.dirname(p) == self.cache_dir]
        os.makedirs(directory, mode=0o700, exist_ok=True)
        return _kernel_dirs.write_record(directory, _GROUP_PREFIX + filename,
                                         self._stamp(child_paths, _kernel_dirs.idents_of(directory, mine)))

    def _stamp(self, child_paths: Dict[str, str], idents: Dict[str, list]) -> dict:
        return {"child_paths": child_paths, _STAMP_KEY: {"schema": _SCHEMA, "key": self.key, "children": idents}}

    def _local_group(self, filename: str) -> Optional[Dict[str, str]]:
        """The group as materialised under TRITON_CACHE_DIR, if every child
        is still the file the stamp recorded; else None."""
        try:
            with open(os.path.join(self.cache_dir, _GROUP_PREFIX + filename), "rb") as f:
                stamp = json.loads(f.read())
            rec = stamp[_STAMP_KEY]
            paths = stamp["child_paths"]
            if rec["schema"] != _SCHEMA or rec["key"] != self.key or not paths:
                return None
            children = rec["children"]
            out = {}
            for child, path in paths.items():
                want = children.get(child)
                if (want is None or path != os.path.join(self.cache_dir, child)
                        or _identity(path) != want):
                    return None
                out[child] = path
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _stored_group(self, filename: str, again: bool = False) -> Optional[Dict[str, str]]:
        key = _entry_key("group", self.key, filename)
        found = _STORE.recheck(key) if again else _get(key)
        if found is None:
            return None
        meta, arts = self._decode(found, "group", filename)
        if meta is None or not arts:
            return None
        try:
            return self._materialise(filename, arts)
        except OSError:
            _STORE.get_state().errors += 1
            return None

    def _materialise(self, filename: str, arts: List[tuple]) -> Dict[str, str]:
        """Lays the group out under the trusted base as TRITON_CACHE_DIR/<key>
        (kernel_dirs.materialise: a new directory appears whole; an existing
        one has each file replaced, then the stamp)."""
        paths = {name: os.path.join(self.cache_dir, name) for name, _ in arts}
        _kernel_dirs.materialise(os.path.dirname(self.cache_dir), self.cache_dir,
                                 [(name, data, 0o600) for name, data in arts], _GROUP_PREFIX + filename,
                                 lambda idents: self._stamp(paths, idents),
                                 lambda d: self._local_group(filename) is not None)
        return paths


# ------------------------------------------------- Triton's RemoteCacheManager

class RemoteCacheBackend(_tcache.RemoteCacheBackend):
    """A backend for Triton's own RemoteCacheManager
    (``TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager``,
    ``TRITON_REMOTE_CACHE_BACKEND=progcache.triton:RemoteCacheBackend``): each
    file is a progcache entry on the configured tiers (checksummed, signed,
    capped). CacheManager is the better choice: RemoteCacheManager asks the
    backend on every lookup, rewrites each file of a hit, and stores a group's
    files one by one; see docs/triton.md."""

    def __init__(self, key: str):
        super().__init__(key)
        self._key = key

    def get(self, filenames: List[str]) -> Dict[str, bytes]:
        out = {}
        for name in filenames:
            if not isinstance(name, str) or not _safe_name(os.path.basename(name)):
                continue
            found = _get(_entry_key("remote-file", self._key, name), host_code=_host_code(os.path.basename(name)))
            if found is None:
                continue
            meta_json, arts = found
            try:
                meta = json.loads(meta_json)
            except ValueError:
                continue
            if (isinstance(meta, dict) and meta.get("key") == self._key and meta.get("name") == name
                    and meta.get("triton") == triton.__version__ and len(arts) == 1):
                out[name] = arts[0][1]
        return out

    def put(self, filename: str, data: bytes) -> None:
        if not isinstance(data, bytes):
            data = str(data).encode("utf-8")
        _put(_entry_key("remote-file", self._key, filename),
             {"kind": "remote-file", "key": self._key, "name": filename, "triton": triton.__version__},
             [("data", data)])


# ------------------------------------------------------------ enabling

def _warm_start_wanted() -> bool:
    """The memo is on where this manager is Triton's, unless
    ``PROGCACHE_TRITON_WARM_START`` says otherwise (docs/triton.md, "The
    warm-start memo"). The rule is the autoload hook's, which decides before
    Triton's first compile; without that module (progcache not installed by
    pip) only the variable turns the memo on."""
    try:
        import _progcache_autoload  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return _env_flag("PROGCACHE_TRITON_WARM_START")
    return bool(_progcache_autoload.wanted("triton"))


def enable(*, warm_start: Optional[bool] = None) -> None:
    """Makes Triton use this cache manager in this process (and in processes
    it starts, through ``TRITON_CACHE_MANAGER``) and memoises
    ``triton_key()``; ``warm_start=False`` (or
    ``PROGCACHE_TRITON_WARM_START=0`` where ``warm_start`` is not given)
    leaves the memo off."""
    os.environ["TRITON_CACHE_MANAGER"] = "progcache.triton:CacheManager"
    _knobs.cache.manager_class = CacheManager
    if warm_start is None:
        warm_start = _warm_start_wanted()
    if warm_start:
        from . import _triton_key
        _triton_key.install(_tcache)


if _warm_start_wanted():
    from . import _triton_key as _tk
    _tk.install(_tcache)
