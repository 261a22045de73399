"""Slow clients cannot starve the portal: the front as deployed, on loopback, under slow-header and slow-body
clients.

The web pod runs gunicorn's sync workers behind nginx (deploy/web.yaml). Here both run as the manifests run
them: gunicorn with the web container's own arguments (only the address moved to a free loopback port) and
nginx with the proxy container's arguments and the very file the ConfigMap is generated from
(deploy/proxy/nginx.conf; only its two ports moved). The production settings answer, with ``DEBUG`` off
(tests/front_settings.py). Then more slow clients than gunicorn has workers open connections, some dribbling
their headers, some their body, and a normal ``GET`` of the sign-in page is timed: through nginx it answers at
once; straight at gunicorn, the same clients hold every worker and it does not (gunicorn's docs: sync workers
need a buffering proxy, https://gunicorn.org/deploy). The test also measures when nginx cuts a client that
never finishes its headers (client_header_timeout) or stops sending its body (client_body_timeout).

Bounded: about 30 s, never more than a minute; every process it starts is stopped, also on failure.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CONFIG = DEPLOY / "proxy" / "nginx.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)

START_S = 30.0  # gunicorn's workers importing Django on a loaded machine
SETTLE_S = 1.5  # the slow clients connected and holding whatever they can hold
DRIP_S = 1.0  # one header line or one body byte per second: never idle long enough for a read timeout
ANSWER_BOUND_S = 5.0  # a generous bound for the sign-in page under attack; it takes milliseconds
STARVED_WAIT_S = 6.0  # how long the bare gunicorn is given to answer under the same attack
CUT_SLACK_S = 5.0
LABELS = {"header": "headers", "body": "bodies"}
CSRF_COOKIE = b"a" * 32  # a well-formed CSRF secret (Django checks its form, then the body's token against it)

pytestmark = pytest.mark.skipif(
    NGINX is None and not os.environ.get("CI"),
    reason="nginx is not installed (Debian's nginx package; .ci/run installs it, and in CI this test runs)",
)


def _web_containers() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "web.yaml").read_text())
    web = next(d for d in docs if d["kind"] == "Deployment")
    return {c["name"]: c for c in web["spec"]["template"]["spec"]["containers"]}


def _host() -> str:
    """The Host the readiness probe sends, which ALLOWED_HOSTS lists (tests/test_deploy.py checks that)."""
    probe = _web_containers()["proxy"]["readinessProbe"]["httpGet"]
    return next(h["value"] for h in probe["httpHeaders"] if h["name"] == "Host")


def _seconds(directive: str) -> float:
    found = re.search(rf"^\s*{directive}\s+(\d+)s;", CONFIG.read_text(), re.MULTILINE)
    assert found, f"{directive} is not set in seconds in {CONFIG}"
    return float(found.group(1))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Process:
    """A child in a process group of its own, its output in a file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def tail(self) -> str:
        return f"{self.name}: {self.log.read_text()[-2000:]}"


@dataclass
class Front:
    nginx: int  # nginx's port
    gunicorn: int  # gunicorn's port
    workers: int
    processes: list[Process]

    def diagnostics(self) -> str:
        return "\n".join(p.tail() for p in self.processes)


