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

# The switches that act through progcache-autoload.pth, and the call that
# does what each does where that file is not run.
_SWITCHES = {"triton": ("PROGCACHE_TRITON_WARM_START", "progcache.triton.enable(warm_start=True)"),
             "tilelang": ("PROGCACHE_TILELANG", "progcache.tilelang.enable()"),
             "torch": ("PROGCACHE_TORCH", "progcache.torch.enable()"),
             "jax": ("PROGCACHE_JAX", "progcache.jax.enable()"),
             "cupy": ("PROGCACHE_CUPY", "progcache.cupy.enable()")}


def _hook_installed() -> bool:
    """Whether progcache-autoload.pth is in a directory Python runs .pth
    files from (a site directory)."""
    import site
    import sys

    if sys.flags.no_site:
        return False  # python -S: no .pth file was run, wherever it is
    try:
        dirs = list(site.getsitepackages())
        if site.ENABLE_USER_SITE:
            dirs.append(site.getusersitepackages())
    except Exception:  # some embedded Pythons lack these
        return False
    import os

    return any(os.path.isfile(os.path.join(d, "progcache-autoload.pth")) for d in dirs)


def _check_switches() -> None:
    """A switch set where Python never ran progcache-autoload.pth (progcache
    installed with ``pip install --target`` and found through PYTHONPATH, or
    Python started with -S) does nothing in a process that imports only the
    framework. This process imports progcache: it arms the same hooks now
    (they act on the framework if it is imported later, and at once if it
    already was). Where a hook is what turns progcache on for a framework,
    it says once what to call where nothing imports progcache; a program that
    imports progcache's module for the framework itself, or never imports the
    framework (``python -m progcache``), hears nothing."""
    import sys

    from ._integration import env_flag

    if not any(env_flag(var) for var, _ in _SWITCHES.values()) or "_progcache_autoload" in sys.modules:
        return
    try:
        import _progcache_autoload  # type: ignore[import-not-found, unused-ignore]

        # Installed in a site directory, the .pth is there: the variable was
        # set after Python started, and a new process will run it.
        _progcache_autoload.arm(None if _hook_installed() else _say_once)
    except Exception:
        pass


def _say_once(package: str) -> None:
    from ._integration import warn_once

    var, call = _SWITCHES[package]
    try:  # under -W error a warning is an exception: never one out of an import
        warn_once("autoload", "not-run:" + package,
                  f"{var} is set, but Python did not run progcache-autoload.pth (progcache is not installed in a "
                  "site directory: pip install --target with PYTHONPATH, or python -S): it acts here only because "
                  f"this process imported progcache, and does nothing in one that does not. Call {call} before "
                  f"{package} compiles (docs/python.md, \"Switches without site directories\").")
    except Warning:
        pass


_check_switches()


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
