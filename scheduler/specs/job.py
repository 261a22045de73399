"""A job object of a scenario's ``submit`` event (spec/scenario.md, "Job keys") → core :class:`Job`.

Extension: ``gpu_milli`` (1–999) asks for a share of one time-sliced GPU, as in the Alibaba openb trace; such
a job runs only on nodes with ``"sharing": true``. ``name``, ``image``, ``command``, ``env``,
``restart_limit`` and the host resources ``cpu`` and ``host_memory_gib`` are checked and otherwise ignored so one
job spec serves a scenario, ``manage.py jobs submit`` and the API: the engine plans no process and no application
failure (``restart_limit`` is the loop's, the host resources the cluster backend's, read by the portal's submit
from the spec it has checked here).
"""

from __future__ import annotations

import re
from typing import Any

from scheduler.core.gpus import catalog
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.snapshot import Job, ModelProfile, Request
from scheduler.core.model.vocabulary import DEFAULT_JOB_KIND, Dtype, JobKind, JobTier, ModelMode, Priority
from scheduler.core.sizing.bounds import (
    BOUNDS,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_KEYS,
    MAX_NAME_CHARS,
    MAX_PROJECT_CHARS,
    MAX_RESTART_LIMIT,
    TEXT_LIMITS,
    out_of_bounds,
    text_problem,
)
from scheduler.core.sizing.memory import memory_model_conflict, memory_model_for
from scheduler.specs.fields import (
    Errors,
    check_keys,
    describe,
    join,
    read_bool,
    read_choice,
    read_int,
    read_list,
    read_number,
    read_object,
    read_str,
)

REQUEST_KEYS = ("gpus", "mig_profile", "memory_gib", "model", "gpu_milli")
IGNORED_KEYS = ("name", "image", "command", "env")
JOB_KEYS = (
    "id",
    "team",
    "project",
    "kind",
    "priority",
    *REQUEST_KEYS,
    "replicas",
    "gpu_model",
    "preemptible",
    "consolidate",
    "checkpoint_interval_s",
    "tier",
    "duration_s",
    "rank",
    "restart_limit",
    "cpu",
    "host_memory_gib",
    *IGNORED_KEYS,
)
MODEL_KEYS = ("params_b", "dtype", "context", "batch", "mode")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a POSIX shell accepts as a variable name


def parse_job(errors: Errors, path: str, value: Any, submitted_at: float) -> Job | None:
    """A job object submitted at ``submitted_at``, or None after recording every problem with it.

    Team references and duplicate ids are checked by the caller, which sees the whole timeline.
    """
    data = read_object(errors, path, value)
    if data is None:
        return None
    check_keys(errors, path, data, JOB_KEYS, required=("id", "team"))
    before = len(errors.messages)
    job_id = read_str(errors, join(path, "id"), data["id"], max_chars=MAX_NAME_CHARS) if "id" in data else None
    team = read_str(errors, join(path, "team"), data["team"], max_chars=MAX_NAME_CHARS) if "team" in data else None
    gpu_model = (
        _read_gpu_constraint(errors, join(path, "gpu_model"), data["gpu_model"]) if "gpu_model" in data else None
    )
    options: dict[str, Any] = {}
    for key, enum in (("kind", JobKind), ("priority", Priority), ("tier", JobTier)):
        if key in data:
            options[key] = read_choice(errors, join(path, key), data[key], enum)
    request = _read_request(errors, path, data, gpu_model, options.get("kind") or DEFAULT_JOB_KIND)
    if "replicas" in data:
        options["replicas"] = _read_bounded_int(errors, join(path, "replicas"), "replicas", data["replicas"])
    if "preemptible" in data:
        options["preemptible"] = read_bool(errors, join(path, "preemptible"), data["preemptible"])
    if "consolidate" in data:
        # true (the default): production placed on larger capacity than its right size may later be moved to its
        # right-sized slice make-before-break; false keeps it where it starts (docs/job-spec.md).
        options["consolidate"] = read_bool(errors, join(path, "consolidate"), data["consolidate"])
    for key in ("checkpoint_interval_s", "duration_s"):
        if key in data:
            options[key] = _read_bounded_number(errors, join(path, key), key, data[key])
    if "rank" in data:
        options["rank"] = _read_bounded_int(errors, join(path, "rank"), "rank", data["rank"])
    if "project" in data:
        options["project"] = read_str(errors, join(path, "project"), data["project"], max_chars=MAX_PROJECT_CHARS)
    if "restart_limit" in data:
        _check_restart_limit(errors, join(path, "restart_limit"), data["restart_limit"])
    _check_host_resources(errors, path, data)
    _check_ignored(errors, path, data)
    if len(errors.messages) > before or job_id is None or team is None or request is None:
        return None
    return Job(id=job_id, team=team, request=request, gpu_model=gpu_model, submitted_at=submitted_at, **options)


