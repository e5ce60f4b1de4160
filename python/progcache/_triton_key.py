"""Keys computed by hashing a framework's own files, memoised under a
manifest of what they read: Triton's ``triton_key()`` and, under
progcache.torch, Inductor's ``torch_key()``.

Triton's ``triton_key()`` hashes Triton's own Python sources and its
``libtriton.so`` (about 500 MB) once per process: 0.5-0.6 s before any cache
is asked. Inductor's ``torch_key()`` hashes every Python module of torch
(about 2 500 files, 0.2 s). Each value changes only when one of those files
changes, so it is memoised in the local cache root under a manifest, in the
scheme the include scan's manifests use (docs/compile.md): the stat identity
(device, inode, size, mtime, ctime) of every file the real computation
opened and of every directory it listed. A lookup stats each of them; any
difference (an edited, added, removed or reinstalled file) and the key is
computed again by the framework's own function, and the memo replaced. A
computation none of whose files changed within two seconds before it began,
nor while it ran, is memoised; otherwise not (a file rewritten while it was
read, or within one tick of a coarse clock, could keep its identity).

Which files are read is not assumed: the real computation runs with an audit
hook (PEP 578) recording every ``open`` and directory listing it makes, so a
framework that hashes more files is covered as it is.

The same memo answers ``ptxas --version``, which Triton's CUDA backend runs
(twice, as a subprocess) before its first lookup in a process, while the
binary's stat identity is unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import threading
import time
from typing import Callable, Optional

from . import _core

_SCHEMA = 2
# A file changed this recently before a computation began (or while it ran)
# is not trusted to have changed its identity with its bytes: the include
# scan's window (src/compile/scan_files.h, k_recent_ns).
_SETTLE_NS = 2_000_000_000
_recording = threading.local()
_hook_installed = False
_install_lock = threading.Lock()
_installed_for: Optional[Callable] = None


def _audit(event: str, args: tuple) -> None:
    rec = getattr(_recording, "paths", None)
    if rec is None:
        return
    if event == "open":
        path = args[0]
    elif event in ("os.listdir", "os.scandir"):
        path = args[0] if args else "."
    else:
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if isinstance(path, str):
        rec.add(os.path.abspath(path if path else "."))


def _ident(path: str) -> Optional[list]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


_memo_stores: dict = {}


def _store(companion: str = "triton"):
    """The local memo store of a companion store's root, opened once per
    process (the keys and the two version checks each ask for it); None
    where the cache is off or the root cannot be used."""
    if companion not in _memo_stores:
        try:
            opened = _open_store(companion)
        except Exception:
            opened = None
        _memo_stores[companion] = opened
    return _memo_stores[companion]


def _open_store(companion: str):
    cfg = _core.resolve_config()
    if cfg["disabled"]:
        return None
    root = os.path.join(cfg["dir"], _core.COMPANION_STORES[companion])
    # The local disk only: a manifest of stat identities means nothing on
    # another machine.
    return _core.open_file_store(root, cfg["max_size_bytes"], cfg["max_entries"], cfg["fsync"], cfg["hmac_key"],
                                 cfg["sharing"], signing_keys=cfg["signing_keys"], cap_root=cfg["dir"],
                                 count_lookups=False)  # a memo's lookups are no kernel's


def _memo_key(cache_module) -> bytes:
    return _core.typed_key("triton-key-memo", [
        ("schema", _SCHEMA), ("module", os.path.abspath(cache_module.__file__)), ("python", sys.version),
        ("ext_suffix", sysconfig.get_config_var("EXT_SUFFIX") or ""), ("executable", sys.executable)])


def compute_recorded(original: Callable[[], str]) -> tuple:
    """Runs Triton's own computation (bypassing its lru_cache), recording
    every file it opened and directory it listed: (key, sorted paths)."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # audit hooks cannot be removed; idle unless recording
        _hook_installed = True
    _recording.paths = set()
    try:
        key = original()
    finally:
        paths, _recording.paths = _recording.paths, None
    return key, sorted(paths)


