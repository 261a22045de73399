"""Submits survive PostgreSQL dropping connections: zero duplicates, zero acknowledged jobs
missing.

The portal runs as production runs it (``gunicorn portal.wsgi``, 3 sync workers, DEBUG off) on 127.0.0.1, and
reaches PostgreSQL through a TCP proxy of this test's that drops connections two ways:

- **at random**: every 0.1–0.4 s one open connection (idle, mid-query or mid-transaction) is cut;
- **after a COMMIT**: a quarter of the ``COMMIT`` messages (PostgreSQL's simple Query message, which is how
  psycopg ends a transaction) are passed on to the server, its reply is swallowed, and the connection is cut.
  The transaction is committed, and Django hears only that the connection is gone: the audit's case, a job
  saved and the client answered an error.

Clients submit with an ``Idempotency-Key`` each (one key, one job name) and retry the same request on every
5xx, 409 (the key still in flight) or connection error, as a client following the draft would. At the end the
database is read directly: one job per key, every acknowledged job there, every job with its key and every
key with its job. The figures are printed (``-s``) and recorded in RELIABILITY.md.

PostgreSQL only: the server is a process of its own and must share the test database (SQLite's test database
lives in this process's memory). Bounded: the submits stop after ``BURST_S`` whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import requests
from django.conf import settings
from django.db import connection
from django.db.models import Count
from rest_framework.authtoken.models import Token

from jobs.models import IdempotencyKey, Job
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 6
SUBMITS_PER_CLIENT = 20
BURST_S = 60.0  # a ceiling; on an idle machine the submits take about 15 s
START_S = 30.0
MAX_ATTEMPTS = 60
COMMIT_CUT_P = 0.25
# PostgreSQL's simple Query message carrying "COMMIT" (https://www.postgresql.org/docs/current/protocol-message-formats.html,
# Query: 'Q', Int32 length including itself, the query as a NUL-terminated string): psycopg's connection.commit().
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"


def _needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            "the portal runs under gunicorn in processes of their own and must share the test database: run with "
            "DATABASE_URL=postgres://... (SQLite's test database lives in this process's memory)"
        )


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    server: socket.socket
    swallow: bool = False  # replies from PostgreSQL are dropped: a COMMIT was passed on, the cut follows
    closed: bool = False


class CuttingProxy:
    """A TCP proxy to PostgreSQL on loopback that cuts connections (module doc)."""

    def __init__(self, upstream: tuple[str, int], *, seed: int) -> None:
        self.upstream = upstream
        self.rng = random.Random(seed)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: set[_Pair] = set()
        self.lock = threading.Lock()
        self.cuts: Counter[str] = Counter()
        self.connections = 0
        self.chaos = threading.Event()
        self.stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._cut_at_random, daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()
        self.listener.close()
        with self.lock:
            pairs = list(self.pairs)
        for pair in pairs:
            self._close(pair, None)

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                return
            pair = _Pair(client, server)
            with self.lock:
                self.pairs.add(pair)
                self.connections += 1
            threading.Thread(target=self._pump, args=(pair, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, False), daemon=True).start()

    def _pump(self, pair: _Pair, from_client: bool) -> None:
        source, target = (pair.client, pair.server) if from_client else (pair.server, pair.client)
        try:
            while data := source.recv(65536):
                if from_client and COMMIT in data and self.chaos.is_set() and self.rng.random() < COMMIT_CUT_P:
                    pair.swallow = True
                    target.sendall(data)
                    time.sleep(0.05)  # PostgreSQL commits; its reply goes nowhere
                    self._close(pair, "after-commit")
                    return
                if not (pair.swallow and not from_client):
                    target.sendall(data)
        except OSError:
            pass
        self._close(pair, None)

    def _cut_at_random(self) -> None:
        while not self.stopped.wait(self.rng.uniform(0.1, 0.4)):
            if not self.chaos.is_set():
                continue
            with self.lock:
                live = sorted(self.pairs, key=id)
            if live:
                self._close(self.rng.choice(live), "random")

    def _close(self, pair: _Pair, cut: str | None) -> None:
        with self.lock:
            if pair.closed:
                return
            pair.closed = True
            self.pairs.discard(pair)
            if cut is not None:
                self.cuts[cut] += 1
        for sock in (pair.client, pair.server):
            with contextlib.suppress(OSError):  # already closed by its other end
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@dataclass
class Tally:
    """What the clients saw: every answer by status (or the connection error), and per key what it ended with."""

    answers: Counter[str] = field(default_factory=Counter)
    acknowledged: dict[str, int] = field(default_factory=dict)  # key → the job id a 201 named
    replayed_after_failure: int = 0  # a 201 marked Idempotent-Replayed after a failed attempt: saved, then lost
    retries: int = 0
    unexpected: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _client(base: str, token: str, team: str, index: int, tally: Tally, deadline: float) -> None:
    session = requests.Session()
    for n in range(SUBMITS_PER_CLIENT):
        key = f"fault-{index}-{n}-{uuid.uuid4().hex[:8]}"
        body = {"team": team, "name": key, "kind": "training", "gpus": 1, "image": "busybox"}
        headers = {"Authorization": f"Token {token}", "Idempotency-Key": key}
        failed = False
        for attempt in range(MAX_ATTEMPTS):
            if time.monotonic() > deadline:
                with tally.lock:
                    tally.given_up.append(key)
                return
            if attempt:
                with tally.lock:
                    tally.retries += 1
                time.sleep(random.uniform(0.05, 0.25))
            try:
                response = session.post(f"{base}/api/v1/jobs/", json=body, headers=headers, timeout=20)
            except requests.RequestException as exc:
                with tally.lock:
                    tally.answers[f"connection error ({type(exc).__name__})"] += 1
                session = requests.Session()
                failed = True
                continue
            with tally.lock:
                tally.answers[str(response.status_code)] += 1
            if response.status_code == 201:
                with tally.lock:
                    tally.acknowledged[key] = response.json()["id"]
                    if failed and response.headers.get("Idempotent-Replayed") == "true":
                        tally.replayed_after_failure += 1
                break
            if response.status_code >= 500 or response.status_code == 409:
                if response.status_code >= 500 and not response.headers.get("Content-Type", "").startswith(
                    "application/json"
                ):
                    with tally.lock:
                        tally.unexpected.append(f"{response.status_code} not JSON: {response.text[:200]}")
                failed = True
                continue
            with tally.lock:
                tally.unexpected.append(f"{key}: {response.status_code} {response.text[:300]}")
            break
        else:
            with tally.lock:
                tally.given_up.append(key)


@pytest.fixture
def proxy() -> Iterator[CuttingProxy]:
    _needs_postgresql()  # before gunicorn starts: on SQLite there is nothing for it to share
    db = connection.settings_dict
    running = CuttingProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)), seed=27)
    running.start()
    yield running
    running.stop()


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


@pytest.fixture
def portal(proxy: CuttingProxy) -> Iterator[str]:
    """gunicorn as deploy/web.yaml starts it, its database through the proxy; yields its base URL."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DEBUG": "0",
        "SECRET_KEY": "fault-test-" + "k" * 60,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "CACHE_BACKEND": "locmem",
        "API_THROTTLE_USER": "100000/min",
        "JOBS_PENDING_LIMIT_TEAM": "100000",
        "JOBS_PENDING_LIMIT_USER": "100000",
        "DATABASE_URL": f"postgres://{db['USER']}{password}@127.0.0.1:{proxy.port}/{db['NAME']}",
        "PGSSLMODE": "disable",  # the proxy reads the protocol: no TLS between the portal and it
        "LOG_LEVEL": "ERROR",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "3"]
    server = subprocess.Popen(
        command, cwd=settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    try:
        while True:
            if server.poll() is not None:
                error = server.stderr.read() if server.stderr is not None else ""
                pytest.fail(f"gunicorn exited ({server.returncode}): {error[-2000:]}")
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not answer within {START_S:.0f} s")
            time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


def test_dropped_connections_during_submits_make_no_duplicate_and_lose_no_acknowledged_job(
    proxy: CuttingProxy, portal: str
) -> None:
    team = TeamFactory(name="Faults", slug="faults", namespace="team-faults")
    lead = MembershipFactory(team=team, role="lead", user=UserFactory(username="fault-lead")).user
    token = Token.objects.create(user=lead).key
    fleet()

    tally = Tally()
    proxy.chaos.set()
    started = time.monotonic()
    deadline = started + BURST_S
    clients = [
        threading.Thread(target=_client, args=(portal, token, team.slug, i, tally, deadline)) for i in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(BURST_S + 30)
    proxy.chaos.clear()
    elapsed = time.monotonic() - started

    jobs = Job.objects.filter(team=team)
    per_name = dict(jobs.values_list("name").annotate(n=Count("id")).values_list("name", "n"))
    duplicates = {name: n for name, n in per_name.items() if n > 1}
    ids = set(jobs.values_list("id", flat=True))
    missing = {key: job_id for key, job_id in tally.acknowledged.items() if job_id not in ids}
    names = dict(jobs.values_list("id", "name"))
    wrong = {key: job_id for key, job_id in tally.acknowledged.items() if job_id in names and names[job_id] != key}
    keys = {row.key: row.body["id"] for row in IdempotencyKey.objects.filter(user=lead)}
    jobs_without_key = ids - set(keys.values())
    keys_without_job = {k: i for k, i in keys.items() if i not in ids}

    submits = CLIENTS * SUBMITS_PER_CLIENT
    print(
        f"\nfault test: {submits} submits by {CLIENTS} clients in {elapsed:.1f} s; {proxy.connections} database "
        f"connections, {sum(proxy.cuts.values())} cut ({proxy.cuts['random']} at random, "
        f"{proxy.cuts['after-commit']} after a COMMIT); {sum(tally.answers.values())} answers "
        f"{dict(sorted(tally.answers.items()))}; {tally.retries} retries; {len(tally.acknowledged)} acknowledged, "
        f"{tally.replayed_after_failure} of them replayed after a failed attempt (saved, answer lost); "
        f"{len(duplicates)} duplicates, {len(missing)} acknowledged but missing; {len(tally.given_up)} given up"
    )
    assert not tally.unexpected, tally.unexpected[:5]
    assert not duplicates, duplicates
    assert not missing, missing
    assert not wrong, wrong
    assert not jobs_without_key and not keys_without_job, (jobs_without_key, keys_without_job)
    assert not tally.given_up, f"{len(tally.given_up)} submits never got an answer: {tally.given_up[:5]}"
    assert len(tally.acknowledged) == submits == len(per_name)
    assert "500" not in tally.answers, "a dropped connection answered 500, not 503"
    # The faults happened: connections were cut, some right after a commit, and some saved job's answer was lost.
    assert proxy.cuts["random"] > 0 and proxy.cuts["after-commit"] > 0
    assert tally.replayed_after_failure > 0
