"""Redis for the loop's tests: the server of settings.REDIS_URL (CI: db 15), skipped with the reason when it
is not reachable, and every key a test creates under its own prefix removed afterwards; and, for tests that
stop, restart or flush Redis, a private redis-server of their own (:func:`redis_server`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

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


class RedisServer:
    """A redis-server of the test's own on a free loopback port, keeping nothing on disk: it can be stopped,
    started again (empty) and flushed without touching the shared server other tests use. Every wait is
    bounded."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=5)

    def start(self, timeout_s: float = 10.0) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        command += ["no", "--dir", str(self.directory)]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        client = self.client()
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        pytest.fail(f"redis-server on port {self.port} did not answer within {timeout_s:.0f} s")
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._process is None:
            return
        process, self._process = self._process, None
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_port() -> int:
    # A port the kernel just handed out and took back: free unless something grabs it in the next moment.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private, running :class:`RedisServer` (skipped when the redis-server binary is missing), always
    stopped at teardown."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed: apt-get install redis-server (the test starts its own)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
