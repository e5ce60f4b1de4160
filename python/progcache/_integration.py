"""What progcache.triton and progcache.tilelang share: one process-wide store
per companion directory of the cache root, opened once from the usual
configuration, whose failures are misses; and the helpers that write a
kernel's files where the framework reads them."""

from __future__ import annotations

import atexit
import json
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import _core, _kernel_dirs


def signed(cfg: dict) -> bool:
    """Whether entries are verified against a key: HMAC
    (PROGCACHE_HMAC_KEY_FILE) or Ed25519 (PROGCACHE_SIGNING_KEY_FILE,
    PROGCACHE_TRUSTED_KEYS_FILE)."""
    return bool(cfg["hmac_key"]) or cfg.get("signing_keys") is not None


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


_warned: set = set()
_warned_lock = threading.Lock()


def warn_once(integration: str, what: str, message: str) -> None:
    """One RuntimeWarning per (integration, what) in this process."""
    with _warned_lock:
        if (integration, what) in _warned:
            return
        _warned.add((integration, what))
    warnings.warn(f"progcache.{integration}: {message}", RuntimeWarning, stacklevel=3)


# How long a miss waits for another process compiling the same program,
# where the configuration gives no PROGCACHE_LOCK_TIMEOUT.
LOCK_TIMEOUT_S = 600.0


def lock_timeout(st: "State") -> float:
    """The configured wait for another process's compile, in seconds."""
    return float(st.cfg.get("lock_timeout_s", LOCK_TIMEOUT_S)) if st.cfg is not None else LOCK_TIMEOUT_S


@dataclass
class State:
    """One resolved configuration of a companion store, and its store."""

    cfg: Optional[dict] = None  # _core.resolve_config(); None when it did not resolve
    disabled: bool = False  # PROGCACHE_DISABLE
    failed: Optional[str] = None  # why the cache is not used, when it is not
    errors: int = 0  # failures turned into misses
    store: Any = None
    root: str = ""
    sharing: str = "private"
    signed: bool = False
    remote: bool = False  # the store includes the remote tier
    code_store: Any = None  # the disk store alone, for host code (opened on demand)
    host_code: Dict[str, Any] = field(default_factory=dict)  # the library's rule for code
    remote_refused: bool = False  # a remote tier configured but left out (code without signing)


