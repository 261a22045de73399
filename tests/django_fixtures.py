"""What the Django tests share: personas (a team's lead and member, an outsider, finance and staff) and a cache
cleared before every test that reaches Django's database or test client.

A pytest plugin, not a conftest: ``tests/conftest.py`` loads it only when pytest-django runs, so the engine's
tests, which need none of it, import no Django."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.cache import cache

from teams.roles import FINANCE, PLATFORM_ADMIN
from tests.factories import MembershipFactory, TeamFactory, UserFactory

# pytest-django's fixtures through which a test reaches the database or sends requests (a fixture of the suite's
# own that needs one, as ``team`` needs ``db``, brings it into the test's closure too).
DJANGO_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
        "client",
        "async_client",
        "admin_client",
        "rf",
        "async_rf",
    }
)


def uses_django(item: pytest.Item) -> bool:
    """Whether a test reaches Django's database or test client: only such a test can count a throttled request."""
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker("django_db") is not None or not DJANGO_FIXTURES.isdisjoint(fixtures)


@pytest.fixture(autouse=True)
def _fresh_throttles(request: pytest.FixtureRequest) -> None:
    """Each Django test starts with no request counted: the API throttles count per user id in the cache, and ids
    repeat from test to test (rolled back), so one test's requests would otherwise spend the next one's. A test
    that reaches neither the database nor a client cannot count a request, and is left alone."""
    if uses_django(request.node):
        cache.clear()


@pytest.fixture
def team(db):
    return TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")


@pytest.fixture
def lead(team):
    return MembershipFactory(team=team, role="lead", user=UserFactory(username="nlp-lead")).user


@pytest.fixture
def member(team):
    return MembershipFactory(team=team, role="member", user=UserFactory(username="nlp-member")).user


@pytest.fixture
def outsider(db):
    other = TeamFactory(name="Vision", slug="vision", namespace="team-vision")
    return MembershipFactory(team=other, role="lead", user=UserFactory(username="vision-lead")).user


@pytest.fixture
def finance_user(db):
    user = UserFactory(username="carol")
    user.groups.add(Group.objects.get_or_create(name=FINANCE)[0])
    return user


@pytest.fixture
def platform_admin(db):
    user = UserFactory(username="dave", is_staff=True, is_superuser=True)
    user.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN)[0])
    return user


@pytest.fixture
def superuser(db):
    return UserFactory(username="root", is_staff=True, is_superuser=True)
