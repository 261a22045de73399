"""Tenants: a team is one Kubernetes namespace with projects, members and GPU quotas."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core.model.vocabulary import Priority, choices_of
from teams.grants import DEFAULT_MAX_PRIORITY, PRIORITIES, default_production_kinds
from teams.validators import (
    QUOTA_GPU_CLASSES,
    validate_chargeback_code,
    validate_claim_name,
    validate_namespace,
    validate_production_kinds,
    validate_quota_gpu_class,
    validate_slug,
)


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.CharField(max_length=50, unique=True, validators=[validate_slug])
    namespace = models.CharField(
        max_length=63,
        unique=True,
        validators=[validate_namespace],
        help_text="Kubernetes namespace the team's pods run in (DNS-1123 label).",
    )
    weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Share of idle capacity above guarantees, relative to other teams.",
    )
    checkpoint_claim = models.CharField(
        max_length=253,
        blank=True,
        default="",
        validators=[validate_claim_name],
        help_text=(
            "An existing PersistentVolumeClaim in the team's namespace that holds its jobs' checkpoints (mounted "
            "at /checkpoints); empty: Microcosm creates microcosm-checkpoints."
        ),
    )
    # The priority grant (teams.grants): production preempts other teams' work, so a platform admin grants it.
    max_priority = models.CharField(
        "highest priority",
        max_length=16,
        choices=choices_of(Priority),
        default=DEFAULT_MAX_PRIORITY,
        help_text=(
            "The highest priority the team's jobs may have, whoever submits them. Production preempts other "
            "teams' work anywhere: grant it only to teams that serve production traffic."
        ),
    )
    production_kinds = models.JSONField(
        "production for",
        default=default_production_kinds,
        validators=[validate_production_kinds],
        help_text=(
            "The job kinds that may run at production priority once it is granted; production is for inference "
            "unless you also allow training or batch."
        ),
    )
    # The team's on-demand budget (scheduler.autoscaled.OnDemandBudget for the cluster's, and why GPU-hours).
    on_demand_gpu_hours_per_day = models.DecimalField(
        "on-demand GPU-hours a day",
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Autoscaled node time the team's jobs may ask for in a UTC day; empty: no budget of its own.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(max_priority__in=list(PRIORITIES)), name="team_max_priority_valid"),
            models.CheckConstraint(condition=Q(weight__gte=1), name="team_weight_positive"),
            models.CheckConstraint(condition=~Q(slug=""), name="team_slug_not_empty"),
            models.CheckConstraint(condition=~Q(namespace=""), name="team_namespace_not_empty"),
        ]

    def __str__(self) -> str:
        return self.name


class Project(models.Model):
    """A chargeback unit inside a team: GPU-hours are reported per project."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="projects")
    code = models.CharField(max_length=64, validators=[validate_chargeback_code], help_text="Chargeback code.")
    name = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["team__name", "code"]
        constraints = [
            models.UniqueConstraint(fields=["team", "code"], name="project_code_unique_per_team"),
            models.CheckConstraint(condition=~Q(code=""), name="project_code_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.code}"


class Membership(models.Model):
    class Role(models.TextChoices):
        LEAD = "lead", "Team lead"
        MEMBER = "member", "Member"

    class Source(models.TextChoices):
        """Who keeps the membership: a person (the admin, the org file's ``members``) or single sign-on, which
        recomputes it from the provider's groups at each sign-in (teams.sso) and never touches the others."""

        MANUAL = "manual", "Granted by hand"
        SSO = "sso", "Single sign-on groups"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.MANUAL)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=["lead", "member"]), name="membership_role_valid"),
            models.CheckConstraint(condition=Q(source__in=["manual", "sso"]), name="membership_source_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Quota(models.Model):
    """Guaranteed and burst GPU-equivalents of a team for one GPU class (or ``any`` class).

    GPU-equivalents: a whole GPU counts 1, a MIG slice its compute slices / 7, a shared GPU its fraction.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_class = models.CharField(
        max_length=16,
        validators=[validate_quota_gpu_class],
        choices=[(c, c) for c in QUOTA_GPU_CLASSES],
        default="any",
    )
    guaranteed_gpus = models.DecimalField(max_digits=9, decimal_places=3, validators=[MinValueValidator(Decimal(0))])
    burst_gpus = models.DecimalField(
        max_digits=9,
        decimal_places=3,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Ceiling including borrowed idle capacity; at least the guarantee.",
    )

    class Meta:
        ordering = ["team__name", "gpu_class"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_class"], name="quota_unique_team_class"),
            models.CheckConstraint(condition=Q(guaranteed_gpus__gte=0), name="quota_guaranteed_non_negative"),
            models.CheckConstraint(
                condition=Q(burst_gpus__gte=models.F("guaranteed_gpus")),
                name="quota_burst_at_least_guaranteed",
                violation_error_message="Burst must be at least the guaranteed GPUs.",
            ),
            models.CheckConstraint(condition=Q(gpu_class__in=list(QUOTA_GPU_CLASSES)), name="quota_gpu_class_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} {self.gpu_class}: {self.guaranteed_gpus}/{self.burst_gpus}"


# The roles a provider group can give: a team role (with a team) or an organisation-wide one (without).
SSO_TEAM_ROLES = ("lead", "member")
SSO_ORG_ROLES = ("finance", "platform-admin")  # teams.roles.ORG_ROLES, spelled here for the constraint


class SsoGroup(models.Model):
    """One group of the identity provider and the role it gives (the org file's ``sso_groups``, spec in
    docs/security.md): a team role when ``team`` is set, else ``finance`` or ``platform-admin``."""

    group = models.CharField(max_length=255, help_text="The group's name as the provider's groups claim has it.")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="sso_groups")
    role = models.CharField(max_length=16, choices=[(r, r) for r in (*SSO_TEAM_ROLES, *SSO_ORG_ROLES)])

    class Meta:
        ordering = ["team__name", "role", "group"]
        verbose_name = "single sign-on group"
        constraints = [
            models.UniqueConstraint(fields=["group", "team", "role"], name="ssogroup_unique"),
            models.UniqueConstraint(
                fields=["group", "role"], condition=Q(team__isnull=True), name="ssogroup_unique_org_role"
            ),
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(role__in=SSO_TEAM_ROLES))
                | (Q(team__isnull=True) & Q(role__in=SSO_ORG_ROLES)),
                name="ssogroup_role_fits_team",
            ),
            models.CheckConstraint(condition=~Q(group=""), name="ssogroup_group_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.group} → {self.team.slug + ' ' if self.team else ''}{self.role}"


class SsoOrgRole(models.Model):
    """An organisation-wide role that single sign-on gave ``user`` (so that it alone takes it away again): the
    role itself is the user's Django group (teams.roles); one given by hand has no row here and is left alone."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_org_roles")
    role = models.CharField(max_length=16, choices=[(r, r) for r in SSO_ORG_ROLES])

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "role"], name="ssoorgrole_unique")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} (single sign-on)"
