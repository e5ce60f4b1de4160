"""One "machine" for progcache.torch's tests (python/tests/test_torch.py): a
progcache root and the directories torch writes, a child process per
compile (python/tests/torch_child.py), and what a cold start and a warm
start from progcache look like in a child's report."""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "torch_child.py")


class Machine:
    """A progcache root and the directories torch writes (Inductor's cache,
    Triton's, the temporary directory that holds Inductor's precompiled
    headers), each fresh unless shared on purpose."""

    def __init__(self, tmp_path, name="a", root=None, dirs=None, **extra):
        self.root = root or str(tmp_path / f"root-{name}")
        base = dirs or str(tmp_path / f"dirs-{name}")
        self.inductor = os.path.join(base, "inductor")
        self.triton = os.path.join(base, "triton")
        self.tmp = os.path.join(base, "tmp")
        self.extra = extra

    def env(self, **more):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("TORCH", "TRITON_", "PROGCACHE_"))}
        os.makedirs(self.tmp, exist_ok=True)
        e.update({"TORCHINDUCTOR_CACHE_DIR": self.inductor, "TRITON_CACHE_DIR": self.triton, "TMPDIR": self.tmp,
                  "PROGCACHE_DIR": self.root, "PROGCACHE_TORCH": "1"})
        e.update(self.extra)
        e.update(more)
        return e

    def wipe(self):
        """What a new machine has of torch's own caches: nothing."""
        for d in (self.inductor, self.triton, self.tmp):
            shutil.rmtree(d, ignore_errors=True)

    def run(self, timeout=900, **spec):
        env_more = spec.pop("env", {})
        p = subprocess.run([sys.executable, CHILD, json.dumps(spec)], env=self.env(**env_more), capture_output=True,
                           text=True, timeout=timeout)
        assert p.returncode == 0, p.stderr[-4000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        out["stderr"] = p.stderr
        return out

    def libraries(self):
        """{path: bytes} of every shared library and precompiled header
        torch has in its directories."""
        found = {}
        for base in (self.inductor, self.tmp):
            for dirpath, _, files in os.walk(base):
                for f in files:
                    if f.endswith((".so", ".gch")):
                        p = os.path.join(dirpath, f)
                        with open(p, "rb") as fh:
                            found[p] = fh.read()
        return found


def cold(m):
    got = m.run()
    assert got["inductor"].get("fxgraph_cache_miss") == 1, got
    assert got["progcache"]["cpp_compiled"] > 0 and got["progcache"]["cpp_stored"] > 0, got
    return got


def served(got):
    """Whether a run was a warm start from progcache: no Inductor compile,
    no C++ compile, the graph and the AOTAutograd entry served."""
    return (got["inductor"].get("fxgraph_cache_hit") == 1 and not got["inductor"].get("fxgraph_cache_miss")
            and got["aot"].get("autograd_cache_hit") == 1 and got["progcache"]["cpp_compiled"] == 0
            and got["progcache"]["cpp_served"] > 0)
