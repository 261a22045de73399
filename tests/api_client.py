"""The REST API's test client, signed in as ``user`` or anonymous: one helper for every app's API tests."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient


def api(user: Any = None) -> APIClient:
    """A client that sends requests as ``user`` (authentication forced), or as nobody when ``user`` is None."""
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client
