"""progcache for tilelang: a backend for tilelang's own kernel cache (PyPI
``tilelang`` 0.1.x, from 0.1.15), turned on with one variable::

    PROGCACHE_TILELANG=1

or in code, ``progcache.tilelang.enable()``. ``tilelang.compile``,
``@tilelang.jit`` and ``tilelang.cache.cached`` keep going through tilelang's
``KernelCache`` (every execution backend: tvm_ffi, cython, nvrtc, cutedsl);
what changes is where a kernel's files live (docs/tilelang.md):

- A kernel's whole file set (device and host source, the kernel library or
  ``executable.so``, ``kernel.cubin``/``kernel.py``, parameters, tilelang's
  manifest) is ONE progcache entry in ``<progcache root>/tilelang``: published
  atomically, checksummed, signed when signing is on, counted under the byte
  cap, on every tier (memory, disk, and Redis when signed).
- tilelang loads those files by path, so a hit materialises them in tilelang's
  own layout under ``TILELANG_CACHE_DIR`` (one directory rename) with a record
  of each file's stat identity; a later lookup loads that copy only while every
  recorded file keeps its identity, and asks the store otherwise.
- The key is tilelang's own, plus what tilelang's leaves out: the identity of
  the nvcc and host C++ compiler it runs (their ``--version``). tilelang's
  binary cache of nvcc outputs is keyed with it too, so a new CUDA toolkit
  never serves a cubin an older one built.
- Nothing executable is loaded from a place others can write unless it is
  signed: the library's rule for host code (trust.h). With no
  ``PROGCACHE_HMAC_KEY_FILE``, a group-shared root (``PROGCACHE_SHARING=group``)
  is not read and the remote tier is not used.
- tilelang's cache directory is trusted only as a private cache root is
  (owner, mode, every directory above it); where it fails, kernels are laid
  out in a private directory of the process instead, and the user is told
  once.
- Any failure of the cache is a miss, and tilelang compiles as without it.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import threading
import uuid
import warnings
from typing import Any, Dict, List, Optional, Union

try:
    import tilelang  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from tilelang.cache import kernel_cache as _kc  # type: ignore[import-untyped, import-not-found, unused-ignore]
except ImportError as _e:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "progcache.tilelang needs tilelang 0.1.15 or newer (PyPI 'tilelang'): pip install 'tilelang>=0.1.15,<0.2'. "
        f"Importing it failed: {_e}") from None

from . import _core, _integration, _kernel_dirs

_MIN_TILELANG = (0, 1, 15)


def _tilelang_version() -> tuple:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", getattr(tilelang, "__version__", ""))
    return tuple(int(g) for g in m.groups()) if m else (0, 0, 0)


_KC: Any = getattr(_kc, "KernelCache", None)
if (_tilelang_version() < _MIN_TILELANG or _tilelang_version()[:2] != (0, 1) or _KC is None
        or not all(callable(getattr(_KC, m, None)) for m in
                   ("_load_kernel_from_disk", "_save_kernel_to_disk", "_get_cache_path", "_get_staging_root",
                    "_is_complete_cache_dir", "_verify_cache_dir_integrity", "_get_cache_namespace"))):
    raise ImportError(f"progcache.tilelang supports tilelang 0.1.x from 0.1.15 (PyPI 'tilelang>=0.1.15,<0.2'); this "
                      f"is tilelang {getattr(tilelang, '__version__', '?')}. pip install 'tilelang>=0.1.15,<0.2'")

# Bump when the entry's layout or metadata changes: older entries then miss.
_SCHEMA = 1
_RECORD = ".progcache.json"
_MEMORY_BYTES = 64 << 20


# A kernel library is code: the remote tier only with signed entries.
_STORE = _integration.CodeStoreState("tilelang", _MEMORY_BYTES)
_DIRS = _kernel_dirs.KernelDirs("tilelang", "tilelang's cache directory (TILELANG_CACHE_DIR)")
_warned: set = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn("progcache.tilelang: " + message, RuntimeWarning, stacklevel=3)


def reset() -> None:
    """Forgets the resolved configuration and closes the store (flushing
    remote writes); the next lookup resolves and opens them again."""
    _STORE.reset()
    _DIRS.reset()
    _warned.clear()


def stats() -> Dict[str, Union[int, float, None]]:
    """The store's counters (hits, misses, errors per tier) plus ``errors``:
    failures of this module that were turned into misses."""
    return _STORE.stats()


# ------------------------------------------------------------ the key

_compilers_lock = threading.Lock()
_compilers_value: List[list] = []


def _version_of(path: Optional[str]) -> str:
    if not path:
        return "none"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {type(e).__name__}"
    return out.stdout.decode("utf-8", "replace") + f"[rc {out.returncode}]"


def _compiler_paths() -> List[str]:
    paths = []
    for probe in ("tilelang.contrib.nvcc:get_nvcc_compiler", "tilelang.contrib.cc:get_cplus_compiler"):
        mod, fn = probe.split(":")
        try:
            import importlib
            paths.append(str(getattr(importlib.import_module(mod), fn)()))
        except Exception as e:  # no CUDA toolkit found: part of the identity too
            paths.append(f"({type(e).__name__})")
    return paths


def _compilers() -> list:
    """[[path, --version output]] of the nvcc and host C++ compiler tilelang
    runs: what tilelang's own keys leave out. Once per process, and memoised
    in the store under the stat identity of each resolved binary (running
    both costs 6-8 ms here), so a replaced compiler is asked again."""
    if not _compilers_value:
        with _compilers_lock:
            if not _compilers_value:
                paths = _compiler_paths()
                real = [os.path.realpath(p) if os.path.isabs(p) else p for p in paths]
                mkey = _core.typed_key("tilelang-compilers", [
                    ("schema", _SCHEMA), ("paths", paths), ("real", real),
                    ("identities", [_integration.identity(r) or [] for r in real])])
                found = _STORE.get(mkey)
                value = None
                if found is not None:
                    try:
                        value = json.loads(dict(found[1])["versions"])
                    except (KeyError, ValueError, TypeError):
                        value = None
                if not (isinstance(value, list) and len(value) == len(paths)):
                    value = [[p, _version_of(p if os.path.isabs(p) else None)] for p in paths]
                    _STORE.put(mkey, {"kind": "tilelang-compilers", "schema": _SCHEMA},
                               [("versions", json.dumps(value).encode())])
                _compilers_value.append(value)
    return _compilers_value[0]


def _entry_key(cache, key: str) -> bytes:
    return _core.typed_key("tilelang-kernel", [
        ("schema", _SCHEMA), ("key", key), ("backend", type(cache).__name__),
        ("kernel_lib", str(getattr(cache, "kernel_lib_path", ""))), ("namespace", _KC._get_cache_namespace()),
        ("tilelang", tilelang.__version__), ("compilers", _compilers())])


# ------------------------------------------------------------ files on disk

def _record_ok(path: str, ekey: bytes) -> bool:
    """Whether the directory holds what progcache wrote for this entry: its
    record names the entry, and every recorded file keeps its identity."""
    rec = _kernel_dirs.read_record(path, _RECORD)
    return rec is not None and rec.get("entry") == ekey.hex() and _kernel_dirs.files_match(path, rec.get("files"))


def _record(ekey: bytes):
    return lambda idents: {"entry": ekey.hex(), "files": idents}


def _write_record(path: str, ekey: bytes, names: List[str]) -> None:
    _kernel_dirs.write_record(path, _RECORD, _record(ekey)(_kernel_dirs.idents_of(path, names)))


def _trust_cache_dir() -> None:
    """Every cache tilelang keeps (its kernels, its cache of nvcc outputs,
    their staging) lives under ``TILELANG_CACHE_DIR``: when that directory
    may not be trusted, tilelang's setting is pointed at this process's
    private directory instead (said once), so not even a cubin comes from
    where another user could write."""
    from tilelang import env  # type: ignore[import-untyped, import-not-found, unused-ignore]
    current = str(env.TILELANG_CACHE_DIR)
    trusted = _DIRS.base(current)
    if trusted != current:
        env.TILELANG_CACHE_DIR = trusted


def _kernel_path(cache, key: str) -> str:
    """Where tilelang loads the kernel ``key`` from: its own cache path when
    that directory may be trusted, else the same name in this process's
    private directory."""
    own = _orig_get_cache_path(cache, key)
    return os.path.join(_DIRS.base(os.path.dirname(own)), os.path.basename(own))


def _loadable(sharing: str, signed: bool) -> bool:
    """progcache.KernelCache's stores (opened with their own arguments): the
    library's rule for host code, nothing executable from a root others can
    write unless its entries are signed (checked, with the key, by the
    store)."""
    if sharing == "group" and not signed:
        _warn_once("group", "the cache root is shared with a group (PROGCACHE_SHARING=group) and entries are not "
                            "signed: tilelang kernels are not loaded from it (set PROGCACHE_HMAC_KEY_FILE)")
        return False
    return True


def _files_of(found, cache, key: str):
    """The entry's files [(name, bytes, executable)] when ``found`` (a
    store's answer) is a valid entry for this kernel; else None."""
    decoded = _integration.decode(found)
    if decoded is None:
        return None
    meta, arts = decoded
    names = [n for n, _ in arts]
    if not (meta.get("kind") == "tilelang-kernel" and meta.get("schema") == _SCHEMA
            and meta.get("key") == key and meta.get("backend") == type(cache).__name__
            and meta.get("tilelang") == tilelang.__version__ and meta.get("files") == names and names
            and len(set(names)) == len(names) and all(_integration.safe_name(n) for n in names)
            and isinstance(meta.get("executable"), list)):
        return None
    exe = set(meta["executable"])
    return [(n, data, n in exe) for n, data in arts]


