"""Forms of the portal's job pages: they parse what a person typed into a job spec (the job keys of
spec/scenario.md) and show every problem next to its field; the services decide the rest."""

from __future__ import annotations

import shlex
import uuid
from typing import Any, cast

from django import forms
from django.http import QueryDict

from jobs.access import check_grant, priorities_allowed, priorities_offered
from jobs.errors import IdempotencyKeyInvalid, PriorityNotGranted
from jobs.idempotency import MAX_KEY_CHARS, key_parse
from jobs.selectors.rightsizing import fleet_gpu_models
from scheduler.core import ModelProfile, bounds, memory_model_for
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GpuModelSpec
from scheduler.core.model.vocabulary import DEFAULT_JOB_KIND, Dtype, JobKind, JobTier, ModelMode, Priority
from teams.models import Team

REQUEST_BY = (
    ("model", "Model profile (right-sized for you)"),
    ("memory_gib", "GPU memory"),
    ("mig_profile", "MIG profile"),
    ("gpus", "Whole GPUs"),
)
MODE_CHOICES = [("", "as the kind")] + [(m.value, m.value) for m in ModelMode]
# Spec key path → the form field that shows its error.
SPEC_KEY_TO_FIELD = {
    "model.params_b": "params_b",
    "model.dtype": "dtype",
    "model.context": "context",
    "model.batch": "batch",
    "model.mode": "mode",
    "model": "params_b",
    "duration_s": "duration_h",
    "team": "team",
    "id": "name",
}


def _mig_profile_choices() -> list[tuple[str, str]]:
    """The MIG profiles of the fleet's GPU models, smallest model first (none when no GPU of it has MIG)."""
    names: list[str] = []
    for spec in _fleet_specs():
        names += [p for p in spec.profiles() if p not in names]
    return [("", "—")] + [(n, n) for n in names]


def _gpu_model_choices() -> list[tuple[str, str]]:
    """The fleet's GPU classes and models: a constraint naming anything else could never be met."""
    models = fleet_gpu_models()
    classes = sorted({GPU_MODEL_BY_NAME[m].gpu_class if m in GPU_MODEL_BY_NAME else m for m in models})
    return [("", "Any GPU")] + [(c, f"any {c}") for c in classes] + [(m, m) for m in models]


def _fleet_specs() -> list[GpuModelSpec]:
    return [GPU_MODEL_BY_NAME[m] for m in fleet_gpu_models() if m in GPU_MODEL_BY_NAME]


