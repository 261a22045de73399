"""The checkpoint interval proposed for a job and for a spec: where it runs, how many servers it spans, what
its checkpoint costs (measured, from its model, or the default), and the pages that show it."""

from __future__ import annotations

import statistics
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.checkpoint_intervals import (
    DEFAULT_GPUS_PER_NODE,
    CostSource,
    checkpoint_interval_proposal,
    checkpoint_interval_proposal_for_spec,
)
from scheduler.core import ModelProfile, checkpoint_interval, checkpointing
from scheduler.core.model.vocabulary import ModelMode
from tests.factories import AllocationFactory, JobEventFactory, JobFactory, NodeFactory

pytestmark = pytest.mark.django_db

# Rates high enough that Young's interval falls inside the bounds, so every figure below is the formula's.
RATES = {"spot": 4.0, "on-demand": 0.5, "reserved": 0.25}
CAP_S = 86_400.0
COST_S = 45.0
WRITE_GIB_PER_S = 2.0
SEVEN_B_TRAINING = {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 1, "mode": "training"}


@pytest.fixture(autouse=True)
def checkpoints(settings):
    settings.CHECKPOINTS = {
        "interruptions_per_node_day": dict(RATES),
        "default_cost_s": COST_S,
        "write_gib_per_s": WRITE_GIB_PER_S,
        "max_interval_s": CAP_S,
    }
    return settings.CHECKPOINTS


def _young(cost_s: float, rate: float, nodes: int) -> float:
    return checkpoint_interval(
        cost_s=cost_s, interruptions_per_node_day=rate, nodes=nodes, max_interval_s=CAP_S
    ).interval_s


def _checkpointed(job, duration_s: object, minutes_ago: int) -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    JobEventFactory(job=job, type="checkpointed", at=at, details={"step": minutes_ago, "duration_s": duration_s})


def test_a_pending_spot_ok_gang_is_planned_for_spot_on_the_servers_it_packs_into(team) -> None:
    NodeFactory(gpu_count=8)
    job = JobFactory(team=team, tier="spot-ok", gpus=4, replicas=3, checkpoint_interval_s=600)
    proposal = checkpoint_interval_proposal(job=job)
    assert (proposal.tiers, proposal.nodes, proposal.placed) == (("spot",), 2, False)  # two 4-GPU replicas a server
    assert (proposal.cost_s, proposal.cost_source) == (COST_S, CostSource.DEFAULT)
    assert proposal.interval_s == pytest.approx(_young(COST_S, RATES["spot"], 2))
    assert proposal.mtbf_s == pytest.approx(86_400 / (RATES["spot"] * 2))
    assert proposal.own_interval_s == 600 and proposal.bound == "none"


def test_production_is_never_planned_for_spot_and_any_takes_reserved_first(team) -> None:
    production = JobFactory(team=team, tier="spot-ok", priority="production")
    anywhere = JobFactory(team=team, tier="any")
    assert checkpoint_interval_proposal(job=production).tiers == ("reserved",)
    assert checkpoint_interval_proposal(job=anywhere).interval_s == pytest.approx(_young(COST_S, RATES["reserved"], 1))


def test_the_measured_cost_is_the_median_of_the_reported_durations(team) -> None:
    job = JobFactory(team=team, tier="spot-ok")
    for minutes_ago, duration in enumerate((30.0, 50.0, 0.0, 40.0, "slow", None, 70.0)):
        _checkpointed(job, duration, minutes_ago)
    JobEventFactory(job=job, type="checkpointed", details=["not", "a", "dict"])
    proposal = checkpoint_interval_proposal(job=job)
    measured = [30.0, 50.0, 40.0, 70.0]  # 0 means "not reported"; text and missing values are not durations
    assert (proposal.cost_source, proposal.measured_checkpoints) == (CostSource.MEASURED, len(measured))
    assert proposal.cost_s == statistics.median(measured)
    assert proposal.interval_s == pytest.approx(_young(statistics.median(measured), RATES["spot"], 1))


def test_before_its_first_checkpoint_a_model_job_is_costed_from_its_training_state(team) -> None:
    job = JobFactory(team=team, gpus=None, model=SEVEN_B_TRAINING, tier="spot-ok")
    proposal = checkpoint_interval_proposal(job=job)
    expected = checkpointing.estimated_cost_s(
        ModelProfile(params_b=7, mode=ModelMode.TRAINING), write_gib_per_s=WRITE_GIB_PER_S
    )
    assert (proposal.cost_source, proposal.cost_s) == (CostSource.MODEL, pytest.approx(expected))
    broken = JobFactory(team=team, gpus=None, model={"params_b": "many"})
    assert checkpoint_interval_proposal(job=broken).cost_source == CostSource.DEFAULT
    nothing = JobFactory(team=team, gpus=None, model={"params_b": 0})
    assert checkpoint_interval_proposal(job=nothing).cost_source == CostSource.DEFAULT


