"""The demo's feed of work: ``manage.py demo run`` keeps the demo fleet contended so the queue and the graphs move.

Beat runs :func:`demo_feed` every ``DEMO_FEED_S`` seconds (``portal/demo_settings.py``). On an idle demo it starts
the opening (:mod:`demo.opening`: the wave that fills the fleet in the first minute, then a production arrival);
afterwards each call submits one job of the *stream*, a random template of a demo team, unless enough jobs
already wait. Everything goes through ``job_submit`` like any other submission.

The stream keeps demand above capacity: at the demo's 60× a template's hours of work are real minutes, and most
templates ask for 4 to 16 whole H100 or A100 GPUs, so a job every 15 s asks for more H100 and 8-GPU A100 time than
the fleet has; the teams' burst limits and ``FEED_MAX_PENDING`` keep the queue readable.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from django.utils import timezone

from demo.opening import opening_step
from jobs.models import Job
from jobs.services import job_submit
from teams.models import Team

_MINUTE = 60
_HOUR = 60 * _MINUTE

# (team slug, project code, spec) templates; durations are virtual seconds (SIMULATED_SPEED per real second).
_FEED: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "nlp",
        "llm-pretrain",
        {
            "kind": "training",
            "gpus": 8,
            "gpu_model": "H100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 4 * _HOUR,
        },
    ),
    (
        "nlp",
        "llm-pretrain",
        {
            "kind": "training",
            "gpus": 8,
            "replicas": 2,
            "gpu_model": "H100",
            "checkpoint_interval_s": 900,
            "duration_s": 6 * _HOUR,
            "tier": "spot-ok",
            "preemptible": True,
        },
    ),
    (
        "nlp",
        "chat-serving",
        {
            "kind": "inference",
            "priority": "production",
            "model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8, "mode": "inference"},
            "duration_s": 2 * _HOUR,
        },
    ),
    (
        "nlp",
        "chat-serving",
        {"kind": "inference", "priority": "production", "gpus": 4, "gpu_model": "H100", "duration_s": 2 * _HOUR},
    ),
    (
        "nlp",
        "eval",
        {
            "kind": "batch",
            "memory_gib": 18,
            "priority": "low",
            "tier": "spot-ok",
            "preemptible": True,
            "duration_s": _HOUR // 2,
        },
    ),
    (
        "nlp",
        "llm-pretrain",
        {
            "kind": "training",
            "gpus": 8,
            "gpu_model": "A100",
            "tier": "spot-ok",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 4 * _HOUR,
        },
    ),
    (
        "vision",
        "detect-train",
        {
            "kind": "training",
            "gpus": 8,
            "gpu_model": "A100",
            "preemptible": True,
            "checkpoint_interval_s": 300,
            "duration_s": 4 * _HOUR,
        },
    ),
    (
        "vision",
        "detect-train",
        {
            "kind": "training",
            "gpus": 4,
            "gpu_model": "H100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 3 * _HOUR,
        },
    ),
    ("vision", "seg-serving", {"kind": "inference", "mig_profile": "3g.40gb", "duration_s": 2 * _HOUR}),
    (
        "vision",
        "seg-serving",
        {"kind": "inference", "mig_profile": "1g.10gb", "replicas": 2, "duration_s": 90 * _MINUTE},
    ),
    (
        "speech",
        "asr-train",
        {
            "kind": "training",
            "gpus": 4,
            "gpu_model": "A100",
            "tier": "spot-ok",
            "preemptible": True,
            "checkpoint_interval_s": 300,
            "duration_s": 3 * _HOUR,
        },
    ),
    (
        "speech",
        "asr-train",
        {
            "kind": "training",
            "gpus": 8,
            "gpu_model": "A100",
            "preemptible": True,
            "checkpoint_interval_s": 600,
            "duration_s": 4 * _HOUR,
        },
    ),
    ("speech", "tts-serving", {"kind": "inference", "memory_gib": 9, "duration_s": 90 * _MINUTE}),
    ("speech", "asr-train", {"kind": "batch", "gpus": 1, "priority": "low", "duration_s": 20 * _MINUTE}),
)
FEED_MAX_PENDING = 24  # the feed pauses while this many jobs wait, so the queue stays readable


def demo_feed(
    *, rng: random.Random | None = None, max_pending: int = FEED_MAX_PENDING, now: datetime | None = None
) -> list[Job]:
    """Submit the demo's next work through ``job_submit``: the opening's next step (:mod:`demo.opening`) when it
    has one, else one job from a random template of the stream; none when the demo teams are missing or
    ``max_pending`` jobs already wait."""
    rng = rng or random.Random()
    now = now or timezone.now()
    opening = opening_step(now=now)
    if opening is not None:
        return opening
    if Job.objects.filter(state="pending").count() >= max_pending:
        return []
    slug, project, spec = rng.choice(_FEED)
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return []
    # Durations vary ±50 % so jobs do not finish in lockstep.
    varied = {**spec, "project": project, "name": f"{project}-{rng.randrange(1000, 9999)}"}
    varied["duration_s"] = int(spec["duration_s"] * rng.uniform(0.5, 1.5))
    return [job_submit(team=team, spec=varied, actor=None, source="demo feed", now=now)]