class StoreState:
    """The configuration and the store of one companion directory
    (``<PROGCACHE_DIR>/<companion>``), resolved on first use and again after
    reset() (tests, or a program that changes the PROGCACHE_ variables).

    A cache failure is a miss: a configuration that does not resolve (a
    malformed variable), a root that cannot be used (another owner's, open
    to others, a file, a path that cannot be made) or a remote tier that
    cannot be opened is said once, as a warning, and the integration runs
    as if progcache were absent (or without the remote tier). Every failure
    of the store later is counted in ``errors`` and is a miss.

    Host code (trust.h: shared libraries, objects, Python modules) is read
    only through ``get(key, host_code=True)``, which asks the library's rule:
    the private disk store, or stores whose entries are signed and
    verified; never a group-shared root or a remote tier without signing."""

    def __init__(self, companion: str, memory_bytes: int = 0, *, remote: bool = True,
                 compressed: bool = False) -> None:
        self._companion = companion
        self._memory_bytes = memory_bytes
        self._remote = remote
        # Whether the disk store compresses where PROGCACHE_COMPRESSION is
        # not set (the configuration's compressing_store_level): for stores
        # whose entries shrink several times over, as the nvcc launcher's.
        self._compressed = compressed
        self._lock = threading.Lock()
        self._lookups = threading.local()  # .missed: this thread's last get() was a counted miss
        self._opened: Optional[State] = None
        self._exit_registered = False

    @property
    def integration(self) -> str:
        return self._companion

    def _open_store(self, cfg: dict, root: str, memory_bytes: int, urls: list):
        level = cfg["compressing_store_level" if self._compressed else "compression_level"]
        return _core.open_tiered_store(memory_bytes, root, cfg["max_size_bytes"], urls, cfg["read_only"],
                                       cfg["hmac_key"], cfg["sharing"], cfg["max_entries"], cfg["fsync"],
                                       cfg["remote_password"], compression=level,
                                       remote_compression=cfg["remote_compression_level"],
                                       signing_keys=cfg["signing_keys"], cap_root=cfg["dir"])

    def _unusable(self, why: str) -> State:
        warn_once(self._companion, "unusable", f"the cache is not used ({why}); compiling as without progcache")
        # PROGCACHE_DISABLE still holds when another setting is malformed.
        return State(disabled=env_flag("PROGCACHE_DISABLE"), failed=why,
                     host_code={"disk": False, "remote": False, "disk_reason": why, "remote_reason": why})

    def _open(self) -> State:
        try:
            cfg = _core.resolve_config()
        except Exception as e:  # a malformed variable: said once, then no cache
            return self._unusable(str(e))
        st = State(cfg=cfg, disabled=bool(cfg["disabled"]),
                   root=os.path.join(cfg["dir"], _core.COMPANION_STORES[self._companion]), sharing=cfg["sharing"],
                   signed=signed(cfg), remote=bool(cfg["remote_urls"]) and self._remote,
                   host_code=dict(cfg["host_code"]))
        if st.disabled:
            return st
        urls = list(cfg["remote_urls"]) if self._remote else []
        try:
            st.store = self._open_store(cfg, st.root, self._memory_bytes, urls)
        except Exception as e:
            if not urls:
                return self._unusable(str(e))
            # The remote tier's setting is at fault, or the root: try the root alone.
            try:
                st.store = self._open_store(cfg, st.root, self._memory_bytes, [])
            except Exception as e2:
                return self._unusable(str(e2))
            warn_once(self._companion, "remote", f"PROGCACHE_REMOTE is not used ({e}); the local store is")
            st.remote = False
            st.host_code["remote"] = False
        return st

    def get_state(self) -> State:
        st = self._opened
        if st is None:
            with self._lock:
                if self._opened is None:
                    self._opened = self._open()
                    if not self._exit_registered:
                        # Remote writes are queued; closing flushes them before exit.
                        atexit.register(self.reset)
                        self._exit_registered = True
                st = self._opened
        return st

    def reset(self) -> None:
        with self._lock:
            st, self._opened = self._opened, None
        if st is not None:
            for store in (st.store, st.code_store):
                if store is not None:
                    try:
                        store.close()
                    except Exception:
                        pass

    def stats(self) -> Dict[str, Union[int, float, None]]:
        st = self.get_state()
        out = dict(st.store.stats()) if st.store is not None else {}
        out["errors"] = st.errors
        return out

    def code_allowed(self, st: State) -> bool:
        """Whether host code may be read at all under this configuration
        (said once when not)."""
        if st.store is None:
            return False
        if not st.host_code["disk"]:
            warn_once(self._companion, "host-disk", st.host_code["disk_reason"])
            return False
        return True

    def _code_store(self, st: State):
        """The store host code is read from: the whole configuration when
        every tier of it is trusted with code; the disk store alone when the
        remote tier is not; None when nothing is."""
        if not self.code_allowed(st):
            return None
        if not st.remote or st.host_code["remote"]:
            return st.store
        if st.code_store is None:
            warn_once(self._companion, "host-remote", st.host_code["remote_reason"])
            with self._lock:
                if st.code_store is None and st.cfg is not None:
                    st.code_store = self._open_store(st.cfg, st.root, 0, [])
        return st.code_store

    def _mixed(self, st: State) -> bool:
        """Whether the store may hold entries written by others whose host
        code this process must not run."""
        return not (st.host_code["disk"] and (st.host_code["remote"] or not st.remote))

    def get(self, key: bytes, *, host_code: bool = False):
        """The entry (metadata JSON, [(name, bytes)]) or None. With
        ``host_code`` the entry is read only where code may come from; any
        other lookup that finds host code (by name or by content) in a store
        that is not trusted with it is a miss."""
        st = self.get_state()
        self._lookups.missed = False
        try:
            store = self._code_store(st) if host_code else st.store
            if store is None:
                return None
            found = store.get_entry(key)
        except Exception:  # a cache failure is a miss
            st.errors += 1
            return None
        # The store counted a miss (and nothing else) for this lookup.
        self._lookups.missed = found is None
        if found is not None and not host_code and self._mixed(st):
            if any(_core.classify_artifact(n, d) == "host" for n, d in found[1]):
                st.errors += 1
                return None
        return found

    def count_copy_hit(self) -> None:
        """Counts a lookup answered from a copy this integration keeps (a
        materialised kernel directory) as the hit it is."""
        st = self.get_state()
        try:
            if st.store is not None:
                st.store.count_copy_hit()
        except Exception:  # counting never fails a lookup
            st.errors += 1

    def missed(self) -> bool:
        """Whether this thread's last get() was a miss the store counted
        (not an error, not an entry refused after a counted hit): only such
        a miss is taken back by uncount_miss()."""
        return bool(getattr(self._lookups, "missed", False))

    def uncount_miss(self) -> None:
        """Takes back the miss of a lookup that was served after all (it
        waited for another process's compile and found the entry)."""
        st = self.get_state()
        try:
            if st.store is not None:
                st.store.uncount_miss()
        except Exception:
            st.errors += 1

    def recheck(self, key: bytes, *, host_code: bool = False):
        """A look again after a counted miss (under the compile lock): the
        entry if the local disk holds one now, else None without counting
        a second miss (one compile, one miss)."""
        st = self.get_state()
        try:
            store = self._code_store(st) if host_code else st.store
            if store is None or not store.disk_has(key):
                return None
        except Exception:
            st.errors += 1
            return None
        return self.get(key, host_code=host_code)

    def put(self, key: bytes, meta: dict, artifacts: List[tuple]) -> bool:
        """Stores an entry; whether it was (never raises)."""
        st = self.get_state()
        if st.store is None:
            return False
        try:
            st.store.put_entry(key, json.dumps(meta, sort_keys=True), artifacts)
        except Exception:  # the compile succeeded; a failed store costs only a later miss
            st.errors += 1
            return False
        return True


