"""What the API reads and writes. Serializers check shapes and types only; the jobs services enforce every
rule and their messages come back as field errors (see ``jobs.api.errors``)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.moves import job_is_moving
from jobs.selectors.network import job_network
from jobs.selectors.node_requests import job_node_request
from jobs.selectors.waiting import EtaDisplay, EtaStatus, eta_display, waiting_reason
from scheduler.core import PreviewOutcome, bounds
from scheduler.core.model.vocabulary import (
    DEFAULT_JOB_KIND,
    CapacityTier,
    Dtype,
    JobKind,
    JobState,
    JobTier,
    ModelMode,
    Priority,
    choices_of,
)
from scheduler.gateways.protocol import LogSource

# Named for the OpenAPI schema (settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]): two fields are "tier".
JOB_TIER_CHOICES = choices_of(JobTier)
CAPACITY_TIER_CHOICES = choices_of(CapacityTier)

# --- reads ---------------------------------------------------------------------------------------------------


class JobSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug", read_only=True)
    project = serializers.CharField(source="project.code", read_only=True, allow_null=True, default=None)
    # null: submitted by the scheduler or a command without a user (allow_null puts "nullable" in the schema)
    submitted_by = serializers.CharField(source="submitted_by.username", read_only=True, default=None, allow_null=True)
    request = serializers.CharField(source="request_display", read_only=True, help_text="e.g. 2 × 4 GPUs")
    waiting_reason = serializers.SerializerMethodField(
        help_text="Why a pending job waits, in the scheduler's words; for a job its quota holds, what would unblock "
        "it. null for a job that is not pending."
    )
    eta_at = serializers.SerializerMethodField(
        help_text="When the scheduler expects a pending job to start: a reservation's start or its replay of the "
        "queue. null when it gives no time (eta_status none) and once that time has passed (eta_status due): a "
        "start time in the past is never given."
    )
    eta_status = serializers.SerializerMethodField(
        help_text="What eta_at is for a pending job: estimated (eta_at is ahead); due (the estimate has passed "
        "and the job has not started: the next scheduling cycle decides); none (no estimate: a job its quota "
        "holds, one deep in the queue, or one no cycle has seen yet — waiting_reason says why). null for a job "
        "that is not pending."
    )
    url = serializers.HyperlinkedIdentityField(view_name="api:job-detail", lookup_url_kwarg="pk")
    moving = serializers.SerializerMethodField(
        help_text="A move is under way: the job is starting again on its right-sized capacity while its old "
        "replicas serve (both placements are held until the new replicas are ready). Read-only."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "team",
            "project",
            "name",
            "kind",
            "image",
            "command",
            "gpus",
            "mig_profile",
            "memory_gib",
            "model",
            "request",
            "replicas",
            "gpu_model",
            "priority",
            "rank",
            "preemptible",
            "consolidate",
            "moving",
            "checkpoint_interval_s",
            "tier",
            "duration_s",
            "restart_limit",
            "cpu",
            "host_memory_gib",
            "restarts",
            "last_exit_reason",
            "state",
            "state_reason",
            "waiting_reason",
            "queue_position",
            "team_queue_position",
            "eta_at",
            "eta_status",
            "submitted_by",
            "submitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_waiting_reason(self, job: Job) -> str | None:
        return waiting_reason(job)

    @extend_schema_field(serializers.BooleanField())
    def get_moving(self, job: Job) -> bool:
        if job.state != JobState.RUNNING:
            return False  # only running work moves: no query for the queue's pages
        annotated = getattr(job, "moving", None)  # jobs.selectors.moves.with_moving: one query for a page
        return bool(annotated) if annotated is not None else job_is_moving(job)

    def _eta(self, job: Job) -> EtaDisplay | None:
        if job.state != JobState.PENDING:
            return None
        now = self.context.setdefault("now", timezone.now())  # one instant for every job of a page
        return eta_display(job.eta_at, now)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_eta_at(self, job: Job) -> str | None:
        eta = self._eta(job)
        return serializers.DateTimeField().to_representation(eta.at) if eta is not None and eta.at else None

    @extend_schema_field(serializers.ChoiceField(choices=[status.value for status in EtaStatus], allow_null=True))
    def get_eta_status(self, job: Job) -> str | None:
        eta = self._eta(job)
        return eta.status.value if eta is not None else None


class ReplicaLogSerializer(serializers.Serializer):
    """One replica's log as ``GET /api/v1/jobs/{id}/logs/`` gives it (``jobs.selectors.logs``)."""

    job = serializers.IntegerField()
    replica = serializers.IntegerField()
    tail = serializers.IntegerField(help_text="The lines asked for; the text may hold fewer.")
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a declared field, not Field.source
        choices=[source.value for source in LogSource],
        help_text="kubernetes: the job container's output; simulated: the replica's lifecycle lines only.",
    )
    truncated = serializers.BooleanField(help_text="The size limit cut the text short.")
    note = serializers.CharField(allow_blank=True, help_text="Why the log is empty, in the cluster's words.")
    text = serializers.CharField(allow_blank=True)


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor.username", read_only=True, default=None, allow_null=True, help_text="null: scheduler"
    )

    class Meta:
        model = JobEvent
        fields = ["type", "at", "actor", "details"]
        read_only_fields = fields


