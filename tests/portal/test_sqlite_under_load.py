"""The embedded default under its own load answers no 5xx ("database is locked" was a 500).

Everything runs as ``make demo`` runs it, on one SQLite **file**: the real scheduling loop in a process of its
own (``manage.py scheduler run``, the loop the demo's Celery worker runs from beat, here every 0.2 s instead of
every 10 so that its writes surely meet the portal's), and the portal under ``manage.py runserver`` (threaded,
as ``demo run`` starts it) on 127.0.0.1. Beside them, for a bounded time, a lead reorders the team's queue and
changes priorities, members read ``GET /api/v1/queue/`` with their tokens (each token's first use is a write),
and a platform admin saves a quota and a node in the admin. Every answer is counted: not one may be a 5xx.

The test database of the suite is not used (it lives in this process's memory, out of the other processes'
reach): the file is migrated and seeded by processes of its own (``tests.portal.sqlite_load_seed``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any

import pytest
import requests
from django.conf import settings

BURST_S = 20.0  # the portal's load; the whole test stays within a minute on a loaded machine
START_S = 30.0  # the web answering, the loop's first cycles
MAX_REQUESTS_PER_CLIENT = 400
LOOP_INTERVAL_S = "0.2"


@dataclass
class Tally:
    """Every answer the clients got: (client, method, path, status), and the first lines of any 5xx."""

    answers: list[tuple[str, str, str, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, client: str, response: requests.Response) -> requests.Response:
        request = response.request
        path = (request.path_url or "").split("?")[0]
        with self.lock:
            self.answers.append((client, request.method or "", path, response.status_code))
            if response.status_code >= 500:
                head = response.text[:400]
                self.failures.append(f"{client} {request.method} {path} → {response.status_code}: {head}")
        return response

    def count(self, client: str, method: str, statuses: tuple[int, ...]) -> int:
        return sum(1 for c, m, _p, s in self.answers if c == client and m == method and s in statuses)


class _Form(HTMLParser):
    """The fields a browser would submit from the first ``method="post"`` form whose id ends in ``_form`` (an
    admin change form): inputs, checked boxes, selected options, text areas. Submit buttons are left out; the
    caller names the one it presses."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._in_form = self._done = False
        self._select: str | None = None
        self._select_first: str | None = None
        self._select_chosen = False
        self._textarea: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attrs_list}
        if tag == "form" and not self._done and attrs.get("method", "").lower() == "post":
            self._in_form = attrs.get("id", "").endswith("_form")
        if not self._in_form:
            return
        name = attrs.get("name", "")
        if tag == "input" and name:
            kind = attrs.get("type", "text").lower()
            if kind in ("submit", "button", "image", "file", "reset"):
                return
            if kind in ("checkbox", "radio") and "checked" not in attrs:
                return
            self.fields.append((name, attrs.get("value", "on" if kind == "checkbox" else "")))
        elif tag == "select" and name:
            self._select, self._select_first, self._select_chosen = name, None, False
        elif tag == "option" and self._select is not None:
            value = attrs.get("value", "")
            if self._select_first is None:
                self._select_first = value
            if "selected" in attrs:
                self.fields.append((self._select, value))
                self._select_chosen = True
        elif tag == "textarea" and name:
            self._textarea, self._text = name, ""

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form, self._done = False, True
        elif tag == "select" and self._select is not None:
            if not self._select_chosen and self._select_first is not None:
                self.fields.append((self._select, self._select_first))
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            # The HTML parser keeps the newline browsers drop right after <textarea>.
            self.fields.append((self._textarea, self._text[1:] if self._text.startswith("\n") else self._text))
            self._textarea = None


def _form_fields(html: str) -> list[tuple[str, str]]:
    parser = _Form()
    parser.feed(html)
    return parser.fields