def test_a_running_gang_is_planned_for_the_servers_and_tiers_it_holds(team) -> None:
    now = timezone.now()
    job = JobFactory(team=team, tier="spot-ok", gpus=8, replicas=2, state="running", submitted_at=now, started_at=now)
    spot, on_demand, old = NodeFactory(tier="spot"), NodeFactory(tier="on-demand"), NodeFactory(tier="spot")
    AllocationFactory(job=job, node=spot, tier="spot", gpu_index=0)
    AllocationFactory(job=job, node=spot, tier="spot", gpu_index=1)  # one server, however many GPUs
    AllocationFactory(job=job, node=on_demand, tier="on-demand", replica=1)
    earlier = now - timedelta(hours=1)
    AllocationFactory(job=job, node=old, tier="spot", started_at=earlier, ended_at=now)  # an earlier run: not counted
    proposal = checkpoint_interval_proposal(job=job)
    assert (proposal.placed, proposal.nodes, proposal.tiers) == (True, 2, ("on-demand", "spot"))
    # The gang stops when either server does: the rates add up.
    assert proposal.mtbf_s == pytest.approx(86_400 / (RATES["spot"] + RATES["on-demand"]))
    assert proposal.tier_label == "on-demand + spot"


def test_a_tier_rated_zero_gets_the_cap(team, checkpoints) -> None:
    checkpoints["interruptions_per_node_day"]["reserved"] = 0.0
    proposal = checkpoint_interval_proposal(job=JobFactory(team=team, tier="reserved-only"))
    assert (proposal.interval_s, proposal.bound, proposal.mtbf_s, proposal.young_s) == (CAP_S, "cap", None, None)


def test_a_spec_is_planned_like_a_pending_job_and_an_empty_inventory_has_8_gpu_servers() -> None:
    proposal = checkpoint_interval_proposal_for_spec(
        tier="spot-ok", priority="normal", replicas=4, gpus_per_replica=DEFAULT_GPUS_PER_NODE, model=None
    )
    assert (proposal.tiers, proposal.nodes, proposal.placed, proposal.own_interval_s) == (("spot",), 4, False, None)
    assert proposal.interval_s == pytest.approx(_young(COST_S, RATES["spot"], 4))
    by_model = checkpoint_interval_proposal_for_spec(
        tier="any", priority="high", replicas=1, gpus_per_replica=None, model=ModelProfile(params_b=1)
    )
    assert by_model.cost_source == CostSource.MODEL and by_model.tiers == ("reserved",)
    with pytest.raises(ValueError):
        checkpoint_interval_proposal_for_spec(
            tier="cheap", priority="normal", replicas=1, gpus_per_replica=1, model=None
        )


# --- the pages ------------------------------------------------------------------------------------------------

FIELDS = {"tier": "spot-ok", "priority": "normal", "replicas": "2", "request_by": "gpus", "gpus": "8"}


def test_the_submit_page_proposes_an_interval_and_refreshes_it_as_fields_change(
    client, member, team, checkpoints
) -> None:
    client.force_login(member)
    page = client.get(reverse("jobs:submit")).content.decode()
    assert 'data-testid="checkpoint-proposal"' in page and reverse("jobs:checkpoint_interval") in page
    response = client.post(reverse("jobs:checkpoint_interval"), FIELDS)
    body = response.content.decode()
    proposal = response.context["proposal"]
    assert (proposal.tiers, proposal.nodes) == (("spot",), 2)
    assert "spot MTBF of 3 h" in body and "over 2 servers" in body and "assumed until the job reports its own" in body
    assert f'data-fill-interval="{round(proposal.interval_s)}"' in body
    checkpoints["interruptions_per_node_day"]["reserved"] = 0.0001  # Young: 2.3 days, above the cap
    capped = client.post(reverse("jobs:checkpoint_interval"), {**FIELDS, "tier": "reserved-only"})
    assert capped.context["proposal"].bound == "cap" and "; capped (the formula gives " in capped.content.decode()
    invalid = client.post(reverse("jobs:checkpoint_interval"), {**FIELDS, "replicas": "0"})
    assert invalid.context["proposal"] is None and b"checkpoint-proposal" not in invalid.content


def test_the_proposal_endpoint_needs_a_signed_in_user_and_a_post(client, member) -> None:
    anonymous = client.post(reverse("jobs:checkpoint_interval"), FIELDS)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    client.force_login(member)
    assert client.get(reverse("jobs:checkpoint_interval")).status_code == 405


def test_the_job_page_shows_the_proposal_beside_the_jobs_own_interval(client, member, outsider, team) -> None:
    job = JobFactory(team=team, name="spot-trainer", tier="spot-ok", checkpoint_interval_s=600)
    _checkpointed(job, 42.0, 1)
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "Proposed: every" in body and "measured: the median of its latest 1 checkpoint)" in body
    assert "Its own: every 10 min" in body
    service = JobFactory(team=team, kind="inference", gpus=1)
    assert "Proposed: every" not in client.get(reverse("jobs:detail", args=[service.pk])).content.decode()
    none = JobFactory(team=team, tier="spot-ok")
    assert "It sets none" in client.get(reverse("jobs:detail", args=[none.pk])).content.decode()
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404
