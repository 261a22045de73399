"""METRICS_TOKEN: too short a token, or one beside METRICS_PUBLIC, stops start-up with advice; the demo opens
/metrics; /metrics is spared the HTTPS redirect that every
other page gets (Prometheus scrapes inside the cluster over plain HTTP)."""

from __future__ import annotations

import pytest

from tests.portal.test_settings import PRODUCTION_ENV, _manage


def test_a_short_metrics_token_is_refused_with_advice() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "METRICS_TOKEN": "short"})
    assert result.returncode != 0
    assert "METRICS_TOKEN must be at least 32 characters" in result.stderr


def test_a_token_and_metrics_public_at_once_are_refused() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "METRICS_TOKEN": "t" * 40, "METRICS_PUBLIC": "1"})
    assert result.returncode != 0
    assert "METRICS_TOKEN and METRICS_PUBLIC both set" in result.stderr


def test_production_settings_close_metrics_and_the_demo_s_open_it() -> None:
    shown = "from django.conf import settings; print(settings.METRICS_PUBLIC)"
    production = _manage("shell", "-c", shown, env=PRODUCTION_ENV)
    assert production.stdout.strip().splitlines()[-1] == "False", production.stderr
    demo = _manage("shell", "-c", shown, "--settings", "portal.demo_settings", env={**PRODUCTION_ENV, "DEBUG": "1"})
    assert demo.stdout.strip().splitlines()[-1] == "True", demo.stderr


@pytest.mark.django_db
def test_metrics_is_spared_the_https_redirect_that_pages_get(client, settings) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.METRICS_TOKEN = ""
    settings.METRICS_PUBLIC = True
    assert client.get("/healthz").status_code == 301
    assert client.get("/metrics").status_code == 200
