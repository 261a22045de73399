"""METRICS_TOKEN: too short a token stops start-up with advice; /metrics is spared the HTTPS redirect that every
other page gets (Prometheus scrapes inside the cluster over plain HTTP)."""

from __future__ import annotations

import pytest

from tests.portal.test_settings import PRODUCTION_ENV, _manage


def test_a_short_metrics_token_is_refused_with_advice() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "METRICS_TOKEN": "short"})
    assert result.returncode != 0
    assert "METRICS_TOKEN must be at least 32 characters" in result.stderr


@pytest.mark.django_db
def test_metrics_is_spared_the_https_redirect_that_pages_get(client, settings) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.METRICS_TOKEN = ""
    assert client.get("/healthz").status_code == 301
    assert client.get("/metrics").status_code == 200
