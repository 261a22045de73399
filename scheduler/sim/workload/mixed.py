"""Seeded generator of mixed inference + training workloads (spec/benchmarks.md B2; B3 uses it training-only).

Pure: the same cluster, configuration and run-time sample give the same :class:`~scheduler.sim.Scenario`.
The Philly run times are an argument (load them with :func:`scheduler.sim.traces.philly.load_philly_runtimes`
from :func:`default_philly_path`, resolved at run time; the trace is never copied into the project).

Arrivals: one Poisson process (exponential gaps) from t = 0 to the end of the window; each arrival is an
inference service with probability ``p`` and a training job otherwise, ``p`` chosen so that inference carries
``inference_share`` of the offered demand. The rate is set so that the offered demand — expected true need
(``scheduler.core.sizing.need.replica_need``, on an A100-SXM4-80GB) × expected duration × arrival rate — is
``load`` × the cluster's GPUs. Expectations are exact sums over the tables below, not samples.

Stationary start: services live for hours, so an empty cluster would take most of a day to reach its steady
inference population. The generator therefore also draws the services' arrivals over the
``PREHISTORY_S`` (48 h) before t = 0, from their own seeded stream, and submits those still alive at t = 0
with their remaining lifetime (an M/G/∞ population in equilibrium). Training starts from an empty queue; the
warm-up (default 2 h, excluded from the figures) lets it fill.

Inference services (``kind: inference``, memory from :mod:`scheduler.core.sizing.memory` via a ``model`` request):

| draw | distribution |
|---|---|
| parameters (B) | 1: 12 %, 3: 14 %, 7: 30 %, 8: 15 %, 13: 13 %, 34: 8 %, 70: 8 % |
| dtype | int4 30 %, int8 30 %, bf16 40 % |
| context (tokens) | 2,048: 35 %, 4,096: 35 %, 8,192: 20 %, 32,768: 10 % |
| batch | 1: 40 %, 2: 30 %, 4: 20 %, 8: 10 % |
| replicas | 1: 70 %, 2: 20 %, 3: 10 % |
| priority | production 50 %, high 30 %, normal 20 % (only normal is preemptible) |
| lifetime | 30 min + exponential with mean 6 h (long-running; then the service is retired) |
| team | ``serving`` or ``assist``, equally likely |

Training jobs (``kind: training``, whole GPUs, preemptible, checkpointed):

| draw | distribution |
|---|---|
| GPUs (B2) | 1: 40 %, 2: 15 %, 4: 15 %, 8: 15 %, 16: 10 %, 32: 5 % (mostly small, as in Philly: ATC '19) |
| GPUs (B3) | 2: 20 %, 4: 20 %, 8: 20 %, 16: 20 %, 32: 12 %, 64: 8 % |
| pod shape | GPUs per replica 1, 2, 4 or 8 (those ≤ the job's GPUs), equally likely; replicas = GPUs / that |
| run time | a uniform draw from the Philly sample, clipped to [60 s, 24 h] (9 % are under 1 min, 3.5 % over 1 day) |
| priority | high 15 %, normal 60 %, low 25 % |
| checkpoint interval | 10 min 30 %, 30 min 40 %, 60 min 30 % |
| team | ``research``, ``vision`` or ``speech``, equally likely |

Mixes (spec B2 ``--mix``, :data:`MIXES`): ``balanced`` — inference carries 40 % of the offered demand (the
default); ``serving`` — 80 %, the share of requested GPU-time latency-sensitive pods hold in Alibaba's openb
trace. Nothing else differs between them.

Teams and guarantees — the inference teams' guarantees cover their expected non-preemptible demand, as a
platform team would size them. Production and high services are not preemptible (80 % of the services, by
the priority table), so the expected non-preemptible inference demand is ``0.8 × inference_share × load`` of
the cluster's GPUs (the offered demand is ``load`` × GPUs in true need, the unit quotas are counted in). The
inference teams share ``max(inference_share, 0.8 × inference_share × load)`` of the GPUs as guarantees
(serving 2/3, assist 1/3), capped at the whole cluster; the training teams share the rest (research 40 %,
vision 30 %, speech 30 %). At load 1.2 that is 0.384 < 0.4 of the GPUs (``balanced``) and 0.768 < 0.8
(``serving``): the share covers it and the guarantees are the mix's share; at load 1.5 it is 0.48 and 0.96.
Every team may burst to the whole cluster. All jobs may use any tier (the engine keeps production off spot by
its own rule). :func:`inference_guarantee_share` computes it; a test checks it covers the demand.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, ModelProfile, Request, Team
from scheduler.core.model.vocabulary import Dtype, JobKind, Priority
from scheduler.core.sizing.need import replica_need
from scheduler.sim.events import Submit, TimedEvent
from scheduler.sim.scenario import Scenario
from scheduler.sim.workload.clusters import ClusterDef

T = TypeVar("T")
Table = tuple[tuple[T, float], ...]

PARAMS_B: Table[float] = ((1, 0.12), (3, 0.14), (7, 0.30), (8, 0.15), (13, 0.13), (34, 0.08), (70, 0.08))
DTYPES: Table[Dtype] = ((Dtype.INT4, 0.3), (Dtype.INT8, 0.3), (Dtype.BF16, 0.4))
CONTEXTS: Table[int] = ((2048, 0.35), (4096, 0.35), (8192, 0.20), (32768, 0.10))
BATCHES: Table[int] = ((1, 0.4), (2, 0.3), (4, 0.2), (8, 0.1))
SERVICE_REPLICAS: Table[int] = ((1, 0.7), (2, 0.2), (3, 0.1))
SERVICE_PRIORITIES: Table[Priority] = ((Priority.PRODUCTION, 0.5), (Priority.HIGH, 0.3), (Priority.NORMAL, 0.2))
SERVICE_MIN_S = 1800.0
SERVICE_MEAN_EXTRA_S = 6 * 3600.0
TRAINING_GPUS_MIXED: Table[int] = ((1, 0.40), (2, 0.15), (4, 0.15), (8, 0.15), (16, 0.10), (32, 0.05))
TRAINING_GPUS_TOPOLOGY: Table[int] = ((2, 0.20), (4, 0.20), (8, 0.20), (16, 0.20), (32, 0.12), (64, 0.08))
GPUS_PER_POD = (1, 2, 4, 8)
TRAINING_PRIORITIES: Table[Priority] = ((Priority.HIGH, 0.15), (Priority.NORMAL, 0.60), (Priority.LOW, 0.25))
CHECKPOINT_INTERVALS_S: Table[float] = ((600.0, 0.3), (1800.0, 0.4), (3600.0, 0.3))
RUNTIME_MIN_S = 60.0
RUNTIME_MAX_S = 24 * 3600.0
INFERENCE_TEAMS: Table[str] = (("serving", 2 / 3), ("assist", 1 / 3))
TRAINING_TEAMS: Table[str] = (("research", 0.4), ("vision", 0.3), ("speech", 0.3))
REFERENCE_MODEL = "A100-SXM4-80GB"  # the cluster's most common GPU: offered need is counted on it
PREHISTORY_S = 48 * 3600.0
MIXES: dict[str, float] = {"balanced": 0.4, "serving": 0.8}  # mix → inference's share of the offered demand
PHILLY_RUNTIME = Path("traces/philly/philly_runtime.csv")


def default_philly_path() -> Path:
    """``../shared/traces/philly/philly_runtime.csv`` beside the project root, resolved now."""
    return Path(__file__).resolve().parents[3].parent / "shared" / PHILLY_RUNTIME


@dataclass(frozen=True)
class WorkloadConfig:
    seed: int = 42
    load: float = 1.2
    hours: float = 8.0  # the measured window
    warmup_s: float = 2 * 3600.0  # excluded from the figures
    inference_share: float = 0.4  # of the offered demand
    training_gpus: Table[int] = TRAINING_GPUS_MIXED
    cycle_s: float = 10.0
    policy: Policy = field(default_factory=Policy)

    def __post_init__(self) -> None:
        problems = []
        if not self.load > 0:
            problems.append(f"load must be positive, got {self.load!r}")
        if not self.hours > 0:
            problems.append(f"hours must be positive, got {self.hours!r}")
        if self.warmup_s < 0:
            problems.append(f"warmup_s must not be negative, got {self.warmup_s!r}")
        if not 0 <= self.inference_share <= 1:
            problems.append(f"inference_share must be within [0, 1], got {self.inference_share!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def until_s(self) -> float:
        return self.warmup_s + self.hours * 3600.0

    @property
    def window(self) -> tuple[float, float]:
        return (self.warmup_s, self.until_s)


@dataclass(frozen=True)
class Workload:
    scenario: Scenario
    cluster: ClusterDef
    config: WorkloadConfig
    arrivals_per_hour: float
    inference_probability: float
    offered_load: float  # the load the rate was set for (= config.load)

    @property
    def jobs(self) -> tuple[Job, ...]:
        return tuple(e.action.job for e in self.scenario.events if isinstance(e.action, Submit))


def _pick(rng: random.Random, table: Table[T]) -> T:
    values, weights = zip(*table, strict=True)
    return rng.choices(values, weights=weights)[0]


def _expectation(table: Table[float]) -> float:
    return sum(value * weight for value, weight in table) / sum(weight for _, weight in table)


def clip_runtime(runtime_s: float) -> float:
    return min(max(runtime_s, RUNTIME_MIN_S), RUNTIME_MAX_S)


def expected_service_need_s(policy: Policy) -> float:
    """E[true need × lifetime] of one inference service, exact over the tables."""
    need = 0.0
    for (params, wp), (dtype, wd), (context, wc), (batch, wb) in itertools.product(PARAMS_B, DTYPES, CONTEXTS, BATCHES):
        job = Job("x", "x", Request(model=ModelProfile(params, dtype, context, batch)), kind=JobKind.INFERENCE)
        need += wp * wd * wc * wb * replica_need(job, REFERENCE_MODEL, policy)
    lifetime = SERVICE_MIN_S + SERVICE_MEAN_EXTRA_S
    return need * _expectation(SERVICE_REPLICAS) * lifetime


def expected_training_need_s(table: Table[int], runtimes_s: Sequence[float]) -> float:
    """E[GPUs × run time] of one training job (independent draws), exact over the table and the sample."""
    mean_runtime = sum(clip_runtime(r) for r in runtimes_s) / len(runtimes_s)
    return _expectation(table) * mean_runtime


def non_preemptible_share() -> float:
    """The share of services that are not preemptible (every priority but ``normal``, by the priority table)."""
    total = sum(weight for _, weight in SERVICE_PRIORITIES)
    return sum(weight for priority, weight in SERVICE_PRIORITIES if priority != Priority.NORMAL) / total


def inference_guarantee_share(inference_share: float, load: float) -> float:
    """The share of the cluster's GPUs the inference teams are guaranteed (module docstring): at least their
    expected non-preemptible demand, at least the mix's share, at most the cluster."""
    return min(1.0, max(inference_share, non_preemptible_share() * inference_share * load))


