"""The check behind progcache.torch's C++ builds (python/src/held_places.cpp;
docs/torch.md, "The C++ builds"), without torch: a manifest holds only while
every file it read has its bytes and every place where an include operand
could be found holds a header exactly when it did. Within a process, a place
seen empty is remembered by the identity of the deepest directory on its path
that exists; every way of filling it after that is seen."""

import hashlib
import mmap
import os
import shutil
import threading
import time
import warnings

import pytest

from progcache import _core


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_file_read_holds_only_with_its_bytes(tmp_path):
    h = tmp_path / "a.h"
    h.write_text("#define A 1\n")
    deps = [[str(h), sha(h)]]
    assert _core.file_sha256(str(h)) == sha(h)
    assert _core.manifest_holds(deps, [])
    assert _core.manifest_holds(deps, [])  # remembered by its stat identity
    # Same size, same modification time put back: the change time and the
    # bytes still tell.
    st = os.stat(h)
    h.write_text("#define A 2\n")
    os.utime(h, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not _core.manifest_holds(deps, [])
    h.write_text("#define A 1\n")
    assert _core.manifest_holds(deps, [])
    os.remove(h)
    assert not _core.manifest_holds(deps, [])
    assert _core.file_sha256(str(h)) is None
    (tmp_path / "d").mkdir()
    assert _core.file_sha256(str(tmp_path / "d")) is None  # not a regular file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _core.file_sha256(str(fifo)) is None  # never opened: a FIFO would block


def test_a_place_holds_a_header_exactly_when_recorded(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "there.h").write_text("// here\n")
    present, absent = str(inc / "there.h"), str(inc / "later.h")
    assert _core.manifest_holds([], [[present, True], [absent, False]])
    (inc / "later.h").write_text("// created after the compile\n")
    assert not _core.manifest_holds([], [[absent, False]])
    os.remove(inc / "there.h")
    assert not _core.manifest_holds([], [[present, True]])
    # A directory or a dangling link where a header could be is no header.
    (inc / "dir.h").mkdir()
    os.symlink(tmp_path / "nowhere.h", inc / "dangling.h")
    assert _core.manifest_holds([], [[str(inc / "dir.h"), False], [str(inc / "dangling.h"), False]])
    assert not _core.manifest_holds([], [[str(inc / "dir.h"), True]])
    # Relative places, and places below a missing directory or a file.
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert _core.manifest_holds([], [["inc/later.h", True], ["inc/none.h", False]])
        assert not _core.manifest_holds([], [["inc/later.h", False]])
    finally:
        os.chdir(cwd)
    assert _core.manifest_holds([], [[str(tmp_path / "no" / "such" / "dir.h"), False],
                                     [str(inc / "later.h" / "x.h"), False]])


def test_what_g_plus_plus_would_open_is_a_header(tmp_path):
    # g++ includes anything a path reaches that is not a directory: a link to
    # /dev/null, a FIFO, a device shadow the header found after them. A place
    # it cannot look at (here a loop of links) fails its compile: such a
    # manifest holds for neither answer.
    inc = tmp_path / "inc"
    inc.mkdir()
    places = {"null": inc / "null.h", "fifo": inc / "fifo.h", "loop": inc / "loop.h"}
    for p in places.values():
        assert _core.manifest_holds([], [[str(p), False]])
    os.symlink("/dev/null", places["null"])
    os.mkfifo(places["fifo"])
    os.symlink(places["loop"], places["loop"])
    for k in ("null", "fifo"):
        assert _core.header_at(str(places[k])) is True, k
        assert not _core.manifest_holds([], [[str(places[k]), False]]), k
        assert _core.manifest_holds([], [[str(places[k]), True]]), k
    assert _core.header_at(str(places["loop"])) is None
    for present in (False, True):
        assert not _core.manifest_holds([], [[str(places["loop"]), present]])
    assert _core.header_at(str(inc)) is False and _core.header_at(str(inc / "none.h")) is False


def test_a_file_written_within_the_slack_is_hashed_again(tmp_path):
    # A write through a shared mapping to a page already dirty changes the
    # bytes and not the times: a file changed within 2 s is never trusted by
    # its identity (nor on a file system with whole-second times, where a
    # rewrite of the same size in the same second keeps it).
    h = tmp_path / "a.h"
    h.write_bytes(b"#define A 1\n")
    with open(h, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[11:12] = b"\n"
        first = _core.file_sha256(str(h))
        st = os.stat(h)
        m[10:11] = b"2"
        assert os.stat(h).st_mtime_ns == st.st_mtime_ns  # the times did not move
        assert _core.file_sha256(str(h)) == hashlib.sha256(b"#define A 2\n").hexdigest() != first


def test_a_manifest_of_another_shape_is_damage_not_held(tmp_path):
    h = tmp_path / "a.h"
    h.write_text("x\n")
    good = [[str(h), sha(h)]]
    assert _core.manifest_holds(good, [])
    for deps, probes in [(None, []), (good, None), ({}, []), ([[str(h)]], []), ([(str(h), sha(h))], []),
                         ([[str(h), 1]], []), (good, [[str(h), None]]), (good, [[str(h), 1]]),
                         (good, [[str(h)]]), (good, [[b"/x", False]]), (good, ["/x"])]:
        assert not _core.manifest_holds(deps, probes), (deps, probes)

    # Only exact lists and strs, as JSON gives: a subclass could run code that
    # changes the lists while they are read.
    class Shrinking(list):
        def __len__(self):
            outer.clear()
            return 2

    outer = [Shrinking([str(h), sha(h)])]
    assert not _core.manifest_holds(outer, [])

    class Path(str):
        pass

    assert not _core.manifest_holds([[Path(str(h)), sha(h)]], [])
    assert not _core.manifest_holds(good, [[Path(str(h)), True]])


def test_names_no_file_system_accepts_or_that_are_not_utf8(tmp_path):
    # A NUL byte: absent, not an exception (as os.stat raises ValueError).
    assert _core.manifest_holds([], [[str(tmp_path) + "/a\0b.h", False]])
    assert not _core.manifest_holds([], [[str(tmp_path) + "/a\0b.h", True]])
    # A name that is not UTF-8 reaches the file system as its bytes, as
    # os.fsdecode spells it (surrogate escapes), the way the scan records it.
    raw = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.h")
    with open(raw, "wb") as f:
        f.write(b"// latin-1 name\n")
    name = os.fsdecode(raw)
    assert _core.manifest_holds([[name, hashlib.sha256(b"// latin-1 name\n").hexdigest()]], [[name, True]])
    os.remove(raw)
    assert not _core.manifest_holds([], [[name, True]])
    assert _core.manifest_holds([], [[name, False]])


def test_a_place_remembered_empty_is_seen_filled(tmp_path):
    if not _core.on_local_file_system(str(tmp_path)):
        pytest.skip("the temporary directory is not on a local file system: no place is remembered there")
    base = tmp_path / "tree"
    for d in ("inc", "deep", "swap/inc", "other/inc"):
        (base / d).mkdir(parents=True)
    (base / "other" / "inc" / "d.h").write_text("// found through a link\n")
    places = {"create": str(base / "inc" / "a.h"), "mkdirs": str(base / "deep" / "x" / "y" / "b.h"),
              "rename": str(base / "inc" / "c.h"), "link": str(base / "swap" / "inc" / "d.h")}
    # A directory changed within 2 s is not trusted to change its times again.
    assert _core.manifest_holds([], [[p, False] for p in places.values()])
    assert not any(_core.place_remembered_empty(p) for p in places.values())
    time.sleep(2.2)
    for k, p in places.items():
        assert _core.manifest_holds([], [[p, False]]), k
        assert _core.place_remembered_empty(p), k  # the next check stats the directory only
        assert _core.manifest_holds([], [[p, False]]), k
    (base / "inc" / "a.h").write_text("// new\n")
    (base / "deep" / "x" / "y").mkdir(parents=True)
    (base / "deep" / "x" / "y" / "b.h").write_text("// new\n")
    (tmp_path / "c.h").write_text("// moved in\n")
    os.rename(tmp_path / "c.h", base / "inc" / "c.h")
    shutil.rmtree(base / "swap" / "inc")
    os.symlink(base / "other" / "inc", base / "swap" / "inc")
    for k, p in places.items():
        assert os.path.isfile(p)
        assert not _core.place_remembered_empty(p), k
        assert not _core.manifest_holds([], [[p, False]]), f"{k}: a header now there was reported absent"


def test_checks_in_threads_agree(tmp_path):
    # Inductor builds in a pool of threads: the memo is shared and locked.
    import concurrent.futures
    inc = tmp_path / "inc"
    inc.mkdir()
    files = []
    for i in range(50):
        (inc / f"h{i}.h").write_text(f"// {i}\n")
        files.append([str(inc / f"h{i}.h"), sha(inc / f"h{i}.h")])
    probes = [[str(inc / f"h{i}.h"), True] for i in range(50)] + [[str(inc / f"n{i}.h"), False] for i in range(500)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda _: _core.manifest_holds(files, probes), range(64)))
    (inc / "n7.h").write_text("// now there\n")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert not any(pool.map(lambda _: _core.manifest_holds(files, probes), range(64)))


def test_a_fork_while_another_thread_checks_leaves_the_child_able_to_check(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    probes = [[str(inc / f"n{i}.h"), False] for i in range(2000)]
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            _core.manifest_holds([], probes)

    t = threading.Thread(target=busy)
    t.start()
    try:
        for _ in range(20):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, on purpose
                pid = os.fork()
            if pid == 0:
                os._exit(0 if _core.manifest_holds([], probes) else 1)
            deadline = time.monotonic() + 30
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    raise AssertionError("a child forked during a check never finished its own")
                time.sleep(0.01)
    finally:
        stop.set()
        t.join()
