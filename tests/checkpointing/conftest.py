"""A real HTTP server on loopback that records the checkpoint reports it receives, for the report tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Recorder:
    """What the server received, and the statuses it answers with (one per request, then 201)."""

    url: str
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder(url="")
    pause = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            recorder.received.append(Received("POST", self.path, dict(self.headers.items()), json.loads(raw)))
            pause.wait(recorder.delay_s)
            status = recorder.statuses.pop(0) if recorder.statuses else 201
            body = json.dumps({"detail": "recorded" if status < 400 else "refused"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # keep the test output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        pause.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
