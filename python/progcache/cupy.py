"""progcache for CuPy: a backend for CuPy's kernel cache (PyPI
``cupy-cuda13x`` / ``cupy-cuda12x`` 14.x, whose experimental
``cupy.cuda._compiler_cache.KernelCacheBackend`` it implements), turned on
with one variable::

    PROGCACHE_CUPY=1

or in code, ``progcache.cupy.enable()`` (``disable()`` gives CuPy its own
backend back). ``RawKernel``, ``RawModule``, ``ElementwiseKernel`` and every
CuPy kernel compiled through NVRTC keep going through CuPy's compiler; what
changes is where the cubin (or LTO-IR, with its name-expression header) lives
and what decides its key (docs/cupy.md):

- Each kernel is one progcache entry in ``<progcache root>/cupy``: published
  atomically, checksummed, signed when signing is on, counted under the
  root's byte cap, on every tier (memory, disk, remote).
- The key is CuPy's own (source, options, architecture, NVRTC version, its
  headers' checksum) plus what it leaves out: every header the compile could
  read, found by progcache's NVRTC rule (docs/compile.md: each ``#include``
  of the source and of every file found, each place searched, absent places
  too), and the device runtime library linked for ``-rdc``. A header edited
  after a store is a miss, never a stale cubin.
- Processes that miss the same kernel at once compile it once: the first
  compiles, the others wait on a lock under the store and are served.
- A compile progcache cannot key (jitify, whose headers CuPy collects
  itself; a computed include it cannot follow; a time macro in the source)
  is compiled every time and stored nowhere, counted: CuPy's own key would
  serve it stale after a header edit.
- Any failure of the cache is a miss, and CuPy compiles as without it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from typing import Any, Dict, Optional, Union

try:
    import cupy  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from cupy.cuda import compiler as _cc  # type: ignore[import-untyped, import-not-found, unused-ignore]
except ImportError as _e:  # pragma: no cover - exercised in a subprocess test
    raise ImportError("progcache.cupy needs CuPy (PyPI 'cupy-cuda13x' or 'cupy-cuda12x', 14.x). "
                      f"Importing it failed: {_e}") from None

from . import _core, _integration

# Bump when the entry's layout or metadata changes: older entries then miss.
_SCHEMA = 1
_MEMORY_BYTES = 64 << 20
LOCK_TIMEOUT_S = _integration.LOCK_TIMEOUT_S  # where the configuration gives none (PROGCACHE_LOCK_TIMEOUT)
# What a compile progcache cannot key is: compiled, neither stored nor read.
_UNCACHEABLE = b""
# Macros whose value is the time of the compile: a kernel that names one in
# its source is compiled every time (a stored one would hold another time).
_TIME_MACROS = ("__TIME__", "__DATE__", "__TIMESTAMP__")
SUPPORTED = "cupy 14.x (from 14.2)"
# The directory a source's quoted includes are looked for in: CuPy compiles
# each source from a new, empty temporary directory, so none is found there.
# progcache keys them against a directory that cannot exist (below a
# character device), the same on every machine, so keys do not depend on
# where the cache root is.
_NO_DIR = "/dev/null/progcache-cupy"

_why_not = ""
_Base: Any = object
try:
    from cupy.cuda import _compiler_cache as _ccache  # type: ignore[import-untyped, import-not-found, unused-ignore]
    _Base = _ccache.KernelCacheBackend
    for _n in ("_set_kernel_cache_backend", "_compile_with_cache_cuda", "_is_cudadevrt_needed",
               "_get_cudadevrt_path", "_preprocess", "_get_nvrtc_version"):
        if not callable(getattr(_cc, _n, None)):
            _why_not = f"cupy.cuda.compiler.{_n} is missing"
    if not _why_not and not hasattr(_cc, "_kernel_cache_backend"):
        _why_not = "cupy.cuda.compiler._kernel_cache_backend is missing"
    if not _why_not:
        # The stand-in takes CuPy 14's parameters: a CuPy that calls its
        # compile another way is not one progcache knows.
        import inspect
        _params = [p.name for p in inspect.signature(_cc._compile_with_cache_cuda).parameters.values()]
        _expected = ["source", "options", "arch", "extra_source", "backend", "enable_cooperative_groups",
                     "name_expressions", "log_stream", "cache_in_memory", "jitify", "to_ltoir"]
        if _params != _expected:
            _why_not = f"cupy.cuda.compiler._compile_with_cache_cuda takes ({', '.join(_params)})"
        _params = [p.name for p in inspect.signature(_cc._preprocess).parameters.values()]
        if not _why_not and _params != ["source", "options", "arch", "backend"]:
            _why_not = f"cupy.cuda.compiler._preprocess takes ({', '.join(_params)})"
except Exception as _e2:
    _why_not = f"cupy.cuda._compiler_cache.KernelCacheBackend is missing ({_e2})"


class _CupyStore(_integration.StoreState):
    pass


_STORE = _CupyStore("cupy", _MEMORY_BYTES)
_local = threading.local()  # .call: the compile this thread is in (source, options, arch, flags)
_counts_lock = threading.Lock()
_counts = {"to_cupy": 0, "uncacheable": 0, "preprocess_remembered": 0, "changed_while_compiling": 0}
_enable_lock = threading.Lock()
_enabled = False
_saved: Dict[str, Any] = {}


def _count(name: str) -> None:
    with _counts_lock:
        _counts[name] += 1


def reset() -> None:
    """Forgets the resolved configuration and closes the store; the next
    lookup resolves and opens it again."""
    _STORE.reset()
    with _counts_lock:
        for k in _counts:
            _counts[k] = 0


def stats() -> Dict[str, Union[int, float, None]]:
    """The store's counters plus ``errors`` (failures turned into misses),
    ``uncacheable`` (lookups of compiles progcache cannot key: jitify, a
    computed include it cannot follow, a time macro in the source; compiled
    every time, stored nowhere), ``to_cupy`` (lookups and stores left to
    CuPy's own disk backend: progcache's store cannot be used, or CuPy asked
    outside the compile progcache stands in for) and
    ``preprocess_remembered`` (CuPy's preprocess of an empty file answered
    from the root instead of NVRTC) and ``changed_while_compiling`` (a
    compile whose key was not the same after it: a header changed while
    NVRTC read it; stored nowhere)."""
    out = _STORE.stats()
    with _counts_lock:
        out.update(_counts)
    return out


# ------------------------------------------------------------ the key

_devrt_memo: Dict[str, tuple] = {}


def _file_digest(path: str) -> str:
    """SHA-256 of a file, remembered while its stat identity holds."""
    st = os.stat(path)
    ident = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    had = _devrt_memo.get(path)
    if had is not None and had[0] == ident:
        return had[1]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    _devrt_memo[path] = (ident, h.hexdigest())
    return h.hexdigest()


_nvrtc_memo: Dict[str, str] = {}


def _cupy_nvrtc(state_dir: str) -> str:
    """The NVRTC CuPy compiles with, by its file's fingerprint: the
    ``libnvrtc.so`` cuda.pathfinder gave CuPy (a wheel's or the toolkit's,
    which need not be the one progcache would find), as mapped into this
    process; where that cannot be told, every ``libnvrtc.so`` mapped (which
    can only cost a miss). Remembered for the process: a loaded library is
    what runs, whatever its path holds later. ValueError where the file is
    gone (replaced since the load): nothing can be keyed."""
    got = _nvrtc_memo.get(state_dir)
    if got is not None:
        return got
    _cc._get_nvrtc_version()  # loads CuPy's NVRTC, if it has not yet
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)  # address, perms, offset, device, inode[, path]
            if len(fields) == 6 and os.path.basename(fields[5]).startswith("libnvrtc.so"):
                paths.add(fields[5].strip())
    # CuPy loads what cuda.pathfinder finds (remembered by it): that file
    # alone where it is among those mapped; every mapped one where not.
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # type: ignore[import-untyped, import-not-found, unused-ignore]
        chosen = os.path.realpath(load_nvidia_dynamic_lib("nvrtc").abs_path or "")
    except Exception:
        chosen = ""
    if chosen in paths:
        paths = {chosen}
    if not paths or any(p.endswith("(deleted)") for p in paths):
        raise ValueError("the NVRTC CuPy loaded cannot be named")
    got = "".join(f"nvrtc {p} {_core.library_fingerprint('nvrtc', p, state_dir)}\0" for p in sorted(paths))
    _nvrtc_memo[state_dir] = got
    return got


def _key(name: str, call: tuple, st: _integration.State) -> Optional[bytes]:
    """progcache's key for CuPy's kernel ``name`` compiled by ``call``; None
    where progcache cannot key it (compiled every time, stored nowhere)."""
    source, options, arch, jitify, to_ltoir, backend = call
    opts = [str(o) for o in options]
    # CuPy turns jitify on itself for this option (its headers are its own).
    if jitify or "-DCUPY_USE_JITIFY" in opts or backend != "nvrtc" or not isinstance(source, str):
        return None
    if any(m in source for m in _TIME_MACROS):
        return None
    state_dir = st.cfg["dir"] if st.cfg is not None else st.root
    extra = hashlib.sha256()
    extra.update(f"progcache.cupy {_SCHEMA}\0cupy {cupy.__version__}\0{name}\0".encode())
    extra.update(_cupy_nvrtc(state_dir).encode())
    if _cc._is_cudadevrt_needed(tuple(opts)) and not to_ltoir:
        devrt = _cc._get_cudadevrt_path()
        extra.update(f"cudadevrt {devrt} {_file_digest(devrt)}\0".encode())
    target = "ltoir" if to_ltoir else "cubin"
    arch_opt = [f"-arch={'compute' if to_ltoir else 'sm'}_{arch}"] if arch else []
    if to_ltoir:
        arch_opt.append("-dlto")
    return _core.program_key(source.encode("utf-8"), "c++", target, opts + arch_opt, [],
                             f"{_NO_DIR}/{name}.cu", extra.digest(), [], False, state_dir)


def _our_key(name: str) -> Optional[bytes]:
    """The key for this lookup; None where CuPy's own cache answers (no
    store, or a lookup outside CuPy's compile); _UNCACHEABLE where nothing
    may answer (a compile progcache cannot key: CuPy's own key would serve
    it stale after a header edit). Made once per lookup of a compile; the
    save after a miss makes it again to compare."""
    call = getattr(_local, "call", None)
    st = _STORE.get_state()
    if call is None or st.store is None or st.disabled:
        return None
    keys = getattr(_local, "keys", None)  # None outside the stand-in (a direct call)
    if keys is not None and name in keys:
        return keys[name]
    try:
        key = _key(name, call, st)
    except (ValueError, OSError, RuntimeError):  # a computed include it cannot follow, an unreadable header
        key = None
    if key is None:
        _count("uncacheable")
        key = _UNCACHEABLE
    if keys is not None:
        keys[name] = key
    return key


# ------------------------------------------------------------ CuPy's preprocess of an empty file

# The most remembered preprocess outputs kept (one per NVRTC, options and
# architecture).
_MAX_PREPROCESS_MEMOS = 256
_MEMO_MAGIC = b"progcache.cupy preprocess 1\n"
_MEMO_LIMIT = 1 << 16
# Options under which an empty file's preprocess reads or writes a file, or
# fails where a compile would say why: CuPy runs it every time.
_TOUCHES_FILES = ("-include", "--pre-include", "-pre-include", "--use-pch", "-use-pch", "--create-pch",
                  "-create-pch", "--pch", "-pch", "--time", "-time", "--fdevice-time-trace", "-fdevice-time-trace")


def _preprocess_memo_path(options: tuple, arch: Any, st: _integration.State) -> Optional[str]:
    """Where the output of CuPy's preprocess of an empty file under these
    options is remembered; None where it is not: a root others may write
    (group-shared), an option that reads or writes a file."""
    if st.store is None or st.disabled or st.sharing != "private" or not st.host_code["disk"]:
        return None
    opts = [str(o) for o in options]
    if any(o.startswith(_TOUCHES_FILES) for o in opts):
        return None
    state_dir = st.cfg["dir"] if st.cfg is not None else st.root
    h = hashlib.sha256()
    h.update(f"progcache.cupy preprocess {_SCHEMA}\0cupy {cupy.__version__}\0arch {arch}\0".encode())
    h.update(_cupy_nvrtc(state_dir).encode())
    for o in opts:
        h.update(o.encode() + b"\0")
    return os.path.join(st.root, "preprocess", h.hexdigest())


def _read_memo(path: str) -> Optional[str]:
    """The text a memo file holds, or None for anything but a whole memo of
    this user's: a regular file only this user can write, framed and
    checksummed (an empty or torn file, a planted one, a FIFO are none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022
                or st.st_size > _MEMO_LIMIT + 128):
            return None
        data = os.read(fd, _MEMO_LIMIT + 129)
    finally:
        os.close(fd)
    if not data.startswith(_MEMO_MAGIC):
        return None
    digest, sep, body = data[len(_MEMO_MAGIC):].partition(b"\n")
    if not sep or digest != hashlib.sha256(body).hexdigest().encode():
        return None
    text = body.decode("utf-8")
    return text if all(x.startswith("//") for x in text.split("\n") if x) else None