def _read_gpu_constraint(errors: Errors, path: str, value: Any) -> str | None:
    if not isinstance(value, str) or (value not in catalog.GPU_MODEL_BY_NAME and value not in catalog.GPU_CLASSES):
        known = ", ".join((*catalog.GPU_CLASSES, *catalog.GPU_MODEL_BY_NAME))
        errors.add(path, f"unknown GPU model or class {describe(value)}; use one of: {known}")
        return None
    return value


def _read_request(
    errors: Errors, path: str, data: dict[str, Any], gpu_model: str | None, kind: JobKind
) -> Request | None:
    stated = [key for key in REQUEST_KEYS if key in data]
    if len(stated) != 1:
        found = f"found {', '.join(stated)}" if stated else "found none"
        errors.add(path, f"state the request in exactly one way: {', '.join(REQUEST_KEYS)}; {found}")
        return None
    key = stated[0]
    where = join(path, key)
    value = data[key]
    if key == "gpus":
        gpus = _read_bounded_int(errors, where, "gpus", value)
        return Request(gpus=gpus) if gpus is not None else None
    if key == "gpu_milli":
        milli = read_int(errors, where, value, minimum=1, maximum=FULL_GPU_MILLI - 1)
        return Request(gpu_milli=milli) if milli is not None else None
    if key == "memory_gib":
        memory = _read_bounded_number(errors, where, "memory_gib", value)
        return Request(memory_gib=memory) if memory is not None else None
    if key == "mig_profile":
        profile = _read_profile(errors, where, value, gpu_model)
        return Request(mig_profile=profile) if profile is not None else None
    model = _read_model_profile(errors, where, value, kind)
    return Request(model=model) if model is not None else None


def _read_profile(errors: Errors, path: str, value: Any, gpu_model: str | None) -> str | None:
    """A MIG profile name that some catalog model offers (one matching ``gpu_model`` when it is given)."""
    models = [spec for spec in catalog.GPU_MODELS if gpu_model is None or gpu_model in (spec.name, spec.gpu_class)]
    names = list(dict.fromkeys(name for spec in models for name in spec.profiles()))
    if isinstance(value, str) and value in names:
        return value
    scope = f"a {gpu_model}" if gpu_model else "any catalog GPU"
    errors.add(path, f"{describe(value)} is not a MIG profile of {scope}; use one of: {', '.join(names)}")
    return None


def _read_model_profile(errors: Errors, path: str, value: Any, kind: JobKind) -> ModelProfile | None:
    """The model to size; without ``mode``, the memory model the job's kind implies (a training job is sized for
    training), and a ``mode`` that contradicts the kind is refused rather than silently sized wrong."""
    data = read_object(errors, path, value)
    if data is None:
        return None
    check_keys(errors, path, data, MODEL_KEYS, required=("params_b",))
    before = len(errors.messages)
    params_b = (
        _read_bounded_number(errors, join(path, "params_b"), "model.params_b", data["params_b"])
        if "params_b" in data
        else None
    )
    options: dict[str, Any] = {}
    if "dtype" in data:
        options["dtype"] = read_choice(errors, join(path, "dtype"), data["dtype"], Dtype)
    options["mode"] = memory_model_for(kind)
    if "mode" in data:
        mode = read_choice(errors, join(path, "mode"), data["mode"], ModelMode)
        conflict = memory_model_conflict(kind, mode) if mode is not None else None
        if conflict is not None:
            errors.add(join(path, "mode"), conflict)
        options["mode"] = mode
    for key in ("context", "batch"):
        if key in data:
            options[key] = _read_bounded_int(errors, join(path, key), f"model.{key}", data[key])
    if len(errors.messages) > before or params_b is None:
        return None
    return ModelProfile(params_b=params_b, **options)


