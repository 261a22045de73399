"""CapacityIndex bookkeeping of CPU and host memory (traces only): what running and placed jobs hold per node."""

from __future__ import annotations

import pytest

from scheduler.core.model.snapshot import Job, Slot
from tests.scheduler.properties.builders import A100, job, node, running, state_of, whole

NODES = [node("a", A100, 2, cpu_milli=8_000, memory_mib=65_536), node("b", A100, 2, cpu_milli=8_000)]


def _sized(job_id: str, cpu_milli: int = 2_000, memory_mib: int = 16_384) -> Job:
    return job(job_id, gpus=1, cpu_milli=cpu_milli, memory_mib=memory_mib)


def test_a_replica_holding_no_slot_holds_no_cpu_or_memory_anywhere() -> None:
    # A running job whose second replica lost its slot (a malformed record): only the first counts.
    held = running(_sized("r"), (whole("a", 0), ()))
    index = state_of(NODES, [held]).index
    assert index is not None
    assert index.cpu_used == {"a": 2_000, "b": 0}
    assert index.mem_used == {"a": 16_384, "b": 0}


def test_every_replica_counts_on_its_own_node_and_removal_gives_it_back() -> None:
    held = running(_sized("r"), (whole("a", 0), whole("b", 1)))
    state = state_of(NODES, [held])
    index = state.index
    assert index is not None
    assert (index.cpu_used, index.mem_used) == ({"a": 2_000, "b": 2_000}, {"a": 16_384, "b": 16_384})
    statement = state.begin()
    state.remove("r")
    assert (index.cpu_used, index.mem_used) == ({"a": 0, "b": 0}, {"a": 0, "b": 0})
    statement.rollback()
    assert (index.cpu_used, index.mem_used) == ({"a": 2_000, "b": 2_000}, {"a": 16_384, "b": 16_384})


def test_a_job_stating_no_cpu_or_memory_holds_none() -> None:
    index = state_of(NODES, [running(job("r", gpus=2), (whole("a", 0, 1),))]).index
    assert index is not None
    assert (index.cpu_used, index.mem_used) == ({"a": 0, "b": 0}, {"a": 0, "b": 0})


@pytest.mark.parametrize(
    ("node_name", "cpu_milli", "memory_mib", "cap"),
    [
        ("a", 2_000, 16_384, 3),  # 6,000 milli-CPU and 49,152 MiB left: 3 by either
        ("a", 1_000, 16_384, 3),  # memory binds
        ("a", 4_000, 1_024, 1),  # CPU binds
        ("a", 0, 0, 1 << 30),  # the job states neither
        ("b", 2_000, 16_384, 3),  # "b" states no host memory: only CPU counts
        ("b", 0, 16_384, 1 << 30),
        ("a", 7_000, 0, 0),
    ],
)
def test_resource_cap_counts_what_is_left_on_the_node(
    node_name: str, cpu_milli: int, memory_mib: int, cap: int
) -> None:
    held = running(_sized("r"), (whole("a", 0), whole("b", 0)))
    index = state_of(NODES, [held]).index
    assert index is not None
    assert index.resource_cap(node_name, _sized("j", cpu_milli, memory_mib)) == cap


def test_placing_counts_cpu_at_once_and_the_gpu_after_a_flush() -> None:
    state = state_of(NODES)
    index = state.index
    assert index is not None
    state.place(_sized("p"), ((Slot("b", 1),),))
    assert index.cpu_used["b"] == 2_000
    index.flush()
    assert index.free["b"] == [0]
