"""make_program_cache_key (cuda.core's signature) and compile()."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional, Sequence, Union

from . import _core
from ._caches import FileStreamProgramCache, InMemoryProgramCache, _NullStore, _StoreCache, _config

_private_state: Optional[str] = None
_followed_cuda_python = False


def _follow_cuda_python(installed: bool = False) -> None:
    """Where cuda-python is in use in this process (cuda.core, or
    cuda.bindings' NVRTC), compiles and keys with the NVRTC and nvJitLink it
    loads: cuda-pathfinder's choice (pip's NVIDIA wheels before the system
    toolkit, a library already loaded first of all), not progcache's own
    search (the toolkit first). Otherwise one process would hold two
    compilers: cuda.core's cubin and progcache's would differ for one
    program, and a key progcache made would name a compiler other than the
    one whose bytes cuda.core stored under it. Asked once, when first
    needed with cuda-python loaded (loading cuda.pathfinder costs about
    60 ms, so a process without cuda-python never pays it);
    ``$PROGCACHE_NVRTC`` and ``$PROGCACHE_NVJITLINK`` still win.

    ``installed``: follow it also where cuda.core is installed but not yet
    imported. make_program_cache_key() asks so: its keys are for cuda.core's
    compiles, which may come later in the process (a key made before
    ``import cuda.core`` named the toolkit's NVRTC while cuda.core then
    compiled with pip's)."""
    global _followed_cuda_python
    if _followed_cuda_python:
        return
    in_use = "cuda.core" in sys.modules or "cuda.bindings.nvrtc" in sys.modules
    if not in_use and installed:
        import importlib.util
        try:
            in_use = importlib.util.find_spec("cuda.core") is not None
        except (ImportError, ValueError):  # no cuda package at all, or a broken one
            in_use = False
    if not in_use:
        return
    _followed_cuda_python = True
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception:  # noqa: BLE001 - an older cuda-python: progcache's own search
        return
    for library in ("nvrtc", "nvJitLink"):
        try:
            path = load_nvidia_dynamic_lib(library).abs_path
        except Exception:  # noqa: BLE001 - not found by it: progcache's own search
            continue
        _core.prefer_library(library, path)


def _state_dir() -> str:
    """Where compile() keeps its memos and locks: the cache root, or, with
    PROGCACHE_DISABLE set, a private directory of this process's (the cache
    root is not touched at all, as with the CLI)."""
    global _private_state
    try:
        cfg = _config()
    except ValueError:  # a malformed setting: compile() says so once and runs uncached
        cfg = {"disabled": True}
    if not cfg["disabled"]:
        return cfg["dir"]
    if _private_state is None:
        import atexit
        import shutil
        import tempfile
        _private_state = tempfile.mkdtemp(prefix="progcache-state-")
        atexit.register(shutil.rmtree, _private_state, True)
    return _private_state


# ProgramOptions fields that reach nvJitLink when the program is PTX (or
# LTO-IR): cuda.core's Linker reads only these, so NVRTC-only fields
# (include_path, pch, ...) must neither change nor refuse a PTX key. `name`
# is keyed on its own; `time` and `no_cache` change only the log.
_LINKER_FIELDS = ("arch", "max_register_count", "link_time_optimization", "debug", "lineinfo", "ftz", "prec_div",
                  "prec_sqrt", "fma", "split_compile", "ptxas_options")
# ProgramOptions fields with compile-time side effects (they write files).
_SIDE_EFFECT_FIELDS = ("create_pch", "time", "fdevice_time_trace")


def _strings(words: Any, what: str) -> list[str]:
    if isinstance(words, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a sequence of strings, not a single string")
    out = []
    for w in words:
        if isinstance(w, bytes):
            w = w.decode()
        if not isinstance(w, str):
            raise TypeError(f"{what} must be strings, not {type(w).__name__}")
        out.append(w)
    return out


def _takes_target(fn) -> bool:
    try:
        import inspect
        return len(inspect.signature(fn).parameters) >= 2
    except (TypeError, ValueError):
        return False


def _as_bytes(options: Any, backend: str, target: str) -> list[str]:
    raw = options.as_bytes(backend, target) if _takes_target(options.as_bytes) else options.as_bytes(backend)
    if isinstance(raw, (bytes, bytearray)):
        return [p.decode() for p in bytes(raw).split(b"\0") if p]
    return _strings(raw, "options")


def _linker_words(options: Any, target: str) -> list[str]:
    """The nvJitLink flags cuda.core's Linker would pass for PTX input."""
    try:
        from cuda.core import LinkerOptions  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:  # an options object of cuda.core's shape, without cuda.core
        return _as_bytes(options, "nvrtc", target)
    fields = {f: getattr(options, f) for f in _LINKER_FIELDS if getattr(options, f, None) is not None}
    return _strings(LinkerOptions(**fields).as_bytes("nvjitlink"), "options")


class _Inputs:
    """One program's inputs, judged by cuda.core's rules, in the form the C++
    core keys and compiles (both through progcache::program_key)."""

    __slots__ = ("code", "code_type", "target", "options", "names", "name", "extra_digest", "nvvm_sources",
                 "use_libdevice")
    code: bytes
    code_type: str
    target: str
    options: list[str]
    names: list[str]
    name: str
    extra_digest: Optional[bytes]
    nvvm_sources: list[tuple[str, bytes]]
    use_libdevice: bool


# What each code type compiles to (progcache::compile's matrix; cuda.core's
# for c++, ptx and nvvm).
_TARGETS_OF = {"c++": ("cubin", "ltoir", "ptx"), "ptx": ("cubin", "ptx"), "ltoir": ("cubin", "ptx"),
               "nvvm": ("ltoir", "ptx")}


def _inputs(code: Any, code_type: Any, target: Any, options: Any, name_expressions: Any, name: Optional[str],
            extra_digest: Any, *, strict: bool) -> _Inputs:
    """``strict``: make_program_cache_key's contract (cuda.core's exception
    types; bytes code only for NVVM). compile() is lenient about bytes code."""
    # ValueError, as cuda.core raises, with its phrases ("is not a valid
    # SourceCodeType", "is not valid for code_type") for callers who match.
    code_type = code_type.lower() if isinstance(code_type, str) else code_type
    target = target.lower() if isinstance(target, str) else target
    if code_type in ("cxx", "cuda", "cu"):
        code_type = "c++"
    if code_type not in _TARGETS_OF:
        raise ValueError(f"unknown code type {code_type!r}: use c++, ptx, ltoir or nvvm ({code_type!r} is not a "
                         "valid SourceCodeType)")
    if target not in ("ptx", "cubin", "ltoir"):
        raise ValueError(f"target_type={target!r} is not supported by the program cache (ptx, cubin or ltoir)")
    if target not in _TARGETS_OF[code_type]:
        raise ValueError(f"cannot compile code type {code_type!r} to target {target!r}: target_type={target!r} is "
                         f"not valid for code_type={code_type!r} (supported: {', '.join(_TARGETS_OF[code_type])})")
    if extra_digest is not None:
        if not isinstance(extra_digest, (bytes, bytearray, memoryview)):
            raise TypeError("extra_digest must be bytes or None")
        extra_digest = bytes(extra_digest)
    i = _Inputs()
    i.code_type, i.target, i.extra_digest = code_type, target, extra_digest
    i.nvvm_sources, i.use_libdevice = [], False

    if isinstance(code, str):
        i.code = code.encode("utf-8")
    elif isinstance(code, (bytes, bytearray, memoryview)):
        if strict and code_type in ("c++", "ptx"):
            raise TypeError(f"code must be str for code_type={code_type!r}; bytes are accepted only for NVVM IR "
                            "(and LTO-IR)")
        i.code = bytes(code)
    else:
        raise TypeError(f"code must be str or bytes, not {type(code).__name__}")

    structured = options is not None and hasattr(options, "as_bytes")
    if options is None:
        words: list[str] = []
    elif structured:
        extra_sources = getattr(options, "extra_sources", None)
        if extra_sources is not None and code_type != "nvvm":
            raise ValueError(f"extra_sources is only valid for code_type='nvvm', not {code_type!r}")
        if code_type == "c++":
            side = [f for f in _SIDE_EFFECT_FIELDS if getattr(options, f, None) is not None]
            if side:
                raise ValueError(f"options with compile-time side effects ({', '.join(side)}) cannot be cached: "
                                 "a cache hit skips the compile, so the files they write would not appear")
            words = _as_bytes(options, "nvrtc", target)
        elif code_type == "nvvm":
            words = _as_bytes(options, "nvvm", target)
            i.use_libdevice = bool(getattr(options, "use_libdevice", None))
            for item in extra_sources or ():
                if not (isinstance(item, (tuple, list)) and len(item) == 2):
                    raise TypeError("extra_sources must be (name, source) pairs")
                src_name, src = item
                src = src.encode("utf-8") if isinstance(src, str) else src
                if not isinstance(src_name, str) or not isinstance(src, (bytes, bytearray)):
                    raise TypeError("extra_sources must be (str name, str or bytes source) pairs")
                i.nvvm_sources.append((src_name, bytes(src)))
        else:
            words = _linker_words(options, target)
        if name is None:
            name = getattr(options, "name", None) or "default_program"
    else:
        words = _strings(options, "options")
    i.options = words
    if name is None:
        name = "program"
    if not isinstance(name, str):
        raise TypeError(f"the program name must be str, not {type(name).__name__}")
    if strict and code_type == "c++" and extra_digest is None and ("/" in name or "\\" in name):
        raise ValueError(f"program name {name!r} has a directory component: NVRTC resolves quoted includes "
                         "there; pass an extra_digest that fingerprints what it makes visible (or use "
                         "progcache.compile(), which scans it)")
    i.name = name

    # cuda.core ignores name expressions where NVRTC does not compile (PTX,
    # NVVM): they neither change those keys nor are checked there. compile()
    # refuses them there, so it checks them.
    if strict and code_type != "c++":
        i.names = []
        return i
    names = []
    for n in name_expressions:
        if isinstance(n, bytes):
            n = n.decode("utf-8")
        elif not isinstance(n, str):
            raise TypeError(f"name_expressions elements must be str or bytes, not {type(n).__name__}")
        names.append(n)
    i.names = names
    return i


def _key_of(i: _Inputs) -> bytes:
    _follow_cuda_python(installed=True)
    return _core.program_key(i.code, i.code_type, i.target, i.options, i.names, i.name, i.extra_digest,
                             i.nvvm_sources, i.use_libdevice, _state_dir())


def make_program_cache_key(*, code: Union[str, bytes], code_type: str, options: Any, target_type: str,
                           name_expressions: Sequence[Union[str, bytes]] = (), extra_digest: Optional[bytes] = None,
                           name: Optional[str] = None) -> bytes:
    """The cache key of a compile: a 32-byte SHA-256 digest, the same key
    progcache.compile() uses for the same program (``key.hex()`` is what the
    CLI prints and ``progcache get`` takes).

    cuda.core's contract: ``options`` is a ``cuda.core.ProgramOptions`` (or
    any object with ``as_bytes``) or a list of option strings; code types
    ``c++``, ``ptx``, ``nvvm`` (and progcache's ``ltoir``) in any case;
    targets ``ptx``, ``cubin``, ``ltoir``. TypeError: bytes code for c++ or
    PTX, a ``bytearray`` or non-string name expression for c++ (PTX and NVVM
    ignore name expressions, as cuda.core does). ValueError: an unknown code
    type or an unsupported code/target pair, side-effect options (``create_pch``,
    ``time``, ``fdevice_time_trace``), ``extra_sources`` outside NVVM,
    ``use_libdevice`` or a program name with a directory without
    ``extra_digest``. Unlike cuda.core, include paths and pre-includes need
    no ``extra_digest``: the headers they reach are scanned into the key.
    ``name`` (progcache's addition) defaults to ``options.name``.
    """
    return _key_of(_inputs(code, code_type, target_type, options, name_expressions, name, extra_digest,
                           strict=True))


class CompileError(RuntimeError):
    """The compiler rejected the program; ``log`` holds its full output."""

    def __init__(self, message: str, log: str, options: list[str]) -> None:
        super().__init__(message)
        self.log = log
        self.options = options


class CompiledProgram:
    """What compile() returns: ``code`` (bytes), ``symbol_mapping`` (name
    expression → lowered name), ``log``, ``from_cache``, ``key`` (the 32-byte
    key, as make_program_cache_key returns it) and ``uncacheable``: None, or
    why the program could not be keyed (an include named through a macro
    outside the include path, an option with side effects, ...), in which
    case it was compiled without the cache and ``key`` is None."""

    __slots__ = ("code", "code_type", "symbol_mapping", "log", "from_cache", "key", "uncacheable")

    def __init__(self, code: bytes, code_type: str, symbol_mapping: dict, log: str, from_cache: bool,
                 key: Optional[bytes], uncacheable: Optional[str] = None):
        self.code = code
        self.code_type = code_type
        self.symbol_mapping = symbol_mapping
        self.log = log
        self.from_cache = from_cache
        self.key = key
        self.uncacheable = uncacheable

    def __repr__(self) -> str:
        return (f"CompiledProgram({self.code_type}, {len(self.code)} bytes, from_cache={self.from_cache}, "
                f"symbols={self.symbol_mapping})")




_warned_uncached = False


def _warn_uncached(e: Exception) -> None:
    global _warned_uncached
    if not _warned_uncached:
        _warned_uncached = True
        import warnings
        warnings.warn(f"progcache.compile: the default cache is not used ({e}); compiling without it",
                      RuntimeWarning, stacklevel=3)


def compile_stats() -> dict:
    """This process's compile() counters: compiles, compile_errors, hits,
    shared_waits (threads that waited for another's compile), lock_waits,
    cache_errors, unstable_inputs (compiles not stored because a header
    changed while the compiler ran), uncacheable (compiles of programs that
    could not be keyed, done without the cache)."""
    return dict(_core.compile_stats())


def compile(code: Union[str, bytes], code_type: str = "c++", target: str = "cubin", options: Any = (),
            name_expressions: Iterable[str] = (), cache: Any = None, *, name: Optional[str] = None,
            extra_digest: Optional[bytes] = None) -> CompiledProgram:
    """Compiles through progcache's cache (None: no cache; a progcache cache
    object; or True for the default FileStreamProgramCache; with
    ``$PROGCACHE_DISABLE`` set nothing is cached). ``options`` as
    for make_program_cache_key, whose key the result carries (``key``, 32
    bytes). ``name`` defaults to ``options.name``, else "program". The GIL
    is released while compiling and while reading or writing the cache."""
    store = None
    state_dir = _state_dir()
    if cache is True:
        try:
            cache = FileStreamProgramCache()
        except Exception as e:  # an unusable root or setting: one warning, then compile uncached
            _warn_uncached(e)
            cache = None
    if isinstance(cache, _StoreCache):
        # With PROGCACHE_DISABLE the caches hold nothing: compile uncached.
        store = None if isinstance(cache._store, _NullStore) else cache._store
        root = store.root() if store is not None else ""
        if root:
            state_dir = root
    elif isinstance(cache, InMemoryProgramCache):
        raise TypeError("compile() caches in progcache's C++ stores; use FileStreamProgramCache or "
                        "TieredProgramCache (an InMemoryProgramCache can be filled with its result)")
    elif cache is not None:
        raise TypeError(f"cache must be a progcache cache, True or None, not {type(cache).__name__}")
    name_expressions = list(name_expressions)
    i = _inputs(code, code_type, target, options, name_expressions, name, extra_digest, strict=False)
    if i.code_type == "nvvm":
        raise ValueError("NVVM IR is compiled by libNVVM, which progcache does not drive: compile it with "
                         "cuda.core and cache the bytes under make_program_cache_key(...)")
    _follow_cuda_python()
    ok, a, log, symbols, from_cache, key, uncacheable = _core.compile(i.code, i.code_type, i.target, i.options,
                                                                      i.names, i.name, i.extra_digest, store,
                                                                      os.fspath(state_dir))
    if not ok:
        raise CompileError(a, log, i.options)
    # The mapping is keyed by the name expressions as the caller gave them
    # (bytes stay bytes), as cuda.core's ObjectCode.symbol_mapping is.
    mapping = dict(symbols)
    for n in name_expressions:
        if isinstance(n, bytes) and n.decode("utf-8") in mapping:
            mapping[n] = mapping.pop(n.decode("utf-8"))
    return CompiledProgram(a, i.target, mapping, log, bool(from_cache), key, uncacheable)


def explain(code: Union[str, bytes], code_type: str = "c++", target: str = "cubin", options: Any = (),
            name_expressions: Iterable[str] = (), cache: Any = None, *, name: Optional[str] = None,
            extra_digest: Optional[bytes] = None) -> dict:
    """Would compile() with these arguments hit, and if not, why? Nothing is
    compiled or counted. ``cache``: a progcache cache with a disk store
    (FileStreamProgramCache or TieredProgramCache); None or True: the default
    FileStreamProgramCache. Returns a dict: ``key`` (32 bytes), ``outcome``
    ("hit", "miss" or "damaged", with ``detail``), ``name``, ``target``,
    ``same_name`` (stored entries of the program's name), ``without_record``
    (of those, how many carry no record of their inputs), ``nearest`` (the
    key of the stored entry nearest this program, or None) and
    ``differences``: one dict per input that differs from it (``component``,
    ``change``, ``subject``, ``before``, ``after``), and ``record`` (JSON
    text: what the key is made of)."""
    if cache is None or cache is True:
        cache = FileStreamProgramCache()
    if not isinstance(cache, _StoreCache) or isinstance(cache._store, _NullStore):
        raise TypeError("explain() reads a progcache cache with a disk store (FileStreamProgramCache or "
                        f"TieredProgramCache), not {type(cache).__name__}")
    store = cache._store
    state_dir = store.root() or _state_dir()
    i = _inputs(code, code_type, target, options, list(name_expressions), name, extra_digest, strict=False)
    _follow_cuda_python()
    return _core.explain(i.code, i.code_type, i.target, i.options, i.names, i.name, i.extra_digest, store,
                         os.fspath(state_dir))