class MoveSerializer(serializers.Serializer):
    """One move of a job (``jobs.selectors.moves``), read-only."""

    generation = serializers.IntegerField(help_text="The start of the job's replicas the move made (1, 2, …)")
    started_at = serializers.DateTimeField()
    source = serializers.CharField(  # type: ignore[assignment]  # a declared field, not Field.source
        help_text='The placement it leaves, e.g. "a100-1 GPU 3"'
    )
    target = serializers.CharField(help_text='The placement it starts, e.g. "mig-1 GPU 0 (3g.40gb)"')
    outcome = serializers.ChoiceField(
        choices=["under-way", "completed", "abandoned"],
        help_text="under-way: the old replicas serve until the new are ready; completed: the old ones stopped; "
        "abandoned: the new ones stopped and the job kept its old placement (reason says why)",
    )
    ended_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)


class AllocationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    gpu_model = serializers.CharField(source="node.gpu_model.name", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "replica",
            "generation",
            "node",
            "gpu_model",
            "gpu_index",
            "mig_profile",
            "mig_start",
            "tier",
            "price_per_gpu_hour",
            "started_at",
            "ended_at",
            "end_reason",
        ]
        read_only_fields = fields


class UsageSerializer(serializers.Serializer):
    gpu_hours = serializers.FloatField(help_text="GPU-equivalent hours (a 3g MIG slice counts 3/7 per hour)")
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, help_text="At each allocation's price")


class NetworkSerializer(serializers.Serializer):
    fabric = serializers.CharField(help_text='The nodes\' fabric ("efa", "infiniband", …); "tcp": none; "mixed"')
    devices_per_node = serializers.IntegerField(help_text="Fabric devices each node offers (0 without a fabric)")
    nodes = serializers.IntegerField(help_text="Nodes the placement spans")
    label = serializers.CharField(  # type: ignore[assignment]  # a declared field, not Field.label
        help_text='"EFA × 32 per node", "TCP only — no fabric on these nodes"'
    )


