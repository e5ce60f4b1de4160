#!/usr/bin/env python3
"""Python hit latency: progcache's caches against cuda.core's own
InMemoryProgramCache and FileStreamProgramCache (cuda-core from PyPI), same
payloads, same run, medians of 15 alternating repetitions. Prints ratios against the
targets (memory >= 3x at every size; file >= 3x at 4 and 64 KiB, >= 1.2x at
1 MiB), and progcache's file hit against two floors timed in the same run: a
bare read of a plain file of the same size (the floor of any file cache, with
no checksum) and that read plus the XXH3-128 every hit verifies (the floor of
any verified one). "cuda.core/verified floor" is the most any cache that
checks every byte could lead cuda.core by on this machine. "phase" is where
a file hit's bytes started modulo 32 in this run (0: on the fast path).

usage: python3 bench/python_hits.py      (needs: pip install . "cuda-core[cu13]")
"""
import ctypes
import hashlib
import os
import statistics
import sys
import tempfile
import timeit

import progcache

try:
    from cuda.core.utils import FileStreamProgramCache as CoreFile
    from cuda.core.utils import InMemoryProgramCache as CoreMemory
except Exception as e:  # pragma: no cover
    sys.exit(f"cuda.core is needed for the comparison: {e}")


def paired_median_us(fa, fb, number, repeat=15):
    """Alternates the two measurements so both see the same machine noise."""
    a, b = [], []
    for _ in range(repeat):
        a.append(timeit.timeit(fa, number=number) / number * 1e6)
        b.append(timeit.timeit(fb, number=number) / number * 1e6)
    return statistics.median(a), statistics.median(b)


def read_floor(path: str, size: int):
    """A bare read of a plain file of the same size into a new bytes: what
    any file cache pays at least, with no checks at all."""
    def f():
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, size)
        finally:
            os.close(fd)
    return f


def verified_floor(path: str, size: int):
    """The bare read plus the checksum progcache verifies on every hit (its
    own XXH3-128 build), over the bytes read."""
    read, checksum = read_floor(path, size), progcache._core.entry_checksum
    return lambda: checksum(read())


# The key every cache is read with: a 32-byte SHA-256 digest, the kind of
# key cuda.core's Program.compile(cache=) passes (make_program_cache_key).
# progcache takes 32 bytes as the key itself; a short text key would be
# hashed first (about 0.3 us), which no compile through a cache pays.
KEY = hashlib.sha256(b"a program").digest()


def phase(data: bytes) -> int:
    """Where a hit's bytes start modulo 32. An entry's payload starts on a
    multiple of 64 in its file, so 0 means the copy and the checksum ran on
    whole 32-byte units (docs/benchmarks.md, "Payloads on a cache line")."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value % 32


def main() -> int:
    print(f"{'payload':>8} {'memory: progcache':>18} {'cuda.core':>10} {'ratio':>6}   "
          f"{'file: progcache':>16} {'cuda.core':>10} {'ratio':>6} {'target':>7}   {'bare read':>10} "
          f"{'progcache/bare':>14} {'read+XXH3':>10} {'progcache/that':>14} {'cuda.core/that':>14} {'phase':>5}")
    for size, target_file in ((4 << 10, 3.0), (64 << 10, 3.0), (1 << 20, 1.2)):
        payload = os.urandom(size)
        pm, cm = progcache.InMemoryProgramCache(), CoreMemory()
        pm[KEY] = payload
        cm[KEY] = payload
        pf = progcache.FileStreamProgramCache(tempfile.mkdtemp())
        cf = CoreFile(tempfile.mkdtemp())
        pf[KEY] = payload
        cf[KEY] = payload
        plain = os.path.join(tempfile.mkdtemp(), "plain")
        with open(plain, "wb") as f:
            f.write(payload)
        n = 2000 if size < (1 << 20) else 300
        a, b = paired_median_us(lambda: pm[KEY], lambda: cm[KEY], 20000)
        c, d = paired_median_us(lambda: pf[KEY], lambda: cf[KEY], n)
        floor, vfloor = paired_median_us(read_floor(plain, size), verified_floor(plain, size), n)
        mem_ok, file_ok = b / a >= 3.0, d / c >= target_file
        print(f"{size >> 10:>5} KiB {a:>15.3f} us {b:>7.3f} us {b / a:>5.1f}x   {c:>13.1f} us {d:>7.1f} us "
              f"{d / c:>5.1f}x {'>= ' + format(target_file, '.1f'):>7}{'' if mem_ok and file_ok else ' MISSED'}"
              f"   {floor:>7.1f} us {c / floor:>13.2f}x {vfloor:>7.1f} us {c / vfloor:>13.2f}x {d / vfloor:>13.2f}x"
              f" {phase(pf[KEY]):>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
