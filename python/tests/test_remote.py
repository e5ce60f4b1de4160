import pytest

import progcache

pytestmark = pytest.mark.skipif(not progcache._core.HAVE_REDIS, reason="built without Redis")


def test_redis_program_cache_round_trip(redis_url):
    c = progcache.RedisProgramCache(redis_url)
    c[b"k"] = b"remote-bytes"
    assert c[b"k"] == b"remote-bytes"
    assert len(c) == 1
    del c[b"k"]
    assert c.get(b"k") is None


def test_two_machines_share_through_tiered(redis_url, tmp_path):
    m1 = progcache.TieredProgramCache(tmp_path / "m1", urls=redis_url)
    m1[b"kernel"] = b"compiled once"
    m1.close()  # flushes the background remote write
    m2 = progcache.TieredProgramCache(tmp_path / "m2", urls=[redis_url])
    assert m2[b"kernel"] == b"compiled once"
    m2.close()
    # Backfilled into machine 2's own disk tier.
    assert progcache.FileStreamProgramCache(tmp_path / "m2")[b"kernel"] == b"compiled once"


def test_read_only_and_bad_url(redis_url, tmp_path):
    ro = progcache.RedisProgramCache(redis_url, read_only=True)
    ro[b"x"] = b"ignored"
    assert progcache.RedisProgramCache(redis_url).get(b"x") is None
    with pytest.raises(ValueError, match="bad remote URL"):
        progcache.RedisProgramCache("redis://user:hunter2@host:notaport")
    try:
        progcache.RedisProgramCache("redis://user:hunter2@host:notaport")
    except ValueError as e:
        assert "hunter2" not in str(e)


def test_dead_remote_leaves_local_tiers_working(tmp_path):
    c = progcache.TieredProgramCache(tmp_path / "t", urls="redis://127.0.0.1:1?timeout=50&connect_timeout=50")
    c[b"k"] = b"local"
    assert c[b"k"] == b"local"
    assert c.get(b"other") is None
    c.close()
