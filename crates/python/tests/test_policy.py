"""Eviction policies written in Python: the engine's plug-in hooks, called on a Python object."""

import collections
import gc
import random
import threading

import pytest

import pcache

PAGE = 4096


class Fifo:
    """The built-in `fifo` plug-in's order, in Python: newest last in the dict."""

    name = "py-fifo"

    def __init__(self):
        self.q = collections.OrderedDict()

    def folio_added(self, folio):
        self.q[folio.pfn] = folio

    def folio_accessed(self, folio):
        pass

    def folio_removed(self, folio, why):
        self.q.pop(folio.pfn, None)

    def evict_candidates(self, nr):
        return [self.q.popitem(last=False)[1] for _ in range(min(nr, len(self.q)))]

    def folio_putback(self, folio, why):
        self.q[folio.pfn] = folio

    def folio_reclaimable(self, folio):
        if folio.pfn in self.q:
            self.q.move_to_end(folio.pfn, last=False)


class Lru(Fifo):
    name = "py-lru"

    def folio_accessed(self, folio):
        self.q.move_to_end(folio.pfn)


class Counting(Lru):
    """LRU that checks what it is told: adds and removes balance, folios are values."""

    def __init__(self):
        super().__init__()
        self.adds = self.removes = 0
        self.why = collections.Counter()
        self.out = set()  # candidates handed to the engine
        self.bad = []

    def folio_added(self, folio):
        assert isinstance(folio, pcache.Folio) and folio.key == (folio.mapping << 40) ^ folio.index
        self.adds += 1
        super().folio_added(folio)

    def folio_removed(self, folio, why):
        self.removes += 1
        self.why[why] += 1
        if folio.pfn not in self.q and folio.pfn not in self.out:
            self.bad.append(("removed, not held", folio))
        self.out.discard(folio.pfn)
        super().folio_removed(folio, why)

    def evict_candidates(self, nr):
        got = super().evict_candidates(nr)
        self.out.update(f.pfn for f in got)
        return got

    def folio_putback(self, folio, why):
        self.why["putback-" + why] += 1
        self.out.discard(folio.pfn)
        super().folio_putback(folio, why)


def pattern(i):
    return random.Random(i).randbytes(PAGE)


def trace(lirs, name):
    return next(p for p in lirs if p.name.startswith(name + "."))


@pytest.mark.parametrize("builtin,cls", [("fifo", Fifo), ("lru", Lru)])
def test_python_fifo_and_lru_miss_exactly_as_the_builtin_plug_ins(lirs, builtin, cls):
    for name in ["cpp", "ps"]:
        rec = pcache.replay(trace(lirs, name), variants=[builtin], policy=cls, usable_equals_nominal=True)
        assert rec["variants"] == [builtin, cls.name]
        runs = {(r["variant"], r["cache_pages"]): r for r in rec["results"]}
        for size in rec["sizes"]:
            want, got = runs[(builtin, size)], runs[(cls.name, size)]
            assert got["misses"] == want["misses"] and got["usable_pages"] == want["usable_pages"] == size, (name, size)


def test_sync_access_and_optional_hooks_change_no_miss(lirs):
    class Minimal:
        """No putback, refault or reclaimable hooks; a factory, not a class."""

        def __init__(self):
            self.q = collections.OrderedDict()

        folio_added = Lru.folio_added
        folio_accessed = Lru.folio_accessed
        folio_removed = Lru.folio_removed
        evict_candidates = Lru.evict_candidates

    class SyncLru(Lru):
        name = "py-lru-sync"
        sync_access = True

    t = trace(lirs, "cs")
    want = pcache.replay(t, pages=[300], variants=["lru"], usable_equals_nominal=True)["results"][0]["misses"]
    for policy in [SyncLru, lambda: Minimal()]:
        rec = pcache.replay(t, pages=[300], policy=policy, usable_equals_nominal=True)
        assert rec["results"][0]["misses"] == want
    assert pcache.replay(t, pages=[300], policy=lambda: Minimal())["variants"] == ["Minimal"]


def test_a_python_policy_holds_the_pages_of_an_embedded_cache_under_memory_pressure(tmp_path):
    # 1 MiB of frames for 8 MiB of data: the policy chooses every eviction.
    p = Counting()
    cache = pcache.PageCache(memory="1M", kswapd=False, policy=p)
    n = 2048
    f = cache.open(tmp_path / "data")
    for i in range(n):
        assert f.write(pattern(i), i * PAGE) == PAGE
    f.fsync()
    for i in random.Random(1).sample(range(n), n):
        assert f.read(PAGE, i * PAGE) == pattern(i), i
    vm = cache.vmstat()
    assert vm["pgsteal_direct"] > n // 2 and vm["pgcache_miss"] > n // 2
    assert p.why["evicted"] > n and p.bad == []
    # What the policy holds is what the cache holds, and adds balance removes.
    assert p.adds - p.removes == len(p.q) == f.cached_pages() and not p.out
    f.truncate(0)
    assert p.adds == p.removes and not p.q and p.why["truncated"] > 0
    f.close()
    cache.shutdown()


