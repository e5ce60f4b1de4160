"""Run at interpreter start by ``progcache-autoload.pth``, and only when
``PROGCACHE_TRITON_WARM_START``, ``PROGCACHE_TILELANG``, ``PROGCACHE_TORCH``,
``PROGCACHE_JAX`` or ``PROGCACHE_CUPY`` is set, or
``TRITON_CACHE_MANAGER`` names progcache's manager (whose warm-start memo is on
by default), so that the variable alone turns progcache on where the framework
offers no hook of its own early enough:

- Triton computes ``triton_key()`` before it imports its cache manager, so a
  memo installed by ``progcache.triton`` when Triton loads the manager comes
  too late for the process's first compile;
- tilelang has no setting that names another cache;
- torch's Inductor has none for its caches in another store, and its compile
  workers are new processes that must turn progcache on themselves;
- JAX and CuPy ask a module function for their cache (JAX's
  ``get_file_cache``, CuPy's kernel cache backend): none is a setting.

This module imports nothing heavy: it adds a finder that notices the import of
the ``triton``, ``tilelang`` or ``torch`` package and, once that package has run,
imports ``progcache.triton``, ``progcache.tilelang`` or ``progcache.torch``, whose
import does the rest. A
process that imports neither pays one environment lookup and this module's
import; a failure here never fails the framework's import.
"""

import os
import sys

_WATCHED = {"triton": ("PROGCACHE_TRITON_WARM_START", "progcache.triton"),
            "tilelang": ("PROGCACHE_TILELANG", "progcache.tilelang"),
            "torch": ("PROGCACHE_TORCH", "progcache.torch"),
            "jax": ("PROGCACHE_JAX", "progcache.jax"),
            "cupy": ("PROGCACHE_CUPY", "progcache.cupy")}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def wanted(package: str) -> bool:
    """Whether the switch for ``package`` is on. Triton's memo is on by
    default wherever progcache's cache manager is Triton's
    (``TRITON_CACHE_MANAGER=progcache.triton:CacheManager``), and
    ``PROGCACHE_TRITON_WARM_START`` set to a word decides either way (``0``
    turns it off); the other switches are off unless set."""
    variable = _WATCHED[package][0]
    if package == "triton" and not os.environ.get(variable, "").strip():
        return os.environ.get("TRITON_CACHE_MANAGER", "").strip().startswith("progcache.triton:")
    return _flag(variable)


def _install(package: str, note=None) -> None:
    variable, module = _WATCHED[package]
    # Already imported (or being imported): the program asked for progcache's
    # module itself, so the switch is not what turned it on here.
    asked = module in sys.modules
    try:
        __import__(module)  # its import installs what the variable asks for
    except Exception as e:  # an optimisation or a cache: never fail the framework's import
        import warnings
        why = f"{variable} is set" if _flag(variable) else "TRITON_CACHE_MANAGER names progcache's manager"
        warnings.warn(f"progcache: {why} but {module} could not be loaded: {e}", RuntimeWarning,
                      stacklevel=2)
        return
    if note is not None and not asked:
        try:
            note(package)
        except Exception:
            pass


class _Finder:
    """Finds nothing itself: on the first import of a watched package it asks
    the other finders for the spec and wraps the loader so progcache's module
    is imported right after the package has run."""

    def __init__(self, package: str, note=None) -> None:
        self.package = package
        self.note = note

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.package:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            _install(fullname, self.note)

        loader.exec_module = exec_module
        return spec


def arm(note=None) -> None:
    """Loads progcache's module for each switched-on framework once that
    framework has been imported. ``note(package)``, when given, is called
    where the switch is what loaded it (progcache's module was not imported
    by the program itself)."""
    for package in _WATCHED:
        if not wanted(package):
            continue
        if package in sys.modules:
            _install(package, note)
        elif not any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder(package, note))
