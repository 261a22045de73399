"""The body of a job-spec request (submit, right-size) as the one job-spec reader wants it.

The API does not re-validate a job spec with serializers of its own: the body goes whole to the jobs
services, which read it with :func:`scheduler.specs.job.parse_job` — the same keys, types, ranges and
messages as the portal form, ``manage.py jobs submit`` and scenarios, and unknown keys refused with the list
of known ones. The serializers of ``jobs.api.serializers`` only describe the body in the OpenAPI schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import QueryDict
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request


def spec_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body, or a 400 saying what to send instead."""
    data = request.data
    if isinstance(data, QueryDict) or not isinstance(data, Mapping):
        raise ValidationError(
            {"non_field_errors": ["send the job spec as one JSON object (Content-Type: application/json)"]}
        )
    return dict(data)


def json_parsers(parsers: list[Any]) -> list[Any]:
    """Of the configured parsers, those that read JSON: a job spec has nested objects and typed numbers that
    form encodings cannot carry."""
    return [parser for parser in parsers if parser.media_type == "application/json"]
