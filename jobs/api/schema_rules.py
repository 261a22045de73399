"""The job-spec bodies in the OpenAPI schema say what the job-spec reader accepts
(``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``).

A submit (``POST /api/v1/jobs/``) and a right-sizing question (``POST /api/v1/rightsize/``) are read whole by
:func:`scheduler.specs.job.parse_job`; their serializers only describe the body (:mod:`jobs.api.specs`), and
drf-spectacular cannot say from a serializer what the reader adds. :func:`state_spec_rules` writes it into the
body schemas, in what OpenAPI 3.0 can express:

- the request stated in exactly one way: ``oneOf`` four alternatives, each requiring one of ``gpus``,
  ``mig_profile``, ``memory_gib``, ``model`` (a body with none, or with two, matches no alternative or two);
- unknown keys refused, in the body and in ``model``: ``additionalProperties: false``;
- ``gpu_model`` one of the catalog's models or classes, ``mig_profile`` one of its MIG profiles (``enum``);
- text keys the reader wants non-blank (``team``, ``name``, ``project``, ``image``): at least one character that
  is not white space (``pattern``);
- ``model.params_b`` above 0 (``exclusiveMinimum``), ``env`` at most ``MAX_ENV_KEYS`` variables.

What it cannot express is listed in docs/job-spec.md ("In the OpenAPI schema").
"""

from __future__ import annotations

from typing import Any

from scheduler.core import bounds
from scheduler.core.gpus.catalog import GPU_CLASSES, GPU_MODEL_BY_NAME, GPU_MODELS

SUBMIT = "JobSubmitRequest"
RIGHTSIZE = "RightsizeRequest"
MODEL = "ModelProfileRequest"
REQUEST_KEYS = ("gpus", "mig_profile", "memory_gib", "model")  # scheduler.specs.job.REQUEST_KEYS less the trace's
NON_BLANK = r"\S"  # ECMA-262, unanchored: some character that is not white space (the reader strips, then checks)
_TEXT_KEYS = ("team", "name", "project", "image", "id")


def exactly_one_request() -> list[dict[str, Any]]:
    """The ``oneOf`` of a job-spec body: one alternative per way to state the request."""
    return [{"required": [key], "title": f"request by {key}"} for key in REQUEST_KEYS]


def _state_body(schema: dict[str, Any]) -> None:
    properties = schema["properties"]
    schema["oneOf"] = exactly_one_request()
    schema["additionalProperties"] = False
    properties["gpu_model"]["enum"] = [*GPU_CLASSES, *GPU_MODEL_BY_NAME]
    profiles = dict.fromkeys(name for spec in GPU_MODELS for name in spec.profiles())
    properties["mig_profile"]["enum"] = list(profiles)
    for key in _TEXT_KEYS:
        if key in properties:
            properties[key]["pattern"] = NON_BLANK
            properties[key]["minLength"] = 1
    if "env" in properties:
        properties["env"]["maxProperties"] = bounds.MAX_ENV_KEYS


def state_spec_rules(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the reader's rules in the submit and right-sizing body schemas."""
    schemas = result.get("components", {}).get("schemas", {})
    missing = [name for name in (SUBMIT, RIGHTSIZE, MODEL) if name not in schemas]
    if missing:  # a renamed serializer must not silently drop the rules
        raise LookupError(f"the schema has no component {', '.join(missing)}: update jobs.api.schema_rules")
    for name in (SUBMIT, RIGHTSIZE):
        _state_body(schemas[name])
    model = schemas[MODEL]
    model["additionalProperties"] = False
    params_b = model["properties"]["params_b"]
    params_b.update(minimum=0, exclusiveMinimum=True)  # OpenAPI 3.0: a boolean beside minimum
    return result