class CodeStoreState(StoreState):
    """The store of an integration whose entries are code (tilelang's kernel
    libraries, JAX's serialized executables): memory and disk, and the
    remote tier only where the library's rule lets code come from it (with
    signed entries); ``remote_refused`` says when a configured one was left
    out."""

    def _open(self) -> State:
        try:
            self._remote = bool(_core.resolve_config()["host_code"]["remote"])
        except Exception:
            self._remote = False  # the base class says why, once
        st = super()._open()
        st.remote_refused = st.cfg is not None and bool(st.cfg["remote_urls"]) and not self._remote
        return st


def decode(found) -> Optional[tuple]:
    """(metadata dict, artifacts) of a store hit whose metadata is a JSON
    object; None for a miss or anything else (never an exception)."""
    if found is None:
        return None
    meta_json, arts = found
    try:
        meta = json.loads(meta_json)
    except ValueError:
        return None
    return (meta, arts) if isinstance(meta, dict) else None


def safe_name(name: Any) -> bool:
    """A file name an entry may write into a kernel's directory: a plain name
    only, so no entry can write outside it, and never progcache's own
    records."""
    return (isinstance(name, str) and 0 < len(name) < 256 and name not in (".", "..") and "/" not in name
            and "\\" not in name and "\0" not in name and not name.startswith(".progcache"))


# The kernel-directory helpers live in _kernel_dirs; these names stay for
# callers of this module.
identity = _kernel_dirs.identity
write_atomic = _kernel_dirs.write_atomic
rmtree = _kernel_dirs.rmtree