def test_hooks_run_from_engine_threads_while_python_threads_read(tmp_path):
    # kswapd on: hooks come from kswapd, the I/O workers and the readers.
    p = Counting()
    cache = pcache.PageCache(memory="1M", policy=p)
    f = cache.open(tmp_path / "shared")
    n = 600
    for i in range(n):
        f.write(pattern(i), i * PAGE)
    f.fsync()
    errors = []

    def reader(seed):
        r = random.Random(seed)
        try:
            for _ in range(400):
                i = r.randrange(n)
                if f.read(PAGE, i * PAGE) != pattern(i):
                    errors.append(i)
        except Exception as e:  # a hook's error comes back through a read
            errors.append(e)

    ts = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == [] and p.bad == [] and p.why["evicted"] > 0
    f.close()
    cache.shutdown()


class Boom(Fifo):
    """Raises in its third evict_candidates."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def evict_candidates(self, nr):
        self.calls += 1
        if self.calls == 3:
            raise ZeroDivisionError("boom")
        return super().evict_candidates(nr)


def test_an_exception_in_a_hook_reaches_the_caller_and_the_data_stays_right(tmp_path, lirs):
    cache = pcache.PageCache(memory="1M", kswapd=False, policy=Boom())
    f = cache.open(tmp_path / "boom")
    n, raised = 1024, []
    for i in range(n):
        try:
            f.write(pattern(i), i * PAGE)
        except ZeroDivisionError as e:
            raised.append((i, str(e)))  # the write was done all the same
    assert len(raised) == 1 and raised[0][1] == "boom"
    # Raised once; the cache goes on (the adapter evicts oldest first).
    f.fsync()
    assert all(f.read(PAGE, i * PAGE) == pattern(i) for i in range(n))
    assert cache.vmstat()["pgsteal_direct"] > n // 2
    cache.shutdown()
    # A replay raises it at its end.
    with pytest.raises(ZeroDivisionError, match="boom"):
        pcache.replay(trace(lirs, "cs"), policy=Boom)

    class BadAdd(Fifo):
        def folio_added(self, folio):
            raise KeyError(folio.pfn)

    with pytest.raises(KeyError):
        pcache.replay(trace(lirs, "cs"), sizes=[10, 20], policy=BadAdd)


def test_a_hook_calling_into_the_cache_is_refused(tmp_path):
    class Reentrant(Fifo):
        def folio_added(self, folio):
            super().folio_added(folio)
            self.cache.drop_caches()  # would wait for the locks its thread holds

    p = Reentrant()
    cache = pcache.PageCache(memory="1M", kswapd=False, policy=p)
    p.cache = cache
    f = cache.open_memory("r")
    with pytest.raises(RuntimeError, match="must not call into a page cache"):
        f.write(b"x" * PAGE, 0)
    assert f.read(PAGE, 0) == b"x" * PAGE
    del p.cache  # a cycle through the engine the garbage collector cannot see


def test_a_cache_handle_collected_inside_a_hook_is_dropped_after_it(tmp_path):
    # The garbage collector may run in a hook, while the engine holds its
    # locks: dropping a file there would wait for them.
    class Collecting(Fifo):
        def folio_added(self, folio):
            super().folio_added(folio)
            gc.collect()

    cache = pcache.PageCache(memory="1M", kswapd=False, policy=Collecting())
    for i in range(3):
        g = cache.open(tmp_path / f"garbage{i}")
        g.write(b"g" * 4 * PAGE, 0)
        cycle = [g]
        cycle.append(cycle)
        del g, cycle
    f = cache.open_memory("f")
    f.write(b"x" * PAGE, 0)
    assert f.read(PAGE, 0) == b"x" * PAGE
    cache.shutdown()


@pytest.mark.parametrize(
    "bad,exc",
    [
        (lambda got: [1 << 30] + got, ValueError),  # an unknown pfn
        (lambda got: got + got[:1], ValueError),  # a duplicate
        (lambda got: [got[0].pfn, got[0]] if got else got, ValueError),  # the same as an int and a folio
        (lambda got: ["page"] + got, TypeError),  # not a folio
        (lambda got: got + [got[0]] * 40, ValueError),  # more than asked for
    ],
)
def test_a_bad_candidate_is_refused_without_harm(tmp_path, lirs, bad, exc):
    class Bad(Fifo):
        def evict_candidates(self, nr):
            return bad(super().evict_candidates(nr))

    cache = pcache.PageCache(memory="1M", kswapd=False, policy=Bad())
    f = cache.open(tmp_path / "bad")
    n, raised = 600, []
    for i in range(n):
        try:
            f.write(pattern(i), i * PAGE)
        except exc as e:
            raised.append(str(e))
    assert len(raised) == 1
    f.fsync()
    assert all(f.read(PAGE, i * PAGE) == pattern(i) for i in range(n))
    cache.shutdown()
    with pytest.raises(exc):
        pcache.replay(trace(lirs, "cs"), policy=Bad)


def test_replay_takes_a_class_or_factory_and_checks_the_hooks(lirs):
    t = trace(lirs, "cs")
    with pytest.raises(TypeError, match="not an instance"):
        pcache.replay(t, policy=Fifo())

    class NoEvict:
        def folio_added(self, folio):
            pass

        folio_accessed = folio_removed = folio_added

    with pytest.raises(TypeError, match="evict_candidates"):
        pcache.replay(t, policy=NoEvict)
    with pytest.raises(TypeError, match="evict_candidates"):
        pcache.PageCache(memory="1M", policy=NoEvict())
    with pytest.raises(ValueError, match="already a column"):
        pcache.replay(t, variants=["fifo"], policy=type("F", (Fifo,), {"name": "fifo"}))
    # A built-in plug-in by name is still the tunable.
    assert pcache.PageCache(memory="1M", policy="fifo").config["tunables"]["policy"] == "fifo"
