"""The suite's root: free of Django, so that the engine's tests run without it
(``pytest -p no:django tests/scheduler/core``; ``tests/test_engine_tests_without_django.py`` holds that).

The personas and the fresh cache the Django tests share live in ``tests/django_fixtures.py``, loaded here only
when pytest-django runs: importing them needs configured settings, which the engine's tests never ask for."""

from __future__ import annotations

import pytest

from tests.slow_first import slowest_first


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("django"):
        config.pluginmanager.import_plugin("tests.django_fixtures")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # After the plugins' own reorders (pytest-django's by database use): a stable sort keeps them within a file.
    slowest_first(items)
