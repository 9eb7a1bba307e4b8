"""The embedded engine: data round-trips under memory pressure, exceptions."""

import errno
import os
import random
import threading

import pytest

import pcache

PAGE = 4096


def pattern(i):
    return random.Random(i).randbytes(PAGE)


def test_round_trip_under_memory_pressure(tmp_path):
    # 1 MiB of frames for 8 MiB of data: most pages are reclaimed (written
    # back, dropped) and read again from the file.
    cache = pcache.PageCache(memory="1M", kswapd=False)
    n = 2048
    f = cache.open(tmp_path / "data")
    for i in range(n):
        assert f.write(pattern(i), i * PAGE) == PAGE
    f.fsync()
    assert f.size() == n * PAGE
    for i in random.Random(1).sample(range(n), n):
        assert f.read(PAGE, i * PAGE) == pattern(i), i
    vm = cache.vmstat()
    assert vm["pgsteal_direct"] + vm["pgsteal_kswapd"] > n // 2
    assert vm["pgcache_miss"] > n // 2
    assert f.cached_pages() <= (1 << 20) // PAGE
    # And from a fresh cache, the data is on disk.
    f.close()
    cache.shutdown()
    g = pcache.PageCache(memory="1M").open(tmp_path / "data", create=False)
    assert all(g.read(PAGE, i * PAGE) == pattern(i) for i in range(0, n, 97))


def test_threads_read_in_parallel(tmp_path):
    cache = pcache.PageCache(memory="2M")
    f = cache.open_memory("shared")
    for i in range(256):
        f.write(pattern(i), i * PAGE)
    errors = []

    def reader(seed):
        r = random.Random(seed)
        for _ in range(500):
            i = r.randrange(256)
            if f.read(PAGE, i * PAGE) != pattern(i):
                errors.append(i)

    ts = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_short_reads_at_end_of_file_and_fadvise():
    cache = pcache.PageCache(memory="1M")
    f = cache.open_memory("f")
    f.write(b"abc" * 5000, 0)
    assert f.read(100, 14990) == (b"abc" * 5000)[14990:]
    assert f.read(10, 1 << 40) == b""
    assert f.cached_pages() == 4
    f.fsync()
    f.fadvise(0, 0, os.POSIX_FADV_DONTNEED)
    assert f.cached_pages() == 0
    f.fadvise(0, 0, "willneed")
    assert f.read(3, 3) == b"abc"


def test_closed_file_raises_ebadf():
    f = pcache.PageCache(memory="1M").open_memory("c")
    f.write(b"x", 0)
    f.close()
    assert f.closed
    f.close()  # twice is fine, as io's files
    for call in [
        lambda: f.read(1, 0),
        lambda: f.write(b"y", 0),
        f.fsync,
        lambda: f.fadvise(0, 0, "dontneed"),
        f.size,
        lambda: f.truncate(0),
    ]:
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.EBADF


def test_bad_offsets_raise_oserror_with_errno():
    f = pcache.PageCache(memory="1M").open_memory("o")
    for call in [lambda: f.read(1, -1), lambda: f.read(-1, 0), lambda: f.write(b"x", -4096)]:
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        f.write(b"x", (1 << 63) - 1)
    assert e.value.errno == errno.EFBIG
    with pytest.raises(OSError) as e:
        f.fadvise(0, 0, 42)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OverflowError):
        f.read(1, 1 << 64)
    assert f.size() == 0  # nothing was written


def test_open_errors_are_the_kernels(tmp_path):
    cache = pcache.PageCache(memory="1M")
    with pytest.raises(FileNotFoundError):
        cache.open(tmp_path / "nope", create=False)
    with pytest.raises(OSError):
        cache.open(tmp_path)


def test_tunables_unknown_names_are_keyerrors_bad_values_valueerrors():
    with pytest.raises(KeyError):
        pcache.PageCache(memory="1M", no_such_tunable=1)
    with pytest.raises(ValueError):
        pcache.PageCache(memory="1M", workingset="maybe")
    with pytest.raises(ValueError):
        pcache.PageCache(memory="huge")
    c = pcache.PageCache({"memory_bytes": 1 << 20, "workingset": False, "ra_pages": 0})
    assert c.config["tunables"]["workingset"] is False and c.config["memory_bytes"] == 1 << 20
    assert "workingset" in pcache.tunable_names()
    s = c.sysctl
    assert "dirty_ratio" in s and len(s) == len(s.keys()) > 3
    s["dirty_ratio"] = 40
    assert s["dirty_ratio"] == "40"
    with pytest.raises(ValueError):
        s["dirty_ratio"] = "lots"
    assert s["dirty_ratio"] == "40"
    with pytest.raises(KeyError):
        s["no_such_sysctl"] = 1
    with pytest.raises(KeyError):
        s["no_such_sysctl"]


def test_vmstat_uses_the_kernels_names():
    c = pcache.PageCache(memory="1M")
    f = c.open_memory("v")
    f.write(b"z" * PAGE, 0)
    before = c.vmstat()
    f.read(PAGE, 0)
    after = c.vmstat()
    assert after["pgcache_hit"] == before["pgcache_hit"] + 1
    for name in ["nr_free_pages", "nr_inactive_file", "nr_active_file", "pgscan_direct", "workingset_refault"]:
        assert name in after
    assert after["nr_free_pages"] == c.nr_free_pages() or abs(after["nr_free_pages"] - c.nr_free_pages()) < 16
