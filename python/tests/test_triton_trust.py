"""progcache.triton and the first promise on every way in, against the real
Triton (PyPI), no GPU needed:

- host code (the ``.so`` modules Triton builds with
  ``triton.runtime.build.compile_module_from_src`` and imports) comes only
  from the private store or from signed stores: a module planted in an
  unsigned remote tier or in a group-shared root never runs;
- a TRITON_CACHE_DIR another user could write is not trusted: a forged
  group there is not served;
- an unusable PROGCACHE_DIR or a malformed PROGCACHE_REMOTE costs a
  warning, never the compile;
- PROGCACHE_DISABLE=1 compiles every kernel, whatever is on disk.
"""

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install triton)")

from conftest import chown_tree, shared_dir  # noqa: E402
from test_triton import Env, files_of, k, store_entries  # noqa: E402

# A Python extension module that says which build it is: Triton's own
# helper compiles it with the C compiler and imports it through the cache
# manager's get_file/put, as it does its cuda_utils and launcher modules.
MODULE_SRC = r"""
#include <Python.h>
static PyObject* which(PyObject* self, PyObject* args) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"which", which, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "pcmod", NULL, -1, methods};
PyMODINIT_FUNC PyInit_pcmod(void) { return PyModule_Create(&mod); }
"""

# One process: builds (or is served) the module of MODULE_SRC % 1 and prints
# which build ran and whether Triton built it. With "plant", the bytes
# stored for it are those of MODULE_SRC % 666: an attacker's module under
# the genuine key, in every tier the attacker's configuration writes.
MODULE_CHILD = r"""
import json, os, sys, tempfile
spec = json.loads(sys.argv[1])
os.environ["TRITON_CACHE_MANAGER"] = "progcache.triton:CacheManager"
import triton.runtime.build as b
import progcache.triton as pt
src = spec["src"]
if spec.get("plant"):
    # The attacker's module, built with Triton's own cache manager elsewhere.
    with tempfile.TemporaryDirectory() as d:
        from triton import knobs
        saved_cls, saved_dir = knobs.cache.manager_class, knobs.cache.dir
        import triton.runtime.cache as tc
        knobs.cache.manager_class = tc.FileCacheManager
        knobs.cache.dir = d
        evil = open(b.compile_so_from_src(src % 666, "pcmod"), "rb").read()
        knobs.cache.manager_class, knobs.cache.dir = pt.CacheManager, saved_dir
    real_put = pt._put
    pt._put = lambda key, meta, arts: real_put(key, meta, [(n, evil) for n, _ in arts])
    pt._get = lambda *a, **kw: None  # always builds, so always plants
builds = []
real_build = b._build
b._build = lambda *a, **kw: builds.append(1) or real_build(*a, **kw)
mod = b.compile_module_from_src(src % 1, "pcmod")
pt.reset()  # flushes remote writes
print(json.dumps({"which": mod.which(), "builds": len(builds)}))
"""


