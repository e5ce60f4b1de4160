"""One process of a progcache.jax test (python/tests/test_jax.py): jits the
programs its spec names, runs them on the CPU, and prints one JSON line with
their results, JAX's compile count and progcache.jax's counters.

spec (argv[1], JSON): programs (a list of [width, const]), min_compile_time
(JAX's threshold, default 0), import (whether the child imports progcache.jax
itself; without, only PROGCACHE_JAX and the autoload hook act), break_hook
(change how JAX's compile after a miss is called, before progcache.jax is imported), cpu (a host
processor identity to report instead of this one's), wait_for (a file to wait
for before compiling: two children start their compiles together),
slow_compile_s (JAX's compile after a miss sleeps this long first)."""

import json
import os
import sys
import time
import warnings

spec = json.loads(sys.argv[1])
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_persistent_cache_min_compile_time_secs", float(spec.get("min_compile_time", 0)))
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

if spec.get("break_hook"):
    # A JAX whose compile after a miss is called another way (as a later
    # version may): JAX itself still works.
    from jax._src import compiler
    _jax_own = compiler._compile_and_write_cache

    def _compile_and_write_cache(backend, computation, devices, *rest):
        return _jax_own(backend, computation, devices, *rest)

    compiler._compile_and_write_cache = _compile_and_write_cache

caught = []
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    enabled = None
    if spec.get("import", True):
        import progcache.jax as pj  # noqa: E402
        if spec.get("cpu"):
            pj._cpu_identity[:] = [spec["cpu"]]
        enabled = pj.enable()
        if spec.get("slow_compile_s"):
            # JAX's compile after a miss takes this long (progcache's lock is
            # held meanwhile).
            _own = pj._hooks["_compile_and_write_cache"]

            def _slow(*a, _own=_own):
                time.sleep(float(spec["slow_compile_s"]))
                return _own(*a)

            pj._hooks["_compile_and_write_cache"] = _slow
    caught = [str(x.message) for x in w if "progcache" in str(x.message)]

# JAX's own count of the XLA compiles this process ran.
from jax._src import compiler as _jc  # noqa: E402

backend_compiles = [0]
_orig = _jc.backend_compile_and_load


def _counting(*a, **k):
    backend_compiles[0] += 1
    return _orig(*a, **k)


_jc.backend_compile_and_load = _counting

if spec.get("wait_for"):
    while not os.path.exists(spec["wait_for"]):
        time.sleep(0.005)

results = []
for width, const in spec.get("programs", [[8, 2.0]]):
    def f(x, w, const=const):
        h = x
        for _ in range(6):
            h = jnp.tanh(h @ w) * const + jnp.sin(h)
        return jnp.sum(h * h)

    x = jnp.arange(width * width, dtype=jnp.float32).reshape(width, width) / (width * width)
    w_ = jnp.eye(width, dtype=jnp.float32) * 0.5
    results.append(float(jax.jit(f)(x, w_)))

out = {"results": results, "backend_compiles": backend_compiles[0], "enabled": enabled, "warnings": caught}
if "progcache.jax" in sys.modules:
    import progcache.jax as pj  # noqa: E402
    out["stats"] = {k: v for k, v in pj.stats().items() if isinstance(v, (int, float))}
    out["enabled"] = pj.enabled()
    out["jax_dir"] = jax.config.jax_compilation_cache_dir
print(json.dumps(out))