def _write_memo(path: str, text: str) -> None:
    body = text.encode("utf-8")
    if len(body) > _MEMO_LIMIT:
        return
    d = os.path.dirname(path)
    os.makedirs(d, mode=0o700, exist_ok=True)
    _integration.write_atomic(d, os.path.basename(path),
                              _MEMO_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    names = os.listdir(d)
    if len(names) > _MAX_PREPROCESS_MEMOS:
        def age(n):
            try:
                return os.stat(os.path.join(d, n)).st_mtime_ns
            except OSError:
                return 0
        for n in sorted(names, key=age)[:len(names) - _MAX_PREPROCESS_MEMOS]:
            try:
                os.unlink(os.path.join(d, n))
            except OSError:
                pass


def _preprocess(source, options, arch, backend):
    """CuPy's preprocess, remembered across processes for the empty file:
    CuPy preprocesses an empty file once per process and set of options, to
    put NVRTC's version lines into its kernel names (tens of milliseconds,
    most of a warm process's first hit). Its output is NVRTC's version
    lines, a function of the NVRTC file (by fingerprint), the options and
    the architecture, which name the memo. Any failure of the memo is a
    preprocess, as without it."""
    run = _saved["preprocess"]
    if source != "" or backend != "nvrtc" or getattr(_local, "call", None) is None:
        return run(source, options, arch, backend)
    path = None
    try:
        path = _preprocess_memo_path(tuple(options), arch, _STORE.get_state())
        text = _read_memo(path) if path is not None else None
        if text is not None:
            _count("preprocess_remembered")
            return text
    except Exception:  # no memo: CuPy preprocesses, as without progcache
        path = None
    out = run(source, options, arch, backend)
    if path is not None and isinstance(out, str):
        try:
            _write_memo(path, out)
        except Exception:  # a memo not written costs the next process a preprocess
            pass
    return out


def _wait_for_another(key: bytes):
    """After a counted miss: the compile is this process's to make unless
    another is making it. Takes the key's lock (held until this thread's
    compile returns) and looks again: a process that compiled it meanwhile
    serves this one, and the lookup counts as the hit it ended as."""
    st = _STORE.get_state()
    missed = _STORE.missed()
    if st.store is None or getattr(_local, "lock", None) is not None:
        return None
    timeout = _integration.lock_timeout(st)
    try:
        lock = _core.LockFile(os.path.join(st.root, "locks"), key.hex(), timeout, st.sharing == "group")
    except (TimeoutError, OSError, ValueError, RuntimeError):  # a lock that cannot be had: compile unlocked
        return None
    found = _integration.decode(_STORE.recheck(key))
    if found is not None:
        if missed:
            _STORE.uncount_miss()
        lock.release()
        return found
    _local.lock = lock
    return None


class ProgcacheKernelCacheBackend(_Base):  # type: ignore[misc, valid-type]
    """CuPy's KernelCacheBackend over progcache's store. Lookups progcache
    cannot key go to ``fallback`` (CuPy's own disk backend)."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback

    def _to_cupy(self):
        st = _STORE.get_state()
        if st.disabled:
            return None  # off: nothing is stored or loaded anywhere
        _count("to_cupy")
        return self.fallback

    def load(self, name: str) -> Optional[bytes]:
        try:
            key = _our_key(name)
            if key is None:
                fb = self._to_cupy()
                return fb.load(name) if fb is not None else None
            if key == _UNCACHEABLE:
                return None
            found = _integration.decode(_STORE.get(key))
            if found is None:
                found = _wait_for_another(key)
            if found is None:
                return None
            meta, arts = found
            if meta.get("schema") != _SCHEMA or meta.get("cupy_name") != name or len(arts) != 1:
                _STORE.get_state().errors += 1
                return None
            return bytes(arts[0][1])
        except Exception:  # a cache failure is a miss
            return None

    def save(self, name: str, cubin: bytes, source: str) -> None:
        try:
            key = _our_key(name)
            if key is None:
                fb = self._to_cupy()
                if fb is not None:
                    fb.save(name, cubin, source)
                return
            if key == _UNCACHEABLE:
                return
            # Made again after the compile: a header changed while NVRTC
            # read it gives another key, and what was compiled cannot be
            # told, so it is stored under neither.
            try:
                again = _key(name, _local.call, _STORE.get_state())
            except (ValueError, OSError, RuntimeError):
                again = None
            if again != key:
                _count("changed_while_compiling")
                return
            kind = "cupy-ltoir" if name.endswith(".ltoir") else "cupy-cubin"
            _STORE.put(key, {"schema": _SCHEMA, "kind": kind, "name": name, "cupy_name": name},
                       [(name, bytes(cubin))])
        except Exception:  # the compile succeeded; a failed store costs only a later miss
            pass


def _compile_with_cache_cuda(source, options, arch, extra_source=None, backend="nvrtc",
                             enable_cooperative_groups=False, name_expressions=None, log_stream=None,
                             cache_in_memory=False, jitify=False, to_ltoir=False):
    """CuPy's compile, with what it compiles noted for the backend's key."""
    before = getattr(_local, "call", None)
    before_keys = getattr(_local, "keys", None)
    _local.call = (source, tuple(options), arch if arch is not None else _arch(), jitify, to_ltoir, backend)
    _local.keys = {}
    try:
        return _saved["compile"](source, options, arch, extra_source, backend, enable_cooperative_groups,
                                 name_expressions, log_stream, cache_in_memory, jitify, to_ltoir)
    finally:
        _local.call, _local.keys = before, before_keys
        lock, _local.lock = getattr(_local, "lock", None), None
        if lock is not None:
            try:
                lock.release()
            except Exception:
                pass


def _arch():
    try:
        return _cc._get_arch()
    except Exception:
        return None  # CuPy meets the same failure next, and says it


# ------------------------------------------------------------ switching on and off

def enable() -> bool:
    """Makes CuPy's kernel cache keep its kernels in progcache. Idempotent;
    ``PROGCACHE_CUPY=1`` calls it when CuPy is imported. Returns whether
    progcache's backend is in place: a CuPy without the backend hook is told
    once and keeps its own cache."""
    global _enabled
    with _enable_lock:
        if _enabled:
            return True
        if _why_not:
            _integration.warn_once("cupy", "hook", f"this CuPy ({getattr(cupy, '__version__', '?')}) has no kernel "
                                   f"cache backend progcache knows ({_why_not}); CuPy keeps its own cache. "
                                   f"progcache.cupy supports {SUPPORTED}")
            return False
        _saved["backend"] = _cc._kernel_cache_backend
        _saved["compile"] = _cc._compile_with_cache_cuda
        _saved["preprocess"] = _cc._preprocess
        _cc._compile_with_cache_cuda = _compile_with_cache_cuda
        _cc._preprocess = _preprocess
        _cc._set_kernel_cache_backend(ProgcacheKernelCacheBackend(_saved["backend"]))
        _enabled = True
        return True


def disable() -> None:
    """Gives CuPy its own kernel cache backend back."""
    global _enabled
    with _enable_lock:
        if not _enabled:
            return
        _cc._compile_with_cache_cuda = _saved["compile"]
        _cc._preprocess = _saved["preprocess"]
        _cc._set_kernel_cache_backend(_saved["backend"])
        _enabled = False


def enabled() -> bool:
    return _enabled


if _integration.env_flag("PROGCACHE_CUPY"):
    enable()
