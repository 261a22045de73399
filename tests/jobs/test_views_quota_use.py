"""A team's production above its guarantee, on its dashboard and on the home page: what the lead, a member, a
lead of several teams and a platform admin see, and the outsider who sees none of it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from scheduler.models import Node
from teams.models import Team
from tests.factories import MembershipFactory, QuotaFactory, TeamFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

ABOVE = "production above the guarantee: 2 GPUs"


@pytest.fixture
def node(db) -> Node:
    return fleet()


@pytest.fixture
def above(team, node) -> Team:
    """``team`` guaranteed 2 GPUs, burst 6, running 3 production GPUs, 1 other and 1 preemptible: production is
    2 GPUs above the guarantee, and the preemptible GPU is borrowed."""
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=2, burst_gpus=6)
    for gpu in (1, 2, 3):
        running_job(team, node, name=f"serve-{gpu}", gpu_index=gpu, priority="production")
    running_job(team, node, name="train", gpu_index=4)
    running_job(team, node, name="sweep", gpu_index=5, preemptible=True)
    return team


def cells(body: str, gpu_class: str) -> list[str]:
    """The figures of a class's row in the dashboard's quota table, in column order."""
    match = re.search(rf'<tr data-gpu-class="{gpu_class}">(.*?)</tr>', body, re.S)
    assert match, f"no {gpu_class} row"
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)]


def dashboard(client, team: Team) -> str:
    response = client.get(reverse("jobs:dashboard", args=[team.slug]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_lead_sees_production_above_the_guarantee_on_the_dashboard(client, lead, above) -> None:
    client.force_login(lead)
    body = dashboard(client, above)
    assert f"All classes (any): {ABOVE}" in body
    assert "guarantee 2 GPUs, burst limit 6 GPUs; borrowed: 1 GPU" in body
    # Guaranteed, burst, held by production / other non-preemptible / preemptible, in use, above: production,
    # borrowed; then the bar.
    assert cells(body, "any")[:8] == ["2 GPUs", "6 GPUs", "3 GPUs", "1 GPU", "1 GPU", "5 GPUs", "2 GPUs", "1 GPU"]
    # The A100 class has no quota row of its own: the ``any`` figures bound it.
    assert cells(body, "A100")[:2] == ["—", "—"] and "counted in the any row" in body


def test_a_member_sees_it_too(client, member, above) -> None:
    client.force_login(member)
    assert ABOVE in dashboard(client, above)


def test_within_the_guarantee_nothing_is_above_it(client, lead, team, node) -> None:
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=4, burst_gpus=6)
    running_job(team, node, name="serve", gpu_index=1, priority="production")
    running_job(team, node, name="sweep", gpu_index=2, preemptible=True)
    client.force_login(lead)
    body = dashboard(client, team)
    assert "production above the guarantee:" not in body and 'class="above"' not in body
    assert cells(body, "any")[:8] == ["4 GPUs", "6 GPUs", "1 GPU", "0 GPUs", "1 GPU", "2 GPUs", "0 GPUs", "0 GPUs"]


def test_per_class_quotas_show_production_above_the_class_guarantee(client, lead, team, node) -> None:
    QuotaFactory(team=team, gpu_class="A100", guaranteed_gpus=2, burst_gpus=4)
    for gpu in (1, 2, 3):
        running_job(team, node, name=f"serve-{gpu}", gpu_index=gpu, priority="production")
    client.force_login(lead)
    body = dashboard(client, team)
    assert "A100: production above the guarantee: 1 GPU" in body
    # Quotas per class only: the overall guarantee is their sum (2) and there is no overall burst limit.
    assert "All classes (any): production above the guarantee: 1 GPU" in body and "burst limit none" in body
    assert cells(body, "A100")[:8] == ["2 GPUs", "4 GPUs", "3 GPUs", "0 GPUs", "0 GPUs", "3 GPUs", "1 GPU", "0 GPUs"]


def test_the_outsider_gets_404_and_sees_nothing_of_it_at_home(client, outsider, above) -> None:
    client.force_login(outsider)
    assert client.get(reverse("jobs:dashboard", args=[above.slug])).status_code == 404
    body = client.get(reverse("home"), follow=True).content.decode()
    assert "production above the guarantee" not in body and above.name not in body


def test_a_lead_of_several_teams_sees_it_on_that_teams_card_at_home(client, lead, above) -> None:
    calm = TeamFactory(name="Speech", slug="speech", namespace="team-speech")
    MembershipFactory(team=calm, user=lead, role="lead")
    QuotaFactory(team=calm, gpu_class="any", guaranteed_gpus=2, burst_gpus=4)
    client.force_login(lead)
    body = client.get(reverse("home")).content.decode()
    cards = dict(re.findall(r'<section class="card team" data-team="([\w-]+)">(.*?)</section>', body, re.S))
    assert set(cards) == {"nlp", "speech"}
    assert f"<strong>{ABOVE}</strong>" in cards["nlp"] and "borrowed: 1 GPU" in cards["nlp"]
    assert "above the guarantee" not in cards["speech"]


def test_a_platform_admin_sees_every_teams_cards(client, platform_admin, above, outsider, node) -> None:
    theirs = outsider.memberships.get().team
    QuotaFactory(team=theirs, gpu_class="any", guaranteed_gpus=0, burst_gpus=2)
    running_job(theirs, node, name="vision-serve", gpu_index=6, priority="production")
    client.force_login(platform_admin)
    body = client.get(reverse("home")).content.decode()
    cards = dict(re.findall(r'<section class="card team" data-team="([\w-]+)">(.*?)</section>', body, re.S))
    assert ABOVE in cards["nlp"]
    assert "production above the guarantee: 1 GPU" in cards["vision"]
    assert ABOVE in dashboard(client, above)
