"""The memo behind the keys frameworks compute by hashing their own files
(Triton's triton_key(), Inductor's torch_key(); progcache/_triton_key.py),
without either framework: a memoised value is answered only while every file
the computation opened and every directory it listed keeps its stat identity,
and a computation that read a file changed just before it began, or while it
ran, is never memoised (its file could keep an identity that no longer
stands for the bytes it read). The identity is tied to the mount a path is
reached through and to the boot."""

import hashlib
import os
import time

import pytest

from progcache import _core, _triton_key as tk

SETTLE = tk._SETTLE_NS / 1e9 + 0.1


@pytest.fixture
def memo(tmp_path, monkeypatch):
    if _core.memo_identities([str(tmp_path)])[0] is None:
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later do): nothing is memoised here")
    monkeypatch.setenv("PROGCACHE_DIR", str(tmp_path / "root"))
    for v in ("PROGCACHE_DISABLE", "PROGCACHE_REMOTE", "PROGCACHE_READONLY", "PROGCACHE_SHARING"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(tk, "_memo_stores", {})
    return tmp_path


class Hasher:
    """A computation like triton_key(): lists a directory, hashes each file
    in it. Counts its runs."""

    def __init__(self, where):
        self.where = where
        self.runs = 0
        self.after_reading = None

    def __call__(self):
        self.runs += 1
        h = hashlib.sha256()
        for name in sorted(os.listdir(self.where)):
            path = os.path.join(self.where, name)
            if not os.path.isfile(path):  # a stat: no audit event
                continue
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
        if self.after_reading is not None:
            self.after_reading()
        return h.digest()


KEY = _core.typed_key("test-key-memo", [("case", "1")])


def tree(memo):
    pkg = memo / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "b.py").write_text("B = 2\n")
    time.sleep(SETTLE)  # files older than the window before the first computation
    return pkg


