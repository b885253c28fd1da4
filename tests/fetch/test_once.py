"""OncePerKey: racing threads make a key's value once; other keys are not blocked; LRU beyond capacity."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from dali_stream.fetch.once import OncePerKey


def test_racing_threads_make_a_value_once_and_other_keys_do_not_wait():
    once = OncePerKey()
    made: list[str] = []
    slow_started, fast_done = threading.Event(), threading.Event()
    released_in_time: list[bool] = []

    def make_slow():
        made.append("slow")
        slow_started.set()
        released_in_time.append(fast_done.wait(10))  # False if "fast" had to wait for this make()
        return "SLOW"

    with ThreadPoolExecutor(8) as pool:
        slow = [pool.submit(once.get, "slow", make_slow) for _ in range(6)]
        assert slow_started.wait(10)
        assert once.get("fast", lambda: made.append("fast") or "FAST") == "FAST"
        fast_done.set()
        assert [f.result() for f in slow] == ["SLOW"] * 6
    assert sorted(made) == ["fast", "slow"] and released_in_time == [True]


def test_least_recently_used_values_beyond_capacity_are_evicted():
    evicted = []
    once = OncePerKey(capacity=2, on_evict=evicted.append)
    once.get("a", lambda: "aa")
    once.get("b", lambda: "bb")
    once.get("a", lambda: "unused")  # kept: "b" is now the least recently used
    once.get("c", lambda: "cc")
    assert evicted == ["bb"]
    assert once.get("a", lambda: "remade") == "aa"
    assert once.get("b", lambda: "remade") == "remade" and evicted == ["bb", "cc"]


def test_values_beyond_a_byte_bound_are_evicted_least_recently_used_first():
    from dali_stream.fetch.once import OncePerKey

    dropped = []
    once = OncePerKey(on_evict=dropped.append, capacity_bytes=10, weigh=len)
    once.get("a", lambda: "aaaa")
    once.get("b", lambda: "bbbb")
    once.get("a", lambda: "never made again")  # a is now the most recently used
    once.get("c", lambda: "cccc")  # 12 bytes > 10: b goes
    assert dropped == ["bbbb"] and once.nbytes == 8 and once.peak_bytes == 12 and once.evictions == 1
    once.get("big", lambda: "x" * 50)  # alone over the bound: kept, everything older goes
    assert dropped == ["bbbb", "aaaa", "cccc"] and once.nbytes == 50
    assert once.clear() == ["x" * 50] and once.nbytes == 0
