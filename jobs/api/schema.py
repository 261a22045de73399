"""The error answers of every API operation in the OpenAPI schema (``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``).

drf-spectacular documents the success response a view declares and nothing else, yet every operation can
answer errors: the request guard's 400 and 413 (``portal.request_guard``), DRF's authentication (401/403),
lookups, pagination and ``?format=`` (404), content negotiation (406), parsing (400/413/415), throttles (429),
the services' conflicts (409), and on the writes that take an ``Idempotency-Key`` header (documented there) a
key used for another request (422). An operation secured by a job's report credential (``jobCredential``,
:mod:`jobs.api.authentication`) says what its 401 and 403 mean for a job rather than for a person.
:func:`add_error_responses` adds each status an operation can answer, with
the error JSON of ``jobs.api.errors``: ``{"detail": "…"}``, or for a 400 one entry per field
(``{"team": ["…"], "model.params_b": ["…"]}``; a nested serializer's entries nest).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from rest_framework.permissions import AllowAny

ERROR = "Error"
JOB_CREDENTIAL = "jobCredential"  # the security scheme of jobs.api.authentication.JobCredentialScheme
_PARAMETER = re.compile(r"\{[^}]*\}")
FIELD_ERRORS = "FieldErrors"

# Operations whose service may refuse with 409: a job that has already ended (jobs.errors.JobStateError) or a
# team or user at its cap of pending jobs (PendingLimitReached). tests/jobs/test_api_errors.py checks each
# one is still in the schema, so a renamed route cannot silently lose its 409.
CONFLICT_OPERATIONS = frozenset(
    {
        ("POST", "/api/v1/jobs/"),
        ("POST", "/api/v1/jobs/{id}/cancel/"),
        ("POST", "/api/v1/jobs/{id}/priority/"),
        ("POST", "/api/v1/jobs/{id}/rank/"),
        ("POST", "/api/v1/jobs/bulk-cancel/"),
        ("POST", "/api/v1/queue/reorder/"),  # only a request whose Idempotency-Key is still being answered
    }
)
# Writes that take an Idempotency-Key header (jobs.api.idempotency): the header is documented on each, with the
# 422 of a key used for another request. A key still being answered is a 409, so each is a conflict operation.
IDEMPOTENT_OPERATIONS = frozenset(
    {
        ("POST", "/api/v1/jobs/"),
        ("POST", "/api/v1/jobs/{id}/cancel/"),
        ("POST", "/api/v1/jobs/{id}/priority/"),
        ("POST", "/api/v1/jobs/{id}/rank/"),
        ("POST", "/api/v1/jobs/bulk-cancel/"),
        ("POST", "/api/v1/queue/reorder/"),
    }
)
IDEMPOTENCY_PARAMETER = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "schema": {"type": "string", "maxLength": 255},
    "description": "A key unique to this request (a UUID): sent again with the same body within 24 hours, the "
    "first answer is returned (marked `Idempotent-Replayed: true`) and nothing is written again; with another "
    "body, 422. At most 255 printable ASCII characters.",
}

_SCHEMAS: dict[str, dict[str, Any]] = {
    ERROR: {
        "type": "object",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
        "description": "What went wrong, in words a person can act on.",
    },
    FIELD_ERRORS: {
        "type": "object",
        "additionalProperties": {
            "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "object"}],
        },
        "description": "One entry per field (a query parameter or a body field path; `non_field_errors` for the "
        "body as a whole), each a list of messages; a nested object's or a list's entries nest.",
    },
}


def _route(path: str) -> str:
    """``/api/v1/jobs/{pk}/`` and ``/api/v1/jobs/{id}/`` are one route: drf-spectacular renames ``pk`` after the
    model's primary key in the schema, but the generator's endpoints keep the URL pattern's name."""
    return _PARAMETER.sub("{}", path)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}, **extra}


def _errors_for(method: str, path: str, operation: dict[str, Any], view: Any) -> dict[str, dict[str, Any]]:
    detail = _ref(ERROR)
    errors = {
        "400": _json(
            {"anyOf": [_ref(FIELD_ERRORS), detail]},
            "Malformed request: invalid parameters or body (one entry per field), a NUL character or text that is "
            "not UTF-8 anywhere in the request, a body nested too deep",
        ),
        "404": _json(detail, "Not found, or not visible to you (another team's); an unknown page or format"),
        "406": _json(detail, "No representation matching the Accept header"),
        "413": _json(detail, "Request body larger than the portal accepts (DATA_UPLOAD_MAX_MEMORY_SIZE)"),
    }
    permissions = view.get_permissions() if view is not None else []
    if {JOB_CREDENTIAL: []} in operation.get("security", []):
        errors["401"] = _json(detail, "No job credential, an invalid one, or a revoked one (the job has ended)")
        errors["403"] = _json(detail, "A job credential of another job: a credential reports for its own job only")
    elif any(not isinstance(permission, AllowAny) for permission in permissions):
        errors["401"] = _json(detail, "No or invalid credentials (a token or a session)")
        errors["403"] = _json(detail, "Signed in, but your role does not allow this")
    if "requestBody" in operation:
        errors["415"] = _json(detail, "Body in a media type the operation does not read")
    if (method, path) in CONFLICT_OPERATIONS:
        errors["409"] = _json(
            detail,
            "Conflicts with the job's state (it has ended) or a cap on pending jobs, or a request with the same "
            "Idempotency-Key is still being answered",
        )
    if (method, path) in IDEMPOTENT_OPERATIONS:
        errors["422"] = _json(detail, "The Idempotency-Key was used for a different request: send a new key")
    if view is not None and view.get_throttles():
        errors["429"] = _json(
            detail,
            "Too many requests: wait for Retry-After seconds",
            headers={"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds until the next try"}},
        )
    return errors


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation gets the error statuses it can answer, beside the
    responses its view declares (a status the view documents itself is left as it is)."""
    # The generator keeps each endpoint's callback; a view instance answers which permissions and throttles apply.
    views = {
        (method.upper(), _route(path)): generator.create_view(callback, method, request)
        for path, _regex, method, callback in getattr(generator, "endpoints", None) or []
    }
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            view = views.get((method.upper(), _route(path)))
            if (method.upper(), path) in IDEMPOTENT_OPERATIONS:
                # A copy each: one shared dict would be written as a YAML anchor and alias.
                operation.setdefault("parameters", []).append(copy.deepcopy(IDEMPOTENCY_PARAMETER))
            for code, response in _errors_for(method.upper(), path, operation, view).items():
                responses.setdefault(code, response)
            operation["responses"] = dict(sorted(responses.items()))
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in _SCHEMAS.items():
        schemas.setdefault(name, schema)
    return result
