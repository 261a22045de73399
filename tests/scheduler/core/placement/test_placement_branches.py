"""Placement corners: ties among equal nodes, leaves and hosts; nodes short of CPU skipped in every holding."""

from __future__ import annotations

import pytest

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Running, Slot, Slots
from scheduler.core.model.vocabulary import Interconnect, JobKind
from scheduler.core.placement import find_slots
from tests.scheduler.properties.builders import A100, H100, job, node, running, state_of, whole

POLICY = Policy()


def _busy(node_name: str, *gpus: int) -> Running:
    return running(job(f"busy-{node_name}", gpus=len(gpus)), (whole(node_name, *gpus),))


def _hosts(slots: Slots | None) -> list[str]:
    assert slots is not None
    return sorted({slot.node for replica in slots for slot in replica})


# -- whole GPUs, one replica ---------------------------------------------------------------------------------


def test_among_nvlink_pair_nodes_without_a_free_pair_the_first_by_name_wins() -> None:
    # Both nodes have GPUs 1 and 2 free: the same free count, no bridged pair (penalty 1) on either.
    pairs = Interconnect.NVLINK_PAIRS
    nodes = [node(name, A100, 4, interconnect=pairs) for name in ("n0", "n1")]
    state = state_of(nodes, [_busy("n0", 0, 3), _busy("n1", 0, 3)])
    assert find_slots(state, job("j", gpus=2), POLICY) == ((Slot("n0", 1), Slot("n0", 2)),)


# -- whole-GPU gangs -----------------------------------------------------------------------------------------


def test_a_leaf_whose_free_gpus_are_too_fragmented_is_passed_over() -> None:
    # Leaf A has 8 free GPUs (2 on each of 4 nodes) but no node holds a 4-GPU replica; leaf B does.
    nodes = [node(f"a{i}", leaf="A") for i in range(4)] + [node(f"b{i}", leaf="B") for i in range(2)]
    busy = [_busy(f"a{i}", *range(6)) for i in range(4)] + [_busy(f"b{i}", *range(4)) for i in range(2)]
    assert _hosts(find_slots(state_of(nodes, busy), job("g", gpus=4, replicas=2), POLICY)) == ["b0", "b1"]


def test_between_two_equally_good_leaves_the_first_by_name_wins() -> None:
    nodes = [node(f"{leaf.lower()}{i}", leaf=leaf) for leaf in ("B", "A") for i in range(2)]
    busy = [_busy(n.name, *range(4)) for n in nodes]
    assert _hosts(find_slots(state_of(nodes, busy), job("g", gpus=4, replicas=2), POLICY)) == ["a0", "a1"]


@pytest.mark.parametrize(
    ("h100_cpu_milli", "hosts"),
    [
        (None, ["h0"]),  # the H100s state no CPU limit: one H100 node holds the whole gang
        # The H100s cannot hold one replica's CPU; every A100 node holds one replica: leaf A, then B by name.
        (1_000, ["a0", "a1"]),
    ],
)
def test_a_gang_limited_by_cpu_is_placed_host_by_host(h100_cpu_milli: int | None, hosts: list[str]) -> None:
    nodes = [node(f"h{i}", H100, cpu_milli=h100_cpu_milli) for i in range(2)]
    nodes += [node(f"{leaf.lower()}{i}", A100, leaf=leaf, cpu_milli=4_000) for leaf in ("B", "A") for i in range(2)]
    gang = job("g", gpus=4, replicas=2, cpu_milli=4_000)
    assert _hosts(find_slots(state_of(nodes), gang, POLICY)) == hosts


# -- MIG instances and shares: a node short of CPU is skipped -----------------------------------------------


def _mig_nodes(m0_cpu_milli: int) -> tuple[list[Node], list[Running]]:
    nodes = [node("m0", A100, 1, mig="all-1g.10gb", cpu_milli=m0_cpu_milli), node("m1", A100, 1, mig="all-1g.10gb")]
    held = running(job("x", mig="1g.10gb", kind=JobKind.INFERENCE), ((Slot("m0", 0, "1g.10gb", 0),),))
    return nodes, [held]


def _share_nodes(s0_cpu_milli: int) -> tuple[list[Node], list[Running]]:
    nodes = [node("s0", H100, 1, sharing=True, cpu_milli=s0_cpu_milli), node("s1", H100, 1, sharing=True)]
    return nodes, [running(job("x", milli=700), ((Slot("s0", 0, milli=700),),))]


MIG_JOB = job("j", mig="1g.10gb", kind=JobKind.INFERENCE, cpu_milli=2_000)
SHARE_JOB = job("j", milli=300, cpu_milli=2_000)


@pytest.mark.parametrize(
    ("world", "the_job", "expected"),
    [
        # The partly used GPU on m0 is preferred (it packs) while m0 has the CPU ...
        (_mig_nodes(8_000), MIG_JOB, Slot("m0", 0, "1g.10gb", 1)),
        # ... and skipped, for the idle one on m1, when it has not.
        (_mig_nodes(1_000), MIG_JOB, Slot("m1", 0, "1g.10gb", 0)),
        # The 300 milli left on s0 fit the share exactly ...
        (_share_nodes(8_000), SHARE_JOB, Slot("s0", 0, milli=300)),
        # ... but not its CPU.
        (_share_nodes(1_000), SHARE_JOB, Slot("s1", 0, milli=300)),
    ],
)
def test_a_replica_skips_gpus_on_nodes_without_its_cpu(
    world: tuple[list[Node], list[Running]], the_job: Job, expected: Slot
) -> None:
    nodes, held = world
    assert find_slots(state_of(nodes, held), the_job, POLICY) == ((expected,),)
