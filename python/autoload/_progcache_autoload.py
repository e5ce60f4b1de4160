"""Run at interpreter start by ``progcache-autoload.pth``, and only when
``PROGCACHE_TRITON_WARM_START`` is set, so that the variable alone turns the
``triton_key()`` memo on.

Triton computes ``triton_key()`` before it imports its cache manager, so a
memo installed by ``progcache.triton`` when Triton loads the manager comes
too late for the process's first compile. This module imports nothing heavy:
it adds a finder that notices the import of the ``triton`` package and, once
that package has run, imports ``progcache.triton``, whose import installs the
memo. A process that never imports Triton pays one environment lookup and
this module's import; a failure here never fails ``import triton``.
"""

import os
import sys


def _flag() -> bool:
    return os.environ.get("PROGCACHE_TRITON_WARM_START", "").strip().lower() in ("1", "true", "yes", "on")


def _install() -> None:
    try:
        import progcache.triton  # noqa: F401  (its import installs the memo)
    except Exception as e:  # the memo is an optimisation: never fail Triton's import
        import warnings
        warnings.warn(f"progcache: PROGCACHE_TRITON_WARM_START is set but the memo could not be installed: {e}",
                      RuntimeWarning, stacklevel=2)


class _TritonFinder:
    """Finds nothing itself: on the first import of ``triton`` it asks the
    other finders for the spec and wraps the loader so the memo is installed
    right after the package has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "triton":
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
            _install()

        loader.exec_module = exec_module
        return spec


def arm() -> None:
    if not _flag():
        return
    if "triton" in sys.modules:
        _install()
    elif not any(isinstance(f, _TritonFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TritonFinder())
