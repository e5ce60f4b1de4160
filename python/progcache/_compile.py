"""make_program_cache_key (cuda.core's signature) and compile()."""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Sequence, Union

from . import _core
from ._caches import FileStreamProgramCache, InMemoryProgramCache, _StoreCache


def _options_list(options: Any) -> list[str]:
    """A list of strings, or an object with ``as_bytes(...)`` like cuda.core's
    ProgramOptions (its NUL-separated or list-of-bytes output)."""
    if options is None:
        return []
    if hasattr(options, "as_bytes"):
        raw = options.as_bytes("nvrtc") if _takes_arg(options.as_bytes) else options.as_bytes()
        if isinstance(raw, (bytes, bytearray)):
            return [p.decode() for p in bytes(raw).split(b"\0") if p]
        return [p.decode() if isinstance(p, (bytes, bytearray)) else str(p) for p in raw]
    if isinstance(options, (str, bytes)):
        raise TypeError("options must be a sequence of strings, not a single string")
    out = []
    for o in options:
        if isinstance(o, bytes):
            o = o.decode()
        if not isinstance(o, str):
            raise TypeError(f"options must be strings, not {type(o).__name__}")
        out.append(o)
    return out


def _takes_arg(fn) -> bool:
    try:
        import inspect
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False


def _code_bytes(code: Union[str, bytes, bytearray, memoryview]) -> bytes:
    if isinstance(code, str):
        return code.encode("utf-8")
    if isinstance(code, (bytes, bytearray, memoryview)):
        return bytes(code)
    raise TypeError(f"code must be str or bytes, not {type(code).__name__}")


def make_program_cache_key(*, code: Union[str, bytes], code_type: str, options: Any, target_type: str,
                           name_expressions: Sequence[str] = (), extra_digest: Optional[bytes] = None) -> bytes:
    """The cache key of a compile, as bytes (64 hex digits).

    Options are canonicalised (``-arch sm_90`` == ``--gpu-architecture=sm_90``).
    Refused with ValueError: options that read files the key cannot see
    (``-I``, ``-include``, ``--use-pch``) without ``extra_digest``; options with
    side effects (``--create-pch``, ``--time``); impossible code/target pairs.
    """
    if extra_digest is not None and not isinstance(extra_digest, (bytes, bytearray)):
        raise TypeError("extra_digest must be bytes or None")
    names = list(name_expressions)
    if not all(isinstance(n, str) for n in names):
        raise TypeError("name_expressions must be strings")
    return _core.make_program_cache_key(_code_bytes(code), code_type, _options_list(options), target_type, names,
                                        None if extra_digest is None else bytes(extra_digest))


class CompileError(RuntimeError):
    """The compiler rejected the program; ``log`` holds its full output."""

    def __init__(self, message: str, log: str, options: list[str]) -> None:
        super().__init__(message)
        self.log = log
        self.options = options


class CompiledProgram:
    """What compile() returns: ``code`` (bytes), ``symbol_mapping`` (name
    expression → lowered name), ``log``, ``from_cache``, ``key``."""

    __slots__ = ("code", "code_type", "symbol_mapping", "log", "from_cache", "key")

    def __init__(self, code: bytes, code_type: str, symbol_mapping: dict, log: str, from_cache: bool, key: str):
        self.code = code
        self.code_type = code_type
        self.symbol_mapping = symbol_mapping
        self.log = log
        self.from_cache = from_cache
        self.key = key

    def __repr__(self) -> str:
        return (f"CompiledProgram({self.code_type}, {len(self.code)} bytes, from_cache={self.from_cache}, "
                f"symbols={self.symbol_mapping})")




def compile_stats() -> dict:
    """This process's compile() counters: compiles, compile_errors, hits,
    shared_waits (threads that waited for another's compile), lock_waits,
    cache_errors, unstable_inputs (compiles not stored because a header
    changed while the compiler ran)."""
    return dict(_core.compile_stats())


def compile(code: Union[str, bytes], code_type: str = "c++", target: str = "cubin", options: Any = (),
            name_expressions: Iterable[str] = (), cache: Any = None, *, name: str = "program",
            extra_digest: Optional[bytes] = None) -> CompiledProgram:
    """Compiles through progcache's cache (None: no cache; a progcache cache
    object; or True for the default FileStreamProgramCache). The GIL is
    released while compiling and while reading or writing the cache."""
    store = None
    state_dir = _core.default_cache_root()
    if cache is True:
        cache = FileStreamProgramCache()
    if isinstance(cache, _StoreCache):
        store = cache._store
        root = store.root()
        if root:
            state_dir = root
    elif isinstance(cache, InMemoryProgramCache):
        raise TypeError("compile() caches in progcache's C++ stores; use FileStreamProgramCache or "
                        "TieredProgramCache (an InMemoryProgramCache can be filled with its result)")
    elif cache is not None:
        raise TypeError(f"cache must be a progcache cache, True or None, not {type(cache).__name__}")
    opts = _options_list(options)
    ok, a, log, symbols, from_cache, key = _core.compile(_code_bytes(code), code_type, target, opts,
                                                         list(name_expressions), name,
                                                         None if extra_digest is None else bytes(extra_digest),
                                                         store, os.fspath(state_dir))
    if not ok:
        raise CompileError(a, log, opts)
    return CompiledProgram(a, target, dict(symbols), log, bool(from_cache), key)
