"""The bounds of a job request: the range every number of a job must be in, and the size of every string.

One table, read by every way in: the job-spec reader (:func:`scheduler.specs.job.parse_job`, behind the
portal form, the API, ``manage.py jobs submit``, scenarios and the right-sizing suggestion) refuses a spec
outside it with the key and the bound, and the engine (:func:`scheduler.core.planning.cycle.plan_cycle`) rejects a
job outside it that reached a snapshot some other way, so no number can make a cycle overflow, loop or
divide by zero. The figures are documented for users in ``docs/job-spec.md``.

Why these figures:

- ``params_b`` ≤ 2,000 (billions): the largest published dense models are below 2 T parameters; above that
  the memory estimate is larger than any cluster.
- ``context`` ≤ 10 M tokens and ``batch`` ≤ 100,000 sequences: beyond the longest-context models served
  today, and what keeps the KV-cache product finite.
- ``memory_gib`` per replica ≥ 0.01 (the ledger keeps two decimals) and ≤ the largest catalog GPU × the GPUs
  one replica may use (:data:`~scheduler.core.sizing.rightsize.MAX_GPUS_PER_REPLICA`): more could never be placed.
- ``gpus`` ≤ 64 per replica and ``replicas`` ≤ 512: a gang of 32,768 GPUs is the largest the inventory can
  describe.
- ``duration_s`` and ``checkpoint_interval_s`` ≤ one year; ``rank`` within a 32-bit signed integer.
- ``restart_limit`` (restarts after application failures, like a Kubernetes Job's ``backoffLimit``) 0–100,
  default 3: a job that fails a hundred times on its own is broken, and each restart holds GPUs others wait
  for. The engine never reads it (only the loop does, when a replica fails), so it is no field of a core job.
- ``cpu`` (host CPU cores per replica) 0.1–1,024 and ``host_memory_gib`` (host memory per replica, GiB) 0.5–32,768:
  a tenth of a core is the least a process feeding a GPU can live on and half a GiB the least a CUDA context
  takes; the largest single servers have under 1,024 hardware threads and 32 TiB. Like ``restart_limit`` the engine
  never reads them (the cluster backend sizes the pods with them).
- Strings (name, image, project, command, env) have the sizes of :data:`TEXT_LIMITS` and hold no NUL and no
  lone surrogate (PostgreSQL stores neither, and no process can receive them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.core.model.snapshot import Job
from scheduler.core.sizing.rightsize import MAX_GPUS_PER_REPLICA

MAX_PARAMS_B = 2_000.0
MAX_CONTEXT = 10_000_000
MAX_BATCH = 100_000
MIN_MEMORY_GIB = 0.01
MAX_MEMORY_GIB = max(spec.memory_mib for spec in GPU_MODELS) * MAX_GPUS_PER_REPLICA / 1024
MAX_GPUS = 64
MAX_REPLICAS = 512
MAX_SECONDS = 365 * 24 * 3600
MAX_RANK = 2_147_483_647
MAX_RESTART_LIMIT = 100
MIN_CPU = 0.1
MAX_CPU = 1024.0
MIN_HOST_MEMORY_GIB = 0.5
MAX_HOST_MEMORY_GIB = 32768.0
DEFAULT_RESTART_LIMIT = 3  # a Kubernetes Job's backoffLimit is 6; three retries tell a bug from bad luck sooner

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

    def holds(self, value: int | float) -> bool:
        # Comparisons alone: NaN fails both, ±inf one end, and int-float comparison is exact for any int
        # (math.isfinite would overflow on a 400-digit one). ``int | float``, not ``float``: compiled by mypyc, a
        # float parameter converts an int on the way in, and a 400-digit one raises there.
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
    "restart_limit": Bound(0, MAX_RESTART_LIMIT),
    "cpu": Bound(MIN_CPU, MAX_CPU),
    "host_memory_gib": Bound(MIN_HOST_MEMORY_GIB, MAX_HOST_MEMORY_GIB),
    # A spec asks for a share of one GPU (1-999, spec/scenario.md); traces also state whole GPUs in milli-GPU.
    "gpu_milli": Bound(1, MAX_GPUS * 1000),
}


def out_of_bounds(key: str, value: int | float) -> str | None:
    """Why ``value`` is outside the bound of ``key`` (a key of :data:`BOUNDS`), or None when it is inside."""
    bound = BOUNDS[key]
    return None if bound.holds(value) else _outside(bound, value)


def _outside(bound: Bound, value: int | float) -> str:
    return f"must be {bound.text()}, got {_short(value)}"


def job_problems(job: Job) -> list[tuple[str, str]]:
    """Every number of ``job`` outside its bound, as (key path, reason); empty when the job is in bounds.

    The engine's defence in depth: a job that reached a snapshot without the spec reader (a trace, a row
    written by hand, a bug) is judged by the same table before anything evaluates it. Every pending job is
    judged every cycle, so this reads the fields directly rather than building a list of them.
    """
    problems: list[tuple[str, str]] = []
    request = job.request
    _judge(problems, job, _JOB_FIELDS)
    _judge(problems, request, _REQUEST_FIELDS)
    if request.model is not None:
        _judge(problems, request.model, _MODEL_FIELDS)
    return problems


def _judge(problems: list[tuple[str, str]], value_of: object, fields: tuple[tuple[str, str, Bound], ...]) -> None:
    for key, name, bound in fields:
        value = getattr(value_of, name)
        if value is None or (type(value) in _NUMBER_TYPES and bound.holds(value)):
            continue
        if type(value) not in _NUMBER_TYPES:  # a bool is an int to Python, not a number to a job spec
            problems.append((key, f"must be a number, got {value!r:.60}"))
        else:
            problems.append((key, _outside(bound, value)))


_NUMBER_TYPES = (int, float)
# (key path, attribute, bound) of the numbers of a job, of its request and of its model profile.
_JOB_FIELDS = tuple((key, key, BOUNDS[key]) for key in ("replicas", "duration_s", "checkpoint_interval_s", "rank"))
_REQUEST_FIELDS = tuple((key, key, BOUNDS[key]) for key in ("gpus", "gpu_milli", "memory_gib"))
_MODEL_FIELDS = tuple((f"model.{key}", key, BOUNDS[f"model.{key}"]) for key in ("params_b", "context", "batch"))


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


def _short(value: int | float) -> str:
    if isinstance(value, int) and value.bit_length() > 128:  # str() of a 4,300-digit integer raises
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return f"{value:g}" if isinstance(value, float) else str(value)  # at most 39 digits
