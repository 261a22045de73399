"""What a team holds against its guarantee now (``jobs.selectors.team_usage``): production, other non-preemptible and
preemptible work per GPU class; production above the guarantee (fair-share rule 2) and borrowed work; the
guarantee and burst limit as the scheduler reads the quota rows; scoped to the user's teams."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.selectors.team_usage import QuotaUse, quota_use_for_user, quota_use_row, team_quota_use
from scheduler.models import Node
from teams.models import Team
from tests.factories import GpuModelFactory, NodeFactory, QuotaFactory, TeamFactory
from tests.portal.fleet import fleet, running_job


def row(**held: float) -> QuotaUse:
    figures = {"production_gpus": 0.0, "other_non_preemptible_gpus": 0.0, "preemptible_gpus": 0.0, **held}
    return quota_use_row(gpu_class="any", guaranteed_gpus=4.0, burst_gpus=8.0, **figures)


# (production, other non-preemptible, preemptible) held against a guarantee of 4 and a burst limit of 8
#   → (production above, other non-preemptible above, borrowed, in use)
@pytest.mark.parametrize(
    ("held", "above"),
    [
        ((3, 1, 0), (0, 0, 0, 4)),  # exactly the guarantee: nothing above it
        ((2, 1, 3), (0, 0, 2, 6)),  # within; preemptible work fills the rest and borrows 2
        ((5, 1, 0), (2, 0, 0, 6)),  # production above the guarantee by 2, within the burst limit
        ((5, 1, 2), (2, 0, 2, 8)),  # production above by 2 and all the preemptible work borrowed
        ((1, 5, 0), (1, 1, 0, 6)),  # above by 2, only 1 of it production: the guarantee was lowered under work
        ((3 / 7, 4 / 7 + 3, 0), (0, 0, 0, 4)),  # slices adding up to the guarantee are not above it
    ],
)
def test_the_arithmetic_of_a_row(held: tuple[float, float, float], above: tuple[float, float, float, float]) -> None:
    production, other, preemptible = held
    q = row(production_gpus=production, other_non_preemptible_gpus=other, preemptible_gpus=preemptible)
    assert (q.production_above_gpus, q.other_non_preemptible_above_gpus, q.borrowed_gpus, q.in_use_gpus) == above


def test_without_a_guarantee_figure_nothing_is_above_it_in_the_class() -> None:
    q = quota_use_row(
        gpu_class="A100",
        guaranteed_gpus=None,
        burst_gpus=None,
        production_gpus=6,
        other_non_preemptible_gpus=1,
        preemptible_gpus=1,
    )
    assert (q.production_above_gpus, q.other_non_preemptible_above_gpus, q.borrowed_gpus) == (0, 0, 0)
    assert q.in_use_gpus == 8


@pytest.fixture
def a100(db) -> Node:
    return fleet()


@pytest.fixture
def h100(db) -> Node:
    model = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100", memory_mib=81920, mig_capable=True)
    return NodeFactory(name="h100-res-01", gpu_model=model, gpu_count=8, tier="reserved")


def by_class(team: Team) -> dict[str, QuotaUse]:
    return {q.gpu_class: q for q in team_quota_use(team=team)}


@pytest.mark.django_db
def test_production_above_the_overall_guarantee_is_counted_from_the_running_allocations(team, a100) -> None:
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=2, burst_gpus=6)
    for gpu in (1, 2, 3):
        running_job(team, a100, name=f"serve-{gpu}", gpu_index=gpu, priority="production")
    running_job(team, a100, name="train", gpu_index=4)
    running_job(team, a100, name="sweep", gpu_index=5, preemptible=True, priority="low")
    running_job(team, a100, name="slice", gpu_index=0, mig_profile="3g.40gb", mig_start=4, preemptible=True)
    rows = by_class(team)
    assert list(rows) == ["any", "A100"]
    q = rows["any"]
    assert (q.guaranteed_gpus, q.burst_gpus) == (2.0, 6.0)
    assert (q.production_gpus, q.other_non_preemptible_gpus, q.preemptible_gpus) == (3.0, 1.0, round(1 + 3 / 7, 3))
    # 3 production + 1 other non-preemptible against a guarantee of 2: production is 2 above it.
    assert (q.production_above_gpus, q.other_non_preemptible_above_gpus) == (2.0, 0.0)
    assert q.borrowed_gpus == round(1 + 3 / 7, 3)
    # No A100 quota row under an ``any`` quota: the class is bounded by the overall figures alone.
    a100_row = rows["A100"]
    assert (a100_row.guaranteed_gpus, a100_row.burst_gpus, a100_row.production_above_gpus) == (None, None, 0.0)
    assert a100_row.in_use_gpus == q.in_use_gpus


@pytest.mark.django_db
def test_production_within_the_guarantee_is_not_above_it(team, a100) -> None:
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=4, burst_gpus=6)
    running_job(team, a100, name="serve", gpu_index=1, priority="production")
    running_job(team, a100, name="train", gpu_index=2)
    running_job(team, a100, name="sweep-1", gpu_index=3, preemptible=True)
    running_job(team, a100, name="sweep-2", gpu_index=4, preemptible=True)
    running_job(team, a100, name="sweep-3", gpu_index=5, preemptible=True)
    q = by_class(team)["any"]
    assert (q.production_gpus, q.other_non_preemptible_gpus, q.preemptible_gpus) == (1.0, 1.0, 3.0)
    assert (q.production_above_gpus, q.other_non_preemptible_above_gpus, q.borrowed_gpus) == (0.0, 0.0, 1.0)


@pytest.mark.django_db
def test_quotas_per_class_bound_each_class_and_add_up_to_the_overall_guarantee(team, a100, h100) -> None:
    QuotaFactory(team=team, gpu_class="A100", guaranteed_gpus=2, burst_gpus=4)
    QuotaFactory(team=team, gpu_class="H100", guaranteed_gpus=1, burst_gpus=2)
    for gpu in (1, 2, 3):
        running_job(team, a100, name=f"serve-{gpu}", gpu_index=gpu, priority="production")
    running_job(team, h100, name="sweep", gpu_index=0, mig_profile="3g.40gb", mig_start=4, preemptible=True)
    rows = by_class(team)
    assert list(rows) == ["any", "A100", "H100"]
    # Overall: guaranteed 2 + 1, no overall burst limit; 3 production GPUs are within the 3 guaranteed.
    overall = rows["any"]
    assert (overall.guaranteed_gpus, overall.burst_gpus) == (3.0, None)
    assert (overall.production_above_gpus, overall.borrowed_gpus) == (0.0, round(3 / 7, 3))
    # But the A100 guarantee is 2: production is 1 above it there, within the A100 burst limit of 4.
    a100_row = rows["A100"]
    assert (a100_row.guaranteed_gpus, a100_row.burst_gpus, a100_row.production_gpus) == (2.0, 4.0, 3.0)
    assert (a100_row.production_above_gpus, a100_row.borrowed_gpus) == (1.0, 0.0)
    h100_row = rows["H100"]
    assert (h100_row.preemptible_gpus, h100_row.production_above_gpus, h100_row.borrowed_gpus) == (
        round(3 / 7, 3),
        0.0,
        0.0,
    )


@pytest.mark.django_db
def test_a_class_outside_per_class_quotas_is_guaranteed_nothing(team, a100, h100) -> None:
    QuotaFactory(team=team, gpu_class="H100", guaranteed_gpus=2, burst_gpus=4)
    running_job(team, a100, name="serve", gpu_index=1, priority="production")
    running_job(team, a100, name="sweep", gpu_index=2, preemptible=True)
    a100_row = by_class(team)["A100"]
    assert (a100_row.guaranteed_gpus, a100_row.burst_gpus) == (0.0, None)
    assert (a100_row.production_above_gpus, a100_row.borrowed_gpus) == (1.0, 1.0)


@pytest.mark.django_db
def test_preemptible_production_counts_as_production(team, a100) -> None:
    # Production is never preempted, so no team could reclaim it: it is not borrowed.
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    running_job(team, a100, name="serve-1", gpu_index=1, priority="production", preemptible=True)
    running_job(team, a100, name="serve-2", gpu_index=2, priority="production", preemptible=True)
    q = by_class(team)["any"]
    assert (q.production_gpus, q.preemptible_gpus, q.production_above_gpus, q.borrowed_gpus) == (2.0, 0.0, 1.0, 0.0)


@pytest.mark.django_db
def test_ended_allocations_hold_nothing(team, a100) -> None:
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    for gpu in (1, 2):
        job = running_job(team, a100, name=f"serve-{gpu}", gpu_index=gpu, priority="production")
    job.allocations.update(ended_at=job.started_at)
    assert by_class(team)["any"].production_above_gpus == 0.0


@pytest.mark.django_db
def test_quota_use_is_scoped_to_the_users_teams(team, lead, member, outsider, platform_admin, a100) -> None:
    theirs = outsider.memberships.get().team
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    QuotaFactory(team=theirs, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    running_job(team, a100, name="serve-1", gpu_index=1, priority="production")
    running_job(team, a100, name="serve-2", gpu_index=2, priority="production")
    running_job(theirs, a100, name="vision", gpu_index=3, priority="production")
    for user in (lead, member):
        assert list(quota_use_for_user(user=user)) == [team.pk]
        assert quota_use_for_user(user=user)[team.pk][0].production_above_gpus == 1.0
    assert list(quota_use_for_user(user=outsider)) == [theirs.pk]
    assert quota_use_for_user(user=outsider)[theirs.pk][0].production_above_gpus == 0.0
    assert set(quota_use_for_user(user=platform_admin)) == {team.pk, theirs.pk}
    assert quota_use_for_user(user=AnonymousUser()) == {}


@pytest.mark.django_db
def test_quota_use_of_many_teams_costs_the_queries_of_one(team, platform_admin, a100) -> None:
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    running_job(team, a100, name="serve", gpu_index=1, priority="production")
    with CaptureQueriesContext(connection) as one:
        quota_use_for_user(user=platform_admin)
    for gpu in (2, 3, 4):
        other = TeamFactory()
        QuotaFactory(team=other, gpu_class="A100", guaranteed_gpus=1, burst_gpus=4)
        running_job(other, a100, name=f"other-{gpu}", gpu_index=gpu)
    with CaptureQueriesContext(connection) as four:
        assert len(quota_use_for_user(user=platform_admin)) == 4
    assert len(four.captured_queries) == len(one.captured_queries)