class NodeRequestSerializer(serializers.Serializer):
    state = serializers.CharField(
        help_text="pending, provisioned, fulfilled, failed, revoked, withdrawn or timed-out (docs/billing.md)"
    )
    pool = serializers.CharField(help_text="The autoscaled pool asked")
    nodes = serializers.IntegerField()
    gpus_per_node = serializers.IntegerField()
    requested_at = serializers.DateTimeField(help_text="When the nodes were asked for")
    arrives_at = serializers.DateTimeField(help_text="When they were expected, as estimated when asked")
    state_since = serializers.DateTimeField()
    message = serializers.CharField(help_text="The autoscaler's words (why it failed), or the loop's")
    node_names = serializers.ListField(child=serializers.CharField(), help_text="The nodes it brought")


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    allocations = AllocationSerializer(many=True, read_only=True)
    moves = MoveSerializer(many=True, read_only=True)
    usage = UsageSerializer(read_only=True)
    network = serializers.SerializerMethodField(
        help_text="The network between the nodes of a placement that spans more than one; null otherwise"
    )

    node_request = serializers.SerializerMethodField(
        help_text="The on-demand nodes last asked of an autoscaled pool for the job; null when none were"
    )

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "env",
            "events",
            "allocations",
            "moves",
            "usage",
            "network",
            "node_request",
        ]
        read_only_fields = fields

    @extend_schema_field(NetworkSerializer(allow_null=True))
    def get_network(self, job: Job) -> dict[str, Any] | None:
        network = job_network(job=job)
        return None if network is None else NetworkSerializer(network).data

    @extend_schema_field(NodeRequestSerializer(allow_null=True))
    def get_node_request(self, job: Job) -> dict[str, Any] | None:
        request = job_node_request(job=job)  # the job was read through the caller's scope (JobViewSet.get_object)
        return None if request is None else NodeRequestSerializer(request).data


# --- writes --------------------------------------------------------------------------------------------------


# The write serializers describe a job spec in the OpenAPI schema only: the body of a submit or right-sizing
# question goes whole to the one job-spec reader (``jobs.api.specs``), and the ranges here are read from the
# same table (scheduler.core.sizing.bounds), so the schema and the refusals agree.


class ModelProfileSerializer(serializers.Serializer):
    params_b = serializers.FloatField(
        min_value=0.001, max_value=bounds.MAX_PARAMS_B, help_text="Parameters in billions"
    )
    dtype = serializers.ChoiceField(choices=choices_of(Dtype), default=Dtype.BF16.value)
    context = serializers.IntegerField(  # type: ignore[assignment]  # a declared field, not Field.context
        min_value=1, max_value=bounds.MAX_CONTEXT, default=4096, help_text="Tokens"
    )
    batch = serializers.IntegerField(min_value=1, max_value=bounds.MAX_BATCH, default=1, help_text="Sequences")
    mode = serializers.ChoiceField(
        choices=choices_of(ModelMode),
        required=False,
        help_text="The memory model; default: the kind's (training for training jobs, else inference). One that "
        "contradicts the kind is refused (batch work may state either)",
    )


class RequestSerializer(serializers.Serializer):
    """The request of one replica, stated exactly one way, as in spec/scenario.md."""

    kind = serializers.ChoiceField(choices=choices_of(JobKind), default=DEFAULT_JOB_KIND.value)
    gpus = serializers.IntegerField(min_value=1, max_value=bounds.MAX_GPUS, required=False)
    mig_profile = serializers.CharField(max_length=32, required=False)
    memory_gib = serializers.FloatField(
        min_value=bounds.MIN_MEMORY_GIB, max_value=round(bounds.MAX_MEMORY_GIB, 2), required=False
    )
    model = ModelProfileSerializer(required=False)
    replicas = serializers.IntegerField(min_value=1, max_value=bounds.MAX_REPLICAS, default=1)
    gpu_model = serializers.CharField(max_length=64, required=False, help_text="A GPU model or class")


