"""Loaders for Alibaba's openb GPU-sharing trace (``../shared/traces/alibaba-openb-2023/``, FGD ATC '23).

Units are the trace's own: CPU in milli-cores, memory in MiB, GPU shares in milli-GPU (1000 = one GPU).

Rules every row must meet (from the trace README; each broken rule is one ``file:line: what is wrong``):

Node lists (``sn,cpu_milli,memory_mib,gpu,model``):
- ``sn`` non-empty and unique in the file; ``cpu_milli`` and ``memory_mib`` integers > 0;
- ``gpu`` an integer ≥ 0; ``model`` empty exactly when ``gpu`` is 0, else one of :data:`GPU_MODELS`.

Pod lists (11 columns, or the first 5 in the ``multigpu*`` files):
- ``name`` non-empty and unique; ``cpu_milli`` and ``memory_mib`` integers ≥ 0 (one real pod asks 0 MiB);
- ``num_gpu`` one of 0, 1, 2, 4, 8; ``gpu_milli`` an integer 0..1000, 0 exactly when ``num_gpu`` is 0,
  and 1000 when ``num_gpu`` > 1 (only one-GPU pods share a GPU);
- ``gpu_spec`` empty or ``|``-separated models of :data:`GPU_MODELS` (repeats folded: the real gpuspec
  files hold ``V100M16|V100M32|V100M32``), and only on GPU pods;
- ``qos`` one of :data:`QOS`; ``pod_phase`` one of :data:`POD_PHASES`;
- ``creation_time`` an integer ≥ 0 and ``deletion_time`` ≥ it; ``scheduled_time`` empty exactly for
  ``Pending`` pods, else between creation and deletion.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from scheduler.sim.traces.rows import Problems, integer, read_rows, show

#: GPU model codes of the trace (G1–G3 are Alibaba-internal codes; no node carries G1).
GPU_MODELS = frozenset({"A10", "G1", "G2", "G3", "P100", "T4", "V100M16", "V100M32"})
QOS = frozenset({"BE", "Burstable", "Guaranteed", "LS"})
POD_PHASES = frozenset({"Failed", "Pending", "Running", "Succeeded"})
GPU_COUNTS = frozenset({0, 1, 2, 4, 8})
MILLI_PER_GPU = 1000

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
MULTIGPU_POD_COLUMNS = POD_COLUMNS[:5]


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One machine of an openb node list; ``model`` is "" for a CPU-only node."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of an openb pod list.

    ``gpu_milli`` is the share of *each* of its ``num_gpu`` GPUs; ``gpu_spec`` the allowed models (empty =
    any). The last five fields are None in the ``multigpu*`` files, which lack those columns.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str | None = None
    pod_phase: str | None = None
    creation_time_s: int | None = None
    deletion_time_s: int | None = None
    scheduled_time_s: int | None = None

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU asked, in milli-GPU (``num_gpu × gpu_milli``)."""
        return self.num_gpu * self.gpu_milli


def load_openb_nodes(path: str | Path) -> tuple[TraceNode, ...]:
    """Every node of an openb node list, in file order; raises TraceError listing every bad row."""
    problems = Problems(str(path))
    nodes: list[TraceNode] = []
    seen: dict[str, int] = {}
    for line, row in read_rows(path, (NODE_COLUMNS,), problems):
        ok = True
        name = row["sn"].strip()
        if not name:
            problems.add(line, "sn: must not be empty")
            ok = False
        elif name in seen:
            problems.add(line, f"sn: duplicate node {show(name)} (first on line {seen[name]})")
            ok = False
        else:
            seen[name] = line
        cpu = integer(problems, line, "cpu_milli", row["cpu_milli"], minimum=1)
        memory = integer(problems, line, "memory_mib", row["memory_mib"], minimum=1)
        gpus = integer(problems, line, "gpu", row["gpu"])
        model = row["model"].strip()
        if gpus == 0 and model:
            problems.add(line, f"model: must be empty on a node without GPUs, got {show(model)}")
            ok = False
        elif gpus and not model:
            problems.add(line, f"model: a node with {gpus} GPUs needs a GPU model")
            ok = False
        elif model and model not in GPU_MODELS:
            problems.add(line, f"model: unknown GPU model {show(model)} (known: {', '.join(sorted(GPU_MODELS))})")
            ok = False
        if ok and cpu is not None and memory is not None and gpus is not None:
            nodes.append(TraceNode(name=name, cpu_milli=cpu, memory_mib=memory, gpus=gpus, model=model))
    problems.raise_if_any()
    return tuple(nodes)