@pytest.fixture
def front() -> Iterator[Front]:
    """gunicorn as the web container runs it, nginx as the proxy container runs it, on loopback ports."""
    assert NGINX is not None, "CI installs Debian's nginx (.ci/run)"
    containers = _web_containers()
    # A directory of its own, readable by nginx's workers (as root nginx runs them as nobody): the prefix the
    # proxy container gets as its emptyDir.
    prefix = Path(tempfile.mkdtemp(prefix="microcosm-front-"))
    prefix.chmod(0o755)
    processes: list[Process] = []
    try:
        gunicorn_port, nginx_port = _free_port(), _free_port()
        command = list(containers["web"]["command"])
        assert command[0] == "gunicorn"
        bind = command.index("--bind") + 1
        deployed_bind = command[bind]
        command[bind] = f"127.0.0.1:{gunicorn_port}"
        workers = int(command[command.index("--workers") + 1])
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.front_settings",
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": _host(),
            # The sign-in page reads no table; a file of its own keeps CI's PostgreSQL out of it.
            "DATABASE_URL": f"sqlite:///{prefix / 'portal.sqlite3'}",
            "CACHE_BACKEND": "locmem",
        }
        processes.append(Process("gunicorn", [sys.executable, "-m", "gunicorn", *command[1:]], env, prefix))

        text = CONFIG.read_text()
        moves = {
            "listen 8080;": f"listen 127.0.0.1:{nginx_port};",
            f"proxy_pass http://{deployed_bind};": f"proxy_pass http://127.0.0.1:{gunicorn_port};",
        }
        for deployed, here in moves.items():
            assert text.count(deployed) == 1, f"{CONFIG} no longer has exactly one {deployed!r}"
            text = text.replace(deployed, here)
        config = prefix / "nginx.conf"
        config.write_text(text)
        proxy = list(containers["proxy"]["command"])
        assert proxy[0] == "nginx"
        proxy[0] = NGINX
        proxy[proxy.index("-p") + 1] = f"{prefix}/"
        proxy[proxy.index("-c") + 1] = str(config)
        processes.append(Process("nginx", proxy, dict(os.environ), prefix))

        ready = Front(nginx_port, gunicorn_port, workers, processes)
        deadline = time.monotonic() + START_S
        while True:
            try:
                if _sign_in(nginx_port, timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the front did not answer\n" + ready.diagnostics()
            assert all(p.process.poll() is None for p in processes), "a process exited\n" + ready.diagnostics()
            time.sleep(0.3)
        yield ready
    finally:
        for process in processes:
            process.stop()
        shutil.rmtree(prefix, ignore_errors=True)


def _sign_in(port: int, timeout: float) -> requests.Response:
    """A normal GET of the sign-in page, as the ingress forwards it."""
    with requests.Session() as session:
        session.trust_env = False  # no proxy from the environment between the test and loopback
        return session.get(
            f"http://127.0.0.1:{port}/accounts/login/",
            headers={"Host": _host(), "X-Forwarded-Proto": "https"},
            timeout=timeout,
            allow_redirects=False,
        )


class SlowClient(threading.Thread):
    """One attacker's connection: ``header`` dribbles header lines and never ends them, ``body`` sends whole
    headers then dribbles a long body, ``stall`` sends whole headers and a few body bytes, then nothing.
    ``cut_s`` is when the server closed or answered the connection, after it opened."""

    def __init__(self, port: int, kind: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.kind, self.stop = port, kind, stop
        self.cut_s: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError as error:
            self.error = repr(error)
            return
        opened = time.monotonic()
        host = _host().encode()
        with sock:
            try:
                if self.kind == "header":
                    sock.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: " + host + b"\r\n")
                else:
                    # A sign-in POST the application reads the body of: without a CSRF cookie and a matching
                    # Origin, Django would refuse it (403) before reading a byte of it.
                    sock.sendall(
                        b"POST /accounts/login/ HTTP/1.1\r\nHost: " + host + b"\r\nX-Forwarded-Proto: https\r\n"
                        b"Origin: https://" + host + b"\r\nCookie: csrftoken=" + CSRF_COOKIE + b"\r\n"
                        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n"
                        b"username=a"
                    )
                while not self.stop.wait(DRIP_S):
                    if select.select([sock], [], [], 0)[0]:  # an answer (408) or the close: cut either way
                        self.cut_s = time.monotonic() - opened
                        return
                    if self.kind == "header":
                        sock.sendall(b"X-Slow: 1\r\n")
                    elif self.kind == "body":
                        sock.sendall(b"a")
            except OSError:
                self.cut_s = time.monotonic() - opened


class Attack:
    """``per_kind`` clients of each kind against one port, until stopped."""

    def __init__(self, port: int, per_kind: int, kinds: tuple[str, ...]) -> None:
        self.stop = threading.Event()
        self.clients = [SlowClient(port, kind, self.stop) for kind in kinds for _ in range(per_kind)]
        for client in self.clients:
            client.start()

    def of(self, kind: str) -> list[SlowClient]:
        return [c for c in self.clients if c.kind == kind]

    def end(self) -> None:
        self.stop.set()
        for client in self.clients:
            client.join(timeout=5)


def _timed_sign_in(port: int, timeout: float) -> tuple[float, int | None]:
    started = time.monotonic()
    try:
        status: int | None = _sign_in(port, timeout).status_code
    except requests.Timeout:
        status = None
    return time.monotonic() - started, status


def test_slow_clients_do_not_starve_the_sign_in_page_behind_the_proxy(front: Front) -> None:
    begun = time.monotonic()
    # Each kind alone outnumbers gunicorn's workers (the audit needed 4 against 3).
    per_kind = front.workers + 1
    header_timeout_s, body_timeout_s = _seconds("client_header_timeout"), _seconds("client_body_timeout")

    # Through nginx: it reads every request whole before it asks gunicorn, so the slow clients hold nginx
    # connections, never a worker.
    attack = Attack(front.nginx, per_kind, ("header", "body", "stall"))
    try:
        time.sleep(SETTLE_S)
        answers = [_timed_sign_in(front.nginx, timeout=ANSWER_BOUND_S + 5) for _ in range(3)]
        # nginx ends the headers that never finish, and the body that stopped, at its timeouts.
        deadline = time.monotonic() + max(header_timeout_s, body_timeout_s) + CUT_SLACK_S
        while time.monotonic() < deadline and any(c.cut_s is None for c in attack.of("header") + attack.of("stall")):
            time.sleep(0.2)
        dribbling_body_open = sum(1 for c in attack.of("body") if c.cut_s is None)
    finally:
        attack.end()
    assert not [c.error for c in attack.clients if c.error], front.diagnostics()
    slowest = max(seconds for seconds, _ in answers)
    assert all(status == 200 for _, status in answers), (answers, front.diagnostics())
    assert slowest < ANSWER_BOUND_S, f"the sign-in page took {slowest:.2f} s behind nginx under attack"
    front_clients = len(attack.clients)
    header_cuts = [c.cut_s or 0.0 for c in attack.of("header")]
    stall_cuts = [c.cut_s or 0.0 for c in attack.of("stall")]
    for cuts, timeout_s in ((header_cuts, header_timeout_s), (stall_cuts, body_timeout_s)):
        assert all(timeout_s - 1 <= cut <= timeout_s + CUT_SLACK_S for cut in cuts), (cuts, timeout_s)

    # Straight at gunicorn, as before the proxy: each kind of slow client alone holds every sync worker (each
    # blocks in a read until gunicorn's 30 s worker timeout kills it), and the sign-in page waits behind them.
    bare: dict[str, tuple[float, int | None]] = {}
    for kind in ("header", "body"):
        attack = Attack(front.gunicorn, per_kind, (kind,))
        try:
            time.sleep(SETTLE_S)
            bare[kind] = _timed_sign_in(front.gunicorn, timeout=STARVED_WAIT_S)
        finally:
            attack.end()
    recovered_s, recovered_status = _timed_sign_in(front.gunicorn, timeout=ANSWER_BOUND_S + 5)

    print(
        f"\n{front.workers} gunicorn workers. Behind nginx, {front_clients} slow clients ({per_kind} dribbling "
        f"headers, {per_kind} dribbling bodies, {per_kind} stalled bodies): sign-in page in {slowest * 1000:.0f} ms "
        f"at worst ({', '.join(f'{s * 1000:.0f}' for s, _ in answers)} ms); nginx cut unfinished headers after "
        f"{min(header_cuts):.1f}-{max(header_cuts):.1f} s, stalled bodies after {min(stall_cuts):.1f}-"
        f"{max(stall_cuts):.1f} s; {dribbling_body_open} dribbling bodies still held an nginx connection, no "
        f"worker. Bare gunicorn, {per_kind} slow clients: "
        + "; ".join(
            f"dribbling {LABELS[kind]}, {'no answer' if status is None else status} in {seconds:.1f} s"
            for kind, (seconds, status) in bare.items()
        )
        + f"; then {recovered_status} in {recovered_s * 1000:.0f} ms once they left"
    )
    # Why the proxy is there: without it the same clients starve the page.
    for kind, (seconds, status) in bare.items():
        assert status is None or seconds >= ANSWER_BOUND_S, (kind, seconds, status)
    assert recovered_status == 200, front.diagnostics()
    assert time.monotonic() - begun < 60
