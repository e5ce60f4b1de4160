"""progcache.jax against the real jax and jaxlib (PyPI) on the CPU: programs
are jitted in fresh processes (python/tests/jax_child.py), which count the
XLA compiles JAX ran; a served process runs none."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/test.sh installs it)")

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "jax_child.py")
PROGRAMS = [[8, 2.0], [16, 2.0], [24, 0.5]]


def run(tmp_path, root, *, jax_dir=None, progcache=True, env=None, **spec):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "JAX_"))}
    e.update({"PROGCACHE_DIR": str(root), "JAX_PLATFORMS": "cpu", "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    if jax_dir is not None:
        e["JAX_COMPILATION_CACHE_DIR"] = str(jax_dir)
    if progcache:
        e["PROGCACHE_JAX"] = "1"
    e.update(env or {})
    spec.setdefault("programs", PROGRAMS)
    p = subprocess.run([sys.executable, CHILD, json.dumps(spec)], env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["stderr"] = p.stderr
    return out


def oracle(tmp_path, programs=PROGRAMS):
    """What the same programs give with no cache at all."""
    out = run(tmp_path, tmp_path / "oracle-root", progcache=True, env={"PROGCACHE_DISABLE": "1"},
              programs=programs)
    assert out["stats"].get("hits", 0) == 0
    return out["results"]


def entries(root):
    out = []
    for dirpath, dirnames, files in os.walk(os.path.join(str(root), "jax")):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        out += [os.path.join(dirpath, f) for f in files if len(f) == 62]
    return sorted(out)


def test_a_second_process_is_served_and_equals_a_fresh_compile(tmp_path):
    root = tmp_path / "root"
    first = run(tmp_path, root)
    assert first["enabled"] is True
    assert first["backend_compiles"] > 0 and first["stats"]["compiled"] > 0
    stored = entries(root)
    assert len(stored) >= len(PROGRAMS)
    second = run(tmp_path, root)
    assert second["backend_compiles"] == 0, second
    assert second["stats"]["hits"] >= len(PROGRAMS) and second["stats"]["misses"] == 0
    assert second["results"] == first["results"] == oracle(tmp_path)
    # progcache set JAX's directory (it had none) under the cache root.
    assert second["jax_dir"] == os.path.join(str(root), "jax-xla")


def test_off_compiles_everything_and_stores_nothing(tmp_path):
    root = tmp_path / "root"
    for _ in range(2):
        out = run(tmp_path, root, env={"PROGCACHE_DISABLE": "1"}, jax_dir=tmp_path / "jaxdir")
        assert out["backend_compiles"] > 0
    assert entries(root) == []
    # JAX's own files are not written either: PROGCACHE_DISABLE is no cache.
    assert not os.path.exists(tmp_path / "jaxdir") or not any(
        f.endswith("-cache") for f in os.listdir(tmp_path / "jaxdir"))


def test_a_new_machine_at_other_paths_is_served(tmp_path):
    """A warm root copied to another path, and JAX's directory empty and at
    another path: served, without one XLA compile. JAX's key alone holds its
    directory's path (the autotune sub-cache option) and misses."""
    first = run(tmp_path, tmp_path / "root-a", jax_dir=tmp_path / "jax-a")
    assert first["backend_compiles"] > 0
    shutil.copytree(tmp_path / "root-a", tmp_path / "elsewhere" / "root-b", symlinks=True)
    shutil.rmtree(tmp_path / "root-a")
    second = run(tmp_path, tmp_path / "elsewhere" / "root-b", jax_dir=tmp_path / "elsewhere" / "jax-b")
    assert second["backend_compiles"] == 0, second
    assert second["results"] == first["results"]


def test_a_host_processor_of_another_kind_is_not_served(tmp_path):
    """An executable XLA built for one processor's features is not served
    to a process on another (JAX's key holds no processor)."""
    root = tmp_path / "root"
    run(tmp_path, root)
    other = run(tmp_path, root, cpu="0" * 32)
    assert other["backend_compiles"] > 0 and other["stats"]["hits"] == 0
    assert other["results"] == oracle(tmp_path)


def test_an_edited_function_recompiles(tmp_path):
    root = tmp_path / "root"
    run(tmp_path, root, programs=[[8, 2.0]])
    edited = run(tmp_path, root, programs=[[8, 3.0]])
    assert edited["stats"]["compiled"] >= 1
    assert edited["results"] == oracle(tmp_path, [[8, 3.0]])
    assert edited["results"] != run(tmp_path, root, programs=[[8, 2.0]])["results"]