class JobSubmitSerializer(RequestSerializer):
    team = serializers.CharField(max_length=bounds.MAX_NAME_CHARS, help_text="Team slug")
    name = serializers.CharField(max_length=bounds.MAX_NAME_CHARS, required=False, help_text="Default: id, else job")
    id = serializers.CharField(
        max_length=bounds.MAX_NAME_CHARS, required=False, help_text="A scenario's job id; the name when name is absent"
    )
    project = serializers.CharField(
        max_length=bounds.MAX_PROJECT_CHARS, required=False, help_text="Project (chargeback) code"
    )
    image = serializers.CharField(max_length=bounds.MAX_IMAGE_CHARS, required=False, allow_blank=True)
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True),
        required=False,
        help_text=f"Arguments; at most {bounds.MAX_COMMAND_BYTES // 1024} KiB in all",
    )
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True),
        required=False,
        help_text=f"Variable names as in a shell; at most {bounds.MAX_ENV_KEYS} variables, "
        f"{bounds.MAX_ENV_BYTES // 1024} KiB in all",
    )
    priority = serializers.ChoiceField(choices=choices_of(Priority), default=Priority.NORMAL.value)
    rank = serializers.IntegerField(min_value=-bounds.MAX_RANK, max_value=bounds.MAX_RANK, required=False)
    preemptible = serializers.BooleanField(required=False)
    consolidate = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Production inference started on larger capacity than its right size may later be moved to its "
        "right-sized slice, make-before-break; false keeps it where it starts",
    )
    checkpoint_interval_s = serializers.IntegerField(min_value=1, max_value=bounds.MAX_SECONDS, required=False)
    tier = serializers.ChoiceField(choices=choices_of(JobTier), default=JobTier.ANY.value)
    duration_s = serializers.IntegerField(min_value=1, max_value=bounds.MAX_SECONDS, required=False)
    restart_limit = serializers.IntegerField(
        min_value=0,
        max_value=bounds.MAX_RESTART_LIMIT,
        default=bounds.DEFAULT_RESTART_LIMIT,
        help_text="Restarts after application failures (a non-zero exit, an OOM kill) before the job fails, as a "
        "Kubernetes Job's backoffLimit; node losses, spot interruptions and preemptions never count",
    )
    cpu = serializers.FloatField(
        min_value=bounds.MIN_CPU,
        max_value=bounds.MAX_CPU,
        required=False,
        help_text="CPU cores per replica (requests = limits); absent: the cluster's default per GPU",
    )
    host_memory_gib = serializers.FloatField(
        min_value=bounds.MIN_HOST_MEMORY_GIB,
        max_value=bounds.MAX_HOST_MEMORY_GIB,
        required=False,
        help_text="Host memory of the job's processes per replica, GiB (/dev/shm comes on top; memory_gib is GPU "
        "memory); absent: the cluster's default per GPU",
    )


class PrioritySerializer(serializers.Serializer):
    priority = serializers.ChoiceField(choices=choices_of(Priority))


class RankSerializer(serializers.Serializer):
    rank = serializers.IntegerField(min_value=-2_147_483_647, max_value=2_147_483_647)


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)


class JobIdsSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="Team slug")
    job_ids = serializers.ListField(child=serializers.IntegerField(min_value=1), min_length=1, max_length=10_000)


class ReorderSerializer(JobIdsSerializer):
    job_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        min_length=1,
        max_length=10_000,
        help_text="Every pending job of the team, in the order they should run (within each priority)",
    )


class BulkCancelSerializer(JobIdsSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)


# --- checkpoints ---------------------------------------------------------------------------------------------

# The largest integer every JSON reader holds exactly (2**53 - 1, a JavaScript number's): a step or a size
# beyond it would not come back as it was sent.
MAX_JSON_INT = 2**53 - 1


class CheckpointSerializer(serializers.Serializer):
    """One recorded checkpoint (``jobs.selectors.jobs.CheckpointRow``)."""

    step = serializers.IntegerField(allow_null=True, help_text="null: the cluster reported a time only")
    saved_at = serializers.DateTimeField()
    size_bytes = serializers.IntegerField(allow_null=True)
    duration_s = serializers.FloatField(allow_null=True, help_text="How long the save took: the checkpoint cost")
    path = serializers.CharField(help_text="The checkpoint's file as the job's pods see it (RESUME_FROM)")
    replica = serializers.IntegerField(allow_null=True)
    source = serializers.CharField(  # type: ignore[assignment]  # a declared field, not Field.source
        help_text="job (its own report), manifest (read by the gateway), simulated; empty: not known"
    )


