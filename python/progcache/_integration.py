"""What progcache.triton and progcache.tilelang share: one process-wide store
per companion directory of the cache root, opened once from the usual
configuration, whose failures are misses; and the helpers that write a
kernel's files where the framework reads them."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Dict, List, Optional, Union

from . import _core


def signed(cfg: dict) -> bool:
    """Whether entries are verified against a key: HMAC
    (PROGCACHE_HMAC_KEY_FILE) or Ed25519 (PROGCACHE_SIGNING_KEY_FILE,
    PROGCACHE_TRUSTED_KEYS_FILE)."""
    return bool(cfg["hmac_key"]) or cfg.get("signing_keys") is not None


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class StoreState:
    """The configuration and the store of one companion directory
    (``<PROGCACHE_DIR>/<companion>``), resolved on first use and again after
    reset() (tests, or a program that changes the PROGCACHE_ variables).
    Every failure of the store is counted in ``errors`` and is a miss."""

    def __init__(self, companion: str, memory_bytes: int = 0, *, remote: bool = True) -> None:
        self._companion = companion
        self._memory_bytes = memory_bytes
        self._remote = remote
        self._lock = threading.Lock()
        self._opened: Optional[dict] = None
        self._exit_registered = False

    def _open(self) -> dict:
        cfg = _core.resolve_config()
        st = {"cfg": cfg, "disabled": bool(cfg["disabled"]), "errors": 0, "store": None,
              "root": os.path.join(cfg["dir"], _core.COMPANION_STORES[self._companion]), "sharing": cfg["sharing"],
              "signed": signed(cfg), "remote": bool(cfg["remote_urls"]) and self._remote}
        if st["disabled"]:
            return st
        urls = list(cfg["remote_urls"]) if self._remote else []
        st["store"] = _core.open_tiered_store(self._memory_bytes, st["root"], cfg["max_size_bytes"], urls,
                                              cfg["read_only"], cfg["hmac_key"], cfg["sharing"], cfg["max_entries"],
                                              cfg["fsync"], cfg["remote_password"],
                                              compression=cfg["compression_level"],
                                              remote_compression=cfg["remote_compression_level"],
                                              signing_keys=cfg["signing_keys"])
        return st

    def get_state(self) -> dict:
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
        if st is not None and st["store"] is not None:
            try:
                st["store"].close()
            except Exception:
                pass

    def stats(self) -> Dict[str, Union[int, float]]:
        st = self.get_state()
        out = dict(st["store"].stats()) if st["store"] is not None else {}
        out["errors"] = st["errors"]
        return out

    def get(self, key: bytes):
        st = self.get_state()
        if st["store"] is None:
            return None
        try:
            return st["store"].get_entry(key)
        except Exception:  # a cache failure is a miss
            st["errors"] += 1
            return None

    def put(self, key: bytes, meta: dict, artifacts: List[tuple]) -> None:
        st = self.get_state()
        if st["store"] is None:
            return
        try:
            st["store"].put_entry(key, json.dumps(meta, sort_keys=True), artifacts)
        except Exception:  # the compile succeeded; a failed store costs only a later miss
            st["errors"] += 1


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


def identity(path: str) -> Optional[list]:
    """A file's stat identity (size, mtime, ctime, inode): what the include
    scan's manifests record. ctime cannot be set back by a user, so a file
    edited, replaced or truncated never keeps it."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def write_atomic(directory: str, name: str, data: bytes, mode: int = 0o600) -> str:
    """Writes directory/name by a temporary file and a rename; returns the path."""
    path = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(prefix=".progcache-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode != 0o600:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