def memoised(mkey: bytes, name: str, compute: Callable[[], bytes], companion: str = "triton") -> bytes:
    """``compute()`` from the memo under ``mkey`` (in the local store of
    ``companion``'s root) when every file and directory it read is as it
    was; else computed, recorded and memoised."""
    store = _store(companion)
    if store is not None:
        try:
            found = store.get_entry(mkey)
            if found is not None:
                meta = json.loads(found[0])
                manifest = meta["manifest"]
                if (meta.get("schema") == _SCHEMA and manifest
                        and all(_ident(p) == ident for p, ident in manifest)):
                    value = dict(found[1])["value"]
                    if isinstance(value, bytes):
                        return value
        except Exception:
            pass  # a damaged memo is a recomputation
    began = time.time_ns()
    value, paths = compute_recorded(compute)
    if store is not None:
        manifest = [[p, _ident(p)] for p in paths]
        # A file that vanished, or changed while (or just before) it was
        # read; or nothing recorded at all (the value was already computed):
        # nothing to check later, so nothing is memoised.
        if manifest and all(ident is not None and max(ident[1], ident[2]) < began - _SETTLE_NS
                            for _, ident in manifest):
            try:
                store.put_entry(mkey, json.dumps({"schema": _SCHEMA, "kind": "key-memo", "name": name,
                                                  "manifest": manifest}), [("value", value)])
            except Exception:
                pass
    return value


def memoised_key(cache_module, original: Callable[[], str]) -> str:
    """triton_key() from the memo when every recorded file and directory is
    as it was; else Triton's computation, recorded and memoised."""
    return memoised(_memo_key(cache_module), "triton_key()", lambda: original().encode("utf-8")).decode("utf-8")


class _VersionMemo:
    """Stands in for ``subprocess`` in the Triton modules that ask a tool its
    version (``ptxas --version``, twice per process, 4 ms each): such a call
    is answered from the memo while the tool's stat identity is unchanged;
    every other use goes to the real module."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def check_output(self, args, *rest, **kwargs):
        real = self._real.check_output
        if (rest or not isinstance(args, (list, tuple)) or len(args) != 2 or args[1] != "--version"
                or not isinstance(args[0], str) or not os.path.isabs(args[0]) or set(kwargs) - {"stderr"}):
            return real(args, *rest, **kwargs)
        tool = args[0]
        ident = _ident(tool)
        if ident is None:
            return real(args, *rest, **kwargs)
        mkey = _core.typed_key("tool-version", [("schema", _SCHEMA), ("argv", list(args)),
                                                ("stderr", repr(kwargs.get("stderr")))])
        try:
            store = _store()
        except Exception:
            store = None
        if store is not None:
            try:
                found = store.get_entry(mkey)
                if found is not None and json.loads(found[0]).get("manifest") == [[tool, ident]]:
                    return dict(found[1])["output"]
            except Exception:
                pass
        out = real(args, *rest, **kwargs)
        if store is not None and isinstance(out, bytes) and _ident(tool) == ident:
            try:
                store.put_entry(mkey, json.dumps({"schema": _SCHEMA, "kind": "triton-tool-memo",
                                                  "name": " ".join(os.path.basename(a) for a in args),
                                                  "manifest": [[tool, ident]]}),
                                [("output", out)])
            except Exception:
                pass
        return out


def _install_version_memo() -> None:
    import subprocess
    for name in ("triton.knobs", "triton.backends.nvidia.compiler"):
        mod = sys.modules.get(name)
        if mod is None:
            try:
                import importlib
                mod = importlib.import_module(name)
            except Exception:
                continue
        if getattr(mod, "subprocess", None) is subprocess:
            setattr(mod, "subprocess", _VersionMemo(subprocess))


def install(cache_module) -> None:
    """Replaces triton_key everywhere Triton holds it (its cache module, and
    every loaded module that imported the function by name, such as the
    autotuner) with the memoised one; modules imported later take it from
    the cache module. Idempotent."""
    global _installed_for
    with _install_lock:
        current = cache_module.triton_key
        if getattr(current, "_progcache_memo", False):
            return
        original = getattr(current, "__wrapped__", current)  # past Triton's lru_cache
        lock = threading.Lock()
        value: list = []

        def triton_key() -> str:
            if value:
                return value[0]
            with lock:
                if not value:
                    value.append(memoised_key(cache_module, original))
            return value[0]

        triton_key._progcache_memo = True  # type: ignore[attr-defined]
        triton_key.__wrapped__ = original  # type: ignore[attr-defined]
        triton_key.__doc__ = "Triton's triton_key(), memoised by progcache under a manifest of the files it reads."
        for mod in list(sys.modules.values()):
            # The module's own namespace only: getattr could run a module's
            # lazy __getattr__ and import things.
            namespace = getattr(mod, "__dict__", None)
            if isinstance(namespace, dict) and namespace.get("triton_key") is current:
                namespace["triton_key"] = triton_key
        cache_module.triton_key = triton_key
        _installed_for = triton_key
        _install_version_memo()
