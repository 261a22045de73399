"""LOG_FORMAT: JSON lines by default in production, plain lines with DEBUG on, either when asked; the 403
filter still makes a refusal one line in JSON."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from portal.log_formats import JsonLines
from tests.factories import JobEventFactory

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "k8Zq3vN0pL4xR7tY1wE9sA2dF6gH5jK0lM3nB8vC4xZ7qW1eR9tY2uI6oP5aS3dF",
    "ALLOWED_HOSTS": "microcosm.example.com",
    "DATABASE_URL": "sqlite:////tmp/microcosm-log-format.sqlite3",
}
# One record with job fields, written through the settings' own LOGGING (a fresh interpreter per environment:
# settings are read once at import).
LOG_ONE_LINE = (
    "import logging; from django.conf import settings; print(settings.LOG_FORMAT); "
    "logging.getLogger('scheduler.loop.cycle').info('cycle 5: bind job 41', extra={'cycle': 5, 'job': '41'})"
)


def _shell(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    inherited = {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "LOG_FORMAT", "LOG_LEVEL"}
    clean = {k: v for k, v in os.environ.items() if k not in inherited}
    clean.update(env, DJANGO_SETTINGS_MODULE="portal.settings")
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", LOG_ONE_LINE],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_logs_json_lines_with_the_extra_fields() -> None:
    result = _shell(PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "json"
    record = json.loads(result.stderr.strip().splitlines()[-1])
    assert record["level"] == "INFO" and record["logger"] == "scheduler.loop.cycle"
    assert record["message"] == "cycle 5: bind job 41"
    assert record["cycle"] == 5 and record["job"] == "41"
    assert record["time"].endswith("+00:00")


def test_debug_logs_plain_lines_and_log_format_overrides_either_default() -> None:
    plain = _shell({"DEBUG": "1"})
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == "plain"
    assert plain.stderr.strip().endswith("INFO scheduler.loop.cycle: cycle 5: bind job 41")
    asked = _shell({"DEBUG": "1", "LOG_FORMAT": "json"})
    assert json.loads(asked.stderr.strip().splitlines()[-1])["job"] == "41"
    assert _shell({**PRODUCTION_ENV, "LOG_FORMAT": "plain"}).stdout.strip() == "plain"


def test_an_unknown_log_format_stops_start_up_naming_the_choices() -> None:
    result = _shell({"DEBUG": "1", "LOG_FORMAT": "xml"})
    assert result.returncode != 0
    assert "LOG_FORMAT='xml' is not one of: json, plain" in result.stderr


@pytest.fixture
def request_log_as_json() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_403_is_one_json_line_without_a_traceback(client: Client, platform_admin, request_log_as_json) -> None:
    event = JobEventFactory()
    client.force_login(platform_admin)
    url = reverse("admin:jobs_jobevent_change", args=[event.pk])
    assert client.post(url, {"_save": "Save"}).status_code == 403
    lines = request_log_as_json.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == f"Forbidden (Permission denied): {url}"
    assert record["status_code"] == 403 and record["level"] == "WARNING"
    assert "exc_info" not in record
