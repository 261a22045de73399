"""Jobs, their append-only event log, and the GPUs they were given.

Field names follow the job keys of ``spec/scenario.md`` so one spec means the same in a scenario, the API and
the database (``gpus``, ``mig_profile``, ``memory_gib``, ``model``, ``replicas``, ``checkpoint_interval_s``,
``duration_s``, ``rank``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core import bounds
from scheduler.core.model.vocabulary import (
    TERMINAL_JOB_STATES,
    CapacityTier,
    EventType,
    JobKind,
    JobState,
    JobTier,
    Priority,
    choices_of,
)

# Exactly one way of stating the request is set (spec/scenario.md: "exactly one of gpus, mig_profile,
# memory_gib, or model").
_ONE_REQUEST = (
    (Q(gpus__isnull=False) & Q(mig_profile="") & Q(memory_gib__isnull=True) & Q(model__isnull=True))
    | (Q(gpus__isnull=True) & ~Q(mig_profile="") & Q(memory_gib__isnull=True) & Q(model__isnull=True))
    | (Q(gpus__isnull=True) & Q(mig_profile="") & Q(memory_gib__isnull=False) & Q(model__isnull=True))
    | (Q(gpus__isnull=True) & Q(mig_profile="") & Q(memory_gib__isnull=True) & Q(model__isnull=False))
)
# Sorted: a frozenset iterates in per-process hash order, which would make the migration flap.
_TERMINAL = sorted(state.value for state in TERMINAL_JOB_STATES)


class Job(models.Model):
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey("teams.Project", on_delete=models.PROTECT, related_name="jobs", null=True, blank=True)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, related_name="jobs", null=True, blank=True
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=choices_of(JobKind))
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list, blank=True, help_text='Argument list, e.g. ["python", "train.py"].')
    env = models.JSONField(default=dict, blank=True)

    # The request, per replica: exactly one of these four.
    gpus = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    mig_profile = models.CharField(max_length=32, blank=True, help_text="NVIDIA profile name, e.g. 3g.40gb.")
    memory_gib = models.DecimalField(
        max_digits=8, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal("0.01"))]
    )
    model = models.JSONField(
        null=True,
        blank=True,
        help_text='Model profile: {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8, "mode": "inference"}.',
    )

    # Host resources per replica (docs/job-spec.md); null: the cluster's default per GPU (docs/deploy.md, Pod
    # resources). host_memory_gib is the memory of the job's own processes: memory_gib above is GPU memory.
    cpu = models.DecimalField(
        max_digits=7,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(str(bounds.MIN_CPU))), MaxValueValidator(Decimal(str(bounds.MAX_CPU)))],
        help_text="CPU cores per replica; blank: the cluster's default per GPU.",
    )
    host_memory_gib = models.DecimalField(
        max_digits=8,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[
            MinValueValidator(Decimal(str(bounds.MIN_HOST_MEMORY_GIB))),
            MaxValueValidator(Decimal(str(bounds.MAX_HOST_MEMORY_GIB))),
        ],
        help_text="Host memory of the job's processes per replica, GiB (/dev/shm comes on top); blank: the "
        "cluster's default per GPU.",
    )

    replicas = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(512)])
    gpu_model = models.CharField(max_length=64, blank=True, help_text="A GPU model or class; blank: any.")
    priority = models.CharField(max_length=16, choices=choices_of(Priority), default=Priority.NORMAL)
    rank = models.IntegerField(default=0, help_text="Order within the team, set by its lead (lower runs first).")
    preemptible = models.BooleanField(default=False)
    # Production inference started on larger capacity than its right size may later be moved to its right-sized
    # slice make-before-break (docs/job-spec.md); False: the job opted out and stays where it started.
    consolidate = models.BooleanField(
        default=True,
        help_text="May be moved to its right-sized slice while it runs (new replicas ready before the old go).",
    )
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    tier = models.CharField(max_length=16, choices=choices_of(JobTier), default=JobTier.ANY)
    duration_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Expected run time at full speed."
    )
    # The restart budget (jobs.services.restarts): application failures restart the job while restarts <
    # restart_limit, then fail it; infrastructure losses (node lost, spot interruption, preemption) never count.
    restart_limit = models.PositiveSmallIntegerField(
        default=bounds.DEFAULT_RESTART_LIMIT,
        validators=[MaxValueValidator(bounds.MAX_RESTART_LIMIT)],
        help_text="Restarts allowed after application failures (a non-zero exit, an OOM kill), as a Kubernetes "
        "Job's backoffLimit.",
    )
    restarts = models.PositiveSmallIntegerField(default=0, help_text="Application failures restarted so far.")
    last_exit_reason = models.TextField(
        blank=True, help_text="The last application failure, in the cluster's words (e.g. exited with code 137)."
    )

    state = models.CharField(max_length=16, choices=choices_of(JobState), default=JobState.PENDING)
    state_reason = models.TextField(blank=True, help_text="Why pending, rejected or failed.")
    submitted_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Written by every scheduling cycle for pending jobs (cleared otherwise), so queue pages read them cheaply.
    queue_position = models.PositiveIntegerField(null=True, blank=True, help_text="1-based in the global order.")
    team_queue_position = models.PositiveIntegerField(null=True, blank=True, help_text="1-based within the team.")
    eta_at = models.DateTimeField(null=True, blank=True, help_text="When the scheduler expects it to start.")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "team"], name="job_state_team"),
            models.Index(fields=["team", "-submitted_at"], name="job_team_submitted"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=_ONE_REQUEST,
                name="job_exactly_one_request",
                violation_error_message="State the request in exactly one way: gpus, mig_profile, memory_gib or model.",
            ),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="job_replicas_positive"),
            models.CheckConstraint(condition=Q(gpus__isnull=True) | Q(gpus__gte=1), name="job_gpus_positive"),
            models.CheckConstraint(
                condition=Q(memory_gib__isnull=True) | Q(memory_gib__gt=0), name="job_memory_positive"
            ),
            models.CheckConstraint(
                condition=Q(cpu__isnull=True) | (Q(cpu__gte=bounds.MIN_CPU) & Q(cpu__lte=bounds.MAX_CPU)),
                name="job_cpu_range",
                violation_error_message=f"CPU is from {bounds.MIN_CPU:g} to {bounds.MAX_CPU:g} cores per replica.",
            ),
            models.CheckConstraint(
                condition=Q(host_memory_gib__isnull=True)
                | (
                    Q(host_memory_gib__gte=bounds.MIN_HOST_MEMORY_GIB)
                    & Q(host_memory_gib__lte=bounds.MAX_HOST_MEMORY_GIB)
                ),
                name="job_host_memory_range",
                violation_error_message=f"Host memory is from {bounds.MIN_HOST_MEMORY_GIB:g} to "
                f"{bounds.MAX_HOST_MEMORY_GIB:g} GiB per replica.",
            ),
            models.CheckConstraint(
                condition=Q(checkpoint_interval_s__isnull=True) | Q(checkpoint_interval_s__gte=1),
                name="job_checkpoint_interval_positive",
            ),
            models.CheckConstraint(
                condition=Q(duration_s__isnull=True) | Q(duration_s__gte=1), name="job_duration_positive"
            ),
            models.CheckConstraint(
                condition=Q(restart_limit__gte=0) & Q(restart_limit__lte=bounds.MAX_RESTART_LIMIT),
                name="job_restart_limit_range",
                violation_error_message=f"A restart limit is from 0 to {bounds.MAX_RESTART_LIMIT} restarts.",
            ),
            # A restart is counted only while the budget lasts, so the count never passes the limit.
            models.CheckConstraint(
                condition=Q(restarts__gte=0) & Q(restarts__lte=models.F("restart_limit")),
                name="job_restarts_within_limit",
            ),
            models.CheckConstraint(condition=Q(kind__in=[v.value for v in JobKind]), name="job_kind_valid"),
            models.CheckConstraint(condition=Q(priority__in=[v.value for v in Priority]), name="job_priority_valid"),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in JobTier]), name="job_tier_valid"),
            models.CheckConstraint(condition=Q(state__in=[v.value for v in JobState]), name="job_state_valid"),
            models.CheckConstraint(
                condition=~Q(state=JobState.RUNNING) | Q(started_at__isnull=False),
                name="job_running_has_started_at",
            ),
            models.CheckConstraint(
                condition=~Q(state__in=_TERMINAL) | Q(finished_at__isnull=False),
                name="job_finished_has_finished_at",
            ),
            models.CheckConstraint(
                condition=Q(started_at__isnull=True) | Q(started_at__gte=models.F("submitted_at")),
                name="job_starts_after_submit",
            ),
            models.CheckConstraint(
                condition=Q(finished_at__isnull=True) | Q(finished_at__gte=models.F("submitted_at")),
                name="job_finishes_after_submit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.name} #{self.pk}"

    def clean(self) -> None:
        if self.project_id is None or self.team_id is None:
            return
        if self.project is not None and self.project.team_id != self.team_id:
            raise ValidationError({"project": "This project belongs to another team: pick one of the job's team."})

    @property
    def request_display(self) -> str:
        """The request as a person would say it, e.g. ``2 × 4 GPUs`` or ``1 × 3g.40gb``."""
        if self.gpus is not None:
            what = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        elif self.mig_profile:
            what = self.mig_profile
        elif self.memory_gib is not None:
            what = f"{self.memory_gib} GiB"
        else:
            model = self.model or {}
            what = f"{model.get('params_b', '?')}B {model.get('dtype', '')} model".replace("  ", " ")
        return f"{self.replicas} × {what}"


class JobEvent(models.Model):
    """Append-only audit of what happened to a job and who did it (actor empty: the scheduler)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=24, choices=choices_of(EventType))
    at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="job_events"
    )
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["job", "at"], name="jobevent_job_at"),
            # Every cycle reads the recent preemptions and every scrape counts them: by type and time, not by a
            # scan of the whole history.
            models.Index(fields=["type", "at"], name="jobevent_type_at"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(type__in=[v.value for v in EventType]), name="jobevent_type_valid")
        ]

    def __str__(self) -> str:
        return f"{self.type} of job {self.job_id} at {self.at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # An audit row that can be rewritten is no audit: refuse updates at the lowest layer so no service,
        # admin action or shell session can change history by accident.
        if self.pk is not None and not self._state.adding:
            raise PermissionError("Job events are append-only; record a new event instead.")
        super().save(*args, **kwargs)