def run_module(env, plant=False, expect_ok=True):
    p = subprocess.run([sys.executable, "-W", "always", "-c", MODULE_CHILD,
                        json.dumps({"src": MODULE_SRC, "plant": plant})],
                       env=env.env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def key_file(tmp_path, name="hmac.key"):
    path = tmp_path / name
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return str(path)


# ---------------------------------------------------------------- host code

def test_a_module_planted_in_an_unsigned_remote_tier_never_runs(tmp_path, redis_url):
    attacker = Env(tmp_path, "attacker", PROGCACHE_REMOTE=redis_url)
    assert run_module(attacker, plant=True)[0]["builds"] == 1  # stored under the genuine module's key
    victim = Env(tmp_path, "victim", PROGCACHE_REMOTE=redis_url)
    got, err = run_module(victim)
    # Not read from the remote tier: built here, and the genuine module ran.
    assert got == {"which": 1, "builds": 1}
    assert err.count("host code") == 1, err  # said once
    # The victim's own private store serves its own build to its next process.
    again, _ = run_module(victim)
    assert again == {"which": 1, "builds": 0}


def test_with_signing_the_remote_tier_serves_the_genuine_module_and_refuses_a_planted_one(tmp_path, redis_url):
    key = key_file(tmp_path)
    writer = Env(tmp_path, "writer", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=key)
    assert run_module(writer)[0] == {"which": 1, "builds": 1}
    reader = Env(tmp_path, "reader", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=key)
    assert run_module(reader)[0] == {"which": 1, "builds": 0}  # served, signed and verified
    # An attacker without the key overwrites the remote entry: refused.
    run_module(Env(tmp_path, "attacker", PROGCACHE_REMOTE=redis_url), plant=True)
    fresh = Env(tmp_path, "fresh", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=key)
    assert run_module(fresh)[0] == {"which": 1, "builds": 1}


def test_a_module_planted_in_a_group_shared_root_never_runs(tmp_path):
    root = str(tmp_path / "team-root")
    member = Env(tmp_path, "member", root=root, PROGCACHE_SHARING="group")
    assert run_module(member, plant=True)[0]["builds"] == 1
    assert store_entries(root), "the planted module is in the shared root"
    victim = Env(tmp_path, "victim", root=root, PROGCACHE_SHARING="group")
    got, err = run_module(victim)
    assert got == {"which": 1, "builds": 1}
    assert "PROGCACHE_SHARING=group" in err
    # Signed entries in the same root are served (the rule, not a ban).
    key = key_file(tmp_path)
    signed = Env(tmp_path, "s1", root=str(tmp_path / "signed-root"), PROGCACHE_SHARING="group",
                 PROGCACHE_HMAC_KEY_FILE=key)
    assert run_module(signed)[0] == {"which": 1, "builds": 1}
    other = Env(tmp_path, "s2", root=str(tmp_path / "signed-root"), PROGCACHE_SHARING="group",
                PROGCACHE_HMAC_KEY_FILE=key)
    assert run_module(other)[0] == {"which": 1, "builds": 0}


def test_the_remote_cache_backend_reads_no_host_code_from_an_unsigned_remote(tmp_path, redis_url):
    code = r"""
import json, os, sys
import progcache.triton as pt
b = pt.RemoteCacheBackend("k" * 52)
if sys.argv[1] == "put":
    b.put("pcmod.so", b"\x7fELF\x02\x01\x01" + b"\0" * 60)
    b.put("kernel.json", b'{"name": "k"}')
pt.reset()
print(json.dumps(sorted(pt.RemoteCacheBackend("k" * 52).get(["pcmod.so", "kernel.json"]))))
"""
    a = Env(tmp_path, "a", PROGCACHE_REMOTE=redis_url)
    out = subprocess.run([sys.executable, "-c", code, "put"], env=a.env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    b = Env(tmp_path, "b", PROGCACHE_REMOTE=redis_url)
    out = subprocess.run([sys.executable, "-c", code, "get"], env=b.env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["kernel.json"]


# ---------------------------------------------------------------- TRITON_CACHE_DIR

def _forge(honest_dir, forged_dir, victim_name, other_cubin):
    """A copy of an honest materialised group whose cubin is another
    kernel's, with a stamp that matches the forged files."""
    shutil.copytree(honest_dir, forged_dir)
    cubin = os.path.join(forged_dir, f"{victim_name}.cubin")
    with open(cubin, "wb") as f:
        f.write(open(other_cubin, "rb").read())
    grp = os.path.join(forged_dir, f"__grp__{victim_name}.json")
    stamp = json.load(open(grp))
    children = {}
    for child in stamp["progcache"]["children"]:
        st = os.stat(os.path.join(forged_dir, child))
        children[child] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    stamp["progcache"]["children"] = children
    stamp["child_paths"] = {c: os.path.join(forged_dir, c) for c in stamp["child_paths"]}
    with open(grp, "w") as f:
        json.dump(stamp, f)


@pytest.mark.parametrize("how", ["others-writable", "another-owner"])
def test_a_forged_group_in_a_cache_dir_others_could_write_is_never_served(tmp_path, how, request):
    honest = Env(tmp_path, "honest")
    good = honest.run([k("softmax"), k("matmul")])
    soft, mat = good["kernels"]
    # The victim's TRITON_CACHE_DIR sits in a directory someone else made
    # first (as under a shared temporary directory), holding a forged group.
    shared = shared_dir(tmp_path, how)
    victim = Env(tmp_path, "victim")
    victim.triton_dir = str(shared / "triton")
    os.makedirs(victim.triton_dir)
    forged = os.path.join(victim.triton_dir, os.path.basename(soft["dir"]))
    _forge(soft["dir"], forged, "softmax", os.path.join(mat["dir"], "matmul.cubin"))
    if how == "another-owner":
        chown_tree(victim.triton_dir, request.getfixturevalue("second_uid"))
    p = victim.popen([k("softmax")])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["compiles"] == 1  # compiled, not served from the forged directory
    assert files_of(r)["softmax"] == files_of(good)["softmax"]
    assert not r["kernels"][0]["dir"].startswith(str(shared))  # laid out privately instead
    assert "TRITON_CACHE_DIR" in err, err


def test_a_private_cache_dir_is_still_used_and_served(tmp_path):
    # The check is not a ban: a TRITON_CACHE_DIR of one's own keeps working.
    env = Env(tmp_path, "a")
    assert env.run([k("softmax")])["compiles"] == 1
    again = env.run([k("softmax")])
    # The materialised copy answered: a hit, with no byte read from the store.
    assert again["compiles"] == 0 and again["stats"]["hits"] == 1 and again["stats"]["bytes_read"] == 0
    assert again["kernels"][0]["dir"].startswith(env.triton_dir)


# ---------------------------------------------------------------- a failure is a miss

def _unusable_roots(tmp_path, request):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    open_dir = tmp_path / "open-to-all"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    cases = {"a file": str(f), "others-writable": str(open_dir), "impossible": str(f / "sub"),
             "proc": "/proc/self/progcache"}
    if os.geteuid() == 0:
        other = tmp_path / "someone-elses"
        other.mkdir(mode=0o700)
        os.chown(other, request.getfixturevalue("second_uid"), -1)
        cases["another owner"] = str(other)
    return cases


def test_an_unusable_root_or_remote_costs_a_warning_and_triton_compiles(tmp_path, request):
    own = Env(tmp_path, "own").run([k("vector_add")], manager="triton")
    cases = {name: {"PROGCACHE_DIR": root} for name, root in _unusable_roots(tmp_path, request).items()}
    cases["malformed remote"] = {"PROGCACHE_REMOTE": "redis://[::1"}
    cases["unknown scheme"] = {"PROGCACHE_REMOTE": "gopher://127.0.0.1/"}
    cases["bad size"] = {"PROGCACHE_MAX_SIZE": "10Q"}
    for i, (name, extra) in enumerate(sorted(cases.items())):
        env = Env(tmp_path, f"c{i}", **extra)
        if "PROGCACHE_DIR" in extra:
            env.root = extra["PROGCACHE_DIR"]
        p = env.popen([k("vector_add")])
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, (name, err)
        r = json.loads(out.strip().splitlines()[-1])
        assert r["compiles"] == 1, name
        assert files_of(r) == files_of(own), name
        assert err.count("progcache.triton:") == 1, (name, err)


def test_compile_with_the_default_cache_on_an_unusable_root_warns_and_compiles(tmp_path, request):
    from conftest import have_nvrtc
    if not have_nvrtc():
        pytest.skip("no NVRTC (CUDA toolkit) on this machine")
    code = r"""
import json, warnings
warnings.simplefilter("always")
import progcache
p = progcache.compile('extern "C" __global__ void k(float* x) { x[0] = 1; }', "c++", "ptx", ["-arch=sm_80"],
                      cache=True)
q = progcache.compile('extern "C" __global__ void k(float* x) { x[0] = 1; }', "c++", "ptx", ["-arch=sm_80"])
print(json.dumps({"same": p.code == q.code, "from_cache": p.from_cache}))
"""
    cases = {name: {"PROGCACHE_DIR": root} for name, root in _unusable_roots(tmp_path, request).items()}
    cases["bad size"] = {"PROGCACHE_DIR": str(tmp_path / "fine"), "PROGCACHE_MAX_SIZE": "10Q"}
    for name, extra in sorted(cases.items()):
        e = {kk: v for kk, v in os.environ.items() if not kk.startswith("PROGCACHE_")}
        e.update(extra)
        out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
        assert out.returncode == 0, (name, out.stderr)
        assert json.loads(out.stdout.strip().splitlines()[-1]) == {"same": True, "from_cache": False}, name
        assert out.stderr.count("RuntimeWarning") == 1, (name, out.stderr)


# ---------------------------------------------------------------- the off switch

def test_disable_compiles_every_kernel_and_leaves_the_cache_dir_alone(tmp_path):
    env = Env(tmp_path, "a")
    assert env.run([k("softmax")])["compiles"] == 1
    assert env.run([k("softmax")])["compiles"] == 0  # materialised: served from TRITON_CACHE_DIR

    def snapshot():
        out = {}
        for d, _, files in os.walk(env.triton_dir):
            for f in files:
                st = os.stat(os.path.join(d, f))
                out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return out

    before = snapshot()
    off = Env(tmp_path, "a", PROGCACHE_DISABLE="1")
    r = off.run([k("softmax")])
    assert r["compiles"] == 1  # the off switch escapes whatever is on disk
    assert not r["kernels"][0]["dir"].startswith(env.triton_dir)
    assert snapshot() == before


def test_disable_holds_when_another_setting_is_malformed(tmp_path):
    env = Env(tmp_path, "a")
    assert env.run([k("softmax")])["compiles"] == 1
    for bad in ({"PROGCACHE_MAX_SIZE": "lots"}, {"PROGCACHE_REMOTE": "ftp://x"}, {"PROGCACHE_SHARING": "everyone"}):
        # Off, and a setting that does not parse: compiled, never the copy on disk.
        assert Env(tmp_path, "a", PROGCACHE_DISABLE="1", **bad).run([k("softmax")])["compiles"] == 1, bad
        # Not off, a setting that does not parse: the cache is not used at all.
        assert Env(tmp_path, "a", **bad).run([k("softmax")])["compiles"] == 1, bad


RETRY_CHILD = r"""
import json, os, sys, time
os.environ["TRITON_CACHE_MANAGER"] = "progcache.triton:CacheManager"
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def bad(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK > 1000, "BLOCK too small")
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)

kept = []  # as a notebook (sys.last_value), a future or a framework's error list keeps them
for attempt in range(3):
    try:
        triton.compile(ASTSource(bad, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64}),
                       target=GPUTarget("cuda", 90, 32))
    except Exception as e:
        kept.append(e)
print(json.dumps({"failures": len(kept)}))
"""


def test_a_compile_that_raised_and_is_tried_again_in_the_same_thread_never_waits_on_itself(tmp_path):
    # Each failed attempt's manager stays alive with the kept exception and
    # holds the kernel's lock; the next attempt must not wait for it (it
    # waited the whole lock timeout, 600 s).
    child = tmp_path / "retry_child.py"  # Triton reads a kernel's source from its file
    child.write_text(RETRY_CHILD)
    p = subprocess.run([sys.executable, str(child)], env=Env(tmp_path, "a").env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"failures": 3}
