"""The demo's stream of work: ``manage.py demo run`` keeps jobs flowing so the queue and the graphs move.

Beat runs :func:`demo_feed` every ``DEMO_FEED_S`` seconds (``portal/demo_settings.py``): one job from a
template of a demo team, submitted through ``job_submit`` like any other, unless enough jobs already wait.
"""

from __future__ import annotations

import random
from typing import Any

from jobs.models import Job
from jobs.services import job_submit
from teams.models import Team

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
            "duration_s": 3600,
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
            "duration_s": 5400,
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
            "duration_s": 2400,
        },
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
            "duration_s": 900,
        },
    ),
    (
        "vision",
        "detect-train",
        {
            "kind": "training",
            "gpus": 4,
            "gpu_model": "A100",
            "preemptible": True,
            "checkpoint_interval_s": 300,
            "duration_s": 2400,
        },
    ),
    ("vision", "seg-serving", {"kind": "inference", "mig_profile": "3g.40gb", "duration_s": 1800}),
    ("vision", "seg-serving", {"kind": "inference", "mig_profile": "1g.10gb", "replicas": 2, "duration_s": 1200}),
    (
        "speech",
        "asr-train",
        {
            "kind": "training",
            "gpus": 2,
            "gpu_model": "A100",
            "tier": "spot-ok",
            "preemptible": True,
            "checkpoint_interval_s": 300,
            "duration_s": 1800,
        },
    ),
    ("speech", "tts-serving", {"kind": "inference", "memory_gib": 9, "duration_s": 1500}),
    ("speech", "asr-train", {"kind": "batch", "gpus": 1, "priority": "low", "duration_s": 600}),
)
FEED_MAX_PENDING = 24  # the feed pauses while this many jobs wait, so the queue stays readable


def demo_feed(*, rng: random.Random | None = None, max_pending: int = FEED_MAX_PENDING) -> Job | None:
    """Submit one demo job (a random template for its demo team) through ``job_submit``; None when the demo
    teams are missing or ``max_pending`` jobs already wait."""
    rng = rng or random.Random()
    if Job.objects.filter(state="pending").count() >= max_pending:
        return None
    slug, project, spec = rng.choice(_FEED)
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return None
    # Durations vary ±50 % so jobs do not finish in lockstep.
    varied = {**spec, "project": project, "name": f"{project}-{rng.randrange(1000, 9999)}"}
    varied["duration_s"] = int(spec["duration_s"] * rng.uniform(0.5, 1.5))
    return job_submit(team=team, spec=varied, actor=None, source="demo feed")