class Allocation(models.Model):
    """One GPU (or one MIG instance of it) held by one replica of a job, from ``started_at`` to ``ended_at``."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="allocations")
    replica = models.PositiveSmallIntegerField()
    node = models.ForeignKey("scheduler.Node", on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField(validators=[MaxValueValidator(15)])
    mig_profile = models.CharField(max_length=32, blank=True, help_text="Blank: the whole GPU.")
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MaxValueValidator(7)])
    tier = models.CharField(max_length=16, choices=choices_of(CapacityTier))
    price_per_gpu_hour = models.DecimalField(
        max_digits=10, decimal_places=4, validators=[MinValueValidator(Decimal(0))]
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=32, blank=True)
    # Which start of the job's replicas this row belongs to: a bind is generation 0, each move one more. While a
    # move is under way the job holds two generations at once (the old replicas serve until the new are ready);
    # its newest open generation is where it runs, the older open ones what it is moving from.
    generation = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-started_at", "id"]
        indexes = [models.Index(fields=["node", "gpu_index"], name="allocation_node_gpu")]
        constraints = [
            models.CheckConstraint(
                condition=(Q(mig_profile="") & Q(mig_start__isnull=True))
                | (~Q(mig_profile="") & Q(mig_start__isnull=False)),
                name="allocation_mig_profile_with_start",
                violation_error_message="A MIG allocation needs both a profile and a start; a whole GPU neither.",
            ),
            models.CheckConstraint(
                condition=Q(mig_start__isnull=True) | Q(mig_start__lte=7), name="allocation_mig_start_range"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="allocation_ends_after_start",
            ),
            models.CheckConstraint(condition=Q(price_per_gpu_hour__gte=0), name="allocation_price_non_negative"),
            models.CheckConstraint(condition=Q(tier__in=[v.value for v in CapacityTier]), name="allocation_tier_valid"),
            # Nothing is bound twice: one live holder per whole GPU and per MIG instance.
            models.UniqueConstraint(
                fields=["node", "gpu_index"],
                condition=Q(ended_at__isnull=True, mig_profile=""),
                name="allocation_one_live_whole_gpu",
            ),
            models.UniqueConstraint(
                fields=["node", "gpu_index", "mig_start"],
                condition=Q(ended_at__isnull=True, mig_start__isnull=False),
                name="allocation_one_live_mig_instance",
            ),
        ]

    def __str__(self) -> str:
        where = f"{self.node.name}/{self.gpu_index}"
        if self.mig_profile:
            where += f" {self.mig_profile}@{self.mig_start}"
        return f"job {self.job_id} replica {self.replica} on {where}"


class IdempotencyKey(models.Model):
    """The first answer to a write sent with an ``Idempotency-Key`` (the API's header, the submit form's hidden
    field), kept so that a retry gets the same answer instead of doing the write again (:mod:`jobs.idempotency`).

    Written in the same transaction as the write itself: a job never exists without the key that made it, and a
    key never without its answer. Unique per user: two users may pick the same key.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # sha256 of the endpoint and the body as sent: the same key with another request is refused, not replayed.
    fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="jobs_idempotency_key_per_user")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"