def change(pkg, how):
    if how == "edit":
        st = os.stat(pkg / "a.py")
        (pkg / "a.py").write_text("A = 3\n")  # same size; mtime put back: the ctime still moves
        os.utime(pkg / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    elif how == "add":
        (pkg / "c.py").write_text("C = 1\n")
    elif how == "remove":
        os.unlink(pkg / "b.py")
    elif how == "replace":
        (pkg / "new").write_text("B = 9\n")
        os.replace(pkg / "new", pkg / "b.py")


@pytest.mark.parametrize("how", ["edit", "add", "remove", "replace"])
def test_a_memo_answers_only_while_every_file_and_directory_read_is_unchanged(memo, how):
    pkg = tree(memo)
    f = Hasher(str(pkg))
    first = tk.memoised(KEY, "test", f)
    assert tk.memoised(KEY, "test", f) == first and f.runs == 1  # the memo answered
    change(pkg, how)
    after = tk.memoised(KEY, "test", f)
    assert f.runs == 2 and after == Hasher(str(pkg))() != first  # computed again: the new value


def test_a_file_changed_just_before_the_computation_is_not_memoised(memo):
    pkg = tree(memo)
    (pkg / "a.py").write_text("A = 5\n")  # within the window: its identity is not trusted yet
    f = Hasher(str(pkg))
    tk.memoised(KEY, "test", f)
    tk.memoised(KEY, "test", f)
    assert f.runs == 2
    time.sleep(SETTLE)
    tk.memoised(KEY, "test", f)
    tk.memoised(KEY, "test", f)
    assert f.runs == 3  # settled: memoised once, then answered


def test_a_file_changed_while_the_computation_ran_is_not_memoised(memo):
    # A writer replaces a file's bytes after the computation read them and
    # before it looked at the identities: memoised, the old value would be
    # answered for the new bytes from then on.
    pkg = tree(memo)
    f = Hasher(str(pkg))
    f.after_reading = lambda: (pkg / "a.py").write_text("A = 7\n")
    stale = tk.memoised(KEY, "test", f)
    f.after_reading = None
    now = tk.memoised(KEY, "test", f)
    assert f.runs == 2 and now == Hasher(str(pkg))() != stale


def test_nothing_read_nothing_memoised_and_a_disabled_cache_keeps_no_memo(memo, monkeypatch):
    f = lambda: b"constant"  # noqa: E731 - reads no file: nothing could say when it changes
    calls = []

    def counted():
        calls.append(1)
        return f()

    tk.memoised(KEY, "test", counted)
    tk.memoised(KEY, "test", counted)
    assert len(calls) == 2
    pkg = tree(memo)
    monkeypatch.setenv("PROGCACHE_DIR", str(memo / "other-root"))
    monkeypatch.setenv("PROGCACHE_DISABLE", "1")
    monkeypatch.setattr(tk, "_memo_stores", {})
    g = Hasher(str(pkg))
    tk.memoised(KEY, "test", g)
    tk.memoised(KEY, "test", g)
    assert g.runs == 2 and not (memo / "other-root").exists()


def test_a_link_switched_while_the_computation_ran_is_not_memoised(memo):
    # A deploy that points a link at another release while a process hashes
    # the first: every identity taken after the computation is the new
    # release's (its files old enough), the value the old one's.
    for rel, a in (("relA", "A = 1\n"), ("relB", "A = 2\n")):
        (memo / rel / "pkg").mkdir(parents=True)
        (memo / rel / "pkg" / "a.py").write_text(a)
        (memo / rel / "pkg" / "b.py").write_text("B = 2\n")
    os.symlink("relA", memo / "cur")
    time.sleep(SETTLE)

    def switch():
        os.symlink("relB", memo / "next")
        os.replace(memo / "next", memo / "cur")

    f = Hasher(str(memo / "cur" / "pkg"))
    f.after_reading = switch
    tk.memoised(KEY, "test", f)
    f.after_reading = None
    now = tk.memoised(KEY, "test", f)
    assert f.runs == 2 and now == Hasher(str(memo / "relB" / "pkg"))()


def test_a_listed_directory_holding_a_link_to_nothing_is_not_memoised(memo):
    pkg = tree(memo)
    os.symlink(str(memo / "later.py"), pkg / "later.py")  # its target is made after the computation
    time.sleep(SETTLE)
    f = Hasher(str(pkg))
    first = tk.memoised(KEY, "test", f)
    (memo / "later.py").write_text("L = 1\n")  # the directory listed is unchanged by this
    after = tk.memoised(KEY, "test", f)
    assert f.runs == 2 and after == Hasher(str(pkg))() != first


def test_nothing_is_memoised_without_an_identity_other_processes_can_trust(memo, monkeypatch):
    pkg = tree(memo)
    f = Hasher(str(pkg))
    real = tk._core.memo_identities
    monkeypatch.setattr(tk._core, "memo_identities", lambda paths, follow=True: [None] * len(paths))
    tk.memoised(KEY, "test", f)
    tk.memoised(KEY, "test", f)
    assert f.runs == 2  # a kernel without unique mount IDs: computed every time
    monkeypatch.setattr(tk._core, "memo_identities", real)
    tk.memoised(KEY, "test", f)
    tk.memoised(KEY, "test", f)
    assert f.runs == 3
    boot = tk._core.boot_id()
    monkeypatch.setattr(tk._core, "boot_id", lambda: boot[:-1] + ("0" if boot[-1] != "0" else "1"))
    tk.memoised(KEY, "test", f)
    assert f.runs == 4  # a memo of another boot (mount IDs start again) is not used


def test_a_path_identity_names_its_mount_not_its_device(tmp_path):
    p = tmp_path / "f"
    p.write_text("x")
    got = tk._core.memo_identities([str(p), str(tmp_path / "absent")])
    if got[0] is None:
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later do): nothing is memoised here")
    st = os.stat(p)
    assert got[0][1:5] == [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] and got[1] is None
    assert got[0][0] != st.st_dev  # the unique mount ID (never reused while the machine runs)


