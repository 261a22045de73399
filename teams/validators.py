"""Field validators shared by the teams models, the org-file loader and the forms."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

from scheduler.core.gpus.catalog import GPU_CLASSES
from scheduler.core.model.vocabulary import JobKind

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_CHARGEBACK_CODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

QUOTA_GPU_CLASSES: tuple[str, ...] = ("any", *GPU_CLASSES)


def validate_namespace(value: str) -> None:
    """A Kubernetes namespace name: a DNS-1123 label of at most 63 characters."""
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValidationError(
            "%(value)r is not a valid Kubernetes namespace: use at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit (e.g. team-nlp).",
            code="invalid_namespace",
            params={"value": value},
        )


def validate_claim_name(value: str) -> None:
    """A PersistentVolumeClaim name: a DNS-1123 subdomain of at most 253 characters ("" is allowed: none)."""
    if value and (len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value)):
        raise ValidationError(
            "%(value)r is not a valid volume claim name: use at most 253 lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (kubectl get pvc -n <namespace> lists them).",
            code="invalid_claim_name",
            params={"value": value},
        )


def validate_slug(value: str) -> None:
    if not _SLUG.match(value):
        raise ValidationError(
            "%(value)r is not a valid slug: use lowercase letters, digits and single '-' between them "
            "(e.g. nlp or vision-research).",
            code="invalid_slug",
            params={"value": value},
        )


def validate_chargeback_code(value: str) -> None:
    if not _CHARGEBACK_CODE.match(value):
        raise ValidationError(
            "%(value)r is not a valid chargeback code: use letters, digits, '.', '_' and '-', starting with "
            "a letter or digit (e.g. llm-pretrain or CC-1042).",
            code="invalid_code",
            params={"value": value},
        )


def validate_quota_gpu_class(value: str) -> None:
    if value not in QUOTA_GPU_CLASSES:
        raise ValidationError(
            "%(value)r is not a GPU class: use one of %(choices)s.",
            code="invalid_gpu_class",
            params={"value": value, "choices": ", ".join(QUOTA_GPU_CLASSES)},
        )


def validate_production_kinds(value: object) -> None:
    """The job kinds a team may run at production priority: a non-empty list of distinct job kinds (to grant
    production to no kind, lower the team's highest priority instead)."""
    kinds = [k.value for k in JobKind]
    if not isinstance(value, list) or not value:
        raise ValidationError(
            "Name at least one job kind of %(choices)s (to grant no production, lower the highest priority).",
            code="invalid_production_kinds",
            params={"choices": ", ".join(kinds)},
        )
    unknown = [v for v in value if v not in kinds]
    if unknown:
        raise ValidationError(
            "%(value)r is not a job kind: use %(choices)s.",
            code="invalid_production_kinds",
            params={"value": unknown[0], "choices": ", ".join(kinds)},
        )
    if len(set(value)) != len(value):
        raise ValidationError("Name each job kind once.", code="invalid_production_kinds")
