"""The two B2 mixes: inference's share of the offered demand, and guarantees that cover the inference teams'
expected non-preemptible demand (scheduler/sim/workload/mixed.py, "Teams and guarantees")."""

from __future__ import annotations

import pytest

from scheduler.core.model.vocabulary import JobKind, Priority
from scheduler.core.sizing.need import replica_need
from scheduler.sim.workload.clusters import mixed_64
from scheduler.sim.workload.mixed import (
    INFERENCE_TEAMS,
    MIXES,
    REFERENCE_MODEL,
    WorkloadConfig,
    generate,
    inference_guarantee_share,
    non_preemptible_share,
)

RUNTIMES = tuple(float(x) for x in (5, 60, 120, 600, 1200, 3600, 7200, 20_000, 100_000))
INFERENCE = {name for name, _ in INFERENCE_TEAMS}


def test_the_mixes() -> None:
    assert MIXES == {"balanced": 0.4, "serving": 0.8}
    assert non_preemptible_share() == pytest.approx(0.8)  # production 50 % + high 30 % of the services


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("load", [1.2, 1.5])
def test_inference_guarantees_cover_the_expected_non_preemptible_demand(mix: str, load: float) -> None:
    share = MIXES[mix]
    workload = generate(mixed_64(), WorkloadConfig(seed=1, hours=1, load=load, inference_share=share), RUNTIMES)
    gpus = workload.cluster.gpus
    guaranteed = sum(dict(team.guaranteed)["any"] for team in workload.scenario.teams if team.name in INFERENCE)
    expected = 0.8 * share * load * gpus
    assert guaranteed >= expected - 0.02  # guarantees are rounded to 0.01 GPU per team
    assert guaranteed == pytest.approx(gpus * inference_guarantee_share(share, load), abs=0.02)
    total = sum(dict(team.guaranteed)["any"] for team in workload.scenario.teams)
    assert total == pytest.approx(gpus, abs=0.05)  # the training teams share the rest


def test_at_the_default_load_the_guarantees_are_the_mix_share() -> None:
    assert inference_guarantee_share(0.4, 1.2) == 0.4 and inference_guarantee_share(0.8, 1.2) == 0.8
    assert inference_guarantee_share(0.4, 1.5) == pytest.approx(0.48)
    assert inference_guarantee_share(0.8, 2.0) == 1.0


@pytest.mark.parametrize("mix", list(MIXES))
def test_inference_carries_its_share_of_the_offered_demand(mix: str) -> None:
    share = MIXES[mix]
    workload = generate(mixed_64(), WorkloadConfig(seed=3, hours=400, inference_share=share), RUNTIMES)
    policy = workload.scenario.policy
    need = {JobKind.INFERENCE: 0.0, JobKind.TRAINING: 0.0}
    for job in workload.jobs:
        if job.submitted_at > 0:
            need[job.kind] += replica_need(job, REFERENCE_MODEL, policy) * job.replicas * (job.duration_s or 0.0)
    assert need[JobKind.INFERENCE] / sum(need.values()) == pytest.approx(share, abs=0.08)
    production = [j for j in workload.jobs if j.kind == JobKind.INFERENCE and j.priority == Priority.PRODUCTION]
    assert production and all(not j.preemptible for j in production)
