"""``make demo`` driven in Chromium by its four personas for a few minutes of the demo's own load answers no 5xx.

The demo runs as ``make demo`` runs it, on the embedded default: a SQLite **file**, ``manage.py migrate``,
``manage.py demo seed``, then ``manage.py demo run`` (runserver, a Celery worker and beat on kombu's filesystem
broker, the demo's job feed and spot interruption; ``demo/management/commands/demo.py``) with ``DEBUG=1``. It runs in a
copy of this checkout under a temporary folder: ``portal/settings.py`` fixes ``VAR_DIR`` at ``BASE_DIR / "var"``
(the database, the broker's folders, beat's schedule and the loop's lock file), so the demo run from the checkout
itself would share the developer's ``var/`` and a ``make demo`` running beside the test.

While the loop cycles and the feed submits, Chromium plays the personas the seed creates (``demo/seed.py``,
password ``demo``) in turns until the time is up: a team lead (dashboard, queue, jobs, a job's page, a job
submitted through the form, ↑/↓ on the manage page), a member (pages, the API in the browser, and an API token
that a thread of the test reads ``GET /api/v1/queue/`` with meanwhile), finance (billing pages, the summary CSV)
and a platform admin (the node list, a node's change page, saved). Every response the browser gets
(``BrowserContext.on("response")``), every request the test makes itself and every request line of runserver's
access log is counted: none may be a 5xx.

``DEMO_UNDER_LOAD_S`` sets how long the personas drive the demo (default 90 s; the whole test then takes about
two and a half minutes on a loaded machine).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.browser.conftest import BROWSER_TIMEZONE, sign_in

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
LOAD_S = float(os.environ.get("DEMO_UNDER_LOAD_S", "90"))
START_S = 90.0  # runserver answering /healthz after `demo run` started (the worker and beat start beside it)
STEP_TIMEOUT_MS = 30_000  # a page under the loop's writes on a loaded machine; SQLite's busy timeout is 15 s
TOKEN_READ_EVERY_S = 0.5
PASSWORD = "demo"  # demo.seed.DEMO_PASSWORD
LEAD, MEMBER, FINANCE, ADMIN = "nlp-lead", "nlp-member", "finance", "admin"
TEAM = "nlp"
# What the copy leaves out: the checkout's own runtime folder and caches, and what no demo process reads.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "var", "test-artifacts", "__pycache__", ".*_cache", "node_modules", "*.sqlite3*"
)
JOB_PAGE = re.compile(r"/jobs/\d+/")
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) ')


@dataclass
class Tally:
    """Every response seen: (who, method, path, status); the 5xx ones; the steps done and any that broke."""

    answers: list[tuple[str, str, str, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    steps: Counter[str] = field(default_factory=Counter)
    broken: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, who: str, method: str, url: str, status: int) -> None:
        path = url.split("://", 1)[-1].partition("/")[2].split("?")[0]
        with self.lock:
            self.answers.append((who, method, f"/{path}", status))
            if status >= 500:
                self.failures.append(f"{who} {method} /{path} → {status}")

    def page_loads(self) -> int:
        return sum(self.steps.values())


@dataclass
class Demo:
    base: str
    root: Path  # the copy of the checkout the demo runs in
    database: Path
    out: Path  # `demo run`'s stdout and stderr, its children's included
    err: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def child_pids(self) -> list[int]:
        """The children ``demo run`` reported starting ("demo: started web (pid 123)")."""
        text = self.out.read_text(errors="replace") if self.out.exists() else ""
        return [int(pid) for pid in re.findall(r"demo: started \w+ \(pid (\d+)\)", text)]

    def cycles(self) -> int:
        """Scheduling cycles the loop has finished (``scheduler.models.CycleStats``), read from the file."""
        with sqlite3.connect(self.database, timeout=15) as connection:
            row = connection.execute("SELECT COALESCE(SUM(cycles), 0) FROM scheduler_cyclestats").fetchone()
        return int(row[0])

    def jobs(self) -> int:
        with sqlite3.connect(self.database, timeout=15) as connection:
            return int(connection.execute("SELECT COUNT(*) FROM jobs_job").fetchone()[0])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _demo_env() -> dict[str, str]:
    """The environment ``make demo`` gives its commands: the caller's, DEBUG=1, and nothing of the test run's."""
    dropped = ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", "CELERY_BROKER_URL")
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    return env | {"DEBUG": "1", "PYTHONUNBUFFERED": "1"}


def _stop(demo: Demo) -> None:
    """SIGTERM to `demo run`, which stops its children (SIGTERM, SIGKILL after 10 s); then make sure of it."""
    children = demo.child_pids()
    if demo.process.poll() is None:
        _kill_group(demo.process.pid, signal.SIGTERM)
        try:
            demo.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(demo.process.pid, signal.SIGKILL)
            demo.process.wait()
    for pid in children:  # each child runs in a session of its own: the supervisor's group does not hold it
        if _alive(pid):
            _kill_group(pid, signal.SIGKILL)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    """`make demo` in a copy of the checkout: migrated, seeded, and `demo run` answering on a free port."""
    root = tmp_path / "microcosm"
    shutil.copytree(REPO, root, ignore=IGNORED, symlinks=True)
    (root / "var").mkdir()
    env = _demo_env()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    manage = [sys.executable, str(root / "manage.py")]
    for command in (["migrate", "--noinput", "-v0"], ["demo", "seed", "--url", f"{base}/"]):
        done = subprocess.run([*manage, *command], cwd=root, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{command[0]} failed: {done.stderr[-3000:]}"
    out, err = tmp_path / "demo.out", tmp_path / "demo.err"
    # A safety net: the demo stops by itself some time after the test should have stopped it.
    run = [*manage, "demo", "run", "--host", "127.0.0.1", "--port", str(port), "--duration-s", str(LOAD_S + 300)]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(run, cwd=root, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    running = Demo(base, root, root / "var" / "microcosm.sqlite3", out, err, process)
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert process.poll() is None, f"demo run exited: {running.log()[-3000:]}"
            try:
                if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            late = f"the demo did not answer within {START_S:.0f} s: {running.log()[-3000:]}"
            assert time.monotonic() < deadline, late
            time.sleep(0.5)
        yield running
    finally:
        _stop(running)
        leftovers = [pid for pid in running.child_pids() if _alive(pid)]
        assert not leftovers, f"demo processes still running: {leftovers}"


class Persona:
    """One browser context signed in as one demo user; its responses are counted under its name."""

    def __init__(self, browser: Any, base: str, username: str, tally: Tally) -> None:
        self.base, self.username, self.tally = base, username, tally
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id=BROWSER_TIMEZONE)
        self.context.set_default_timeout(STEP_TIMEOUT_MS)
        self.context.set_default_navigation_timeout(STEP_TIMEOUT_MS)
        self.context.on("response", lambda r: tally.add(username, r.request.method, r.url, r.status))
        self.page = self.context.new_page()
        sign_in(self.page, base, username, PASSWORD)
        self.page.wait_for_selector("h1")
        assert "/accounts/login/" not in self.page.url, f"{username} could not sign in"

    def open(self, path: str, step: str, ready: str = "h1") -> None:
        self.page.goto(f"{self.base}{path}")
        self.page.wait_for_selector(ready)
        self.tally.steps[step] += 1

    def close(self) -> None:
        self.context.close()


def _lead(lead: Persona, cycle: int) -> None:
    page = lead.page
    lead.open("/dashboard/", "lead dashboard")
    lead.open("/queue/", "lead queue")
    lead.open("/jobs/", "lead jobs")
    hrefs = page.eval_on_selector_all("main a[href]", "links => links.map(link => link.getAttribute('href'))")
    jobs = sorted({href for href in hrefs if JOB_PAGE.fullmatch(href)})
    if jobs:
        lead.open(jobs[cycle % len(jobs)], "lead job page")

    lead.open("/jobs/submit/", "lead submit form")
    page.fill("#id_name", f"load-check-{cycle}")
    page.select_option("#id_kind", "batch")
    page.check("#id_request_by_3")  # whole GPUs
    page.fill("#id_gpus", "1")
    page.fill("#id_duration_h", "0.5")
    page.click("button:has-text('Submit job')")
    page.wait_for_selector(f"h1:has-text('load-check-{cycle}')")
    lead.tally.steps["lead job submitted"] += 1

    lead.open(f"/teams/{TEAM}/manage/", "lead manage")
    moves = page.locator("button[name=action][value^='up:']:enabled, button[name=action][value^='down:']:enabled")
    if moves.count():
        moves.nth(cycle % moves.count()).click()
        page.wait_for_load_state()
        page.wait_for_selector("h1")
        lead.tally.steps["lead move"] += 1


def _member(member: Persona, cycle: int) -> None:
    member.open(f"/teams/{TEAM}/", "member dashboard")
    member.open("/jobs/", "member jobs")
    member.open("/cluster/", "member cluster")
    member.open("/api/v1/queue/", "member API in the browser", ready="body")
    member.open("/queue/", "member queue")


def _finance(finance: Persona, cycle: int) -> None:
    page = finance.page
    finance.open("/billing/", "finance billing")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Summary CSV").click()
    download_info.value.path()  # the whole file arrived
    finance.tally.steps["finance CSV"] += 1
    finance.open(f"/billing/teams/{['nlp', 'vision', 'speech'][cycle % 3]}/", "finance team billing")
    finance.open("/billing/advisor/", "finance advisor")


def _admin(admin: Persona, cycle: int) -> None:
    page = admin.page
    admin.open("/admin/scheduler/node/", "admin node list", ready="#result_list")
    # Saved as they are; on-demand and reserved nodes only, which the demo's spot interruption leaves alone.
    links = page.locator("#result_list tbody th a", has_not_text="-spot-")
    links.nth(cycle % links.count()).click()
    page.wait_for_selector("#node_form")
    admin.tally.steps["admin node page"] += 1
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_selector(".messagelist .success, .errornote")
    # A form error (the loop changed the node between the page and the save) is an answer too, not a 5xx.
    saved = page.locator(".messagelist .success").count() > 0
    admin.tally.steps["admin node saved" if saved else "admin node refused"] += 1


def _token(member: Persona) -> str:
    """The member makes an API token on its page and reads the key the page shows once."""
    member.open("/accounts/token/", "member token page")
    member.page.get_by_role("button", name=re.compile("Create a token|Regenerate")).click()
    member.page.wait_for_selector("#token")
    return str(member.page.input_value("#token"))


def _token_reader(base: str, token: str, tally: Tally, until: float, errors: list[BaseException]) -> None:
    """A script polling the queue with the member's token, as the API docs' example does."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    try:
        while time.monotonic() < until:
            answer = session.get(f"{base}/api/v1/queue/", timeout=60)
            tally.add("token", "GET", answer.url, answer.status_code)
            time.sleep(TOKEN_READ_EVERY_S)
    except BaseException as exc:  # reported by the test
        errors.append(exc)