def _fetch(cache, key: str, ekey: bytes):
    """The files of the tilelang store's entry for this kernel, when there
    is a valid one that may be loaded; else None."""
    st = _STORE.get_state()
    if st.remote_refused:
        _warn_once("remote", "PROGCACHE_REMOTE is not used for tilelang kernels without PROGCACHE_HMAC_KEY_FILE: "
                             "a kernel library is code, loaded only when signed")
    return _files_of(_STORE.get(ekey, host_code=True), cache, key)


def _write_dir(d: str, ekey: bytes, files) -> None:
    for name, data, exe in files:
        _integration.write_atomic(d, name, data, 0o700 if exe else 0o600)
    _write_record(d, ekey, [n for n, _, _ in files])


def _materialise(cache, key: str, ekey: bytes, files) -> str:
    path = _kernel_path(cache, key)
    _kernel_dirs.materialise(os.path.dirname(path), path, [(n, data, 0o700 if exe else 0o600) for n, data, exe in files],
                             _RECORD, _record(ekey), lambda d: _record_ok(d, ekey))
    return path


def _stage(cache, key: str, kernel, func, verbose, private: str):
    """Has tilelang write the kernel's files its own way (every backend's
    hooks, its manifest) into the directory ``private``; returns the
    entry's (metadata, artifacts), or None when tilelang's own checks
    refuse what it wrote (it logged why)."""
    with _redirected(key, private):
        _orig_save(cache, key, kernel, func, verbose)
    if not (cache._is_complete_cache_dir(private) and cache._verify_cache_dir_integrity(private)):
        return None
    names, arts, exe = [], [], []
    for entry in sorted(os.scandir(private), key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False) or not _integration.safe_name(entry.name):
            continue
        with open(entry.path, "rb") as f:
            arts.append((entry.name, f.read()))
        names.append(entry.name)
        if entry.stat(follow_symlinks=False).st_mode & 0o100:
            exe.append(entry.name)
    return ({"kind": "tilelang-kernel", "schema": _SCHEMA, "key": key, "backend": type(cache).__name__,
             "tilelang": tilelang.__version__, "files": names, "executable": exe}, arts)