def _check_restart_limit(errors: Errors, path: str, value: Any) -> None:
    """How many times an application failure (a non-zero exit, an OOM kill) may restart the job before it
    fails, as a Kubernetes Job's ``backoffLimit``; infrastructure losses never count against it."""
    number = read_int(errors, path, value, minimum=None)
    if number is not None and out_of_bounds("restart_limit", number) is not None:
        errors.add(
            path,
            f"must be a whole number of restarts from 0 to {MAX_RESTART_LIMIT} (0: the first application failure "
            f"fails the job), got {describe(number)}",
        )


def _check_host_resources(errors: Errors, path: str, data: dict[str, Any]) -> None:
    """``cpu`` (cores) and ``host_memory_gib`` (the job's processes' memory, GiB; ``memory_gib`` is GPU memory) per
    replica: the cluster backend's pods request them, with limits equal (docs/job-spec.md)."""
    for key, unit, hint in (
        ("cpu", "cores", "e.g. 16 or 0.5"),
        ("host_memory_gib", "GiB of host memory", "the memory of the job's processes; GPU memory is memory_gib"),
    ):
        if key not in data:
            continue
        number = read_number(errors, join(path, key), data[key], minimum=None)
        if number is not None and out_of_bounds(key, number) is not None:
            bound = BOUNDS[key]
            errors.add(
                join(path, key),
                f"must be from {bound.low:g} to {bound.high:g} {unit} per replica ({hint}), got {describe(number)}",
            )


def _check_ignored(errors: Errors, path: str, data: dict[str, Any]) -> None:
    """The real-cluster keys are ignored by the simulator but still must have the right shape and size."""
    for key in ("name", "image"):
        if key in data:
            read_str(errors, join(path, key), data[key], max_chars=TEXT_LIMITS[key])
    if "command" in data:
        _check_command(errors, join(path, "command"), data["command"])
    if "env" in data:
        _check_env(errors, join(path, "env"), data["env"])


def _check_command(errors: Errors, path: str, value: Any) -> None:
    items = read_list(errors, path, value)
    size = 0
    for i, item in enumerate(items or []):
        text = read_str(errors, join(path, i), item, allow_empty=True)
        size += len(text.encode()) if text is not None else 0
    if size > MAX_COMMAND_BYTES:
        errors.add(path, f"must be at most {MAX_COMMAND_BYTES // 1024} KiB in all, got {size:,} bytes")


def _check_env(errors: Errors, path: str, value: Any) -> None:
    env = read_object(errors, path, value)
    if env is None:
        return
    if len(env) > MAX_ENV_KEYS:
        errors.add(path, f"must have at most {MAX_ENV_KEYS} variables, got {len(env)}")
        return
    size = 0
    for name, item in env.items():
        valid = isinstance(name, str) and ENV_NAME.fullmatch(name) is not None
        where = join(path, name) if valid else path
        if not valid:
            errors.add(path, f"{describe(name)} is not a variable name: use letters, digits and _, not first a digit")
            name = str(name)
        if not isinstance(item, str):
            errors.add(where, f"must be a string, got {describe(item)}")
            continue
        problem = text_problem(item)
        if problem is not None:
            errors.add(where, problem)
        size += len(name.encode(errors="replace")) + len(item.encode(errors="replace"))
    if size > MAX_ENV_BYTES:
        errors.add(path, f"must be at most {MAX_ENV_BYTES // 1024} KiB in all (names and values), got {size:,} bytes")


def _read_bounded_int(errors: Errors, where: str, key: str, value: Any) -> int | None:
    """An integer at ``where`` inside the bound of ``key`` (a key path of
    :data:`~scheduler.core.sizing.bounds.BOUNDS`)."""
    number = read_int(errors, where, value, minimum=None)
    return number if number is not None and _inside(errors, where, key, number) else None


def _read_bounded_number(errors: Errors, where: str, key: str, value: Any) -> float | None:
    """A number at ``where`` inside the bound of ``key`` (a key path of
    :data:`~scheduler.core.sizing.bounds.BOUNDS`)."""
    number = read_number(errors, where, value, minimum=None)
    return number if number is not None and _inside(errors, where, key, number) else None


def _inside(errors: Errors, where: str, key: str, value: float) -> bool:
    reason = out_of_bounds(key, value)
    if reason is not None:
        errors.add(where, reason)
    return reason is None