def _access_log(text: str) -> Counter[int]:
    return Counter(int(match["status"]) for match in ACCESS_LINE.finditer(text))


def _server_errors(text: str) -> list[str]:
    """What the web logged about each error answer (``django.request``: "Internal Server Error: /path" and the
    traceback after it, ``portal.busy``'s warning), not the worker's own task errors."""
    lines = text.splitlines()
    return [
        "\n".join(lines[n : n + 40])
        for n, line in enumerate(lines)
        if "ERROR django.request" in line or "WARNING portal.busy" in line
    ]


def test_the_demo_driven_by_its_personas_answers_no_5xx(browser, demo: Demo) -> None:
    tally = Tally()
    personas = {name: Persona(browser, demo.base, name, tally) for name in (LEAD, MEMBER, FINANCE, ADMIN)}
    drives: list[tuple[str, Callable[[Persona, int], None]]] = [
        (LEAD, _lead),
        (MEMBER, _member),
        (FINANCE, _finance),
        (ADMIN, _admin),
    ]
    reader_errors: list[BaseException] = []
    try:
        token = _token(personas[MEMBER])
        cycles_before, jobs_before = demo.cycles(), demo.jobs()
        started = time.monotonic()
        until = started + LOAD_S
        reader = threading.Thread(target=_token_reader, args=(demo.base, token, tally, until, reader_errors))
        reader.start()
        rounds = 0
        while time.monotonic() < until:
            for name, drive in drives:
                if time.monotonic() >= until:
                    break
                try:
                    drive(personas[name], rounds)
                except Exception as exc:  # a step that broke is reported below, with the 5xx it may hide
                    tally.broken.append(f"{name}, round {rounds}: {type(exc).__name__}: {str(exc)[:300]}")
            rounds += 1
        reader.join(timeout=90)
        elapsed = time.monotonic() - started
        cycles, jobs = demo.cycles() - cycles_before, demo.jobs() - jobs_before
    finally:
        for persona in personas.values():
            persona.close()

    assert demo.process.poll() is None, f"demo run stopped during the load: {demo.log()[-3000:]}"
    server = _access_log(demo.log())
    statuses = Counter(status for *_rest, status in tally.answers)
    summary = (
        f"{len(tally.answers)} responses in {elapsed:.0f} s ({dict(Counter(who for who, *_rest in tally.answers))}), "
        f"{rounds} rounds of the four personas, "
        f"{tally.page_loads()} steps; statuses {dict(sorted(statuses.items()))}; "
        f"runserver's access log {dict(sorted(server.items()))}; the loop ran {cycles} cycles and "
        f"{jobs} jobs were submitted (feed and form); steps {dict(tally.steps)}"
    )
    print(summary)
    server_errors = "\n\n".join(_server_errors(demo.log())[:3])
    assert tally.failures == [], f"{tally.failures[:10]}\n{summary}\n{server_errors}"
    assert not any(status >= 500 for status in server), f"{summary}\n{server_errors}"
    assert not reader_errors, reader_errors
    assert tally.broken == [], f"{tally.broken[:5]}\n{summary}\n{server_errors}"
    # The load was real: every persona went round, writes went through, and the loop wrote beside them.
    assert rounds >= 2 and tally.page_loads() >= 30, summary
    assert tally.steps["lead job submitted"] >= 1 and tally.steps["admin node saved"] >= 1, summary
    assert sum(1 for who, *_rest in tally.answers if who == "token") >= 20, summary
    assert cycles >= 2, summary