def _teams(capacity: int, inference_share: float, load: float) -> tuple[Team, ...]:
    teams = []
    guaranteed = inference_guarantee_share(inference_share, load)
    for table, share in ((INFERENCE_TEAMS, guaranteed), (TRAINING_TEAMS, 1 - guaranteed)):
        for name, fraction in table:
            guaranteed = round(capacity * share * fraction, 2)
            teams.append(Team(name, guaranteed=(("any", guaranteed),), burst=(("any", float(capacity)),)))
    return tuple(teams)


def _service(rng: random.Random, index: int, t: float) -> Job:
    model = ModelProfile(_pick(rng, PARAMS_B), _pick(rng, DTYPES), _pick(rng, CONTEXTS), _pick(rng, BATCHES))
    priority = _pick(rng, SERVICE_PRIORITIES)
    return Job(
        id=f"svc-{index:05d}",
        team=_pick(rng, INFERENCE_TEAMS),
        request=Request(model=model),
        kind=JobKind.INFERENCE,
        priority=priority,
        replicas=_pick(rng, SERVICE_REPLICAS),
        preemptible=priority == Priority.NORMAL,
        duration_s=round(SERVICE_MIN_S + rng.expovariate(1 / SERVICE_MEAN_EXTRA_S), 3),
        submitted_at=t,
    )


