"""Python reads progcache's configuration through the library, as the CLI
does: every PROGCACHE_* variable means the same in both front ends."""
import os
import shutil
import socket
import subprocess
import time

import pytest

import progcache
from conftest import requires_nvrtc
from progcache import CacheEntry, CacheKey, CubinCache, FileStreamProgramCache, KernelCache


def test_disable_bypasses_every_cache_and_never_touches_the_root(tmp_path, monkeypatch):
    root = tmp_path / "root"
    monkeypatch.setenv("PROGCACHE_DIR", str(root))
    monkeypatch.setenv("PROGCACHE_DISABLE", "1")
    c = FileStreamProgramCache()
    c["k"] = b"v"
    assert c.get("k") is None and len(c) == 0
    with pytest.raises(KeyError):
        c["k"]
    t = progcache.TieredProgramCache()
    t["k"] = b"v"
    assert t.get("k") is None
    key = CacheKey("f", {}, [], "sm_90")
    cc = CubinCache()
    cc.put(CacheEntry(key, "ptx", b"\x7fELF"))
    assert cc.get(key) is None and key not in cc
    kc = KernelCache()
    for _ in range(2):
        assert not kc.cached(lambda: {"k.cubin": b"x"}).from_cache
    assert kc.builds == 2
    assert not root.exists(), "a disabled cache wrote into its root"


@requires_nvrtc
def test_disable_makes_compile_uncached(tmp_path, monkeypatch):
    root = tmp_path / "root"
    monkeypatch.setenv("PROGCACHE_DIR", str(root))
    monkeypatch.setenv("PROGCACHE_DISABLE", "yes")
    src = 'extern "C" __global__ void k(int* x) { x[0] = 7; }'
    before = progcache.compile_stats()["compiles"]
    for _ in range(2):
        r = progcache.compile(src, "c++", "cubin", ["-arch=sm_80"], cache=True)
        assert not r.from_cache
    assert progcache.compile_stats()["compiles"] - before == 2
    assert not root.exists()


def test_caps_come_from_the_environment_unless_given(tmp_path, monkeypatch):
    monkeypatch.setenv("PROGCACHE_MAX_SIZE", "3M")
    assert FileStreamProgramCache(tmp_path / "a").max_size_bytes == 3 * 1024 * 1024
    assert FileStreamProgramCache(tmp_path / "b", max_size_bytes=None).max_size_bytes is None  # explicit: no cap
    assert FileStreamProgramCache(tmp_path / "c", max_size_bytes=4096).max_size_bytes == 4096
    assert progcache.TieredProgramCache(tmp_path / "d").max_size_bytes == 3 * 1024 * 1024
    monkeypatch.delenv("PROGCACHE_MAX_SIZE")
    assert FileStreamProgramCache(tmp_path / "e").max_size_bytes is None  # cuda.core's default
    monkeypatch.setenv("PROGCACHE_MAX_ENTRIES", "5")
    c = FileStreamProgramCache(tmp_path / "f")
    for i in range(20):
        c[str(i)] = b"x" * 100
    files = [p for p in (tmp_path / "f").rglob("*") if p.is_file() and len(p.name) == 62]
    assert len(files) <= 5 and len(c) == len(files)


def test_a_bad_setting_is_an_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("PROGCACHE_MAX_SIZE", "10Q")
    with pytest.raises(ValueError, match="PROGCACHE_MAX_SIZE"):
        FileStreamProgramCache(tmp_path / "a")
    monkeypatch.delenv("PROGCACHE_MAX_SIZE")
    monkeypatch.setenv("PROGCACHE_DURABILITY", "sometimes")
    with pytest.raises(ValueError, match="PROGCACHE_DURABILITY"):
        FileStreamProgramCache(tmp_path / "b")