# ------------------------------------------------------------ the hooks

_orig_load = _KC._load_kernel_from_disk
_orig_save = _KC._save_kernel_to_disk
_orig_get_cache_path = _KC._get_cache_path
_orig_staging_attr = inspect.getattr_static(_KC, "_get_staging_root")
_orig_get_staging_root = _KC._get_staging_root
_redirect = threading.local()


def _get_staging_root(*args):
    """tilelang's staging root, or, while a kernel is redirected, the
    private directory progcache stages it in: files tilelang writes before
    its own rename never sit where another user could swap them."""
    r = getattr(_redirect, "staging", None)
    if r is not None:
        return r
    return _orig_get_staging_root(*args)


_patched_staging_attr = (staticmethod(_get_staging_root) if isinstance(_orig_staging_attr, staticmethod)
                         else _get_staging_root)


def _get_cache_path(self, key: str) -> str:
    """Where tilelang reads and writes the kernel ``key``: the redirected
    directory while one is active, else tilelang's own path in a trusted
    cache directory (``_kernel_path``): tilelang also tags each kernel with
    this path and writes files there after the first launch."""
    r = getattr(_redirect, "to", None)
    if r is not None and r[0] == key:
        return r[1]
    return _kernel_path(self, key)


class _redirected:
    """While active, tilelang's cache reads and writes the kernel ``key``
    at ``path`` (on this thread)."""

    def __init__(self, key: str, path: str) -> None:
        self._to = (key, path)

    def __enter__(self) -> None:
        if _KC._get_cache_path is not _get_cache_path:
            _KC._get_cache_path = _get_cache_path  # falls through to tilelang's unless redirected
        if inspect.getattr_static(_KC, "_get_staging_root") is not _patched_staging_attr:
            _KC._get_staging_root = _patched_staging_attr
        _redirect.to = self._to
        _redirect.staging = os.path.dirname(self._to[1])

    def __exit__(self, *exc) -> None:
        _redirect.to = None
        _redirect.staging = None