def walk(where):
    """A computation like pkgutil's: hashes the .py files of a directory and
    of each subdirectory, which it finds with os.path.isdir (a stat no audit
    hook sees)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(where)):
        path = os.path.join(where, name)
        if name.endswith(".py"):
            with open(path, "rb") as f:
                h.update(name.encode() + f.read())
        elif os.path.isdir(path):
            h.update(name.encode() + walk(path))
    return h.digest()


def test_a_listed_directory_holding_a_link_not_read_through_is_not_memoised(memo):
    pkg = tree(memo)
    (memo / "target").write_text("a file, not a package")
    os.symlink(str(memo / "target"), pkg / "ext")
    time.sleep(SETTLE)
    runs = []
    f = lambda: runs.append(1) or walk(str(pkg))  # noqa: E731
    first = tk.memoised(KEY, "test", f)
    os.unlink(memo / "target")
    (memo / "target").mkdir()
    (memo / "target" / "m.py").write_text("M = 1\n")  # the link now leads to a package: nothing listed changed
    after = tk.memoised(KEY, "test", f)
    assert len(runs) == 2 and after == walk(str(pkg)) != first


@pytest.mark.parametrize("how", ["dotdot", "descriptor"])
def test_a_read_no_path_names_for_a_later_look_is_not_memoised(memo, how):
    pkg = tree(memo)
    runs = []

    def f():
        runs.append(1)
        with open(pkg / "b.py", "rb") as fh:  # a read named by its path, recorded
            named = fh.read()
        if how == "dotdot":  # the kernel resolves ".." after the links before it; abspath would drop it as text
            with open(os.path.join(str(pkg), "..", "pkg", "a.py"), "rb") as fh:
                return named + fh.read()
        fd = os.open(str(pkg), os.O_RDONLY)
        try:
            return named + "\0".join(sorted(os.listdir(fd))).encode()
        finally:
            os.close(fd)

    tk.memoised(KEY, "test", f)
    tk.memoised(KEY, "test", f)
    assert len(runs) == 2


def test_a_child_forked_while_the_lock_is_held_has_its_own():
    lock = tk.fork_safe_lock()
    lock[0].acquire()  # as a first computation in another thread holds it
    pid = os.fork()
    if pid == 0:
        ok = lock[0].acquire(timeout=5)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    lock[0].release()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_tools_version_is_memoised_only_for_a_program_of_its_own(memo, tmp_path):
    import shutil
    import subprocess
    # A wrapper script (as TRITON_PTXAS_PATH may name) running the real tool:
    # the tool changes, the script does not.
    inner = tmp_path / "inner"
    inner.write_text("#!/bin/sh\necho one\n")
    script = tmp_path / "tool"
    script.write_text(f"#!/bin/sh\nexec {inner} \"$@\"\n")
    for p in (inner, script):
        p.chmod(0o755)
    time.sleep(SETTLE)
    memo_sp = tk._VersionMemo(subprocess)
    assert memo_sp.check_output([str(script), "--version"]) == b"one\n"
    inner.write_text("#!/bin/sh\necho two\n")
    assert memo_sp.check_output([str(script), "--version"]) == b"two\n"  # a script is never memoised
    true = shutil.which("true")
    if true is None or open(true, "rb").read(4) != b"\x7fELF":
        pytest.skip("no ELF `true` here")
    got = memo_sp.check_output([os.path.realpath(true), "--version"])
    found = tk._store("triton").get_entry(_core.typed_key("tool-version", [
        ("schema", tk._SCHEMA), ("argv", [os.path.realpath(true), "--version"]), ("boot", _core.boot_id()),
        ("stderr", repr(None))]))
    assert found is not None and dict(found[1])["output"] == got  # a program of its own is memoised


def _plant_as(uid, root, mkey, value, paths):
    """In a child running as `uid` (a member of the root's group), writes a
    memo of `value` for `mkey` that names `paths` as they are now: what a
    member of a team's root could leave for the others."""
    import json
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            store = _core.open_file_store(os.path.join(root, _core.COMPANION_STORES["triton"]), None, None, False,
                                          b"", "group", count_lookups=False)
            meta = {"schema": tk._SCHEMA, "kind": "key-memo", "name": "planted", "boot": _core.boot_id(),
                    "paths": paths, "ids": _core.memo_identities(paths)}
            store.put_entry(mkey, json.dumps(meta), [("value", value)])
            code = 0
        except BaseException as e:  # noqa: BLE001 - said, then the child's exit code fails the test
            os.write(2, f"member: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the member could not write its memo"


def test_a_memo_in_a_group_shared_root_is_used_only_where_its_entries_are_signed(memo, monkeypatch, second_uid):
    """A memoised key decides what every lookup after it is served (torch_key()
    is in each FX graph's key): it follows the rule for code. In a team's
    root without signing, another member's memo is never taken, nor is one
    kept; with signing, this user's own memo is used and the member's
    unsigned one refused."""
    import pathlib
    import shutil
    import tempfile
    # Where the member can reach (pytest's own directories are private).
    base = pathlib.Path(tempfile.mkdtemp(prefix="progcache-team-"))
    os.chmod(base, 0o755)
    try:
        _group_root_case(base, monkeypatch, second_uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _group_root_case(base, monkeypatch, second_uid):
    pkg = tree(base)
    root = base / "team"
    root.mkdir()
    os.chown(root, 0, second_uid)
    os.chmod(root, 0o2770)
    monkeypatch.setenv("PROGCACHE_DIR", str(root))
    monkeypatch.setenv("PROGCACHE_SHARING", "group")
    paths = [str(pkg), str(pkg / "a.py"), str(pkg / "b.py")]
    _plant_as(second_uid, str(root), KEY, b"planted", paths)
    h = Hasher(pkg)
    assert tk.memoised(KEY, "k", h) == h() and h.runs == 2, "another member's memo decided the key"
    monkeypatch.setattr(tk, "_memo_stores", {})
    assert tk.memoised(KEY, "k", h) != b"planted" and h.runs == 3, "a memo was kept in a root others write"
    # Signed: the member's unsigned memo is refused, this user's own kept.
    key = base / "hmac.key"
    key.write_bytes(b"k" * 32)
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key))
    monkeypatch.setattr(tk, "_memo_stores", {})
    h = Hasher(pkg)
    first = tk.memoised(KEY, "k", h)
    assert first != b"planted" and h.runs == 1
    assert tk.memoised(KEY, "k", h) == first and h.runs == 1, "a signed root kept no memo"