def _settings_file(path, text):
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_settings_files_reach_the_python_caches(tmp_path, monkeypatch):
    """The user's file and the root's file are read by the library, as by
    the CLI: the root's cap wins over the user's, the environment over both."""
    user = _settings_file(tmp_path / "xdg-config" / "progcache" / "progcache.conf", "compression = 4\nmax_size = 5M\n")
    root = _settings_file(tmp_path / "default-root" / "progcache.conf", "max_size = 3M\n")
    cfg = progcache._core.resolve_config()
    assert cfg["compression_level"] == 4 and cfg["sources"]["PROGCACHE_COMPRESSION"] == f"{user}:1"
    assert cfg["max_size_bytes"] == 3 * 1024 * 1024 and cfg["sources"]["PROGCACHE_MAX_SIZE"] == f"{root}:1"
    assert FileStreamProgramCache().max_size_bytes == 3 * 1024 * 1024
    # A cache in a directory of its own reads that directory's file, as
    # `progcache --dir` does, and the user's file otherwise: never the
    # configured root's.
    assert FileStreamProgramCache(tmp_path / "a").max_size_bytes == 5 * 1024 * 1024
    _settings_file(tmp_path / "b" / "progcache.conf", "max_size = 2M\n")
    (tmp_path / "b").chmod(0o700)
    assert FileStreamProgramCache(tmp_path / "b").max_size_bytes == 2 * 1024 * 1024
    monkeypatch.setenv("PROGCACHE_MAX_SIZE", "1M")
    assert FileStreamProgramCache(tmp_path / "c").max_size_bytes == 1024 * 1024


def test_a_settings_file_that_cannot_be_used_is_a_warning_and_the_defaults(tmp_path):
    """A typo in a settings file never takes the cache down from Python: one
    warning naming the file and line, then the defaults."""
    user = _settings_file(tmp_path / "xdg-config" / "progcache" / "progcache.conf", "compression = 4\nmax_size = 5\n")
    with pytest.warns(RuntimeWarning, match=f"{user}:2: max_size '5' has no unit"):
        cache = FileStreamProgramCache(tmp_path / "a")
    assert cache.max_size_bytes is None  # as if no file: cuda.core's default
    cache["k"] = b"still a cache"
    assert cache["k"] == b"still a cache"
    with pytest.warns(RuntimeWarning, match="the file is ignored"):
        assert progcache._core.resolve_config()["compression_level"] == 0
    user.chmod(0o666)
    with pytest.warns(RuntimeWarning, match="is writable by other users"):
        progcache._core.resolve_config()


