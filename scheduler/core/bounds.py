"""The bounds of a job request: the range every number of a job must be in, and the size of every string.

One table, read by every way in: the job-spec reader (:func:`scheduler.sim.job_spec.parse_job`, behind the
portal form, the API, ``manage.py jobs submit``, scenarios and the right-sizing suggestion) refuses a spec
outside it with the key and the bound, and the engine (:func:`scheduler.core.cycle.plan_cycle`) rejects a
job outside it that reached a snapshot some other way, so no number can make a cycle overflow, loop or
divide by zero. The figures are documented for users in ``docs/job-spec.md``.

Why these figures:

- ``params_b`` ≤ 2,000 (billions): the largest published dense models are below 2 T parameters; above that
  the memory estimate is larger than any cluster.
- ``context`` ≤ 10 M tokens and ``batch`` ≤ 100,000 sequences: beyond the longest-context models served
  today, and what keeps the KV-cache product finite.
- ``memory_gib`` per replica ≥ 0.01 (the ledger keeps two decimals) and ≤ the largest catalog GPU × the GPUs
  one replica may use (:data:`~scheduler.core.rightsize.MAX_GPUS_PER_REPLICA`): more could never be placed.
- ``gpus`` ≤ 64 per replica and ``replicas`` ≤ 512: a gang of 32,768 GPUs is the largest the inventory can
  describe.
- ``duration_s`` and ``checkpoint_interval_s`` ≤ one year; ``rank`` within a 32-bit signed integer.
- Strings (name, image, project, command, env) have the sizes of :data:`TEXT_LIMITS` and hold no NUL and no
  lone surrogate (PostgreSQL stores neither, and no process can receive them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.core.catalog import GPU_MODELS
from scheduler.core.rightsize import MAX_GPUS_PER_REPLICA
from scheduler.core.state import Job

MAX_PARAMS_B = 2_000.0
MAX_CONTEXT = 10_000_000
MAX_BATCH = 100_000
MIN_MEMORY_GIB = 0.01
MAX_MEMORY_GIB = max(spec.memory_mib for spec in GPU_MODELS) * MAX_GPUS_PER_REPLICA / 1024
MAX_GPUS = 64
MAX_REPLICAS = 512
MAX_SECONDS = 365 * 24 * 3600
MAX_RANK = 2_147_483_647

MAX_NAME_CHARS = 200
MAX_IMAGE_CHARS = 500
MAX_PROJECT_CHARS = 64
MAX_COMMAND_BYTES = 64 * 1024  # all arguments together, UTF-8
MAX_ENV_KEYS = 256
MAX_ENV_BYTES = 32 * 1024  # every key and value together, UTF-8
TEXT_LIMITS = {"id": MAX_NAME_CHARS, "name": MAX_NAME_CHARS, "image": MAX_IMAGE_CHARS, "project": MAX_PROJECT_CHARS}


@dataclass(frozen=True, slots=True)
class Bound:
    """The closed range ``[low, high]`` of one key; ``low_open``: the low end itself is excluded."""

    low: float
    high: float
    low_open: bool = False

    def holds(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):  # math.isfinite(int) overflows on huge ones
            return False
        above_low = value > self.low if self.low_open else value >= self.low
        return above_low and value <= self.high

    def text(self) -> str:
        if self.low_open and self.low == 0:
            return f"a positive number, at most {_figure(self.high)}"
        low = f"above {_figure(self.low)}" if self.low_open else f"at least {_figure(self.low)}"
        return f"{low} and at most {_figure(self.high)}"


# Key path in a job spec → its bound. Paths are those of spec/scenario.md ("model.context").
BOUNDS: dict[str, Bound] = {
    "gpus": Bound(1, MAX_GPUS),
    "memory_gib": Bound(MIN_MEMORY_GIB, MAX_MEMORY_GIB),
    "model.params_b": Bound(0, MAX_PARAMS_B, low_open=True),
    "model.context": Bound(1, MAX_CONTEXT),
    "model.batch": Bound(1, MAX_BATCH),
    "replicas": Bound(1, MAX_REPLICAS),
    "duration_s": Bound(0, MAX_SECONDS, low_open=True),
    "checkpoint_interval_s": Bound(0, MAX_SECONDS, low_open=True),
    "rank": Bound(-MAX_RANK, MAX_RANK),
    # A spec asks for a share of one GPU (1-999, spec/scenario.md); traces also state whole GPUs in milli-GPU.
    "gpu_milli": Bound(1, MAX_GPUS * 1000),
}


def out_of_bounds(key: str, value: float) -> str | None:
    """Why ``value`` is outside the bound of ``key`` (a key of :data:`BOUNDS`), or None when it is inside."""
    bound = BOUNDS[key]
    if bound.holds(value):
        return None
    return f"must be {bound.text()}, got {_short(value)}"


def job_problems(job: Job) -> list[tuple[str, str]]:
    """Every number of ``job`` outside its bound, as (key path, reason); empty when the job is in bounds.

    The engine's defence in depth: a job that reached a snapshot without the spec reader (a trace, a row
    written by hand, a bug) is judged by the same table before anything evaluates it.
    """
    request = job.request
    values: list[tuple[str, float | None]] = [
        ("gpus", request.gpus),
        ("gpu_milli", request.gpu_milli),
        ("memory_gib", request.memory_gib),
        ("replicas", job.replicas),
        ("duration_s", job.duration_s),
        ("checkpoint_interval_s", job.checkpoint_interval_s),
        ("rank", job.rank),
    ]
    if request.model is not None:
        model = request.model
        values += [("model.params_b", model.params_b), ("model.context", model.context), ("model.batch", model.batch)]
    problems = []
    for key, value in values:
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            problems.append((key, f"must be a number, got {value!r:.60}"))
            continue
        reason = out_of_bounds(key, value)
        if reason is not None:
            problems.append((key, reason))
    return problems


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored or passed to a process (a NUL or a lone surrogate), or None."""
    if "\x00" in value:
        return "must not contain a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (it holds a lone surrogate)"
    return None


def _figure(value: float) -> str:
    """A bound as a person reads it: 31,536,000 and 1,128, not 3.1536e+07 and 1128.0."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"


def _short(value: float) -> str:
    if isinstance(value, int) and value.bit_length() > 128:  # str() of a 4,300-digit integer raises
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return f"{value:g}" if isinstance(value, float) else str(value)  # at most 39 digits