class CheckpointReportSerializer(serializers.Serializer):
    """A job's report of one complete checkpoint. Shapes and ranges only: ``jobs.services.checkpoint_record``
    judges the rest (a time in the future or before the job was submitted) with the same field errors."""

    step = serializers.IntegerField(min_value=0, max_value=MAX_JSON_INT, help_text="Training steps done")
    saved_at = serializers.DateTimeField(
        default_timezone=UTC, help_text="When the checkpoint was complete (ISO 8601; without an offset: UTC)"
    )
    size_bytes = serializers.IntegerField(min_value=0, max_value=MAX_JSON_INT, default=0)
    duration_s = serializers.FloatField(
        min_value=0, max_value=bounds.MAX_SECONDS, default=0.0, help_text="How long the save took"
    )
    path = serializers.CharField(
        max_length=1000,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="The checkpoint's file as the job's pods see it",
    )
    replica = serializers.IntegerField(
        min_value=0, max_value=bounds.MAX_REPLICAS - 1, default=0, help_text="The reporting replica (0-based)"
    )

    def validate_replica(self, value: int) -> int:
        job = self.context.get("job")
        if job is not None and value >= job.replicas:
            last = job.replicas - 1
            raise serializers.ValidationError(
                f"job {job.pk} has {job.replicas} replica{'s' if job.replicas != 1 else ''}, numbered 0 to {last}: "
                "send the reporting replica's index (its MICROCOSM_REPLICA)"
            )
        return value


# --- right-sizing ---------------------------------------------------------------------------------------------


class RightsizeSerializer(RequestSerializer):
    """A right-sizing question: the request, and what decides where and when the engine starts the job."""

    team = serializers.CharField(
        max_length=bounds.MAX_NAME_CHARS,
        required=False,
        help_text="Team slug: the answer says what the engine does now for this team's job. Default: your team "
        "when you are in exactly one; otherwise the answer has no 'now'",
    )
    priority = serializers.ChoiceField(choices=choices_of(Priority), default=Priority.NORMAL.value)
    tier = serializers.ChoiceField(choices=choices_of(JobTier), default=JobTier.ANY.value)
    preemptible = serializers.BooleanField(required=False)


class OptionSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    gpu_class = serializers.CharField()
    tier = serializers.CharField(help_text="Capacity tier: reserved, on-demand or spot")
    mig_profile = serializers.CharField(allow_null=True)
    gpus = serializers.IntegerField()
    gpu_equivalents = serializers.FloatField()
    price_per_gpu_hour = serializers.DecimalField(
        max_digits=12, decimal_places=4, allow_null=True, help_text="The price catalog's, now"
    )
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field, not Field.label


class NowSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(
        choices=[(o.value, o.value) for o in PreviewOutcome],
        help_text="starts: the next cycle binds it; after-mig-change: once a MIG reconfiguration is done; waits; "
        "never: it could never run on this cluster (a submit is refused)",
    )
    option = OptionSerializer(allow_null=True, help_text="What each replica gets, when it starts")
    nodes = serializers.ListField(child=serializers.CharField(), help_text="Where, one node per replica")
    cost_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=2, allow_null=True, help_text="The whole job at catalog prices"
    )
    after_s = serializers.FloatField(help_text="Seconds until it starts")
    evictions = serializers.IntegerField(help_text="Running jobs the scheduler stops to make room")
    reason = serializers.CharField(help_text="Why it waits or never runs")
    eta_s = serializers.FloatField(allow_null=True, help_text="When it waits: the start estimate, seconds from now")


class SuggestionSerializer(serializers.Serializer):
    options = OptionSerializer(many=True, help_text="Where the job could run, in the order the scheduler tries")
    best = OptionSerializer(allow_null=True, help_text="Where it starts now, else the scheduler's first choice")
    cost_per_hour = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    now = NowSerializer(allow_null=True, help_text="What the scheduler does if the job is submitted now")
    memory_gib = serializers.FloatField(allow_null=True)
    memory_breakdown = serializers.CharField()
    reason = serializers.CharField()
    replicas = serializers.IntegerField()
