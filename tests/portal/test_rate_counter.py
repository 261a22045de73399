"""The atomic rate counter (portal/rate_counter.py) and the API throttles on it: never more than the limit in a
period, whatever the number of parallel callers, in local memory and in a real Redis (REDIS_URL, skipped when
unreachable); DRF's read-then-write throttle, under the same parallel load, lets more through."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from django.conf import settings
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from rest_framework.throttling import SimpleRateThrottle

from portal.rate_counter import rate_admit
from portal.throttles import AtomicRateThrottle
from tests.scheduler.redis_helpers import redis_client, redis_prefix  # noqa: F401 (fixtures)

THREADS = 16
ATTEMPTS = 25  # each: 400 in all, against a limit of 100


class SlowCache:
    """A cache whose every operation takes a millisecond, as a round trip to Redis does: wide enough gaps that
    a read-then-write counter races between threads, as it did for the audit's parallel clients."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        operation = getattr(self.inner, name)

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.001)
            return operation(*args, **kwargs)

        return slow


def _in_parallel(attempt: Callable[[], bool]) -> int:
    """Run ``attempt`` ATTEMPTS times in each of THREADS threads started together; the number admitted."""
    admitted: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def run() -> None:
        start.wait(timeout=10)
        for _ in range(ATTEMPTS):
            result = attempt()
            with lock:
                admitted.append(result)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(admitted) == THREADS * ATTEMPTS
    return sum(admitted)


@pytest.fixture
def memory() -> Iterator[LocMemCache]:
    cache = LocMemCache("rate-counter-test", {"OPTIONS": {"MAX_ENTRIES": 100_000}})
    yield cache
    cache.clear()


def _admit(cache: Any, limit: int = 100, period_s: int = 60) -> Callable[[], bool]:
    return lambda: rate_admit(cache=cache, key="caller", limit=limit, period_s=period_s, now=time.time()).admitted


def test_the_limit_is_admitted_then_refused_with_the_wait(memory: LocMemCache) -> None:
    now = time.time()
    results = [rate_admit(cache=memory, key="k", limit=3, period_s=60, now=now) for _ in range(4)]
    assert [r.admitted for r in results] == [True, True, True, False]
    assert results[-1].wait_s == 60.0
    later = rate_admit(cache=memory, key="k", limit=3, period_s=60, now=now + 20)
    assert not later.admitted and later.wait_s == 40.0  # the oldest admission frees its slot at now + 60
    assert rate_admit(cache=memory, key="other", limit=3, period_s=60, now=now).admitted  # a key of its own


def test_a_slot_frees_when_its_period_ends(memory: LocMemCache) -> None:
    assert [_admit(memory, limit=2, period_s=1)() for _ in range(3)] == [True, True, False]
    time.sleep(1.1)
    assert _admit(memory, limit=2, period_s=1)()


def test_parallel_callers_never_exceed_the_limit_in_memory(memory: LocMemCache) -> None:
    assert _in_parallel(_admit(SlowCache(memory))) == 100


def test_parallel_callers_never_exceed_the_limit_in_redis(redis_prefix: str) -> None:  # noqa: F811
    redis = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": redis_prefix})
    assert _in_parallel(_admit(redis)) == 100


class _Request:
    def __init__(self) -> None:
        self.user = type("User", (), {"is_authenticated": True, "pk": 7})()
        self.META = {"REMOTE_ADDR": "127.0.0.1"}


class _UserRate(SimpleRateThrottle):
    rate = "100/min"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return "throttle_user_7"


class _AtomicUserRate(AtomicRateThrottle, _UserRate):
    pass


def test_drf_read_then_write_lets_parallel_callers_past_the_limit(memory: LocMemCache) -> None:
    """Why the throttles changed: DRF's own counter, same load, same slow cache, admits more than 100."""
    slow = SlowCache(memory)

    def drf() -> bool:
        throttle = _UserRate()
        throttle.cache = cast(Any, slow)
        return throttle.allow_request(cast(Any, _Request()), cast(Any, None))

    assert _in_parallel(drf) > 100


def test_the_api_throttle_holds_for_parallel_callers(memory: LocMemCache) -> None:
    slow = SlowCache(memory)

    def atomic() -> bool:
        throttle = _AtomicUserRate()
        throttle.cache = cast(Any, slow)
        return throttle.allow_request(cast(Any, _Request()), cast(Any, None))

    assert _in_parallel(atomic) == 100


def test_the_api_throttle_holds_for_parallel_callers_in_redis(redis_prefix: str) -> None:  # noqa: F811
    redis = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": redis_prefix})

    def atomic() -> bool:
        throttle = _AtomicUserRate()
        throttle.cache = redis
        return throttle.allow_request(cast(Any, _Request()), cast(Any, None))

    assert _in_parallel(atomic) == 100
