"""Which models the audit trail records, and which of their fields.

A field left out is one that changes without anybody deciding it (timestamps, observed labels, a password
hash, the last sign-in) or one whose change the trail would only repeat. Jobs are left out on purpose: their
changes are job events already.
"""

from __future__ import annotations

from typing import cast

from auditlog.registry import auditlog
from django.contrib.auth import get_user_model
from django.db.models.base import ModelBase

# model label → the fields whose changes are recorded
AUDITED_FIELDS: dict[str, tuple[str, ...]] = {
    # max_priority and production_kinds: the priority grant (teams.grants), a platform admin's decision.
    "teams.Team": ("name", "slug", "namespace", "weight", "checkpoint_claim", "max_priority", "production_kinds"),
    "teams.Project": ("team", "code", "name"),
    # source: granted by hand, or kept by single sign-on from the provider's groups (teams/sso.py)
    "teams.Membership": ("user", "team", "role", "source"),
    "teams.SsoGroup": ("group", "team", "role"),
    "teams.Quota": ("team", "gpu_class", "guaranteed_gpus", "burst_gpus"),
    "billing.GpuPrice": ("gpu_model", "tier", "price_per_gpu_hour", "effective_from", "source"),
    "billing.ReservedCommitment": (
        "name",
        "gpu_model",
        "gpu_count",
        "term_months",
        "monthly_price",
        "start",
        "note",
    ),
    # The node's state is its cordon / drain; its price and tier are what its hours are billed at.
    "scheduler.Node": ("state", "state_source", "state_reason", "price_per_gpu_hour", "tier", "gpu_count"),
    # A MIG reconfiguration destroys every instance on the GPU (docs/gpu-facts.md): the admin's, or the scheduler's
    # reconfiguration as the gateway applied it.
    "scheduler.Gpu": ("mig_layout",),
}
# A user's org-wide roles are their groups (teams.roles); platform admins also get is_staff and is_superuser.
USER_FIELDS = ("username", "is_active", "is_staff", "is_superuser")
USER_M2M_FIELDS = {"groups"}


def audited_register() -> None:
    """Register every audited model with django-auditlog (idempotent: the app registry calls it once, tests
    that reload apps may call it again)."""
    from django.apps import apps

    # auditlog annotates a model class by its metaclass, ModelBase.
    for label, fields in AUDITED_FIELDS.items():
        model = cast(ModelBase, apps.get_model(label))
        if not auditlog.contains(model):
            auditlog.register(model, include_fields=list(fields))
    user = cast(ModelBase, get_user_model())
    if not auditlog.contains(user):
        auditlog.register(user, include_fields=list(USER_FIELDS), m2m_fields=USER_M2M_FIELDS)