def test_hmac_key_bytes_are_used_as_they_are(tmp_path, monkeypatch):
    """A key file holding non-ASCII bytes signs entries the CLI can read."""
    key_file = tmp_path / "k.key"
    key_file.write_bytes(bytes(range(200, 232)))
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key_file))
    c = FileStreamProgramCache(tmp_path / "c")
    c["k"] = b"signed"
    here = os.path.dirname(os.path.abspath(__file__))
    cli = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(here, "..", "..", "build", "progcache"))
    if not os.access(cli, os.X_OK):
        pytest.skip("the progcache CLI is not built (set PROGCACHE_CLI)")
    got = subprocess.run([cli, "--dir", str(tmp_path / "c"), "get", "k", "-o", "-"], capture_output=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"signed"


@pytest.fixture
def redis_with_password(tmp_path):
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        pytest.skip("redis-server not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--requirepass", "s3cret-pw", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                break
        except OSError:
            time.sleep(0.02)
    time.sleep(0.1)
    yield f"redis://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def test_remote_password_file_reaches_the_python_caches(tmp_path, monkeypatch, redis_with_password):
    if not progcache._core.HAVE_REDIS:
        pytest.skip("built without the Redis tier")
    pw = tmp_path / "pw"
    pw.write_text("s3cret-pw\n")
    monkeypatch.setenv("PROGCACHE_REMOTE_PASSWORD_FILE", str(pw))
    r = progcache.RedisProgramCache(redis_with_password)
    r["k"] = b"through the password"
    assert r["k"] == b"through the password"
    monkeypatch.setenv("PROGCACHE_REMOTE", redis_with_password)
    t = progcache.TieredProgramCache(tmp_path / "tiered")
    assert t["k"] == b"through the password"  # found in the remote tier
    monkeypatch.delenv("PROGCACHE_REMOTE_PASSWORD_FILE")
    # Without the password: the tiered cache misses (a remote failure costs a
    # miss); the remote-only cache says why.
    assert progcache.TieredProgramCache(tmp_path / "fresh").get("k") is None
    with pytest.raises(PermissionError, match="authentication failed"):
        progcache.RedisProgramCache(redis_with_password).get("k")


def _cubin_like(n: int) -> bytes:
    words = os.urandom(64)
    out = bytearray()
    i = 0
    while len(out) < n:
        out += words[(i * 8) % 56:(i * 8) % 56 + 8]
        if i % 5 == 0:
            out.append((i * 31) & 0xFF)
        i += 1
    return bytes(out[:n])


def test_compression_setting_reaches_the_python_caches(tmp_path, monkeypatch):
    """PROGCACHE_COMPRESSION makes the disk tier store entries smaller; they
    read back as they were, also through a cache opened without it."""
    payload = _cubin_like(200_000)
    monkeypatch.setenv("PROGCACHE_COMPRESSION", "3")
    assert progcache._core.resolve_config()["compression_level"] == 3
    c = FileStreamProgramCache(tmp_path / "z")
    c["k"] = payload
    files = [p for p in (tmp_path / "z").rglob("*") if p.is_file() and len(p.name) == 62]
    assert len(files) == 1 and files[0].stat().st_size * 3 < len(payload)
    assert c["k"] == payload
    monkeypatch.delenv("PROGCACHE_COMPRESSION")
    cfg = progcache._core.resolve_config()
    assert cfg["compression_level"] == 0 and cfg["remote_compression_level"] == 1
    assert FileStreamProgramCache(tmp_path / "z")["k"] == payload
    monkeypatch.setenv("PROGCACHE_COMPRESSION", "fast")
    with pytest.raises(ValueError, match="PROGCACHE_COMPRESSION"):
        FileStreamProgramCache(tmp_path / "y")


def test_each_tier_compresses_as_its_own_setting_says(tmp_path, monkeypatch, redis_with_password):
    """A tiered cache writes the remote tier at PROGCACHE_REMOTE_COMPRESSION
    and the disk at PROGCACHE_COMPRESSION, each as set."""
    if not progcache._core.HAVE_REDIS:
        pytest.skip("built without the Redis tier")
    payload = _cubin_like(200_000)
    monkeypatch.setenv("PROGCACHE_REMOTE_PASSWORD", "s3cret-pw")
    monkeypatch.setenv("PROGCACHE_REMOTE", redis_with_password)
    port = redis_with_password.rsplit(":", 1)[1]
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed")

    def remote_bytes() -> int:
        keys = subprocess.run([cli, "-p", port, "-a", "s3cret-pw", "--no-auth-warning", "KEYS", "progcache:*"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert len(keys) == 1
        return int(subprocess.run([cli, "-p", port, "-a", "s3cret-pw", "--no-auth-warning", "STRLEN", keys[0]],
                                  capture_output=True, text=True, check=True).stdout)

    def disk_bytes(root) -> int:
        files = [p for p in root.rglob("*") if p.is_file() and len(p.name) == 62]
        assert len(files) == 1
        return files[0].stat().st_size

    for disk_level, remote_level in (("off", "3"), ("3", "off")):
        subprocess.run([cli, "-p", port, "-a", "s3cret-pw", "--no-auth-warning", "FLUSHALL"], check=True,
                       capture_output=True)
        monkeypatch.setenv("PROGCACHE_COMPRESSION", disk_level)
        monkeypatch.setenv("PROGCACHE_REMOTE_COMPRESSION", remote_level)
        root = tmp_path / f"t-{disk_level}-{remote_level}"
        t = progcache.TieredProgramCache(root)
        t["k"] = payload
        t.close()  # flushes the remote queue
        small, large = (disk_bytes(root), remote_bytes()) if disk_level == "3" else (remote_bytes(), disk_bytes(root))
        assert small * 3 < len(payload) < large, (disk_level, remote_level, small, large)
        assert progcache.TieredProgramCache(tmp_path / "reader")["k"] == payload


def _ed25519_pair(directory, name):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command to make Ed25519 keys with")
    priv, pub = directory / f"{name}.pem", directory / f"{name}.pub.pem"
    subprocess.run([openssl, "genpkey", "-algorithm", "ed25519", "-out", str(priv)], check=True, capture_output=True)
    subprocess.run([openssl, "pkey", "-in", str(priv), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    return priv, pub


def test_ed25519_entries_are_read_with_the_public_key_alone(tmp_path, monkeypatch):
    """PROGCACHE_SIGNING_KEY_FILE signs (CI); PROGCACHE_TRUSTED_KEYS_FILE
    verifies (everyone else), as in the CLI: Python's caches follow both."""
    ci_priv, ci_pub = _ed25519_pair(tmp_path, "ci")
    _, other_pub = _ed25519_pair(tmp_path, "other")
    shared = tmp_path / "shared"
    monkeypatch.setenv("PROGCACHE_SIGNING_KEY_FILE", str(ci_priv))
    cfg = progcache._core.resolve_config()
    assert cfg["signing_keys"].can_sign and len(cfg["signing_keys"].trusted) == 1
    FileStreamProgramCache(shared, sharing="group")[b"k" * 32] = b"\x7fELF signed by CI"
    monkeypatch.delenv("PROGCACHE_SIGNING_KEY_FILE")
    monkeypatch.setenv("PROGCACHE_TRUSTED_KEYS_FILE", str(ci_pub))
    reader = FileStreamProgramCache(shared, sharing="group")
    assert reader.get(b"k" * 32) == b"\x7fELF signed by CI"
    reader[b"u" * 32] = b"written without the private key: unsigned"
    assert reader.get(b"u" * 32) is None  # a group-shared root serves only signed entries
    monkeypatch.setenv("PROGCACHE_TRUSTED_KEYS_FILE", str(other_pub))
    assert FileStreamProgramCache(shared, sharing="group").get(b"k" * 32) is None  # signed by an untrusted key
    # A reader's own private root keeps its own compiles, unsigned.
    mine = FileStreamProgramCache(tmp_path / "mine")
    mine[b"m" * 32] = b"local"
    assert mine.get(b"m" * 32) == b"local"
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(tmp_path / "ci.pem"))
    with pytest.raises(ValueError, match="both set"):
        progcache._core.resolve_config()


def _entry_bytes(store_dir):
    return sum(p.stat().st_size for p in (store_dir / "v1").rglob("*") if p.is_file() and len(p.name) == 62)


def test_one_cap_bounds_every_store_of_the_root(tmp_path, monkeypatch):
    """The cuda.core-style cache of the root and pyptx's CubinCache (a
    companion store of the same root) share one cap: old entries of one go
    before new ones of the other, and the bytes on disk of both stay under it."""
    import os

    from progcache import CacheEntry, CacheKey, CubinCache

    root = tmp_path / "default-root"
    monkeypatch.setenv("PROGCACHE_MAX_SIZE", "60K")
    monkeypatch.delenv("PYPTX_CACHE_DIR", raising=False)
    programs = FileStreamProgramCache()
    for i in range(4):
        programs[f"old{i}"] = os.urandom(10000)
    for p in (root / "v1").rglob("*"):
        if p.is_file() and len(p.name) == 62:
            os.utime(p, (1_000_000_000, 1_000_000_000))  # used long ago
    cubins = CubinCache()
    for i in range(5):
        key = CacheKey(f"k{i}")
        cubins.put(CacheEntry(key=key, ptx_source="", cubin_bytes=os.urandom(10000)))
    assert _entry_bytes(root) + _entry_bytes(root / "pyptx") <= 60 * 1024
    assert _entry_bytes(root) == 0, "the root's old entries outlived newer ones of its companion"
    assert CubinCache().get(CacheKey("k4")) is not None


def test_a_cap_of_a_caches_own_bounds_that_cache_alone(tmp_path, monkeypatch):
    """FileStreamProgramCache(max_size_bytes=...) at the root caps its own
    entries; the root's other stores keep theirs (the configured cap is the
    one every store shares)."""
    import os

    from progcache import CacheEntry, CacheKey, CubinCache

    root = tmp_path / "default-root"
    monkeypatch.delenv("PYPTX_CACHE_DIR", raising=False)
    cubins = CubinCache()
    for i in range(3):
        cubins.put(CacheEntry(key=CacheKey(f"k{i}"), ptx_source="", cubin_bytes=os.urandom(10000)))
    small = FileStreamProgramCache(max_size_bytes=20_000)
    for i in range(5):
        small[f"p{i}"] = os.urandom(5000)
    assert _entry_bytes(root) <= 20_000
    assert _entry_bytes(root / "pyptx") >= 30_000, "a cache's own cap evicted another store's entries"
