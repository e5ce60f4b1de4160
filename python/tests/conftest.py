import os
import shutil
import socket
import subprocess
import time

import pytest


@pytest.fixture(autouse=True)
def _private_cache_root(tmp_path, monkeypatch):
    """Every test gets its own default cache root, and its own (empty)
    settings directory: no user's progcache.conf is read."""
    monkeypatch.setenv("PROGCACHE_DIR", str(tmp_path / "default-root"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("PROGCACHE_REMOTE", raising=False)
    monkeypatch.delenv("PROGCACHE_HMAC_KEY_FILE", raising=False)
    monkeypatch.delenv("PROGCACHE_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("PROGCACHE_TRUSTED_KEYS_FILE", raising=False)


def have_nvrtc() -> bool:
    import progcache
    try:
        progcache.compile("__global__ void probe() {}", "c++", "ptx", ["-arch=sm_80"])
        return True
    except Exception:
        return False


requires_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason="no NVRTC (CUDA toolkit) on this machine")


@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server on a free loopback port for the test's duration."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        pytest.skip("redis-server not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


@pytest.fixture
def second_uid():
    """A second user of this machine, made for the test and removed after
    (useradd/userdel; needs root): another user's directories and files
    are made by chowning them to it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a second user")
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    userdel = shutil.which("userdel") or "/usr/sbin/userdel"
    if not os.path.exists(useradd):
        pytest.skip("useradd is not installed")
    name = f"pctest{os.getpid() % 100000}"
    subprocess.run([userdel, name], capture_output=True)  # a leftover of a killed run
    subprocess.run([useradd, "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    import pwd
    uid = pwd.getpwnam(name).pw_uid
    try:
        yield uid
    finally:
        subprocess.run([userdel, name], capture_output=True)


def chown_tree(path, uid):
    """Gives `path` and everything under it to `uid` (as if it made them)."""
    os.chown(path, uid, uid, follow_symlinks=False)
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            os.chown(os.path.join(d, n), uid, uid, follow_symlinks=False)


def shared_dir(tmp_path, how):
    """A directory others share, where an attacker's cache directory can sit:
    open to everyone ("others-writable"), or sticky as /tmp ("another-owner":
    the attacker made the cache directory inside it first)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777 if how == "others-writable" else 0o1777)
    return shared