def load_openb_pods(path: str | Path) -> tuple[TracePod, ...]:
    """Every pod of an openb pod list (any of the 23 variants), in file order; raises TraceError listing
    every bad row."""
    problems = Problems(str(path))
    pods: list[TracePod] = []
    seen: dict[str, int] = {}
    for line, row in read_rows(path, (POD_COLUMNS, MULTIGPU_POD_COLUMNS), problems):
        before = problems.total
        name = row["name"].strip()
        if not name:
            problems.add(line, "name: must not be empty")
        elif name in seen:
            problems.add(line, f"name: duplicate pod {show(name)} (first on line {seen[name]})")
        else:
            seen[name] = line
        cpu = integer(problems, line, "cpu_milli", row["cpu_milli"])
        memory = integer(problems, line, "memory_mib", row["memory_mib"])
        num_gpu = _num_gpu(problems, line, row["num_gpu"])
        gpu_milli = _gpu_milli(problems, line, row["gpu_milli"], num_gpu)
        extra: _PodDetails = _pod_details(problems, line, row, num_gpu) if "qos" in row else {}
        # A value is None only where a problem was recorded, so its None check narrows the type, never skips a row.
        if (
            problems.total == before
            and cpu is not None
            and memory is not None
            and num_gpu is not None
            and gpu_milli is not None
        ):
            pods.append(
                TracePod(
                    name=name,
                    cpu_milli=cpu,
                    memory_mib=memory,
                    num_gpu=num_gpu,
                    gpu_milli=gpu_milli,
                    **extra,
                )
            )
    problems.raise_if_any()
    return tuple(pods)


def _num_gpu(problems: Problems, line: int, text: str) -> int | None:
    value = integer(problems, line, "num_gpu", text)
    if value is not None and value not in GPU_COUNTS:
        problems.add(line, f"num_gpu: must be one of 0, 1, 2, 4, 8, got {value}")
        return None
    return value


def _gpu_milli(problems: Problems, line: int, text: str, num_gpu: int | None) -> int | None:
    value = integer(problems, line, "gpu_milli", text)
    if value is None:
        return None
    if value > MILLI_PER_GPU:
        problems.add(line, f"gpu_milli: must be ≤ {MILLI_PER_GPU} (one whole GPU), got {value}")
        return None
    if num_gpu == 0 and value != 0:
        problems.add(line, f"gpu_milli: must be 0 for a pod without GPUs (num_gpu 0), got {value}")
    elif num_gpu is not None and num_gpu > 0 and value == 0:
        problems.add(line, f"gpu_milli: must be > 0 for a pod with num_gpu {num_gpu}")
    elif num_gpu is not None and num_gpu > 1 and value != MILLI_PER_GPU:
        problems.add(line, f"gpu_milli: must be 1000 for a multi-GPU pod (num_gpu {num_gpu}), got {value}")
    return value


class _PodDetails(TypedDict, total=False):
    """TracePod's optional fields, as the columns after ``gpu_milli`` give them."""

    gpu_spec: tuple[str, ...]
    qos: str
    pod_phase: str
    creation_time_s: int | None
    deletion_time_s: int | None
    scheduled_time_s: int | None


def _pod_details(problems: Problems, line: int, row: dict[str, str], num_gpu: int | None) -> _PodDetails:
    """The columns after ``gpu_milli``, checked; returns TracePod keyword arguments."""
    spec_text = row["gpu_spec"].strip()
    # dict.fromkeys folds repeats in file order: the real gpuspec files hold "V100M16|V100M32|V100M32".
    spec = tuple(dict.fromkeys(spec_text.split("|"))) if spec_text else ()
    unknown = [model for model in spec if model not in GPU_MODELS]
    if unknown:
        problems.add(line, f"gpu_spec: unknown GPU model(s) {show(', '.join(unknown))}")
    elif spec and num_gpu == 0:
        problems.add(line, f"gpu_spec: a pod without GPUs cannot constrain the GPU model, got {show(spec_text)}")
    qos = row["qos"].strip()
    if qos not in QOS:
        problems.add(line, f"qos: must be one of {', '.join(sorted(QOS))}, got {show(qos)}")
    phase = row["pod_phase"].strip()
    if phase not in POD_PHASES:
        problems.add(line, f"pod_phase: must be one of {', '.join(sorted(POD_PHASES))}, got {show(phase)}")
    created = integer(problems, line, "creation_time", row["creation_time"])
    deleted = integer(problems, line, "deletion_time", row["deletion_time"])
    if created is not None and deleted is not None and deleted < created:
        problems.add(line, f"deletion_time: {deleted} is before creation_time {created}")
    scheduled_text = row["scheduled_time"].strip()
    scheduled: int | None = None
    if not scheduled_text:
        if phase in POD_PHASES and phase != "Pending":
            problems.add(line, f"scheduled_time: empty, but only a Pending pod is unscheduled (pod_phase {phase})")
    elif phase == "Pending":
        problems.add(line, f"scheduled_time: a Pending pod was never scheduled, got {show(scheduled_text)}")
    else:
        scheduled = integer(problems, line, "scheduled_time", scheduled_text)
        if scheduled is not None and created is not None and scheduled < created:
            problems.add(line, f"scheduled_time: {scheduled} is before creation_time {created}")
        elif scheduled is not None and deleted is not None and scheduled > deleted:
            problems.add(line, f"scheduled_time: {scheduled} is after deletion_time {deleted}")
    return {
        "gpu_spec": spec,
        "qos": qos,
        "pod_phase": phase,
        "creation_time_s": created,
        "deletion_time_s": deleted,
        "scheduled_time_s": scheduled,
    }
