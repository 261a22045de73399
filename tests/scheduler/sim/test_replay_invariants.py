"""Simulator invariants over seeded loops of generated workloads, every baseline and the engine: work is
conserved, no GPU is ever over-committed, events come in time order, and a seed replays identically. Also
the speed hook: a run progresses at its rate, and the default keeps nominal speed."""

from __future__ import annotations

from collections import defaultdict

import pytest

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import slot_units
from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import CapacityTier, Interconnect
from scheduler.sim import parse_scenario, replay
from scheduler.sim.bench.mixed_run import Repairs, guarded
from scheduler.sim.planners import PLANNERS
from scheduler.sim.topology_model import Fabric, topology_speed
from scheduler.sim.workload.clusters import ClusterDef
from scheduler.sim.workload.mixed import TRAINING_GPUS_MIXED, WorkloadConfig, generate
from tests.scheduler.sim.fakes import first_fit

RUNTIMES = (30.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0)
TINY = ClusterDef(
    "tiny",
    (
        Node("sxm-1", "A100-SXM4-80GB", 4, Interconnect.NVSWITCH, leaf="leaf-1", tier=CapacityTier.RESERVED),
        Node("sxm-2", "H100-SXM5-80GB", 4, Interconnect.NVSWITCH, leaf="leaf-1"),
        Node("pcie-1", "A100-PCIE-40GB", 4, Interconnect.NVLINK_PAIRS, leaf="leaf-2", tier=CapacityTier.SPOT),
    ),
    Fabric(oversubscription=2),
    "12 GPUs",
)
SMALL_GPUS = tuple((g, w) for g, w in TRAINING_GPUS_MIXED if g <= 8)


def workload(seed: int, hours: float = 1.5):
    config = WorkloadConfig(seed=seed, load=1.5, hours=hours, warmup_s=0.0, training_gpus=SMALL_GPUS, cycle_s=30.0)
    return generate(TINY, config, RUNTIMES)


def run(name: str, seed: int):
    planner = PLANNERS[name] if name != "microcosm" else guarded(PLANNERS[name], Repairs())
    w = workload(seed)
    return w, replay(w.scenario, planner, speed=topology_speed(TINY.fabric))


CASES = [(name, seed) for name in ("naive", "k8s-default", "binpack", "fgd") for seed in (1, 2, 3)] + [("microcosm", 1)]


@pytest.mark.parametrize(("name", "seed"), CASES)
def test_replay_invariants(name: str, seed: int) -> None:
    w, result = run(name, seed)
    # events in time order
    times = [event["t"] for event in result.events]
    assert times == sorted(times)
    assert result.runs, "the workload ran nothing: the invariants would hold vacuously"
    # work conservation: what the runs did, less what evictions threw away, is each job's work at the end
    done: dict[str, float] = defaultdict(float)
    for r in result.runs:
        assert 0 < r.rate <= 1 and r.start <= r.end
        done[r.job.id] += r.rate * (r.end - r.start) - (r.rate * r.lost_s if r.outcome == "evicted" else 0.0)
    for job in w.jobs:
        view = result.final["jobs"][job.id]
        assert view["work_done_s"] == pytest.approx(done.get(job.id, 0.0), abs=1e-3)
        if view["state"] == "completed":
            assert view["work_done_s"] == pytest.approx(job.duration_s, abs=1e-3)
        assert done.get(job.id, 0.0) <= (job.duration_s or 0) + 1e-6
    # capacity never exceeded: at every instant each GPU holds at most one GPU's worth
    nodes = {node.name: node for node in TINY.nodes}
    changes: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for r in result.runs:
        for replica in r.slots:
            for slot in replica:
                units = slot_units(slot, GPU_MODEL_BY_NAME[nodes[slot.node].gpu_model])
                changes[(slot.node, slot.gpu)] += [(r.start, units), (r.end, -units)]
    for gpu, deltas in changes.items():
        held = 0
        for _, delta in sorted(deltas, key=lambda d: (d[0], d[1])):  # ends before starts at one instant
            held += delta
            assert held <= UNITS_PER_GPU, f"{gpu} over-committed"
    # the capacity log starts with every GPU
    assert result.capacity[0] == (0.0, 12)


@pytest.mark.parametrize("name", ["naive", "fgd", "microcosm"])
def test_a_seed_replays_identically(name: str) -> None:
    _, first = run(name, 4)
    _, second = run(name, 4)
    assert first.as_dict() == second.as_dict()
    assert first.runs == second.runs


# -- the speed hook ---------------------------------------------------------------------------------------


def scenario(**submit: object):
    doc = {
        "name": "speed",
        "cycle_s": 10,
        "until": 1000,
        "cluster": {"nodes": [{"name": "a", "gpu_model": "A100-SXM4-80GB", "gpus": 2}]},
        "teams": [{"name": "t"}],
        "events": [{"t": 0, "submit": {"id": "j", "team": "t", "gpus": 1, **submit}}],
    }
    return parse_scenario(doc, source="speed.json")


def test_without_a_hook_runs_progress_at_nominal_speed() -> None:
    result = replay(scenario(duration_s=100), first_fit)
    assert result.runs[0].rate == 1.0
    assert (result.runs[0].start, result.runs[0].end, result.runs[0].outcome) == (0, 100, "completed")


def test_a_run_at_half_speed_takes_twice_as_long_and_checkpoints_what_it_did() -> None:
    result = replay(scenario(duration_s=100, checkpoint_interval_s=60), first_fit, speed=lambda j, s, n: 0.5)
    kinds = [(e["t"], e["type"], e.get("work_done_s")) for e in result.events]
    assert kinds == [
        (0, "bound", None),
        (60, "checkpointed", 30),
        (120, "checkpointed", 60),
        (180, "checkpointed", 90),
        (200, "completed", None),
    ]
    assert result.final["jobs"]["j"]["work_done_s"] == 100


@pytest.mark.parametrize("rate", [0.0, 1.5, -1.0])
def test_a_hook_outside_0_1_is_an_error(rate: float) -> None:
    with pytest.raises(ValueError, match="must be in"):
        replay(scenario(duration_s=100), first_fit, speed=lambda j, s, n: rate)


def test_the_run_log_records_evictions_with_the_work_lost() -> None:
    doc = {
        "name": "lost",
        "cycle_s": 10,
        "until": 500,
        "cluster": {"nodes": [{"name": "a", "gpu_model": "A100-SXM4-80GB", "gpus": 1, "tier": "spot"}]},
        "teams": [{"name": "t"}],
        "events": [
            {"t": 0, "submit": {"id": "j", "team": "t", "gpus": 1, "duration_s": 400, "checkpoint_interval_s": 100}},
            {"t": 250, "remove_node": "a"},
        ],
    }
    result = replay(parse_scenario(doc, source="lost.json"), first_fit)
    (evicted,) = result.runs
    assert (evicted.outcome, evicted.start, evicted.end, evicted.lost_s) == ("evicted", 0, 250, 50)
    assert result.capacity == ((0.0, 1), (250.0, 0))
