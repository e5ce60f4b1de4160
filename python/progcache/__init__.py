"""progcache: a cache for compiled GPU programs.

cuda.core-compatible program caches (InMemoryProgramCache,
FileStreamProgramCache, RedisProgramCache, TieredProgramCache),
make_program_cache_key, compile(), pyptx-style CacheKey / CacheEntry /
CubinCache, and tilelang-style KernelCache / @cached, all on progcache's C++
core.
"""

from ._caches import (FileStreamProgramCache, InMemoryProgramCache, RedisProgramCache, TieredProgramCache,
                      _register_with_cuda_core)
from ._compile import CompiledProgram, CompileError, compile, compile_stats, explain, make_program_cache_key
from ._core import __version__
from ._kernels import (DEVICE_KERNEL_PATH, EXECUTABLE_PATH, HOST_KERNEL_PATH, KERNEL_CUBIN_PATH, KERNEL_LIB_PATH,
                       KERNEL_PY_PATH, PARAMS_PATH, CacheEntry, CacheKey, CachedKernel, CubinCache, KernelCache, cached,
                       get_global_cache, set_global_cache)

_register_with_cuda_core(import_now=False)


def __getattr__(name: str):
    # REGISTERED_WITH_CUDA_CORE: True when the caches are registered with
    # cuda.core's ProgramCacheResource. Asking imports cuda.core (and so
    # registers); importing progcache does not: cuda.core takes ~200 ms to
    # import, and the caches register themselves when it is imported.
    if name == "REGISTERED_WITH_CUDA_CORE":
        return _register_with_cuda_core(import_now=True)
    raise AttributeError(f"module 'progcache' has no attribute {name!r}")

__all__ = [
    "CacheEntry", "CacheKey", "CachedKernel", "CompileError", "CompiledProgram", "CubinCache",
    "FileStreamProgramCache", "InMemoryProgramCache", "KernelCache", "RedisProgramCache", "TieredProgramCache",
    "DEVICE_KERNEL_PATH", "EXECUTABLE_PATH", "HOST_KERNEL_PATH", "KERNEL_CUBIN_PATH", "KERNEL_LIB_PATH",
    "KERNEL_PY_PATH", "PARAMS_PATH", "cached", "compile", "compile_stats", "explain", "get_global_cache", "make_program_cache_key", "set_global_cache", "__version__",
]
