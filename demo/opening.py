"""The demo's opening: the work that puts the demo fleet under contention in its first minute.

On an idle demo (no job of any team pending or running: the first ``make demo``, or one started again after its
work ended) the feed submits :data:`OPENING` at once, then the production arrival :data:`ARRIVAL` on its first
call once a cycle has bound the opening. Sized against the seeded fleet and quotas (``demo/seed.py``), the first
cycles then show every kind of wait the engine has:

- **H100** (30 whole GPUs, 22 of them off spot): demand above capacity. Language Models runs a fine-tune within
  its guarantee and pretraining that borrows above it; Computer Vision and Speech take what is left, and the
  8-GPU job that finds no whole box free waits with a *reservation*: the box whose work is expected to end
  first, and a start time.
- **A100** (42 whole GPUs): three 8-GPU gangs and a 16-GPU one for three 8-GPU A100 boxes, so an 8-GPU job
  the quota admits waits with a reservation too. Language Models' second evaluation waits for its *guarantee*
  (work that is not preemptible stays within it) and Speech's large training for its *burst limit*: both are
  held by quota, with the reason and no start time, while A100s stand idle.
- **Production arrival**: Language Models' chat service (a 70B model on four H100s) arrives once a cycle has
  bound the opening, when no H100 off spot has four GPUs idle. Production never waits: it evicts lower work at
  once, borrowed work first (``docs/scheduling-rules.md``, eviction).

Durations are virtual seconds (the simulated fleet runs ``SIMULATED_SPEED``× faster, 60× in the demo: an hour
of work is a real minute), long enough that the contention lasts for minutes, while the feed's stream
(:mod:`demo.feed`) keeps adding work.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from jobs.models import Job
from jobs.services import job_submit
from scheduler.core.model.vocabulary import JobState
from teams.models import Team

_HOUR = 3600


@dataclass(frozen=True)
class DemoJob:
    """A job the demo submits for ``team`` (a slug); ``spec`` is a job spec of ``docs/job-spec.md``."""

    team: str
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec["name"])


OPENING: tuple[DemoJob, ...] = (
    # H100: a fine-tune within the guarantee, borrowing pretraining, and more 8-GPU work than whole boxes.
    DemoJob(
        "nlp",
        {
            "name": "llm-finetune-70b",
            "project": "llm-pretrain",
            "kind": "training",
            "gpus": 8,
            "gpu_model": "H100",
            "checkpoint_interval_s": 1800,
            "duration_s": 8 * _HOUR,
        },
    ),
    DemoJob(
        "nlp",
        {
            "name": "llm-pretrain-13b",
            "project": "llm-pretrain",
            "kind": "training",
            "gpus": 8,
            "gpu_model": "H100",
            "tier": "spot-ok",
            "preemptible": True,
            "checkpoint_interval_s": 900,
            "duration_s": 12 * _HOUR,
        },
    ),
    DemoJob(
        "vision",
        {
            "name": "detect-train-vit-h",
            "project": "detect-train",
            "kind": "training",
            "gpus": 8,
            "gpu_model": "H100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 6 * _HOUR,
        },
    ),
    DemoJob(
        "speech",
        {
            "name": "asr-distill-h100",
            "project": "asr-train",
            "kind": "training",
            "gpus": 2,
            "replicas": 3,
            "gpu_model": "H100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 5 * _HOUR,
        },
    ),
    DemoJob(
        "vision",
        {
            "name": "detect-sweep-h100",
            "project": "detect-train",
            "kind": "batch",
            "gpus": 2,
            "gpu_model": "H100",
            "priority": "low",
            "preemptible": True,
            "duration_s": 3 * _HOUR,
        },
    ),
    DemoJob(
        "speech",
        {
            "name": "tts-finetune-h100",
            "project": "tts-serving",
            "kind": "training",
            "gpus": 2,
            "gpu_model": "H100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 3 * _HOUR,
        },
    ),
    # A100: 8-GPU gangs for three 8-GPU boxes; a second evaluation that is not preemptible, held by the guarantee.
    DemoJob(
        "vision",
        {
            "name": "detect-train-rcnn",
            "project": "detect-train",
            "kind": "training",
            "gpus": 8,
            "replicas": 2,
            "gpu_model": "A100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 4 * _HOUR,
        },
    ),
    DemoJob(
        "nlp",
        {
            "name": "llm-pretrain-7b",
            "project": "llm-pretrain",
            "kind": "training",
            "gpus": 8,
            "gpu_model": "A100",
            "tier": "spot-ok",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 3 * _HOUR,
        },
    ),
    DemoJob(
        "speech",
        {
            "name": "asr-pretrain-8gpu",
            "project": "asr-train",
            "kind": "training",
            "gpus": 8,
            "gpu_model": "A100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 4 * _HOUR,
        },
    ),
    DemoJob(
        "speech",
        {
            "name": "asr-train-large",
            "project": "asr-train",
            "kind": "training",
            "gpus": 4,
            "gpu_model": "A100",
            "checkpoint_interval_s": 600,
            "duration_s": 5 * _HOUR,
        },
    ),
    DemoJob(
        "nlp",
        {
            "name": "eval-harness",
            "project": "eval",
            "kind": "batch",
            "gpus": 4,
            "gpu_model": "A100",
            "duration_s": 2 * _HOUR,
        },
    ),
    DemoJob(
        "nlp",
        {
            "name": "eval-regression",
            "project": "eval",
            "kind": "batch",
            "gpus": 2,
            "gpu_model": "A100",
            "duration_s": 1 * _HOUR,
        },
    ),
)

# Production inference arriving on a full H100 fleet: it preempts lower work at once, borrowed work first.
ARRIVAL = DemoJob(
    "nlp",
    {
        "name": "chat-serving-70b",
        "project": "chat-serving",
        "kind": "inference",
        "priority": "production",
        "gpus": 4,
        "gpu_model": "H100",
        "duration_s": 4 * _HOUR,
    },
)


def opening_step(*, now: datetime) -> list[Job] | None:
    """The opening's next step (module doc): the jobs it submitted, or None when it has nothing to do now (the
    opening is under way or over, and the stream's turn has come)."""
    live = Job.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING])
    if not live.exists():
        return _submit(OPENING, now)
    started = Job.objects.filter(name=OPENING[0].name, team__slug=OPENING[0].team).order_by("-submitted_at").first()
    if started is None:
        return None  # work that is not the demo's keeps the cluster busy: the stream alone
    arrived = Job.objects.filter(name=ARRIVAL.name, team__slug=ARRIVAL.team, submitted_at__gte=started.submitted_at)
    bound = Job.objects.filter(
        name__in=[job.name for job in OPENING], submitted_at__gte=started.submitted_at, started_at__isnull=False
    )
    if not arrived.exists() and bound.exists():
        return _submit((ARRIVAL,), now)
    return None


def _submit(jobs: tuple[DemoJob, ...], now: datetime) -> list[Job]:
    """All of ``jobs`` or none: a refused one would leave the rest of the opening half-submitted, and the next
    step, seeing live work, would never submit the remainder."""
    teams = {team.slug: team for team in Team.objects.filter(slug__in={job.team for job in jobs})}
    with transaction.atomic():
        return [
            job_submit(team=teams[job.team], spec=dict(job.spec), actor=None, source="demo opening", now=now)
            for job in jobs
            if job.team in teams
        ]
