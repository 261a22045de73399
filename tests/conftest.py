"""Personas shared by the whole suite: a team's lead and member, an outsider, finance and staff; and a cache
cleared before every test."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.cache import cache

from teams.roles import FINANCE, PLATFORM_ADMIN
from tests.factories import MembershipFactory, TeamFactory, UserFactory


@pytest.fixture(autouse=True)
def _fresh_throttles() -> None:
    """Each test starts with no request counted: the API throttles count per user id in the cache, and ids
    repeat from test to test (rolled back), so one test's requests would otherwise spend the next one's."""
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