def _csrf(html: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Process:
    """A child process whose output is collected line by line; stopped with SIGTERM, then killed."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            command,
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        for line in stream:
            lines.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for reader in self._readers:
            reader.join(timeout=5)


def _run(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[str, dict[str, Any], Process, Process]]:
    """A migrated, seeded SQLite file; the loop and the web on it. Yields (base URL, seed, loop, web)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'microcosm.sqlite3'}",
        "DEBUG": "1",  # as make demo: a 500 would be Django's debug page
        "SCHEDULER_LOCK": "file",
        "CACHE_BACKEND": "locmem",
        "API_THROTTLE_USER": "100000/min",  # the load is the point, not the throttle
        "LOG_LEVEL": "WARNING",
        "LOG_FORMAT": "plain",
        "PYTHONUNBUFFERED": "1",
    }
    _run([sys.executable, "manage.py", "migrate", "-v0"], env)
    seed = json.loads(_run([sys.executable, "-m", "tests.portal.sqlite_load_seed"], env).strip().splitlines()[-1])
    port = _free_port()
    loop = Process(
        "loop", [sys.executable, "manage.py", "scheduler", "run", "--json", "--interval-s", LOOP_INTERVAL_S], env
    )
    web = Process("web", [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"], env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert loop.alive(), f"the loop exited: {loop.err[-20:]}"
            assert web.alive(), f"the web exited: {web.err[-20:]}"
            try:
                up = requests.get(f"{base}/healthz", timeout=5).status_code == 200
            except requests.ConnectionError:
                up = False
            cycles = sum(1 for line in list(loop.out) if line.startswith("{"))
            if up and cycles >= 2:
                break
            assert time.monotonic() < deadline, f"not started within {START_S:.0f} s: {web.err[-10:]} {loop.err[-10:]}"
            time.sleep(0.2)
        yield base, seed, loop, web
    finally:
        web.stop()
        loop.stop()


def _signed_in(base: str, username: str, password: str, tally: Tally, client: str) -> requests.Session:
    session = requests.Session()
    page = tally.add(client, session.get(f"{base}/accounts/login/", timeout=60))
    answer = session.post(
        f"{base}/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": _csrf(page.text)},
        allow_redirects=False,
        timeout=60,
    )
    tally.add(client, answer)
    assert answer.status_code == 302, f"{username} could not sign in: {answer.status_code}"
    return session


def _lead(base: str, seed: dict[str, Any], tally: Tally, until: float) -> None:
    """Reorders the team's queue (↑/↓) and sets priorities, as the manage page's buttons do."""
    rng = random.Random(1)
    session = _signed_in(base, seed["lead"], seed["password"], tally, "lead")
    manage = f"{base}/teams/{seed['team']}/manage/"
    for n in range(MAX_REQUESTS_PER_CLIENT // 2):
        if time.monotonic() > until:
            return
        page = tally.add("lead", session.get(manage, timeout=60))
        if page.status_code != 200:
            continue
        # The enabled ↑/↓ buttons (templates/jobs/manage.html): the first job cannot go up, the last not down.
        moves = re.findall(r'name="action" value="((?:up|down):\d+)"(?![^>]*disabled)', page.text)
        data: dict[str, Any] = {"csrfmiddlewaretoken": _csrf(page.text)}
        if n % 3 == 2 and moves:
            job_id = rng.choice(moves).split(":")[1]
            data |= {"action": "priority", "priority": rng.choice(["low", "normal"]), "selected": [job_id]}
        elif moves:
            data |= {"action": rng.choice(moves)}
        else:
            continue  # nothing waits right now: the loop placed it all
        tally.add("lead", session.post(manage, data=data, allow_redirects=False, timeout=60))


def _admin(base: str, seed: dict[str, Any], tally: Tally, until: float) -> None:
    """Saves the team's quota (its burst up and down by one) and the nodes (as they are) in the admin."""
    session = _signed_in(base, seed["admin"], seed["password"], tally, "admin")
    targets = [f"{base}/admin/teams/quota/{seed['quota']}/change/"] + [
        f"{base}/admin/scheduler/node/{pk}/change/" for pk in seed["nodes"]
    ]
    for n in range(MAX_REQUESTS_PER_CLIENT // 2):
        if time.monotonic() > until:
            return
        url = targets[n % len(targets)]
        page = tally.add("admin", session.get(url, timeout=60))
        if page.status_code != 200:
            continue
        fields = _form_fields(page.text)
        if "/quota/" in url:
            fields = [(k, str(12 + n % 2) if k == "burst_gpus" else v) for k, v in fields]
        tally.add("admin", session.post(url, data=[*fields, ("_save", "Save")], allow_redirects=False, timeout=60))


def _reader(base: str, token: str, tally: Tally, until: float) -> None:
    """Reads the queue with an API token, as a script polling the API does."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    for _ in range(MAX_REQUESTS_PER_CLIENT):
        if time.monotonic() > until:
            return
        tally.add("token", session.get(f"{base}/api/v1/queue/", timeout=60))


def test_the_portal_answers_no_5xx_while_the_loop_writes_the_same_sqlite_file(embedded):
    base, seed, loop, web = embedded
    tally = Tally()
    cycles_before = sum(1 for line in list(loop.out) if line.startswith("{"))
    until = time.monotonic() + BURST_S
    clients = [
        threading.Thread(target=_lead, args=(base, seed, tally, until)),
        threading.Thread(target=_admin, args=(base, seed, tally, until)),
        *(threading.Thread(target=_reader, args=(base, token, tally, until)) for token in seed["tokens"]),
    ]
    errors: list[BaseException] = []

    def guarded(thread: threading.Thread) -> None:
        try:
            thread.run()
        except BaseException as exc:  # reported below, with the tally
            errors.append(exc)

    runners = [threading.Thread(target=guarded, args=(client,)) for client in clients]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(timeout=BURST_S + 70)
    cycles = sum(1 for line in list(loop.out) if line.startswith("{")) - cycles_before

    summary = Counter((client, method, status) for client, method, _path, status in tally.answers)
    assert not errors, errors
    assert tally.failures == [], "\n".join(tally.failures[:5])
    # The load was real: the loop kept cycling, and every kind of write went through, not only reads.
    assert loop.alive() and web.alive()
    assert cycles >= 10, f"the loop ran {cycles} cycles in {BURST_S:.0f} s: {loop.err[-10:]}"
    assert tally.count("lead", "POST", (302,)) >= 3, summary
    assert tally.count("admin", "POST", (302,)) >= 3, summary
    assert tally.count("token", "GET", (200,)) >= 20, summary
    assert all(status < 500 for *_rest, status in tally.answers)