def _training(rng: random.Random, index: int, t: float, table: Table[int], runtimes_s: Sequence[float]) -> Job:
    gpus = _pick(rng, table)
    per_pod = rng.choice([g for g in GPUS_PER_POD if g <= gpus])
    return Job(
        id=f"train-{index:05d}",
        team=_pick(rng, TRAINING_TEAMS),
        request=Request(gpus=per_pod),
        kind=JobKind.TRAINING,
        priority=_pick(rng, TRAINING_PRIORITIES),
        replicas=gpus // per_pod,
        preemptible=True,
        checkpoint_interval_s=_pick(rng, CHECKPOINT_INTERVALS_S),
        duration_s=clip_runtime(rng.choice(runtimes_s)),
        submitted_at=t,
    )


def generate(cluster: ClusterDef, config: WorkloadConfig, runtimes_s: Sequence[float]) -> Workload:
    """The workload of ``config`` on ``cluster`` (module docstring); ``runtimes_s``: the Philly sample."""
    if not runtimes_s:
        raise ValueError("the run-time sample is empty; pass the Philly run times (philly_runtime.csv)")
    policy = replace(config.policy, cycle_s=config.cycle_s)
    service_s = expected_service_need_s(policy)
    training_s = expected_training_need_s(config.training_gpus, runtimes_s)
    share = config.inference_share
    p_inference = share * training_s / (share * training_s + (1 - share) * service_s)
    mean_need_s = p_inference * service_s + (1 - p_inference) * training_s
    rate_per_s = config.load * cluster.gpus / mean_need_s
    events: list[TimedEvent] = []
    services = trainings = 0
    if p_inference > 0:
        early = random.Random(f"mixed:{config.seed}:prehistory")
        t = -PREHISTORY_S + early.expovariate(rate_per_s * p_inference)
        while t < 0:
            job = _service(early, services + 1, 0.0)
            assert job.duration_s is not None
            remaining = round(job.duration_s + t, 3)
            if remaining > 0:
                services += 1
                job = replace(job, duration_s=remaining)
                events.append(TimedEvent(t=0.0, index=len(events), action=Submit(job)))
            t += early.expovariate(rate_per_s * p_inference)
    rng = random.Random(f"mixed:{config.seed}")
    t = rng.expovariate(rate_per_s)
    while t < config.until_s:
        at = round(t, 3)
        if rng.random() < p_inference:
            services += 1
            job = _service(rng, services, at)
        else:
            trainings += 1
            job = _training(rng, trainings, at, config.training_gpus, runtimes_s)
        events.append(TimedEvent(t=at, index=len(events), action=Submit(job)))
        t += rng.expovariate(rate_per_s)
    scenario = Scenario(
        name=f"{cluster.name} load {config.load:g} seed {config.seed}",
        source=f"<generated: {cluster.name}, load {config.load:g}, seed {config.seed}>",
        policy=policy,
        nodes=cluster.nodes,
        teams=_teams(cluster.gpus, share, config.load),
        events=tuple(events),
        until=config.until_s,
    )
    return Workload(scenario, cluster, config, rate_per_s * 3600, p_inference, config.load)


