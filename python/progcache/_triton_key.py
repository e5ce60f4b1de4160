"""Keys computed by hashing a framework's own files, memoised under a
manifest of what they read: Triton's ``triton_key()`` and, under
progcache.torch, Inductor's ``torch_key()``.

Triton's ``triton_key()`` hashes Triton's own Python sources and its
``libtriton.so`` (about 500 MB) once per process: 0.5-0.6 s before any cache
is asked. Inductor's ``torch_key()`` hashes every Python module of torch
(about 2 500 files, 0.2 s). Each value changes only when one of those files
changes, so it is memoised in the local cache root under a manifest, in the
scheme the include scan's manifests use (docs/compile.md): the identity of
every file the real computation opened and of every directory it listed. A
lookup stats each of them; any difference (an edited, added, removed or
reinstalled file) and the value is computed again by the framework's own
function, and the memo replaced.

The identity is the one the kept header digests use (python/src/
held_places.cpp): the unique ID of the mount a path is reached through
(statx, Linux 6.8 and later), inode, size, modification and change times and
type, for this boot only; where the kernel gives no unique mount ID nothing
is memoised (a file system mounted again may be given the old device number
and hold other bytes at the same inode, size and times). A computation is
memoised only if each path's identity when it was first read is its identity
after the computation (nothing changed under it, no link on its way
switched), none changed within two seconds before the computation began (a
file rewritten in one tick of a coarse clock could keep its identity), no
directory it listed holds a link the computation did not read through (an
existence check through it is a stat no audit hook sees; what it leads to
could change without changing any identity recorded), and every read was
named by a path without ".." (which the kernel resolves after the links
before it). Identities are read with AT_STATX_FORCE_SYNC: a network or FUSE
file system answers with the server's attributes, not cached ones.

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
import stat
import threading
import time
from typing import Any, Callable, List, Optional

from . import _core

_SCHEMA = 3
# A file changed this recently before a computation began (or while it ran)
# is not trusted to have changed its identity with its bytes: the include
# scan's window (src/compile/scan_files.h, k_recent_ns).
_SETTLE_NS = 2_000_000_000
_recording = threading.local()
_UNNAMED = "\0unnamed"  # recorded where a read cannot be named by a path
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
    if not isinstance(path, str) or ".." in path.split("/"):
        # A descriptor, or a path whose ".." the kernel resolves after the
        # links before it (abspath would drop it as text): what was read
        # cannot be named for a later look, so nothing is memoised.
        rec[_UNNAMED] = None
        return
    # Without "..", normpath changes only the spelling ("//", "/./", a
    # trailing slash), never where the path leads.
    path = os.path.normpath(os.path.join(os.getcwd(), path) if not path.startswith("/") else path)
    if path not in rec:
        # Its identity before it is read: one that differs after the
        # computation means it changed under it.
        rec[path] = _ident(path)


def _ident(path: str) -> Optional[list]:
    """A path's identity for a memo (``_core.memo_identities``): the unique
    ID of the mount it is reached through, inode, size, times, type; None
    where it cannot be looked at or the kernel gives no unique mount ID
    (then nothing is memoised)."""
    return _core.memo_identities([path])[0]


def _holds_an_unread_link(directory: str, recorded: set) -> bool:
    """Whether a directory the computation listed holds a symbolic link the
    computation did not read through: a check through it (os.path.isdir,
    exists) is a stat no audit hook sees, and what the link leads to can
    change (created, a file made a package) without changing any identity
    recorded. A link it did read through is recorded with the identity of
    what it led to."""
    try:
        with os.scandir(directory) as entries:
            return any(e.is_symlink() and e.path not in recorded for e in entries)
    except OSError:
        return True


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
    # A memoised key decides what every later lookup is served (torch_key()
    # is part of each FX graph's key), so it follows the rule for code
    # (trust.h): read and written only where host code may come from, the
    # private root or signed entries. In a group-shared root without
    # signing any member could plant one.
    if not cfg["host_code"]["disk"]:
        return None
    root = os.path.join(cfg["dir"], _core.COMPANION_STORES[companion])
    # The local disk only: a manifest of stat identities means nothing on
    # another machine.
    return _core.open_file_store(root, cfg["max_size_bytes"], cfg["max_entries"], cfg["fsync"], cfg["hmac_key"],
                                 cfg["sharing"], signing_keys=cfg["signing_keys"], cap_root=cfg["dir"],
                                 count_lookups=False)  # a memo's lookups are no kernel's


def _memo_key(cache_module) -> bytes:
    # triton_key() starts with the version Triton's package set when it was
    # imported (no file read while recording says it).
    version = getattr(cache_module, "__version__", None) or getattr(sys.modules.get("triton"), "__version__", "")
    return _core.typed_key("triton-key-memo", [
        ("schema", _SCHEMA), ("module", os.path.abspath(cache_module.__file__)), ("version", str(version)),
        ("python", sys.version),
        ("ext_suffix", sysconfig.get_config_var("EXT_SUFFIX") or ""), ("executable", sys.executable)])


def compute_recorded(original: Callable[[], Any]) -> tuple:
    """Runs the computation (Triton's own, past its lru_cache), recording
    every file it opened and directory it listed: (value, sorted [(path,
    identity before it was first read)])."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # audit hooks cannot be removed; idle unless recording
        _hook_installed = True
    _recording.paths = {}
    try:
        key = original()
    finally:
        seen, _recording.paths = _recording.paths, None
    return key, sorted(seen.items())


def memoised(mkey: bytes, name: str, compute: Callable[[], bytes], companion: str = "triton") -> bytes:
    """``compute()`` from the memo under ``mkey`` (in the local store of
    ``companion``'s root) when every file and directory it read is as it
    was; else computed, recorded and, when that is safe, memoised."""
    store = _store(companion)
    boot = _core.boot_id() if store is not None else ""
    if boot:
        try:
            found = store.get_entry(mkey)
            if found is not None:
                meta = json.loads(found[0])
                if (meta.get("schema") == _SCHEMA and meta.get("boot") == boot and meta["paths"]
                        and _core.memo_identities(meta["paths"]) == meta["ids"]):
                    value = dict(found[1])["value"]
                    if isinstance(value, bytes):
                        return value
        except Exception:
            pass  # a damaged memo is a recomputation
    began = time.time_ns()
    value, seen = compute_recorded(compute)
    if boot and seen:
        try:
            meta = _manifest(seen, began)
            if meta is not None:
                meta.update({"schema": _SCHEMA, "kind": "key-memo", "name": name, "boot": boot})
                store.put_entry(mkey, json.dumps(meta), [("value", value)])
        except Exception:
            pass
    return value


def _manifest(seen: List[tuple], began: int) -> Optional[dict]:
    """What a later lookup checks, or None where nothing can be memoised: a
    path that vanished or has no identity a later process can trust, a file
    or link changed while (or just before) the computation ran, a listed
    directory holding a link to nothing."""
    if any(p == _UNNAMED for p, _ in seen):
        return None
    paths = [p for p, _ in seen]
    ids = _core.memo_identities(paths)
    # Each identity is taken as the path is first read and again now: one
    # that differs was changed, or reached another file (a link on its way
    # switched), while the computation ran.
    if ids != [i for _, i in seen]:
        return None
    limit = began - _SETTLE_NS
    if any(i is None or max(i[3], i[4]) >= limit for i in ids):
        return None
    recorded = set(paths)
    if any(i is not None and i[5] == stat.S_IFDIR and _holds_an_unread_link(p, recorded)
           for p, i in zip(paths, ids)):
        return None
    return {"paths": paths, "ids": ids}


def memoised_key(cache_module, original: Callable[[], str]) -> str:
    """triton_key() from the memo when every recorded file and directory is
    as it was; else Triton's computation, recorded and memoised."""
    return memoised(_memo_key(cache_module), "triton_key()", lambda: original().encode("utf-8")).decode("utf-8")


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


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
        # A program of its own only (a script may run any other, whose
        # identity is not recorded), settled as the key memos' files are.
        if ident is None or max(ident[3], ident[4]) >= time.time_ns() - _SETTLE_NS or not _is_elf(tool):
            return real(args, *rest, **kwargs)
        boot = _core.boot_id()
        if not boot:
            return real(args, *rest, **kwargs)
        mkey = _core.typed_key("tool-version", [("schema", _SCHEMA), ("argv", list(args)), ("boot", boot),
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


def fork_safe_lock(make=threading.Lock) -> list:
    """[lock], given a new lock in a child forked while another thread held
    it (a fork during a first computation would leave the child's lock held
    forever)."""
    holder = [make()]
    os.register_at_fork(after_in_child=lambda: holder.__setitem__(0, make()))
    return holder


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
        lock = fork_safe_lock()
        value: list = []

        def triton_key() -> str:
            if value:
                return value[0]
            with lock[0]:
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


def uninstall() -> None:
    """Gives Triton's modules their own ``subprocess`` back (the caller puts
    the function install() replaced back where it was)."""
    global _installed_for
    with _install_lock:
        for name in ("triton.knobs", "triton.backends.nvidia.compiler"):
            mod = sys.modules.get(name)
            held = getattr(mod, "subprocess", None)
            if isinstance(held, _VersionMemo):
                setattr(mod, "subprocess", held._real)
        _installed_for = None
