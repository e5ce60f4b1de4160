"""The check behind progcache.torch's C++ builds (python/src/held_places.cpp;
docs/torch.md, "The C++ builds"), without torch: a manifest holds only while
every file it read has its bytes and every place where an include operand
could be found holds a header exactly when it did. Within a process, a place
seen empty is remembered by the identity of the deepest directory on its path
that exists; every way of filling it after that is seen. A file's digest is
remembered by its identity, for every process where a private root keeps
them; a digest so kept is used only while the file's identity holds."""

import hashlib
import json
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

import pytest

from progcache import _core


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def holds(deps, probes):
    """The check of a manifest written from these lists (None: lists of a
    shape no manifest is written from)."""
    blob = _core.encode_manifest(deps, probes)
    return blob is not None and _core.manifest_holds(blob)


def test_a_file_read_holds_only_with_its_bytes(tmp_path):
    h = tmp_path / "a.h"
    h.write_text("#define A 1\n")
    deps = [[str(h), sha(h)]]
    assert _core.file_sha256(str(h)) == sha(h)
    assert holds(deps, [])
    assert holds(deps, [])  # remembered by its stat identity
    # Same size, same modification time put back: the change time and the
    # bytes still tell.
    st = os.stat(h)
    h.write_text("#define A 2\n")
    os.utime(h, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not holds(deps, [])
    h.write_text("#define A 1\n")
    assert holds(deps, [])
    os.remove(h)
    assert not holds(deps, [])
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
    assert holds([], [[present, True], [absent, False]])
    (inc / "later.h").write_text("// created after the compile\n")
    assert not holds([], [[absent, False]])
    os.remove(inc / "there.h")
    assert not holds([], [[present, True]])
    # A directory or a dangling link where a header could be is no header.
    (inc / "dir.h").mkdir()
    os.symlink(tmp_path / "nowhere.h", inc / "dangling.h")
    assert holds([], [[str(inc / "dir.h"), False], [str(inc / "dangling.h"), False]])
    assert not holds([], [[str(inc / "dir.h"), True]])
    # Relative places, and places below a missing directory or a file.
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert holds([], [["inc/later.h", True], ["inc/none.h", False]])
        assert not holds([], [["inc/later.h", False]])
    finally:
        os.chdir(cwd)
    assert holds([], [[str(tmp_path / "no" / "such" / "dir.h"), False],
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
        assert holds([], [[str(p), False]])
    os.symlink("/dev/null", places["null"])
    os.mkfifo(places["fifo"])
    os.symlink(places["loop"], places["loop"])
    for k in ("null", "fifo"):
        assert _core.header_at(str(places[k])) is True, k
        assert not holds([], [[str(places[k]), False]]), k
        assert holds([], [[str(places[k]), True]]), k
    assert _core.header_at(str(places["loop"])) is None
    for present in (False, True):
        assert not holds([], [[str(places["loop"]), present]])
    assert _core.header_at(str(inc)) is False and _core.header_at(str(inc / "none.h")) is False


def test_a_directory_of_precompiled_headers_where_gcc_looks_is_a_header(tmp_path):
    # g++ takes a NAME.gch directory's precompiled headers in place of NAME:
    # such a directory fills its place, where a directory NAME does not.
    inc = tmp_path / "inc"
    inc.mkdir()
    gch = str(inc / "v.h.gch")
    assert holds([], [[gch, False]])
    os.mkdir(gch)
    assert _core.header_at(gch) is True
    assert not holds([], [[gch, False]]) and holds([], [[gch, True]])


def test_include_places_are_the_library_lexers_with_gccs_precompiled_places(tmp_path):
    src, inc = tmp_path / "src", tmp_path / "inc"
    src.mkdir()
    inc.mkdir()
    (inc / "b.h").write_text("")
    (src / "a.cpp").write_text('#\\\ninclude "b.h"\n#include NAME(x)\n')
    places, computed = _core.include_places([str(src / "a.cpp")], [str(inc)], True, [])
    assert places == {str(src / "b.h"): False, str(src / "b.h.gch"): False,
                      str(inc / "b.h"): True, str(inc / "b.h.gch"): False}
    assert computed == [str(src / "a.cpp") + ":3"]  # its physical line
    assert str(src / "b.h.gch") not in _core.include_places([str(src / "a.cpp")], [str(inc)], False, [])[0]
    assert _core.include_places([str(src / "gone.cpp")], [], True, []) is None
    # The compiler's own first include, looked for as <stdc-predef.h> is.
    implicit = _core.include_places([], [str(inc)], True, ["stdc-predef.h"])[0]
    assert implicit == {str(inc / "stdc-predef.h"): False, str(inc / "stdc-predef.h.gch"): False}
    assert _core.parse_depfile("o: a.cpp b\\ c.h \\\n d$$.h\nb\\ c.h:\n") == ["a.cpp", "b c.h", "d$.h"]
    assert _core.parse_depfile("no rule\n") is None


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
    assert holds(good, [])
    for deps, probes in [(None, []), (good, None), ({}, []), ([[str(h)]], []), ([(str(h), sha(h))], []),
                         ([[str(h), 1]], []), (good, [[str(h), None]]), (good, [[str(h), 1]]),
                         (good, [[str(h)]]), (good, [[b"/x", False]]), (good, ["/x"])]:
        assert not holds(deps, probes), (deps, probes)

    # Only exact lists and strs, as JSON gives: a subclass could run code that
    # changes the lists while they are read.
    class Shrinking(list):
        def __len__(self):
            outer.clear()
            return 2

    outer = [Shrinking([str(h), sha(h)])]
    assert not holds(outer, [])

    class Path(str):
        pass

    assert not holds([[Path(str(h)), sha(h)]], [])
    assert not holds(good, [[Path(str(h)), True]])


def test_names_no_file_system_accepts_or_that_are_not_utf8(tmp_path):
    # A NUL byte: absent, not an exception (as os.stat raises ValueError).
    assert holds([], [[str(tmp_path) + "/a\0b.h", False]])
    assert not holds([], [[str(tmp_path) + "/a\0b.h", True]])
    # A name that is not UTF-8 reaches the file system as its bytes, as
    # os.fsdecode spells it (surrogate escapes), the way the scan records it.
    raw = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.h")
    with open(raw, "wb") as f:
        f.write(b"// latin-1 name\n")
    name = os.fsdecode(raw)
    assert holds([[name, hashlib.sha256(b"// latin-1 name\n").hexdigest()]], [[name, True]])
    os.remove(raw)
    assert not holds([], [[name, True]])
    assert holds([], [[name, False]])


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
    assert holds([], [[p, False] for p in places.values()])
    assert not any(_core.place_remembered_empty(p) for p in places.values())
    time.sleep(2.2)
    for k, p in places.items():
        assert holds([], [[p, False]]), k
        assert _core.place_remembered_empty(p), k  # the next check stats the directory only
        assert holds([], [[p, False]]), k
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
        assert not holds([], [[p, False]]), f"{k}: a header now there was reported absent"


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
        assert all(pool.map(lambda _: holds(files, probes), range(64)))
    (inc / "n7.h").write_text("// now there\n")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert not any(pool.map(lambda _: holds(files, probes), range(64)))


def test_a_fork_while_another_thread_checks_leaves_the_child_able_to_check(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    probes = [[str(inc / f"n{i}.h"), False] for i in range(2000)]
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            holds([], probes)

    t = threading.Thread(target=busy)
    t.start()
    try:
        for _ in range(20):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, on purpose
                pid = os.fork()
            if pid == 0:
                os._exit(0 if holds([], probes) else 1)
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


def test_a_manifest_cut_short_or_damaged_is_not_held(tmp_path):
    h = tmp_path / "a.h"
    h.write_text("x\n")
    blob = _core.encode_manifest([[str(h), sha(h)]], [[str(tmp_path / "b.h"), False], [str(h), True]])
    assert _core.manifest_holds(blob)
    for n in range(len(blob)):
        assert not _core.manifest_holds(blob[:n]), n  # never a shorter manifest that holds
    for bad in (blob + b".", blob + b"a", b"x" + blob[1:], blob.replace(b"\nh", b"\nq", 1),
                bytearray(blob), memoryview(blob), blob.decode("latin-1"), None):
        assert not _core.manifest_holds(bad), bad
    # Digests are 64 lowercase hex digits: no manifest is written with another.
    assert _core.encode_manifest([[str(h), sha(h).upper()]], []) is None
    assert _core.encode_manifest([[str(h), sha(h)[:63]]], []) is None


_KEEPER = """
import json, sys
from progcache import _core
_core.keep_header_digests(sys.argv[1] if sys.argv[1] != "-" else None, sys.argv[2] == "write")
print(json.dumps([_core.file_sha256(p) for p in sys.argv[3:]]))
_core.save_header_digests()
"""


def digests_in_a_new_process(memo, *paths, write=True):
    p = subprocess.run([sys.executable, "-c", _KEEPER, str(memo), "write" if write else "read", *map(str, paths)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def plant(memo, path, data):
    doc = json.loads(memo.read_text())
    doc["files"][str(path)]["sha256"] = hashlib.sha256(data).hexdigest()
    memo.write_text(json.dumps(doc))
    memo.chmod(0o600)


def private_memo(tmp_path):
    """Where a private root would keep the digests (a directory only its
    owner may use); skips where the kernel cannot key them."""
    if not _core.on_local_file_system(str(tmp_path)):
        pytest.skip("identities are trusted only on local file systems with fine times")
    probe = tmp_path / "probe"
    probe.write_text("")
    if not _core.keeps_digests_for_other_processes(str(probe)):
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later): no digest is kept for other processes")
    (tmp_path / "private").mkdir(mode=0o700)
    return tmp_path / "private" / "header-digests.json"


def test_digests_kept_for_every_process_are_used_only_while_the_file_is_unchanged(tmp_path):
    memo = private_memo(tmp_path)
    a, b = tmp_path / "a.h", tmp_path / "b.h"
    a.write_bytes(b"one\n")
    b.write_bytes(b"two\n")
    time.sleep(2.1)  # a file changed within 2 s is never remembered by its identity
    assert digests_in_a_new_process(memo, a, b) == [sha(a), sha(b)]
    assert os.stat(memo).st_mode & 0o777 == 0o600
    kept = json.loads(memo.read_text())["files"]
    assert set(kept) == {str(a), str(b)}
    # A later process takes the kept digest instead of reading the file:
    # one planted in the file is what it answers while the identity holds.
    plant(memo, a, b"planted\n")
    assert digests_in_a_new_process(memo, a) == [hashlib.sha256(b"planted\n").hexdigest()]
    # The file changed (same size, its modification time put back): its
    # change time differs, so the kept digest is not used, now or later.
    st = os.stat(a)
    a.write_bytes(b"ONE\n")
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digests_in_a_new_process(memo, a) == [sha(a)]
    time.sleep(2.1)
    plant(memo, b, b"planted\n")
    assert digests_in_a_new_process(memo, a) == [sha(a)]
    # A file anyone else may write, or another user's, is not read.
    memo.chmod(0o620)
    assert digests_in_a_new_process(memo, b, write=False) == [sha(b)]
    memo.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(memo, 12345, -1)
        assert digests_in_a_new_process(memo, b, write=False) == [sha(b)]
        os.chown(memo, 0, -1)
    assert digests_in_a_new_process(memo, b, write=False) == [hashlib.sha256(b"planted\n").hexdigest()]
    # A damaged file is no memo, and is written again whole.
    memo.write_bytes(b'{"version": 4, "files": {"')
    assert digests_in_a_new_process(memo, a, b) == [sha(a), sha(b)]
    assert set(json.loads(memo.read_text())["files"]) == {str(a), str(b)}
    # Read-only, or none named: nothing is written.
    other = tmp_path / "private" / "other.json"
    assert digests_in_a_new_process(other, a, write=False) == [sha(a)]
    assert digests_in_a_new_process("-", a) == [sha(a)]
    assert os.listdir(tmp_path / "private") == ["header-digests.json"]


def test_a_kept_digest_is_tied_to_its_mount_and_its_boot(tmp_path):
    # Device numbers are given again to file systems mounted later, which
    # can hold other bytes at the same inode, size and times (an image
    # built with copied times, mounted on the same loop device): a digest is
    # kept under the mount's unique ID, and for this boot only.
    memo = private_memo(tmp_path)
    a = tmp_path / "a.h"
    a.write_bytes(b"one\n")
    time.sleep(2.1)
    assert digests_in_a_new_process(memo, a) == [sha(a)]
    plant(memo, a, b"planted\n")
    planted = hashlib.sha256(b"planted\n").hexdigest()
    assert digests_in_a_new_process(memo, a, write=False) == [planted]
    doc = json.loads(memo.read_text())
    stamp = doc["files"][str(a)]["stamp"]
    assert stamp[1:] == [os.stat(a).st_ino, os.stat(a).st_size, os.stat(a).st_mtime_ns, os.stat(a).st_ctime_ns]
    # An entry under the device number instead: not used.
    doc["files"][str(a)]["stamp"] = [os.stat(a).st_dev] + stamp[1:]
    memo.write_text(json.dumps(doc))
    assert digests_in_a_new_process(memo, a, write=False) == [sha(a)]
    # A memo of another boot: not used.
    doc["files"][str(a)]["stamp"] = stamp
    doc["epoch"] = "00000000-0000-0000-0000-000000000000"
    memo.write_text(json.dumps(doc))
    assert digests_in_a_new_process(memo, a, write=False) == [sha(a)]
    doc["epoch"] = open("/proc/sys/kernel/random/boot_id").read().strip()
    memo.write_text(json.dumps(doc))
    assert digests_in_a_new_process(memo, a, write=False) == [planted]


def test_the_memo_file_is_never_read_through_a_link_and_odd_names_never_fail_a_check(tmp_path):
    memo = private_memo(tmp_path)
    a = tmp_path / "a.h"
    a.write_bytes(b"one\n")
    odd = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.h")  # not UTF-8: JSON cannot hold the name
    with open(odd, "wb") as f:
        f.write(b"two\n")
    time.sleep(2.1)
    assert digests_in_a_new_process(memo, a, os.fsdecode(odd)) == [sha(a), hashlib.sha256(b"two\n").hexdigest()]
    assert set(json.loads(memo.read_text())["files"]) == {str(a)}  # the other name left out, the rest written
    plant(memo, a, b"planted\n")
    elsewhere = tmp_path / "elsewhere.json"
    os.replace(memo, elsewhere)
    memo.symlink_to(elsewhere)
    assert digests_in_a_new_process(memo, a, write=False) == [sha(a)]


def test_processes_saving_in_turn_keep_each_others_digests(tmp_path):
    # One process reads the memo, another saves a digest in it meanwhile,
    # then the first saves: both digests are in the file.
    memo = private_memo(tmp_path)
    first, second = tmp_path / "first.h", tmp_path / "second.h"
    first.write_text("#define FIRST\n")
    second.write_text("#define SECOND\n")
    time.sleep(2.1)
    script = (f"import subprocess, sys\nfrom progcache import _core\n"
              f"_core.keep_header_digests({str(memo)!r}, True)\n"
              f"_core.file_sha256({str(first)!r})  # reads the memo (none yet), remembers a digest\n"
              f"subprocess.run([sys.executable, '-c', {_KEEPER!r}, {str(memo)!r}, 'write', {str(second)!r}], "
              f"check=True, stdout=subprocess.DEVNULL)\n"
              f"_core.save_header_digests()\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert set(json.loads(memo.read_text())["files"]) == {str(first), str(second)}
