"""The fresh cache (tests/django_fixtures.py) is for the tests that reach Django's database or test client; the
rest, the engine's tests among them, never touch the cache."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client

from tests.django_fixtures import uses_django


def test_a_test_with_neither_the_database_nor_a_client_is_not_a_django_test(request: pytest.FixtureRequest) -> None:
    assert not uses_django(request.node)


def test_a_test_through_a_fixture_that_needs_the_database_is_one(request: pytest.FixtureRequest, team) -> None:
    assert uses_django(request.node)


@pytest.mark.django_db
def test_a_test_marked_for_the_database_is_one(request: pytest.FixtureRequest) -> None:
    assert uses_django(request.node)


def test_a_test_with_a_client_is_one_and_starts_with_an_empty_cache(
    request: pytest.FixtureRequest, client: Client
) -> None:
    assert uses_django(request.node)
    assert cache.get("left-by-an-earlier-test") is None
    cache.set("left-by-an-earlier-test", 1)  # whichever of these runs second proves the clearing


def test_a_test_with_the_database_also_starts_with_an_empty_cache(db: None) -> None:
    assert cache.get("left-by-an-earlier-test") is None
    cache.set("left-by-an-earlier-test", 1)