def _load_kernel_from_disk(self, key, *args, **kwargs):
    st = _STORE.get_state()
    if st.disabled:
        return None  # PROGCACHE_DISABLE: every kernel is compiled
    try:
        _trust_cache_dir()  # before tilelang compiles: its nvcc outputs are cached there too
    except Exception:
        st.errors += 1
    if st.store is None:
        return None  # an unusable cache (said once): tilelang compiles
    try:
        ekey = _entry_key(self, key)
        path = _kernel_path(self, key)
        if not _record_ok(path, ekey):
            files = _fetch(self, key, ekey)
            if files is None:
                return None
            path = _materialise(self, key, ekey, files)
    except Exception:  # a cache failure is a miss
        st.errors += 1
        return None
    with _redirected(key, path):
        return _orig_load(self, key, *args, **kwargs)


def _save_kernel_to_disk(self, key, kernel, func=None, verbose=False):
    st = _STORE.get_state()
    if st.disabled:
        return None
    if st.store is None:
        return None
    parent = None
    try:
        ekey = _entry_key(self, key)
        path = _kernel_path(self, key)
        parent = _kernel_dirs.new_staging(os.path.dirname(path))
        private = os.path.join(parent, key)
        staged = _stage(self, key, kernel, func, verbose, private)
        if staged is None:
            return None
        # One entry in the store, then the directory where tilelang loads.
        _STORE.put(ekey, *staged)
        _write_record(private, ekey, staged[0]["files"])
        _kernel_dirs.publish(private, path, staged[0]["files"], _RECORD, _record(ekey), lambda d: _record_ok(d, ekey))
    except Exception:  # the compile succeeded; a failed store costs only a later miss
        st.errors += 1
    finally:
        if parent is not None:
            _integration.rmtree(parent)
    return None


def _keyed_with_compilers(original):
    def _finalize_key(cls, key_data):
        key_data = dict(key_data)
        key_data["progcache_compilers"] = _compilers()
        return original.__func__(cls, key_data)

    _finalize_key._progcache = True  # type: ignore[attr-defined]
    return classmethod(_finalize_key)


_enabled = False
_enable_lock = threading.Lock()
_saved_binary_key = None


def _key_binary_cache() -> None:
    """Keys tilelang's cache of nvcc outputs (CUDABinaryCache) with the
    compilers' identity too, so a new toolkit never gets an older one's
    cubin. Idempotent; the caller holds _enable_lock."""
    global _saved_binary_key
    if _saved_binary_key is not None:
        return
    try:
        from tilelang.cache.cuda_binary_cache import CUDABinaryCache  # type: ignore[import-untyped, import-not-found, unused-ignore]
        original = next(vars(c)["_finalize_key"] for c in CUDABinaryCache.__mro__ if "_finalize_key" in vars(c))
        if getattr(original, "__func__", original).__dict__.get("_progcache"):
            return
        _saved_binary_key = (CUDABinaryCache, vars(CUDABinaryCache).get("_finalize_key"))
        CUDABinaryCache._finalize_key = _keyed_with_compilers(original)
    except (ImportError, StopIteration, AttributeError):
        _saved_binary_key = None


def enable() -> None:
    """Makes tilelang's KernelCache (every backend's) keep its kernels in
    progcache. Idempotent; ``PROGCACHE_TILELANG=1`` calls it when tilelang is
    imported."""
    global _enabled
    with _enable_lock:
        if _enabled:
            return
        _KC._load_kernel_from_disk = _load_kernel_from_disk
        _KC._save_kernel_to_disk = _save_kernel_to_disk
        _KC._get_cache_path = _get_cache_path
        _key_binary_cache()
        try:
            _trust_cache_dir()
        except Exception:  # judged again at the first lookup
            pass
        _enabled = True


