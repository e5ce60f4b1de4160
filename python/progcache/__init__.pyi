from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union
import os

from . import _core

__all__ = [
    "CacheEntry", "CacheKey", "CachedKernel", "CompileError", "CompiledProgram", "CubinCache",
    "FileStreamProgramCache", "InMemoryProgramCache", "KernelCache", "RedisProgramCache", "TieredProgramCache",
    "DEVICE_KERNEL_PATH", "EXECUTABLE_PATH", "HOST_KERNEL_PATH", "KERNEL_CUBIN_PATH", "KERNEL_LIB_PATH",
    "KERNEL_PY_PATH", "PARAMS_PATH", "cached", "compile", "compile_stats", "explain", "get_global_cache",
    "make_program_cache_key",
    "set_global_cache", "__version__",
]

__version__: str
REGISTERED_WITH_CUDA_CORE: bool

_KeyLike = Union[bytes, str]
_ValueLike = Any  # bytes, bytearray, memoryview, or an object with .code

# The caches' hot path (cache[key]) is the extension's CacheFront.
class _ProgramCache(_core.CacheFront):
    def __getitem__(self, key: _KeyLike, /) -> bytes: ...
    def __setitem__(self, key: _KeyLike, value: _ValueLike) -> None: ...
    def __delitem__(self, key: _KeyLike) -> None: ...
    def __len__(self) -> int: ...
    def get(self, key: _KeyLike, default: Optional[bytes] = ...) -> Optional[bytes]: ...
    def update(self, items: Union[Mapping[_KeyLike, _ValueLike], Iterable[tuple[_KeyLike, _ValueLike]]], /) -> None: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "_ProgramCache": ...
    def __exit__(self, *exc: Any) -> None: ...

class InMemoryProgramCache(_ProgramCache):
    def __init__(self, *, max_size_bytes: Optional[int] = ...) -> None: ...
    @property
    def size_bytes(self) -> int: ...
    def stats(self) -> dict[str, Union[int, float, None]]: ...

class FileStreamProgramCache(_ProgramCache):
    path: str
    def __init__(self, path: Union[str, os.PathLike, None] = ..., *, max_size_bytes: Optional[int] = ...,
                 durability: Optional[str] = ..., sharing: Optional[str] = ...) -> None: ...
    def stats(self) -> dict[str, Union[int, float, None]]: ...
    @property
    def max_size_bytes(self) -> Optional[int]: ...

class RedisProgramCache(_ProgramCache):
    def __init__(self, urls: Union[str, Iterable[str]], *, read_only: Optional[bool] = ...) -> None: ...
    def stats(self) -> dict[str, Union[int, float, None]]: ...

class TieredProgramCache(_ProgramCache):
    path: str
    def __init__(self, path: Union[str, os.PathLike, None] = ..., *, urls: Union[str, Iterable[str], None] = ...,
                 max_size_bytes: Optional[int] = ..., memory_size_bytes: Optional[int] = ...,
                 read_only: Optional[bool] = ..., sharing: Optional[str] = ...) -> None: ...
    def stats(self) -> dict[str, Union[int, float, None]]: ...
    @property
    def max_size_bytes(self) -> Optional[int]: ...

def make_program_cache_key(*, code: Union[str, bytes], code_type: str, options: Any, target_type: str,
                           name_expressions: Sequence[Union[str, bytes]] = ..., extra_digest: Optional[bytes] = ...,
                           name: Optional[str] = ...) -> bytes: ...

class CompileError(RuntimeError):
    log: str
    options: list[str]
    def __init__(self, message: str, log: str, options: list[str]) -> None: ...

class CompiledProgram:
    code: bytes
    code_type: str
    symbol_mapping: dict[Union[str, bytes], str]
    log: str
    from_cache: bool
    key: Optional[bytes]
    uncacheable: Optional[str]
    def __init__(self, code: bytes, code_type: str, symbol_mapping: dict, log: str, from_cache: bool,
                 key: Optional[bytes], uncacheable: Optional[str] = ...) -> None: ...

def compile_stats() -> dict[str, int]: ...
def compile(code: Union[str, bytes], code_type: str = ..., target: str = ..., options: Any = ...,
            name_expressions: Iterable[Union[str, bytes]] = ..., cache: Any = ..., *, name: Optional[str] = ...,
            extra_digest: Optional[bytes] = ...) -> CompiledProgram: ...
def explain(code: Union[str, bytes], code_type: str = ..., target: str = ..., options: Any = ...,
            name_expressions: Iterable[str] = ..., cache: Any = ..., *, name: Optional[str] = ...,
            extra_digest: Optional[bytes] = ...) -> dict[str, Any]: ...

class CacheKey:
    fn_id: str
    template_kwargs: tuple
    input_shapes: tuple
    arch: str
    def __init__(self, fn_id: str, template_kwargs: Any = ..., input_shapes: Any = ..., arch: str = ...) -> None: ...
    def hash(self) -> str: ...
    def digest(self) -> bytes: ...

@dataclass
class CacheEntry:
    key: CacheKey
    ptx_source: str
    cubin_bytes: Optional[bytes]
    metadata: dict = ...

class CubinCache:
    cache_dir: str
    def __init__(self, cache_dir: Union[str, os.PathLike, None] = ..., enable_disk: bool = ..., *,
                 sharing: Optional[str] = ...) -> None: ...
    def __contains__(self, key: CacheKey) -> bool: ...
    def get(self, key: CacheKey) -> Optional[CacheEntry]: ...
    def put(self, entry: CacheEntry) -> None: ...
    def clear(self, *, disk: bool = ...) -> None: ...
    def __len__(self) -> int: ...

def get_global_cache() -> CubinCache: ...
def set_global_cache(cache: CubinCache) -> None: ...

@dataclass
class CachedKernel:
    artifacts: dict[str, bytes]
    metadata: dict
    from_cache: bool
    key: str

DEVICE_KERNEL_PATH: str
HOST_KERNEL_PATH: str
EXECUTABLE_PATH: str
KERNEL_LIB_PATH: str
KERNEL_CUBIN_PATH: str
KERNEL_PY_PATH: str
PARAMS_PATH: str

class KernelCache:
    execution_backend: str
    cache_dir: str
    builds: int
    errors: int
    def __init__(self, cache_dir: Union[str, os.PathLike, None] = ..., *, max_size_bytes: Optional[int] = ...,
                 sharing: Optional[str] = ..., lock_timeout_s: float = ...) -> None: ...
    # A tilelang PrimFunc gives tilelang's JITKernel; a builder, a CachedKernel.
    def cached(self, func: Any = ..., out_idx: Any = ..., *args: Any, target: Any = ..., target_host: Any = ...,
               execution_backend: str = ..., verbose: bool = ..., pass_configs: Optional[dict] = ...,
               compile_flags: Any = ..., build: Optional[Callable] = ..., **kwargs: Any) -> Any: ...
    def clear_cache(self) -> None: ...
    def __len__(self) -> int: ...
    # The key cached() stores a builder's kernel under.
    def key_of(self, func: Callable, args: tuple, kwargs: dict, target: str) -> str: ...

def cached(cache: Optional[KernelCache] = ..., *, target: str = ...) -> Callable[[Callable], Callable[..., CachedKernel]]: ...