@pytest.mark.parametrize("damage", ["torn", "flipped", "empty"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    root = tmp_path / "root"
    run(tmp_path, root, programs=[[8, 2.0]])
    for path in entries(root):
        data = open(path, "rb").read()
        if damage == "torn":
            data = data[:len(data) // 2]
        elif damage == "flipped":
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        else:
            data = b""
        os.chmod(path, 0o600)
        with open(path, "wb") as f:
            f.write(data)
    again = run(tmp_path, root, programs=[[8, 2.0]])
    assert again["backend_compiles"] > 0 and again["stats"]["hits"] == 0
    assert again["results"] == oracle(tmp_path, [[8, 2.0]])
    assert "Error reading persistent compilation cache" not in again["stderr"]
    served = run(tmp_path, root, programs=[[8, 2.0]])
    assert served["backend_compiles"] == 0, served


def test_a_planted_entry_is_a_miss_under_signing(tmp_path):
    """With entries signed, an entry written by someone without the key (a
    serialized executable is code) is never deserialized: a miss, then
    replaced by a signed one."""
    root = tmp_path / "root"
    key_a, key_b = tmp_path / "a.key", tmp_path / "b.key"
    key_a.write_bytes(b"a" * 32)
    key_b.write_bytes(b"b" * 32)
    for k in (key_a, key_b):
        os.chmod(k, 0o600)
    run(tmp_path, root, programs=[[8, 2.0]], env={"PROGCACHE_HMAC_KEY_FILE": str(key_a)})
    planted = run(tmp_path, root, programs=[[8, 2.0]], env={"PROGCACHE_HMAC_KEY_FILE": str(key_b)})
    assert planted["backend_compiles"] > 0 and planted["stats"]["hits"] == 0
    served = run(tmp_path, root, programs=[[8, 2.0]], env={"PROGCACHE_HMAC_KEY_FILE": str(key_b)})
    assert served["backend_compiles"] == 0, served


def test_two_processes_compile_each_program_once(tmp_path):
    root = tmp_path / "root"
    go = tmp_path / "go"
    programs = [[w, 1.5] for w in (8, 12, 16, 20, 24, 28)]
    outs = [None, None]

    def child(i):
        outs[i] = run(tmp_path, root, programs=programs, wait_for=str(go))

    threads = [threading.Thread(target=child, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    # Both children are past JAX's import (a second or more) before they go.
    import time
    time.sleep(6)
    go.write_text("")
    for t in threads:
        t.join()
    compiled = [o["stats"]["compiled"] for o in outs]
    alone = run(tmp_path, tmp_path / "alone", programs=programs)["stats"]["compiled"]
    # Between them, the two compiled what one process alone compiles.
    assert sum(compiled) == alone, (compiled, alone, outs)
    assert outs[0]["results"] == outs[1]["results"]


def test_the_autoload_switch_alone_serves_a_process_that_never_imports_progcache(tmp_path):
    root = tmp_path / "root"
    run(tmp_path, root, **{"import": False})
    second = run(tmp_path, root, **{"import": False})
    assert second["backend_compiles"] == 0, second
    assert "progcache.jax" in json.dumps(second) or second["stats"]["hits"] > 0


def test_a_jax_without_the_hook_warns_once_and_keeps_its_own_cache(tmp_path):
    root = tmp_path / "root"
    out = run(tmp_path, root, progcache=False, break_hook=True, jax_dir=tmp_path / "jaxdir")
    assert out["enabled"] is False
    assert len([w for w in out["warnings"] if "JAX keeps its own cache" in w]) == 1, out["warnings"]
    assert out["results"] == oracle(tmp_path)
    assert entries(root) == []
    # JAX's own cache was used: its directory holds its entries.
    assert any(f.endswith("-cache") for f in os.listdir(tmp_path / "jaxdir"))


def test_stats_shows_the_store_and_jax_thresholds(tmp_path):
    from progcache.__main__ import command_path

    cmd = command_path()
    if cmd is None:
        pytest.skip("progcache is not installed with its command")
    root = tmp_path / "root"
    run(tmp_path, root, min_compile_time=0.0)
    e = {k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_")}
    e["PROGCACHE_DIR"] = str(root)
    text = subprocess.run([cmd, "stats"], env=e, capture_output=True, text=True, check=True).stdout
    assert "jax store" in text
    assert "jax_persistent_cache_min_compile_time_secs" in text and "at least 0 s" in text
    j = json.loads(subprocess.run([cmd, "stats", "--json"], env=e, capture_output=True, text=True,
                                  check=True).stdout)
    jax_store = [c for c in j["companions"] if c["name"] == "jax"][0]
    assert jax_store["entries"] >= len(PROGRAMS)
    assert any("min_compile_time" in n for n in jax_store["framework_notes"])


def test_two_roots_share_through_the_remote_tier_only_when_signed(tmp_path, redis_url):
    """A serialized executable is code: another machine is served it from
    Redis when entries are signed; unsigned, the remote tier is not used
    (said once) and each machine compiles."""
    key = tmp_path / "hmac.key"
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o600)
    signed = {"PROGCACHE_REMOTE": redis_url + "/0?prefix=signed", "PROGCACHE_HMAC_KEY_FILE": str(key)}
    first = run(tmp_path, tmp_path / "machine-a", env=signed)
    assert first["backend_compiles"] > 0
    served = run(tmp_path, tmp_path / "machine-b", env=signed)
    assert served["backend_compiles"] == 0, served
    assert served["results"] == first["results"]
    unsigned = {"PROGCACHE_REMOTE": redis_url + "/0?prefix=unsigned"}
    run(tmp_path, tmp_path / "machine-c", env=unsigned)
    other = run(tmp_path, tmp_path / "machine-d", env=unsigned)
    assert other["backend_compiles"] > 0
    assert "PROGCACHE_REMOTE is not used for JAX executables" in other["stderr"] + "".join(other["warnings"])


def _popen(tmp_path, root, env=None, **spec):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "JAX_"))}
    e.update({"PROGCACHE_DIR": str(root), "JAX_PLATFORMS": "cpu", "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
              "PROGCACHE_JAX": "1"})
    e.update(env or {})
    spec.setdefault("programs", [[8, 2.0]])
    return subprocess.Popen([sys.executable, CHILD, json.dumps(spec)], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_a_lock(root, proc, seconds=120):
    import glob
    import time
    for _ in range(int(seconds * 20)):
        if glob.glob(os.path.join(str(root), "jax", "locks", "*.lock")):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the first process never took a lock")


def test_a_wait_for_another_compile_ends_at_the_lock_timeout_or_at_ctrl_c(tmp_path):
    """A process whose compile hangs holding a program's lock costs another
    at most PROGCACHE_LOCK_TIMEOUT, after which it compiles; and a wait is
    ended by Ctrl-C as a compile is."""
    import signal
    import time
    root = tmp_path / "root"
    holder = _popen(tmp_path, root, slow_compile_s=120)
    try:
        _wait_for_a_lock(root, holder)
        waiter = _popen(tmp_path, root)
        time.sleep(8)  # past JAX's import, into the wait
        assert waiter.poll() is None, waiter.communicate()
        waiter.send_signal(signal.SIGINT)
        t1 = time.monotonic()
        waiter.communicate(timeout=30)
        assert time.monotonic() - t1 < 10 and waiter.returncode != 0
        t0 = time.monotonic()
        out = run(tmp_path, root, programs=[[8, 2.0]], env={"PROGCACHE_LOCK_TIMEOUT": "2"})
        assert time.monotonic() - t0 < 60
        assert out["stats"]["compiled"] >= 1 and out["results"] == oracle(tmp_path, [[8, 2.0]])
    finally:
        holder.kill()
        holder.communicate()


def test_a_group_root_without_signing_stores_and_waits_for_nothing(tmp_path):
    """Where no executable may be read (a group-shared root, unsigned), none
    is written and no process waits on another's compile."""
    root = tmp_path / "root"
    for _ in range(2):
        out = run(tmp_path, root, env={"PROGCACHE_SHARING": "group"})
        assert out["backend_compiles"] > 0
    assert entries(root) == []
    assert not os.path.isdir(os.path.join(str(root), "jax", "locks")) or \
        os.listdir(os.path.join(str(root), "jax", "locks")) == []


def test_disable_gives_back_only_the_directory_it_set(tmp_path, monkeypatch):
    import jax

    import progcache.jax as pj
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        assert pj.enable()
        assert jax.config.jax_compilation_cache_dir.endswith("jax-xla")
        mine = str(tmp_path / "mine")
        jax.config.update("jax_compilation_cache_dir", mine)
        pj.disable()
        assert jax.config.jax_compilation_cache_dir == mine
        assert pj.enable()  # a directory set: kept
        assert jax.config.jax_compilation_cache_dir == mine
        pj.disable()
        assert jax.config.jax_compilation_cache_dir == mine
    finally:
        pj.disable()
        pj.reset()
        jax.config.update("jax_compilation_cache_dir", before)


def gpu_devices_for_jax() -> str:
    """Why JAX cannot jit on a GPU here (empty where it can): no NVIDIA
    device node, or a jax without its CUDA plugin (jax[cuda13])."""
    if not os.path.exists("/dev/nvidiactl"):
        return "no NVIDIA GPU on this machine (/dev/nvidiactl is absent)"
    e = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    p = subprocess.run([sys.executable, "-c", "import jax; print(len(jax.devices('gpu')))"], env=e,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not p.stdout.strip().isdigit() or int(p.stdout.strip()) == 0:
        return "jax sees no GPU (install jax[cuda13]): " + p.stderr.strip()[-300:]
    return ""


def test_on_a_gpu_a_jit_is_served_to_a_second_process(tmp_path):
    """On a GPU (jax[cuda13]): a second process is served the GPU
    executables without one XLA compile, and computes what a process with
    no cache computes."""
    why = gpu_devices_for_jax()
    if why:
        pytest.skip(why)
    gpu = {"JAX_PLATFORMS": "cuda"}
    root = tmp_path / "root"
    first = run(tmp_path, root, env=gpu)
    assert first["backend_compiles"] > 0 and first["stats"]["compiled"] > 0
    second = run(tmp_path, root, env=gpu)
    assert second["backend_compiles"] == 0, second
    assert second["stats"]["hits"] >= len(PROGRAMS)
    fresh = run(tmp_path, tmp_path / "oracle-root", env=dict(gpu, PROGCACHE_DISABLE="1"))
    assert second["results"] == first["results"] == fresh["results"]