def disable() -> None:
    """Gives tilelang its own cache back (tests; a program that wants it)."""
    global _enabled, _saved_binary_key
    with _enable_lock:
        if not _enabled:
            return
        _KC._load_kernel_from_disk = _orig_load
        _KC._save_kernel_to_disk = _orig_save
        _KC._get_cache_path = _orig_get_cache_path
        _KC._get_staging_root = _orig_staging_attr
        if _saved_binary_key is not None:
            cls, own = _saved_binary_key
            if own is None:
                del cls._finalize_key
            else:
                cls._finalize_key = own
            _saved_binary_key = None
        _enabled = False


# ------------------------------------------------------------ progcache.KernelCache

_private_lock = threading.Lock()
_private_root: List[str] = []


def _private_dir() -> str:
    """A directory of this process that only its user can write (mkdtemp
    under $TMPDIR), removed at exit: where progcache.KernelCache lays out the
    files tilelang loads a kernel from. Its entries' stores may be shared
    with a group; this never is, so nobody can swap a file between the
    store's checks and tilelang's load."""
    with _private_lock:
        if not _private_root:
            import atexit
            import tempfile

            d = tempfile.mkdtemp(prefix="progcache-tilelang-")
            atexit.register(_integration.rmtree, d)
            _private_root.append(d)
        return _private_root[0]


def _cached_in(kc, func, out_idx, args, *, target, target_host, execution_backend, verbose, pass_configs,
               compile_flags):
    """progcache.KernelCache.cached for a tilelang PrimFunc: tilelang's own
    contract (same key, same JITKernel), each kernel one entry of ``kc``'s
    store, compiled once per key across the threads and processes of a
    host."""
    from tilelang import env  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from tilelang.cache import _resolve_cache_dispatch  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from tilelang.jit import JITKernel  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from tilelang.transform.pass_config import normalize_pass_configs  # type: ignore[import-untyped, import-not-found, unused-ignore]

    with _enable_lock:
        _key_binary_cache()  # what tilelang's JITKernel compiles goes through its cache of nvcc outputs
    pass_configs = normalize_pass_configs(pass_configs)
    cache, ctx, verbose = _resolve_cache_dispatch(target, target_host, execution_backend, verbose)
    target, target_host, backend = ctx.target, ctx.target_host, ctx.execution_backend.name

    def compile_kernel():
        kc.builds += 1
        return JITKernel(func, out_idx=out_idx, execution_backend=backend, target=target, target_host=target_host,
                         verbose=verbose, pass_configs=pass_configs, compile_flags=compile_flags, backend_context=ctx)

    if kc._disabled or not env.is_cache_enabled() or backend == "torch":
        return compile_kernel()  # as tilelang does with its cache off (and always for its torch backend)
    key = cache._generate_key(func=func, out_idx=out_idx, execution_backend=backend, args=args, target=target,
                              target_host=target_host, pass_configs=pass_configs, compile_flags=compile_flags)
    ekey = _entry_key(cache, key)
    with kc._memory_lock:
        kernel = kc._memory.get(ekey)
    if kernel is not None:
        try:  # served from this cache's memory: a hit in the root's statistics all the same
            kc._store.count_copy_hit()
        except Exception:
            kc.errors += 1
        return kernel
    load_args = (ctx, out_idx, pass_configs, compile_flags, func, verbose)
    missed = [False]  # the first lookup was a miss the store counted

    def load():
        try:
            if not _loadable(kc._sharing, kc._signed):
                return None
            raw = kc._store.get_entry(ekey)
            missed[0] = raw is None
            files = _files_of(raw, cache, key)
            if files is None:
                return None
            d = os.path.join(_private_dir(), uuid.uuid4().hex)
            os.mkdir(d, 0o700)
            _write_dir(d, ekey, files)
            with _redirected(key, d):
                return _orig_load(cache, key, *load_args)
        except Exception:  # a damaged entry or a failing store is a miss
            kc.errors += 1
            return None

    def build():
        kernel = compile_kernel()
        parent = None
        try:
            parent = _kernel_dirs.new_staging(_private_dir())
            staged = _stage(cache, key, kernel, func, verbose, os.path.join(parent, key))
            if staged is not None:
                kc._store.put_entry(ekey, json.dumps(staged[0], sort_keys=True), staged[1])
        except Exception:  # the compile succeeded; a failed store costs only a later miss
            kc.errors += 1
        finally:
            if parent is not None:
                _integration.rmtree(parent)
        return kernel

    kernel = load()
    if kernel is None:
        # Waiters share the leader's kernel.
        kernel = kc._single_flight(ekey.hex(), load, missed[0], build, reload=False)
    with kc._memory_lock:
        return kc._memory.setdefault(ekey, kernel)


if _integration.env_flag("PROGCACHE_TILELANG"):
    enable()
