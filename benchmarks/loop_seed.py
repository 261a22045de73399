"""The B5 cluster and queue (:mod:`scheduler.sim.bench.synthetic`) written into the database through the project's
own services, for ``bench loop``.

- Nodes: :func:`scheduler.services.fleet.node_register` (GPU model, interconnect, leaf and spine, tier, price, MIG
  layouts); the 1 % the synthetic cluster has unschedulable are cordoned by an admin
  (:func:`scheduler.node_states.node_cordon`). The inventory has no time-slicing flag: the synthetic cluster's shared
  nodes are plain whole-GPU nodes here.
- Teams: one organisation file applied with :func:`teams.services.org_apply` (weights, guarantees). A synthetic team
  with no burst entry may borrow without limit; a quota row needs a burst, so it gets the whole cluster's GPUs.
  Every team is granted ``production`` for inference, as the synthetic queue has production inference.
- Jobs: B5's running work *and* its pending queue are submitted as pending jobs (the cluster starts empty, so the
  first cycle binds thousands of them and the steady cycles run on a busy cluster with the rest waiting), through
  :func:`jobs.services.job_submit_bulk` — the same checks as one submit each; a sample of ``one_by_one`` jobs goes
  through :func:`jobs.services.job_submit` one at a time to measure what a submit costs. Left out, and counted:
  milli-GPU shares (``gpu_milli`` is a trace-only key the services refuse) and jobs the engine would reject on
  this inventory (the submit refuses them with the engine's reason, so a live queue never holds them). Each job
  keeps its synthetic submission time, as an offset from ``start``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from jobs.services import JobSubmission, job_submit, job_submit_bulk
from scheduler.core import Job, NodeCensus, Policy, Snapshot, rejection_reason
from scheduler.models import Node
from scheduler.node_states import node_cordon
from scheduler.services.fleet import gpu_models_sync, node_register
from scheduler.sim.bench.synthetic import NOW
from teams.orgfile import validate_org
from teams.services import org_apply


@dataclass
class Seeded:
    """What was written and how long each part took (seconds of wall time; not part of any cycle)."""

    nodes: int = 0
    cordoned: int = 0
    teams: int = 0
    jobs: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # why → how many synthetic jobs were not submitted
    seconds: dict[str, float] = field(default_factory=dict)  # nodes, teams, jobs
    submit_one_ms: float | None = None  # median of the one-by-one submits

    def as_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "cordoned": self.cordoned,
            "teams": self.teams,
            "jobs": self.jobs,
            "left_out": self.left_out,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "submit_one_ms": None if self.submit_one_ms is None else round(self.submit_one_ms, 1),
        }


def seed(snapshot: Snapshot, *, start: datetime, one_by_one: int = 20) -> Seeded:
    """Write ``snapshot``'s nodes, teams and jobs (module doc); ``start`` is the instant the synthetic ``NOW`` maps
    to. Raises what the services raise: a synthetic job they refuse is a bug of this module, not a figure."""
    seeded = Seeded()
    clock = time.perf_counter()
    gpu_models_sync()
    for node in snapshot.nodes:
        row = node_register(
            name=node.name,
            gpu_model=node.gpu_model,
            gpu_count=node.gpu_count,
            interconnect=str(node.interconnect),
            leaf_switch=node.leaf,
            spine=node.spine,
            tier=str(node.tier),
            price_per_gpu_hour=Decimal(str(node.price_per_gpu_hour)),
            mig_layouts={gpu: layout for gpu, layout in enumerate(node.mig) if layout},
        )
        if not node.schedulable:
            seeded.cordoned += node_cordon(node=row, actor=None, reason="bench loop: unschedulable in B5", at=start)
    seeded.nodes = Node.objects.count()
    seeded.seconds["nodes"] = time.perf_counter() - clock

    clock = time.perf_counter()
    total_gpus = sum(node.gpu_count for node in snapshot.nodes)
    result = org_apply(spec=validate_org({"teams": [_team(team, total_gpus) for team in snapshot.teams]}))
    seeded.teams = len(result.keys("team", "created"))
    seeded.seconds["teams"] = time.perf_counter() - clock

    clock = time.perf_counter()
    submissions = _submissions(snapshot, start, seeded.left_out)
    samples = []
    for item in submissions[:one_by_one]:
        began = time.perf_counter()
        job_submit(team=item.team, spec=item.spec, actor=None, source="bench loop", now=item.at)
        samples.append((time.perf_counter() - began) * 1000)
    if samples:
        seeded.submit_one_ms = sorted(samples)[len(samples) // 2]
    job_submit_bulk(submissions=submissions[one_by_one:], actor=None, source="bench loop")
    seeded.jobs = len(submissions)
    seeded.seconds["jobs"] = time.perf_counter() - clock
    return seeded


def _team(team: Any, total_gpus: int) -> dict[str, Any]:
    burst = dict(team.burst)
    quotas = [
        {"gpu_class": gpu_class, "guaranteed": guaranteed, "burst": burst.get(gpu_class, total_gpus)}
        for gpu_class, guaranteed in team.guaranteed
    ]
    return {
        "name": team.name,
        "slug": team.name,
        "namespace": f"bench-{team.name}",
        "weight": int(team.weight),
        "max_priority": "production",
        "production_kinds": ["inference"],
        "quotas": quotas,
    }


def _submissions(snapshot: Snapshot, start: datetime, left_out: dict[str, int]) -> list[JobSubmission]:
    """Every synthetic job the services accept, running work first (it was submitted earlier), as submissions."""
    nodes = NodeCensus.of(snapshot.nodes)
    policy = Policy()
    jobs = [running.job for running in snapshot.running] + list(snapshot.pending)
    submissions = []
    for job in jobs:
        if job.request.gpu_milli is not None:
            left_out["milli-GPU share (trace-only)"] = left_out.get("milli-GPU share (trace-only)", 0) + 1
            continue
        if rejection_reason(job, nodes, policy) is not None:
            left_out["the engine rejects it here"] = left_out.get("the engine rejects it here", 0) + 1
            continue
        at = start + timedelta(seconds=job.submitted_at - NOW)
        submissions.append(JobSubmission(team=job.team, spec=spec_of(job), at=at))
    return submissions


def spec_of(job: Job) -> dict[str, Any]:
    """``job`` as a job spec (``spec/scenario.md`` keys), as a person would submit it."""
    request = job.request
    spec: dict[str, Any] = {"name": job.id, "kind": str(job.kind), "priority": str(job.priority)}
    if request.gpus is not None:
        spec["gpus"] = request.gpus
    elif request.mig_profile is not None:
        spec["mig_profile"] = request.mig_profile
    elif request.memory_gib is not None:
        spec["memory_gib"] = request.memory_gib
    elif request.model is not None:
        spec["model"] = {"params_b": request.model.params_b, "dtype": str(request.model.dtype)}
    if job.replicas != 1:
        spec["replicas"] = job.replicas
    if job.gpu_model is not None:
        spec["gpu_model"] = job.gpu_model
    spec["tier"] = str(job.tier)
    spec["preemptible"] = job.preemptible
    if job.checkpoint_interval_s:
        spec["checkpoint_interval_s"] = round(job.checkpoint_interval_s)
    if job.duration_s:
        spec["duration_s"] = max(1, round(job.duration_s))
    if job.rank:
        spec["rank"] = job.rank
    return spec
