"""progcache for JAX: the store behind JAX's persistent compilation cache
(PyPI ``jax``/``jaxlib`` 0.10), turned on with one variable::

    PROGCACHE_JAX=1

or in code, ``progcache.jax.enable()`` (``disable()`` gives JAX its own
cache back). ``jax.jit`` keeps going through JAX's compilation cache; what
changes is where a serialized executable lives and what is trusted
(docs/jax.md):

- Each executable is one progcache entry in ``<progcache root>/jax``:
  published atomically, checksummed, signed when signing is on, counted under
  the root's byte cap, on every tier (memory, disk, and the remote tier when
  signed: a serialized executable is code).
- The key is JAX's own, less the paths JAX derives from its cache directory
  (the GPU autotune sub-cache and kernel cache file), so a JAX directory at
  another path is served; plus what JAX's key leaves out: on the CPU, the
  host processor the executable was compiled for.
- Processes that miss the same program at once compile it once: the first
  compiles, the others wait on a lock under the store and are served.
- JAX's own thresholds still decide what is written
  (``jax_persistent_cache_min_compile_time_secs``, ``..._min_entry_size_bytes``);
  ``progcache stats`` shows them beside the store's counters.
- Any failure of the cache is a miss and JAX compiles; nothing progcache does
  raises out of ``jit``. A JAX whose hook is not where this module expects it
  is told once, and keeps its own cache.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import tempfile
import threading
from typing import Any, Dict, Optional, Union

try:
    import jax  # type: ignore[import-untyped, import-not-found, unused-ignore]
except ImportError as _e:  # pragma: no cover - exercised in a subprocess test
    raise ImportError("progcache.jax needs JAX (PyPI 'jax'): pip install 'jax>=0.10,<0.11'. "
                      f"Importing it failed: {_e}") from None

from . import _core, _integration

# Bump when the entry's layout or metadata changes: older entries then miss.
_SCHEMA = 1
_MEMORY_BYTES = 256 << 20
LOCK_TIMEOUT_S = _integration.LOCK_TIMEOUT_S  # where the configuration gives none (PROGCACHE_LOCK_TIMEOUT)
# The name of the directory JAX is given when the program sets none
# (beside the store, under the cache root).
_XLA_DIR = "jax-xla"
# What the key holds in place of JAX's cache directory.
_PINNED_DIR = "<jax-cache-dir>"
# The framework's settings file the CLI's stats shows (docs/cli.md).
_SETTINGS = "framework.json"

_hooks: Dict[str, Any] = {}  # JAX's own functions, while progcache's stand in
_why_not = ""  # why the hook is not available, when it is not


def _find_hooks() -> str:
    """Where JAX's cache is asked for and its key made; '' when all is where
    this module expects it, else what is missing."""
    try:
        from jax._src import compilation_cache as cc  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from jax._src import compiler  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from jax._src import config as jcfg  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from jax._src.compilation_cache_interface import CacheInterface  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception as e:
        return f"JAX's compilation cache modules could not be imported ({e})"
    for mod, names in ((cc, ("get_file_cache", "get_cache_key", "reset_cache", "is_persistent_cache_enabled")),
                       (compiler, ("_compile_and_write_cache", "_cache_read")),
                       (jcfg, ("compilation_cache_dir", "persistent_cache_min_compile_time_secs",
                               "persistent_cache_min_entry_size_bytes"))):
        for n in names:
            if getattr(mod, n, None) is None:
                return f"{mod.__name__}.{n} is missing"
    # progcache calls these as JAX 0.10 does: a JAX that changed how they are
    # called is not one it knows.
    import inspect
    for fn, params in ((cc.get_file_cache, ["path"]),
                       (cc.get_cache_key, ["module", "devices", "compile_options", "backend"]),
                       (compiler._compile_and_write_cache, ["backend", "computation", "executable_devices",
                                                            "compile_options", "host_callbacks", "module_name",
                                                            "cache_key"]),
                       (compiler._cache_read, ["module_name", "cache_key", "compile_options", "backend",
                                               "executable_devices"])):
        try:
            names_ = [p.name for p in inspect.signature(fn).parameters.values()]
        except (TypeError, ValueError):
            names_ = []
        if names_[:len(params)] != params:
            return f"{fn.__module__}.{fn.__name__} takes ({', '.join(names_)}), not ({', '.join(params)})"
    _hooks.update(cc=cc, compiler=compiler, jcfg=jcfg, base=CacheInterface)
    return ""


_why_not = _find_hooks()


class _JaxStore(_integration.CodeStoreState):
    """The JAX store: a serialized executable is code, so the remote tier
    serves only signed entries; a configured one left out is said once."""

    def _open(self) -> _integration.State:
        st = super()._open()
        if st.remote_refused:
            _integration.warn_once("jax", "remote-unsigned",
                                   "PROGCACHE_REMOTE is not used for JAX executables (they are code) without "
                                   "PROGCACHE_HMAC_KEY_FILE or PROGCACHE_SIGNING_KEY_FILE; the local store is")
        return st


_STORE = _JaxStore("jax", _MEMORY_BYTES)
_enable_lock = threading.Lock()
_enabled = False
_set_dir: Optional[list] = None  # [JAX's directory before enable(), the one it set] when enable() set one
_local = threading.local()  # .recheck: the lookup is a look again under the lock; .stored: put() ran
_counts_lock = threading.Lock()
_counts = {"compiled": 0, "declined": 0, "waited": 0}


def _count(name: str) -> None:
    with _counts_lock:
        _counts[name] += 1


def reset() -> None:
    """Forgets the resolved configuration and closes the store (flushing
    remote writes); the next lookup resolves and opens it again."""
    _STORE.reset()
    with _counts_lock:
        for k in _counts:
            _counts[k] = 0


def stats() -> Dict[str, Union[int, float, None]]:
    """The store's counters (hits, misses, errors per tier) plus ``errors``
    (failures of this module turned into misses), ``compiled`` (programs
    JAX compiled after a miss), ``declined`` (of those, the ones JAX did not
    write: below its thresholds, or using host callbacks) and ``waited``
    (misses that waited on another process's compile)."""
    out = _STORE.stats()
    with _counts_lock:
        out.update(_counts)
    return out


# ------------------------------------------------------------ the key

_cpu_identity: list = []


def _host_cpu() -> str:
    """The processor XLA's CPU backend compiles for: vendor, family, model
    and feature flags, as Linux reports them (an executable built for one
    set of features can fault on a processor without them). JAX's key holds
    none of it."""
    if not _cpu_identity:
        fields: Dict[str, str] = {}
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the first processor's block is enough
                    name, _, value = line.partition(":")
                    name = name.strip()
                    if name in ("vendor_id", "cpu family", "model", "flags", "Features", "CPU implementer",
                                "CPU part", "CPU architecture"):
                        fields[name] = " ".join(sorted(value.split())) if name in ("flags", "Features") \
                            else value.strip()
        except OSError:
            pass
        import platform
        fields["machine"] = platform.machine()
        _cpu_identity.append(_core.typed_key("jax-host-cpu", sorted(fields.items())).hex()[:32])
    return _cpu_identity[0]


def _pin_dirs(options: Any) -> Any:
    """A copy of the compile options in which the paths JAX derives from its
    cache directory read the same wherever that directory is; the options
    themselves (what XLA is given) are left as they are."""
    dir_ = _hooks["jcfg"].compilation_cache_dir.value
    if not dir_:
        return options
    debug = options.executable_build_options.debug_options
    prefix = str(pathlib.Path(dir_))
    fields = ("xla_gpu_per_fusion_autotune_cache_dir", "xla_gpu_kernel_cache_file")
    if not any(str(getattr(debug, f, "")).startswith(prefix) for f in fields):
        return options
    pinned = copy.deepcopy(options)
    debug = pinned.executable_build_options.debug_options
    for f in fields:
        value = str(getattr(debug, f, ""))
        if value == prefix or value.startswith(prefix + os.sep):
            setattr(debug, f, _PINNED_DIR + value[len(prefix):])
    return pinned


def _get_cache_key(module, devices, compile_options, backend, *args, **kwargs) -> str:
    """JAX's key for a program, made with the cache directory's paths pinned,
    and the host processor added for the CPU backend."""
    key = _hooks["get_cache_key"](module, devices, _pin_dirs(compile_options), backend, *args, **kwargs)
    if getattr(backend, "platform", "") == "cpu":
        key += "-cpu" + _host_cpu()
    return key


def _entry_key(jax_key: str) -> bytes:
    return _core.typed_key("jax-executable", [("schema", _SCHEMA), ("jax_key", jax_key),
                                              ("jax", getattr(jax, "__version__", ""))])


def _module_name(jax_key: str) -> str:
    m = re.match(r"(.*)-[0-9a-f]{64}", jax_key)
    return m.group(1) if m else ""


# ------------------------------------------------------------ the cache JAX uses

def _lookup(key: str) -> Optional[bytes]:
    """The stored executable for JAX's key, or None; never raises."""
    st = _STORE.get_state()
    if st.disabled or st.store is None or not isinstance(key, str):
        return None
    ekey = _entry_key(key)
    again = getattr(_local, "recheck", False)
    found = _integration.decode(_STORE.recheck(ekey, host_code=True) if again else
                                _STORE.get(ekey, host_code=True))
    if found is None:
        return None
    meta, arts = found
    if (meta.get("schema") != _SCHEMA or meta.get("jax_key") != key or len(arts) != 1
            or arts[0][0] != "executable"):
        st.errors += 1  # an entry that is not this key's: a miss
        return None
    if again:
        _local.served_again = True
    return bytes(arts[0][1])


def _save(key: str, value: bytes) -> None:
    """Stores what JAX wrote; never raises (a failed store is a later miss)."""
    _local.stored = True
    st = _STORE.get_state()
    if st.disabled or st.store is None or not isinstance(key, str) or not isinstance(value, (bytes, bytearray)):
        return
    if not st.host_code["disk"]:
        return  # no process of this configuration may read it (said once by the lookup)
    _STORE.put(_entry_key(key), {"schema": _SCHEMA, "kind": "jax-executable", "name": _module_name(key),
                                 "jax_key": key}, [("executable", bytes(value))])


_CacheBase: Any = _hooks.get("base", object)


class ProgcacheJaxCache(_CacheBase):  # type: ignore[misc, valid-type]
    """JAX's CacheInterface over progcache's store."""

    def __init__(self, path: str) -> None:
        self._path = pathlib.Path(path)

    def get(self, key: str) -> Optional[bytes]:
        try:
            return _lookup(key)
        except Exception:  # never an exception into jit
            return None

    def put(self, key: str, value: bytes) -> None:
        try:
            _save(key, value)
        except Exception:
            pass


def _get_file_cache(path: str):
    """What JAX asks for when it opens its cache (at its first compile, after
    the program's configuration): progcache's, wrapped in JAX's own check of
    contents when ``jax_compilation_cache_check_contents`` asks for it."""
    st = _STORE.get_state()
    if st.store is None and not st.disabled:
        # progcache's store cannot be used (said once): JAX's own cache, as
        # without progcache.
        return _hooks["get_file_cache"](path)
    cache = ProgcacheJaxCache(path)
    if st.store is not None and not st.disabled:
        _write_settings(st.root)
    jcfg, cc = _hooks["jcfg"], _hooks["cc"]
    check = getattr(jcfg, "compilation_cache_check_contents", None)
    if check is not None and check.value and getattr(cc, "VerificationCache", None) is not None:
        return cc.VerificationCache(cache), path
    return cache, path


def _compile_and_write_cache(backend, computation, executable_devices, compile_options, host_callbacks, module_name,
                             cache_key):
    """JAX's compile after a miss, one process at a time per program: a
    process that waited looks again and is served what the first stored."""
    compile_ = _hooks["_compile_and_write_cache"]
    lock = None
    st = _STORE.get_state()
    missed = _STORE.missed()
    # Where no executable may be read (a group root without signing), no
    # process is served another's compile: none waits for one.
    if isinstance(cache_key, str) and not st.disabled and st.store is not None and st.host_code["disk"]:
        timeout = _integration.lock_timeout(st)
        try:
            lock = _core.LockFile(os.path.join(st.root, "locks"), _entry_key(cache_key).hex(), timeout,
                                  st.sharing == "group")
        except (TimeoutError, OSError, ValueError, RuntimeError):  # a lock that cannot be had: compile unlocked
            lock = None
    try:
        if lock is not None:
            # Look again under the lock, waited or not: a process that stored
            # the program between this one's miss and its lock leaves no wait.
            _local.recheck, _local.served_again = True, False
            try:
                found, _ = _hooks["_cache_read"](module_name, cache_key, compile_options, backend,
                                                 executable_devices)
            except Exception:
                found = None
            finally:
                _local.recheck = False
            if found is not None:
                if missed and getattr(_local, "served_again", False):
                    _STORE.uncount_miss()  # one lookup, served: a hit, as it ended
                _count("waited")
                return found
        _local.stored = False
        executable = compile_(backend, computation, executable_devices, compile_options, host_callbacks, module_name,
                              cache_key)
        _count("compiled")
        if not getattr(_local, "stored", False):
            _count("declined")
        return executable
    finally:
        if lock is not None:
            try:
                lock.release()
            except Exception:
                pass


# ------------------------------------------------------------ settings shown by the CLI

def _write_settings(root: str) -> None:
    """Records JAX's thresholds beside the store, where ``progcache stats``
    shows them (only when they changed; never raises)."""
    try:
        jcfg = _hooks["jcfg"]
        notes = [f"JAX writes a program only when its compile took at least "
                 f"{jcfg.persistent_cache_min_compile_time_secs.value:g} s "
                 f"(jax_persistent_cache_min_compile_time_secs)",
                 f"and its entry is at least {max(0, int(jcfg.persistent_cache_min_entry_size_bytes.value))} bytes "
                 f"(jax_persistent_cache_min_entry_size_bytes); jax {getattr(jax, '__version__', '?')}"]
        text = json.dumps({"framework": "jax", "notes": notes}, sort_keys=True)
        path = os.path.join(root, _SETTINGS)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    return
        except OSError:
            pass
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".framework.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:
        pass


# ------------------------------------------------------------ switching on and off

def enable() -> bool:
    """Makes JAX's persistent compilation cache keep its executables in
    progcache. Where the program set no JAX cache directory, one is set
    (``<PROGCACHE_DIR>/jax-xla``: JAX's cache is off without one). Idempotent;
    ``PROGCACHE_JAX=1`` calls it when JAX is imported. Returns whether
    progcache's cache is in place: a JAX whose hook is not where it is
    expected is told once and keeps its own cache."""
    global _enabled, _set_dir
    with _enable_lock:
        if _enabled:
            return True
        if _why_not:
            _integration.warn_once("jax", "hook", f"this JAX ({getattr(jax, '__version__', '?')}) is not one "
                                   f"progcache knows ({_why_not}); JAX keeps its own cache. progcache.jax supports "
                                   "jax 0.10 (pip install 'jax>=0.10,<0.11')")
            return False
        cc, compiler, jcfg = _hooks["cc"], _hooks["compiler"], _hooks["jcfg"]
        _hooks["get_file_cache"] = cc.get_file_cache
        _hooks["get_cache_key"] = cc.get_cache_key
        _hooks["_compile_and_write_cache"] = compiler._compile_and_write_cache
        _hooks["_cache_read"] = compiler._cache_read
        st = _STORE.get_state()
        if not jcfg.compilation_cache_dir.value and not st.disabled:
            try:
                cfg_dir = st.cfg["dir"] if st.cfg is not None else _core.default_cache_root()
                ours = os.path.join(cfg_dir, _XLA_DIR)
                jax.config.update("jax_compilation_cache_dir", ours)
                _set_dir = [None, ours]
            except Exception:
                pass
        cc.get_file_cache = _get_file_cache
        cc.get_cache_key = _get_cache_key
        compiler._compile_and_write_cache = _compile_and_write_cache
        cc.reset_cache()  # a cache JAX opened already is dropped: the next compile opens progcache's
        _enabled = True
        return True


def disable() -> None:
    """Gives JAX its own cache back (tests; a program that wants it)."""
    global _enabled, _set_dir
    with _enable_lock:
        if not _enabled:
            return
        cc, compiler = _hooks["cc"], _hooks["compiler"]
        cc.get_file_cache = _hooks["get_file_cache"]
        cc.get_cache_key = _hooks["get_cache_key"]
        compiler._compile_and_write_cache = _hooks["_compile_and_write_cache"]
        if _set_dir is not None:
            try:
                # Given back only while it is still the one enable() set: a
                # directory the program set since is the program's.
                if _hooks["jcfg"].compilation_cache_dir.value == _set_dir[1]:
                    jax.config.update("jax_compilation_cache_dir", _set_dir[0])
            except Exception:
                pass
            _set_dir = None
        cc.reset_cache()
        _enabled = False


def enabled() -> bool:
    return _enabled


if _integration.env_flag("PROGCACHE_JAX"):
    enable()
