"""Kernel directories: where progcache.triton and progcache.tilelang lay out
a kernel's files for the framework to load by path (Triton's
``TRITON_CACHE_DIR/<key>/``, tilelang's cache directory).

A file loaded from such a directory runs as the user who loads it (a
launcher ``.so``, a kernel library), so the directory is trusted only as the
file store trusts its root (``progcache::prepare_private_dir``): owned by
this user and writable by nobody else, every directory above it owned by
this user or root and writable by nobody else unless sticky. A directory
that fails (a cache directory under a shared temporary directory that
another user created first, a group-writable one) is replaced by a private
directory of this process, removed at exit, and the user is told once.

One directory per kernel, written whole: its files go into a staging
directory beside it, then a record of each file's stat identity, then one
rename. A directory that already exists (torn, edited, left by an older
compile) keeps its inodes for readers in flight: each file is replaced by a
rename, the record last. A lookup trusts the directory only while every
recorded file keeps its identity (``files_match``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import threading
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import _core

# (name, bytes, mode)
FileSpec = Tuple[str, bytes, int]


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


def files_match(directory: str, idents: Any) -> bool:
    """Whether every recorded file of ``directory`` keeps its identity."""
    return (isinstance(idents, dict) and bool(idents)
            and all(identity(os.path.join(directory, n)) == i for n, i in idents.items()))


def read_record(directory: str, record_name: str) -> Optional[dict]:
    try:
        with open(os.path.join(directory, record_name), "rb") as f:
            rec = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


class KernelDirs:
    """The directories one integration loads kernels from: a trusted base
    per configured directory (checked once per process), staging and
    publishing inside it."""

    def __init__(self, integration: str, variable: str) -> None:
        self._integration = integration
        self._variable = variable
        self._lock = threading.Lock()
        self._bases: Dict[str, str] = {}
        self._private: Optional[str] = None
        self._warned: set = set()

    def warn_once(self, what: str, message: str) -> None:
        with self._lock:
            if what in self._warned:
                return
            self._warned.add(what)
        warnings.warn(f"progcache.{self._integration}: {message}", RuntimeWarning, stacklevel=3)

    def private_base(self) -> str:
        """This process's own directory (mkdtemp, 0700), removed at exit."""
        with self._lock:
            if self._private is None:
                import atexit
                d = tempfile.mkdtemp(prefix=f"progcache-{self._integration}-")
                atexit.register(rmtree, d)
                self._private = d
            return self._private

    def base(self, wanted: str) -> str:
        """``wanted`` when it may be trusted (created private when missing),
        else this process's private directory, said once."""
        with self._lock:
            got = self._bases.get(wanted)
        if got is not None:
            return got
        try:
            _core.prepare_private_dir(wanted)
            got = wanted
        except (OSError, ValueError, RuntimeError) as e:
            got = self.private_base()
            self.warn_once("base:" + wanted,
                           f"{self._variable} ({wanted}) is not used: {e}. Kernels are laid out in a private "
                           f"directory of this process instead ({got}); they are still served from progcache's "
                           "store")
        with self._lock:
            self._bases[wanted] = got
        return got

    def reset(self) -> None:
        with self._lock:
            self._bases.clear()
            self._warned.clear()


def new_staging(base: str) -> str:
    """A fresh private directory inside ``base`` (same filesystem, so the
    final rename cannot fail with EXDEV)."""
    return tempfile.mkdtemp(prefix=".progcache-stage-", dir=base)


def write_files(directory: str, files: Iterable[FileSpec]) -> List[str]:
    """Creates each file anew (O_EXCL) in a directory this process made;
    returns the names."""
    names = []
    for name, data, mode in files:
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        names.append(name)
    return names


def idents_of(directory: str, names: Iterable[str]) -> Dict[str, list]:
    out = {}
    for n in names:
        i = identity(os.path.join(directory, n))
        if i is not None:
            out[n] = i
    return out


def write_record(directory: str, record_name: str, record: dict) -> str:
    return write_atomic(directory, record_name, json.dumps(record, sort_keys=True).encode())


def publish(src: str, dst: str, names: List[str], record_name: str,
            make_record: Callable[[Dict[str, list]], dict], valid: Callable[[str], bool]) -> None:
    """Renames the complete directory ``src`` (its files ``names`` and its
    record) to ``dst``, in the same base. A ``dst`` that is already
    ``valid`` is kept; any other existing ``dst`` (torn, edited, an older
    compile's) keeps its inodes for readers in flight: each file is
    replaced by a rename, then the record."""
    try:
        os.rename(src, dst)
        return
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
    if valid(dst):
        return
    st = os.lstat(dst)
    if not os.path.isdir(dst) or os.path.islink(dst) or st.st_uid != os.geteuid():
        raise PermissionError(errno.EPERM, "not a directory of this user's", dst)
    for name in names:
        os.replace(os.path.join(src, name), os.path.join(dst, name))
    write_record(dst, record_name, make_record(idents_of(dst, names)))


def materialise(base: str, dst: str, files: List[FileSpec], record_name: str,
                make_record: Callable[[Dict[str, list]], dict], valid: Callable[[str], bool]) -> None:
    """Lays ``files`` out as the directory ``dst`` (inside ``base``), the
    record ``make_record(identities)`` written last, and publishes it."""
    staging = new_staging(base)
    try:
        names = write_files(staging, files)
        write_record(staging, record_name, make_record(idents_of(staging, names)))
        publish(staging, dst, names, record_name, make_record, valid)
    finally:
        rmtree(staging)
