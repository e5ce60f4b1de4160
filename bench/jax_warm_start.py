"""JAX on the CPU: a new machine served by progcache against JAX's own warm
start on one machine, whole processes, interleaved rounds.

Two workloads: an MLP's forward pass and a small transformer's train step
(embedding, two attention blocks, loss, grad and an SGD update, written with
jax.numpy). Each is run once cold to fill the caches; then every round runs,
in turn:

- ``jax-warm``: JAX's own cache, warm, at the path it was filled at;
- ``progcache-new``: progcache's store filled by the cold run, copied to a
  new path for the round, with JAX's directory empty at a new path (what a
  new machine with other paths sees);
- ``cold``: no cache (the floor the caches are judged against).
The new machine's copy is made and synced before a round's runs, and the
order of the three sides turns from one round to the next.

Reported: medians of the whole process (spawn to exit) and of the first
call of the jitted step (trace, lower, cache lookup or compile, run), the
ratio progcache-new / jax-warm of those medians, and the median of each
round's own ratio. JAX's thresholds are set to cache every
program (minimum compile time 0) on both sides.

    .venv/bin/python bench/jax_warm_start.py [--rounds 7] [--workloads mlp,transformer]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
if os.environ.get("PROGCACHE_JAX"):
    import progcache.jax  # noqa: F401  (the variable alone would do it through the autoload hook)
work = sys.argv[1]
key = jax.random.PRNGKey(0)
if work == "mlp":
    sizes = [512, 1024, 1024, 1024, 256]
    ps = [jax.random.normal(jax.random.fold_in(key, i), (a, b)) * 0.02 for i, (a, b) in enumerate(zip(sizes, sizes[1:]))]
    def step(ps, x):
        for w in ps[:-1]:
            x = jax.nn.gelu(x @ w)
        return jnp.mean(x @ ps[-1])
    args = (ps, jnp.ones((64, 512)))
else:
    V, D, H, L, T = 512, 128, 4, 2, 64
    def init(k):
        ks = jax.random.split(k, 2 + 4 * L)
        p = {"emb": jax.random.normal(ks[0], (V, D)) * 0.02, "out": jax.random.normal(ks[1], (D, V)) * 0.02}
        for l in range(L):
            p[f"qkv{l}"] = jax.random.normal(ks[2 + 4 * l], (D, 3 * D)) * 0.02
            p[f"o{l}"] = jax.random.normal(ks[3 + 4 * l], (D, D)) * 0.02
            p[f"f1{l}"] = jax.random.normal(ks[4 + 4 * l], (D, 4 * D)) * 0.02
            p[f"f2{l}"] = jax.random.normal(ks[5 + 4 * l], (4 * D, D)) * 0.02
        return p
    def norm(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    def loss(p, tok):
        x = p["emb"][tok]
        mask = jnp.tril(jnp.ones((T, T), bool))
        for l in range(L):
            q, k, v = jnp.split(norm(x) @ p[f"qkv{l}"], 3, -1)
            q, k, v = (t.reshape(t.shape[0], T, H, D // H) for t in (q, k, v))
            a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(D // H)
            a = jax.nn.softmax(jnp.where(mask, a, -1e9), -1)
            x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(x.shape) @ p[f"o{l}"]
            x = x + jax.nn.gelu(norm(x) @ p[f"f1{l}"]) @ p[f"f2{l}"]
        logits = norm(x) @ p["out"]
        lp = jax.nn.log_softmax(logits[:, :-1])
        return -jnp.mean(jnp.take_along_axis(lp, tok[:, 1:, None], -1))
    def step(p, tok):
        l, g = jax.value_and_grad(loss)(p, tok)
        return l, jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g)
    args = (init(key), jax.random.randint(key, (8, T), 0, V))
t1 = time.perf_counter()
out = jax.jit(step)(*args)
jax.block_until_ready(out)
t2 = time.perf_counter()
print(json.dumps({"step": t2 - t1, "total": t2 - t0}))
'''


def run(env: dict, work: str, child: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, child, work], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    return wall, json.loads(p.stdout.strip().splitlines()[-1])["step"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workloads", default="mlp,transformer", help="comma-separated: mlp, transformer")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="jax-bench-")
    child = os.path.join(tmp, "child.py")
    with open(child, "w") as f:
        f.write(CHILD)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "JAX_"))}
    base["JAX_PLATFORMS"] = "cpu"
    try:
        for work in a.workloads.split(","):
            jax_dir = os.path.join(tmp, f"{work}-jax-warm")
            root = os.path.join(tmp, f"{work}-root")
            run(dict(base, JAX_COMPILATION_CACHE_DIR=jax_dir), work, child)
            run(dict(base, PROGCACHE_JAX="1", PROGCACHE_DIR=root,
                     JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, f"{work}-jax-first")), work, child)
            times: dict[str, list[tuple[float, float]]] = {"jax-warm": [], "progcache-new": [], "cold": []}
            for r in range(a.rounds):
                # The new machine's copy is made, and written back, before
                # any side of the round runs: no side runs beside the copy's
                # writeback. The order of the sides turns each round.
                new_root = os.path.join(tmp, f"machine{r}", "pc-root")
                shutil.copytree(root, new_root, symlinks=True)
                os.sync()
                sides = {
                    "jax-warm": dict(base, JAX_COMPILATION_CACHE_DIR=jax_dir),
                    "progcache-new": dict(base, PROGCACHE_JAX="1", PROGCACHE_DIR=new_root,
                                          JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, f"machine{r}", "jax-empty")),
                    "cold": base,
                }
                order = list(sides)
                order = order[r % 3:] + order[:r % 3]
                for side in order:
                    times[side].append(run(sides[side], work, child))
                shutil.rmtree(os.path.join(tmp, f"machine{r}"))
            med = {k: (statistics.median(w for w, _ in v), statistics.median(s for _, s in v))
                   for k, v in times.items()}
            print(f"{work}: rounds={a.rounds}")
            for k, (w, s) in med.items():
                print(f"  {k:14s} process {w * 1000:8.0f} ms   step {s * 1000:8.1f} ms")
            pw, ps = med["progcache-new"]
            jw, js = med["jax-warm"]
            print(f"  progcache-new / jax-warm: process {pw / jw:.2f} x, step {ps / js:.2f} x")
            # The same ratio round by round (each round's two sides ran
            # minutes apart at most), which a slow spell on the machine
            # moves less than the medians of each side.
            rw = statistics.median(p[0] / j[0] for p, j in zip(times["progcache-new"], times["jax-warm"]))
            rs = statistics.median(p[1] / j[1] for p, j in zip(times["progcache-new"], times["jax-warm"]))
            print(f"  median of the rounds' ratios: process {rw:.3f} x, step {rs:.3f} x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
