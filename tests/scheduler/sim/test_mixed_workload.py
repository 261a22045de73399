"""The seeded mixed-workload generator and the benchmark clusters: determinism, shape, distribution sanity."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import CapacityTier, JobKind, Priority
from scheduler.core.sizing.need import replica_need
from scheduler.sim.scenario import Submit
from scheduler.sim.workload.clusters import cluster_named, mixed_64, topology_cluster
from scheduler.sim.workload.mixed import (
    REFERENCE_MODEL,
    RUNTIME_MAX_S,
    RUNTIME_MIN_S,
    TRAINING_GPUS_MIXED,
    TRAINING_GPUS_TOPOLOGY,
    WorkloadConfig,
    default_philly_path,
    expected_service_need_s,
    generate,
    realised_load,
)

RUNTIMES = tuple(float(x) for x in (5, 60, 120, 600, 1200, 3600, 7200, 20_000, 100_000))


def jobs_of(config: WorkloadConfig, cluster=None) -> tuple[Job, ...]:
    return generate(cluster or mixed_64(), config, RUNTIMES).jobs


def test_same_seed_same_workload_and_another_seed_another() -> None:
    config = WorkloadConfig(seed=7, hours=4)
    assert generate(mixed_64(), config, RUNTIMES).scenario == generate(mixed_64(), config, RUNTIMES).scenario
    assert jobs_of(WorkloadConfig(seed=8, hours=4)) != jobs_of(config)


def test_the_scenario_is_what_the_replay_takes() -> None:
    workload = generate(mixed_64(), WorkloadConfig(seed=1, hours=2, warmup_s=1800), RUNTIMES)
    scenario = workload.scenario
    assert scenario.until == 1800 + 2 * 3600 and workload.config.window == (1800, 1800 + 7200)
    assert scenario.nodes == mixed_64().nodes and scenario.policy.cycle_s == 10
    times = [event.t for event in scenario.events]
    assert times == sorted(times) and all(isinstance(e.action, Submit) for e in scenario.events)
    assert len({job.id for job in workload.jobs}) == len(workload.jobs)
    assert {team.name for team in scenario.teams} == {"serving", "assist", "research", "vision", "speech"}
    guaranteed = sum(dict(team.guaranteed)["any"] for team in scenario.teams)
    assert guaranteed == pytest.approx(64, abs=0.05)


def test_services_alive_at_the_start_come_from_the_prehistory() -> None:
    jobs = jobs_of(WorkloadConfig(seed=3, hours=1))
    at_start = [job for job in jobs if job.submitted_at == 0]
    assert at_start and all(job.kind == JobKind.INFERENCE for job in at_start)
    assert all((job.duration_s or 0) > 0 for job in at_start)


def test_distributions_over_a_long_horizon() -> None:
    config = WorkloadConfig(seed=11, hours=3000, warmup_s=0)
    workload = generate(mixed_64(), config, RUNTIMES)
    arrivals = [job for job in workload.jobs if job.submitted_at > 0]
    services = [job for job in arrivals if job.kind == JobKind.INFERENCE]
    training = [job for job in arrivals if job.kind == JobKind.TRAINING]
    assert len(services) / len(arrivals) == pytest.approx(workload.inference_probability, abs=0.03)
    sizes = Counter(job.request.gpus * job.replicas for job in training)  # type: ignore[operator]
    for gpus, weight in TRAINING_GPUS_MIXED:
        assert sizes[gpus] / len(training) == pytest.approx(weight, abs=0.03)
    assert all(job.request.gpus in (1, 2, 4, 8) and job.preemptible for job in training)
    assert all(RUNTIME_MIN_S <= (job.duration_s or 0) <= RUNTIME_MAX_S for job in training)
    assert {job.duration_s for job in training} <= {max(RUNTIME_MIN_S, min(r, RUNTIME_MAX_S)) for r in RUNTIMES}
    priorities = Counter(job.priority for job in services)
    assert priorities[Priority.PRODUCTION] / len(services) == pytest.approx(0.5, abs=0.04)
    assert all(
        job.request.model is not None and job.preemptible == (job.priority == Priority.NORMAL) for job in services
    )
    params = {job.request.model.params_b for job in services}  # type: ignore[union-attr]
    assert min(params) == 1 and max(params) == 70
    needs = [replica_need(job, REFERENCE_MODEL, workload.scenario.policy) for job in services]
    assert min(needs) == pytest.approx(1 / 7) and max(needs) >= 2  # from one slice to several whole GPUs
    # the offered load the arrival rate was set for is met on a long horizon
    assert realised_load(workload) == pytest.approx(config.load, rel=0.1)


def test_inference_share_zero_gives_training_only_with_the_b3_sizes() -> None:
    config = WorkloadConfig(seed=2, hours=50, inference_share=0.0, training_gpus=TRAINING_GPUS_TOPOLOGY)
    jobs = jobs_of(config, topology_cluster(128))
    assert jobs and all(job.kind == JobKind.TRAINING for job in jobs)
    assert {job.request.gpus * job.replicas for job in jobs} <= {2, 4, 8, 16, 32, 64}  # type: ignore[operator]


def test_expected_service_need_is_a_weighted_sum_of_slices() -> None:
    lifetime_s = 1800 + 6 * 3600
    need = expected_service_need_s(WorkloadConfig().policy) / lifetime_s
    assert 1 / 7 < need < 8  # per service: more than one slice on average, far less than a server


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"load": 0}, "load"),
        ({"hours": -1}, "hours"),
        ({"warmup_s": -5}, "warmup_s"),
        ({"inference_share": 2}, "share"),
    ],
)
def test_bad_configurations_are_refused(keys: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(**keys)


def test_an_empty_runtime_sample_is_refused() -> None:
    with pytest.raises(ValueError, match="run-time sample is empty"):
        generate(mixed_64(), WorkloadConfig(), ())


def test_mixed_64_is_the_spec_cluster() -> None:
    cluster = mixed_64()
    assert cluster.gpus == 64
    assert {node.gpu_model for node in cluster.nodes} == {"A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"}
    assert len({node.leaf for node in cluster.nodes}) >= 2 and {node.spine for node in cluster.nodes} == {"spine-1"}
    assert {node.tier for node in cluster.nodes} == set(CapacityTier)
    assert all(not node.mig and node.price_per_gpu_hour > 0 for node in cluster.nodes)
    assert cluster_named("mixed-64") == cluster


def test_cluster_errors_name_what_is_known() -> None:
    with pytest.raises(ValueError, match="known: mixed-64"):
        cluster_named("mixed-65")
    with pytest.raises(ValueError, match="multiple of 8"):
        topology_cluster(60)
    assert topology_cluster(128).gpus == 128 and len({n.leaf for n in topology_cluster(128).nodes}) == 4


def test_the_default_trace_path_points_beside_the_project() -> None:
    assert default_philly_path().parts[-4:] == ("shared", "traces", "philly", "philly_runtime.csv")