def offered_need_gpu_s(workload: Workload) -> float:
    """Σ true need × duration of the jobs that arrive after t = 0 (on the reference model): the realised offered
    demand (the services alive at t = 0 are the steady population, not new demand)."""
    policy = workload.scenario.policy
    total = 0.0
    for job in workload.jobs:
        if job.submitted_at <= 0:
            continue
        total += replica_need(job, REFERENCE_MODEL, policy) * job.replicas * (job.duration_s or 0.0)
    return total


def realised_load(workload: Workload) -> float:
    """Offered need-seconds / (GPUs × the arrival horizon): how close this seed came to ``load``."""
    return offered_need_gpu_s(workload) / (workload.cluster.gpus * workload.config.until_s)


def describe(workload: Workload) -> str:
    jobs = workload.jobs
    services = sum(1 for job in jobs if job.kind == JobKind.INFERENCE)
    return (
        f"{len(jobs)} jobs ({services} inference services, {len(jobs) - services} training) at "
        f"{workload.arrivals_per_hour:.2f} arrivals/h; realised offered load {realised_load(workload):.2f}"
    )


__all__ = [
    "MIXES",
    "TRAINING_GPUS_MIXED",
    "TRAINING_GPUS_TOPOLOGY",
    "Workload",
    "WorkloadConfig",
    "default_philly_path",
    "generate",
]
