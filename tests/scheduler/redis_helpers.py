"""Redis for the loop's tests: the server of settings.REDIS_URL (CI: db 15), skipped with the reason when it
is not reachable, and every key a test creates under its own prefix removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=5)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        pytest.skip(f"Redis at {settings.REDIS_URL} is not reachable ({exc}): start it or point REDIS_URL at one")
    yield client
    client.close()


@pytest.fixture
def redis_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A unique key prefix; every key under it (and kombu's bindings of it) is deleted after the test."""
    prefix = f"microcosm-test-{uuid.uuid4().hex[:12]}"
    # kombu's own bookkeeping keys are shared by every queue: remove only those this test brought into being.
    shared = ("_kombu*", "unacked*")
    before = {key for pattern in shared for key in redis_client.scan_iter(pattern)}
    yield prefix
    keys = set(redis_client.scan_iter(f"*{prefix}*"))
    keys |= {key for pattern in shared for key in redis_client.scan_iter(pattern)} - before
    if keys:
        redis_client.delete(*keys)