class RequestForm(forms.Form):
    """What one replica asks for, stated one way; shared by the submit form and its live suggestion."""

    kind = forms.ChoiceField(choices=[(k.value, k.value.title()) for k in JobKind], initial=DEFAULT_JOB_KIND)
    request_by = forms.ChoiceField(label="Request by", choices=REQUEST_BY, initial="model", widget=forms.RadioSelect)
    gpus = forms.IntegerField(label="GPUs per replica", min_value=1, max_value=bounds.MAX_GPUS, required=False)
    mig_profile = forms.ChoiceField(label="MIG profile", choices=_mig_profile_choices, required=False)
    memory_gib = forms.DecimalField(
        label="GPU memory per replica (GiB)",
        min_value=bounds.MIN_MEMORY_GIB,
        max_value=round(bounds.MAX_MEMORY_GIB, 2),
        max_digits=8,
        decimal_places=2,
        required=False,
    )
    params_b = forms.FloatField(
        label="Parameters (billions)", min_value=0.001, max_value=bounds.MAX_PARAMS_B, required=False, initial=7
    )
    dtype = forms.ChoiceField(label="Data type", choices=[(d.value, d.value) for d in Dtype], initial=Dtype.BF16)
    context = forms.IntegerField(label="Context (tokens)", min_value=1, max_value=bounds.MAX_CONTEXT, initial=4096)
    batch = forms.IntegerField(label="Batch (sequences)", min_value=1, max_value=bounds.MAX_BATCH, initial=1)
    # Blank follows the kind (training jobs are sized for training); a mode that contradicts the kind is refused
    # by the spec reader next to this field, so a training job is never sized for serving by a stale choice.
    mode = forms.ChoiceField(
        label="Memory model",
        choices=MODE_CHOICES,
        initial="",
        required=False,
        help_text="As the kind: training sizes weights + gradients + optimizer states; inference weights + KV cache.",
    )
    gpu_model = forms.ChoiceField(label="GPU model", choices=_gpu_model_choices, required=False)
    replicas = forms.IntegerField(
        label="Replicas (gang size)",
        min_value=1,
        max_value=bounds.MAX_REPLICAS,
        initial=1,
        help_text="All replicas start together or not at all.",
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        by = data.get("request_by")
        needed = {"gpus": "gpus", "mig_profile": "mig_profile", "memory_gib": "memory_gib", "model": "params_b"}
        field = needed.get(by or "")
        if field and data.get(field) in (None, ""):
            self.add_error(field, "Required when requesting by this: fill it in or choose another way.")
        return data

    def request_spec(self) -> dict[str, Any]:
        """The request keys of a job spec from the cleaned data (only the chosen way of asking)."""
        data = self.cleaned_data
        spec: dict[str, Any] = {"kind": data["kind"], "replicas": data.get("replicas") or 1}
        by = data["request_by"]
        if by == "gpus":
            spec["gpus"] = data["gpus"]
        elif by == "mig_profile":
            spec["mig_profile"] = data["mig_profile"]
        elif by == "memory_gib":
            spec["memory_gib"] = float(data["memory_gib"])
        else:
            spec["model"] = {
                "params_b": data["params_b"],
                "dtype": data["dtype"],
                "context": data["context"],
                "batch": data["batch"],
            }
            if data.get("mode"):  # blank: the memory model of the kind (the spec reader fills it in)
                spec["model"]["mode"] = data["mode"]
        if data.get("gpu_model"):
            spec["gpu_model"] = data["gpu_model"]
        return spec


class SuggestionForm(RequestForm):
    """The submit form's fields the answer to "what will this get" reads: the request, and the team, priority,
    tier and preemptibility that decide where and when the engine starts it. Priority is any of them here: the
    answer is a preview, the submit itself checks the role."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), required=False)
    priority = forms.ChoiceField(choices=[(p.value, p.value) for p in Priority], initial=Priority.NORMAL)
    tier = forms.ChoiceField(choices=[(t.value, t.value) for t in JobTier], initial=JobTier.ANY)
    preemptible = forms.BooleanField(required=False)

    def __init__(self, *args: Any, teams: list[Team], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast("forms.ModelChoiceField[Team]", self.fields["team"]).queryset = Team.objects.filter(
            pk__in=[t.pk for t in teams]
        )

    def answer_spec(self) -> dict[str, Any]:
        data = self.cleaned_data
        spec = self.request_spec()
        spec.update({"priority": data["priority"], "tier": data["tier"], "preemptible": bool(data.get("preemptible"))})
        return spec


class SubmitForm(RequestForm):
    """A whole job. ``teams`` are those the user may submit to with their role in each (team id → role)."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=200, help_text="A name your team will recognise, e.g. llama-7b-chat.")
    project = forms.CharField(
        label="Project code", max_length=64, required=False, help_text="Chargeback code; blank: the team's."
    )
    image = forms.CharField(label="Container image", max_length=500, required=False)
    command = forms.CharField(
        max_length=2000, required=False, help_text="As in a shell, e.g. python serve.py --port 8000"
    )
    priority = forms.ChoiceField(choices=[(p.value, p.value) for p in Priority], initial=Priority.NORMAL)
    preemptible = forms.BooleanField(
        required=False, help_text="May be stopped for higher-priority work (and resumed from a checkpoint)."
    )
    consolidate = forms.BooleanField(
        label="May be moved to its right-sized slice",
        required=False,
        initial=True,
        help_text="Inference only: production started on a larger GPU than it needs may later be moved to the slice "
        "it fits, make-before-break (the new replicas are ready before the old ones stop). Clear it to keep the job "
        "where it starts.",
    )
    checkpoint_interval_s = forms.IntegerField(
        label="Checkpoint every (seconds)",
        min_value=1,
        required=False,
        help_text="How often the job saves progress; needed to run on spot capacity safely.",
    )
    restart_limit = forms.IntegerField(
        label="Restarts after a failure",
        min_value=0,
        max_value=bounds.MAX_RESTART_LIMIT,
        initial=bounds.DEFAULT_RESTART_LIMIT,
        required=False,
        help_text="How often a crash or out-of-memory kill restarts the job before it fails; node losses and spot "
        "reclaims never count.",
    )
    tier = forms.ChoiceField(
        label="Capacity tier",
        choices=[
            (JobTier.ANY.value, "any"),
            (JobTier.RESERVED_ONLY.value, "reserved only"),
            (JobTier.SPOT_OK.value, "spot allowed"),
        ],
        initial=JobTier.ANY,
    )
    cpu = forms.DecimalField(
        label="CPU cores per replica",
        min_value=bounds.MIN_CPU,
        max_value=bounds.MAX_CPU,
        max_digits=7,
        decimal_places=3,
        required=False,
        help_text="Blank: the cluster's default per GPU. Reserved for the job (requests = limits).",
    )
    host_memory_gib = forms.DecimalField(
        label="Host memory per replica (GiB)",
        min_value=bounds.MIN_HOST_MEMORY_GIB,
        max_value=bounds.MAX_HOST_MEMORY_GIB,
        max_digits=8,
        decimal_places=2,
        required=False,
        help_text="The memory of your processes, not GPU memory; /dev/shm comes on top. Blank: the cluster's "
        "default per GPU. Above it the job is killed for running out of memory.",
    )
    duration_h = forms.DecimalField(
        label="Expected duration (hours)",
        min_value=0.001,
        max_digits=9,
        decimal_places=3,
        required=False,
        help_text="At full speed; blank for services that run until stopped.",
    )

    # Made when the form is rendered, sent back with it: a second submit of the same page (a double click, a
    # reload after an answer that never arrived) finds the job the first one made (jobs.idempotency).
    idempotency_key = forms.CharField(
        max_length=MAX_KEY_CHARS, required=False, widget=forms.HiddenInput, initial=lambda: uuid.uuid4().hex
    )

    field_order = [
        "team",
        "name",
        "kind",
        "project",
        "image",
        "command",
        "request_by",
        "params_b",
        "dtype",
        "context",
        "batch",
        "mode",
        "memory_gib",
        "mig_profile",
        "gpus",
        "gpu_model",
        "replicas",
        "cpu",
        "host_memory_gib",
        "priority",
        "preemptible",
        "consolidate",
        "checkpoint_interval_s",
        "restart_limit",
        "tier",
        "duration_h",
    ]

    def __init__(self, *args: Any, teams: list[Team], roles: dict[int, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.roles = roles
        # self.fields holds copies of the declared fields, typed as plain Fields.
        cast("forms.ModelChoiceField[Team]", self.fields["team"]).queryset = Team.objects.filter(
            pk__in=[t.pk for t in teams]
        )
        if len(teams) == 1:
            self.fields["team"].initial = teams[0].pk
        self._priority_choices(teams, roles)

    def _priority_choices(self, teams: list[Team], roles: dict[int, str]) -> None:
        """What the user's roles allow, a priority none of their teams is granted marked so (teams.grants): it
        stays in the list so that choosing it says who grants it."""
        allowed = set().union(*(priorities_allowed(r) for r in roles.values())) if roles else set()
        granted = {p for t in teams for p in priorities_offered(roles.get(t.pk), t)}
        field = cast(forms.ChoiceField, self.fields["priority"])
        field.choices = [
            (p.value, p.value if p.value in granted else f"{p.value} (not granted: a platform admin grants it)")
            for p in Priority
            if p.value in allowed
        ]
        if Priority.PRODUCTION.value in allowed:
            production = [
                f"{t.slug} for {', '.join(t.production_kinds)} jobs"
                for t in teams
                if Priority.PRODUCTION.value in priorities_offered(roles.get(t.pk), t)
            ]
            field.help_text = (
                f"Production preempts other teams' work and is granted per team by a platform admin: "
                f"{'; '.join(production) if production else 'none of your teams has it'}."
            )

    def clean_command(self) -> list[str]:
        text = self.cleaned_data.get("command", "")
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot split this into arguments ({exc}): check the quotes.") from None

    def clean_idempotency_key(self) -> str:
        """The key, or "" when the page had none (a form from before keys): that submit is not deduplicated."""
        raw = self.cleaned_data.get("idempotency_key", "")
        if not raw:
            return ""
        try:
            return key_parse(raw)
        except IdempotencyKeyInvalid:
            raise forms.ValidationError("This page's form is damaged: reload it and submit again.") from None

    def fresh_key(self) -> None:
        """Give the bound form a new key, so that its next submit is a new job (the old key made one already)."""
        data = cast(QueryDict, self.data).copy()  # a bound form's data is the request's QueryDict
        data["idempotency_key"] = uuid.uuid4().hex
        self.data = data

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if "idempotency_key" in self.errors:  # a hidden field: its error is shown at the top of the form
            self.add_error(None, self.errors.pop("idempotency_key"))
        team, priority = data.get("team"), data.get("priority")
        if team is not None and priority:
            refusal = self._priority_refusal(team, priority, data.get("kind") or DEFAULT_JOB_KIND)
            if refusal:
                self.add_error("priority", refusal)
        return data

    def _priority_refusal(self, team: Team, priority: str, kind: str) -> str | None:
        """Why ``priority`` is refused for a ``kind`` job of ``team``, as ``job_submit`` checks it: the team's
        grant first (asking the lead would not help), then the user's role."""
        try:
            check_grant(team=team, priority=priority, kind=kind, then="submit at")
        except PriorityNotGranted as refused:
            return str(refused)
        allowed = priorities_allowed(self.roles.get(team.pk))
        if priority not in allowed:
            return f"Your role in {team.slug} allows {', '.join(allowed) or 'no'} priority; ask its lead for more."
        return None

    def spec(self) -> dict[str, Any]:
        """The job spec to submit (spec/scenario.md keys), from the cleaned data."""
        data = self.cleaned_data
        spec = self.request_spec()
        spec.update(
            {
                "name": data["name"],
                "priority": data["priority"],
                "preemptible": bool(data.get("preemptible")),
                "tier": data["tier"],
            }
        )
        for key in ("image", "project"):
            if data.get(key):
                spec[key] = data[key]
        if data.get("command"):
            spec["command"] = data["command"]
        if data.get("checkpoint_interval_s"):
            spec["checkpoint_interval_s"] = data["checkpoint_interval_s"]
        if data.get("restart_limit") is not None:  # 0 is a choice: fail at the first application failure
            spec["restart_limit"] = data["restart_limit"]
        for key in ("cpu", "host_memory_gib"):
            if data.get(key) is not None:
                spec[key] = float(data[key])
        if data.get("duration_h"):
            spec["duration_s"] = max(1, round(float(data["duration_h"]) * 3600))
        if (data.get("kind") or DEFAULT_JOB_KIND) == JobKind.INFERENCE and not data.get("consolidate"):
            spec["consolidate"] = False  # only inference is ever moved: other kinds keep the default
        return spec

    def add_spec_errors(self, errors: dict[str, list[str]]) -> None:
        """Show the service's problems with the spec next to the fields they concern."""
        for key, reasons in errors.items():
            field = SPEC_KEY_TO_FIELD.get(key, key.split(".")[0].split("[")[0])
            target = field if field in self.fields else None
            for reason in reasons:
                self.add_error(target, reason if target else f"{key}: {reason}")


class IntervalForm(forms.Form):
    """The submit form's fields the proposed checkpoint interval depends on (``jobs/checkpoint_intervals.py``):
    where the job will run, how many servers it spans, and the model whose training state a checkpoint holds.
    Priority is any of them here: the proposal is a preview, the submit itself checks the role."""

    tier = forms.ChoiceField(choices=[(t.value, t.value) for t in JobTier], initial=JobTier.ANY)
    priority = forms.ChoiceField(choices=[(p.value, p.value) for p in Priority], initial=Priority.NORMAL)
    replicas = forms.IntegerField(min_value=1, max_value=bounds.MAX_REPLICAS, initial=1)
    request_by = forms.ChoiceField(choices=REQUEST_BY, initial="model")
    gpus = forms.IntegerField(min_value=1, max_value=bounds.MAX_GPUS, required=False)
    params_b = forms.FloatField(min_value=0.001, max_value=bounds.MAX_PARAMS_B, required=False, initial=7)
    dtype = forms.ChoiceField(choices=[(d.value, d.value) for d in Dtype], initial=Dtype.BF16, required=False)
    kind = forms.ChoiceField(choices=[(k.value, k.value) for k in JobKind], initial=DEFAULT_JOB_KIND, required=False)
    mode = forms.ChoiceField(choices=MODE_CHOICES, initial="", required=False)  # blank: the kind's

    def proposal_inputs(self) -> dict[str, Any]:
        """Keyword arguments of ``checkpoint_interval_proposal_for_spec`` from the cleaned data: whole GPUs only
        when requested by GPUs, a model only when requested by model."""
        data = self.cleaned_data
        by = data["request_by"]
        model = None
        if by == "model" and data.get("params_b"):
            # A training job checkpoints its training state, not just its weights: the mode follows the kind.
            kind = JobKind(data.get("kind") or DEFAULT_JOB_KIND)
            dtype, mode = Dtype(data.get("dtype") or Dtype.BF16), ModelMode(data.get("mode") or memory_model_for(kind))
            model = ModelProfile(params_b=data["params_b"], dtype=dtype, mode=mode)
        return {
            "tier": data["tier"],
            "priority": data["priority"],
            "replicas": data["replicas"],
            "gpus_per_replica": data.get("gpus") if by == "gpus" else None,
            "model": model,
        }


class PriorityForm(forms.Form):
    priority = forms.ChoiceField(choices=[(p.value, p.value) for p in Priority])

    def __init__(self, *args: Any, allowed: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["priority"]).choices = [(p, p) for p in allowed]


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False, label="Reason (optional)")
