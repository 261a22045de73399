"""The topology throughput model on worked examples: numbers computed by hand from the module's constants."""

from __future__ import annotations

import pytest

from scheduler.core.model.snapshot import Job, Node, Request, Slot
from scheduler.core.model.vocabulary import Fabric as NodeFabric
from scheduler.core.model.vocabulary import Interconnect, JobKind
from scheduler.sim.topology_model import (
    TCP_GBPS,
    Fabric,
    StepProfile,
    allreduce_s,
    compute_s,
    placement_speed,
    slowest_link_gbps,
    topology_speed,
)

IB = NodeFabric.INFINIBAND
A100_COMPUTE_S = 6 * 1e9 * 16_384 / (312e12 * 0.4)  # 0.787692… s per step for 1 B parameters
H100_COMPUTE_S = 6 * 1e9 * 16_384 / (989e12 * 0.4)


def sxm(name: str, leaf: str = "leaf-1", model: str = "A100-SXM4-80GB", fabric: NodeFabric = IB) -> Node:
    """A DGX-like server; on InfiniBand, the network the model's NIC figures are for, unless told otherwise."""
    return Node(name, model, 8, Interconnect.NVSWITCH, leaf=leaf, spine="spine-1", fabric=fabric)


def pcie(name: str) -> Node:
    return Node(name, "A100-PCIE-40GB", 4, Interconnect.NVLINK_PAIRS, leaf="leaf-2", spine="spine-1", fabric=IB)


def slots(*placements: tuple[str, list[int]]) -> tuple[tuple[Slot, ...], ...]:
    """One replica per GPU."""
    return tuple((Slot(node, gpu),) for node, gpus in placements for gpu in gpus)


def nodes(*items: Node) -> dict[str, Node]:
    return {node.name: node for node in items}


def test_compute_and_ring_allreduce_follow_the_formulas() -> None:
    profile = StepProfile()
    assert compute_s(profile, "A100") == pytest.approx(0.787692, rel=1e-5)
    assert compute_s(profile, "H100") == pytest.approx(6 * 1e9 * 16_384 / (989e12 * 0.4))
    # 2(n-1)/n × 2 GB of gradients / 25 GB/s, n = 16
    assert allreduce_s(profile, 16, 25.0) == pytest.approx(2 * 15 / 16 * 2e9 / 25e9)
    assert allreduce_s(profile, 1, 25.0) == 0.0


def test_one_gpu_and_one_nvswitch_node_run_at_full_speed() -> None:
    cluster = nodes(sxm("a"))
    assert placement_speed(slots(("a", [3])), cluster) == 1.0
    assert placement_speed(slots(("a", [0, 1, 2, 3, 4, 5, 6, 7])), cluster) == 1.0


def test_eight_gpus_split_over_two_nodes_of_one_leaf() -> None:
    cluster = nodes(sxm("a"), sxm("b"))
    ideal = A100_COMPUTE_S + 2 * 7 / 8 * 2e9 / 300e9  # NVSwitch, A100: 300 GB/s one way
    actual = A100_COMPUTE_S + 2 * 7 / 8 * 2e9 / 25e9  # HDR 200 Gb/s per GPU
    speed = placement_speed(slots(("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])), cluster)
    assert speed == pytest.approx(ideal / actual)
    assert speed == pytest.approx(0.86166, abs=1e-4)


def test_sixteen_gpus_under_one_leaf_are_ideal_and_across_the_spine_pay_the_oversubscription() -> None:
    cluster = nodes(sxm("a", "leaf-1"), sxm("b", "leaf-1"), sxm("c", "leaf-2"))
    fabric = Fabric(oversubscription=2)
    same_leaf = slots(("a", list(range(8))), ("b", list(range(8))))
    across = slots(("a", list(range(8))), ("c", list(range(8))))
    assert placement_speed(same_leaf, cluster, fabric) == 1.0
    ideal = A100_COMPUTE_S + 2 * 15 / 16 * 2e9 / 25e9
    actual = A100_COMPUTE_S + 2 * 15 / 16 * 2e9 / 12.5e9
    assert placement_speed(across, cluster, fabric) == pytest.approx(ideal / actual)
    assert placement_speed(across, cluster, Fabric(oversubscription=1)) == 1.0


def test_nvlink_pairs_are_fast_only_inside_a_pair() -> None:
    cluster = nodes(pcie("p"))
    assert placement_speed(slots(("p", [0, 1])), cluster) == 1.0
    ideal = A100_COMPUTE_S + 2e9 / 300e9  # n = 2: 2(n-1)/n = 1
    actual = A100_COMPUTE_S + 2e9 / 32e9  # across pairs: PCIe Gen4 x16
    assert placement_speed(slots(("p", [0, 2])), cluster) == pytest.approx(ideal / actual)
    # four GPUs cannot all share a pair: PCIe is already the best a 4-GPU server offers
    assert placement_speed(slots(("p", [0, 1, 2, 3])), cluster) == 1.0


# A gang across GPU models: the slowest GPU's compute and the slowest link, against the best ideal one of its
# models offers (module docstring). Each case: the nodes, 4 GPUs on each of "a" and "b", the expected speed.
ALLREDUCE_8 = 2 * 7 / 8 * 2e9  # ring all-reduce of 8 GPUs, bytes per GB/s of the slowest link
MIXED_CASES = [
    pytest.param(
        # One class, one interconnect: what any split of 8 over two NVSwitch nodes pays (0.86166), no more.
        nodes(sxm("a"), sxm("b", model="A100-SXM4-40GB")),
        (A100_COMPUTE_S + ALLREDUCE_8 / 300e9) / (A100_COMPUTE_S + ALLREDUCE_8 / 25e9),
        id="a100-80gb-with-40gb",
    ),
    pytest.param(
        # One class, NVSwitch with a 4-GPU PCIe server: the PCIe server's NIC (12.5 GB/s per GPU) against
        # one NVSwitch node (300 GB/s); the PCIe servers alone would hold 8 GPUs no better than that.
        nodes(sxm("a"), pcie("b")),
        (A100_COMPUTE_S + ALLREDUCE_8 / 300e9) / (A100_COMPUTE_S + ALLREDUCE_8 / 12.5e9),
        id="a100-nvswitch-with-pcie",
    ),
    pytest.param(
        # Across classes: the H100s wait for the A100s (compute), over the A100 server's NIC (25 GB/s).
        nodes(sxm("a", model="H100-SXM5-80GB"), sxm("b")),
        (H100_COMPUTE_S + ALLREDUCE_8 / 380e9) / (A100_COMPUTE_S + ALLREDUCE_8 / 25e9),
        id="h100-with-a100",
    ),
]


@pytest.mark.parametrize(("cluster", "expected"), MIXED_CASES)
def test_a_gang_across_models_pays_its_slowest_gpu_and_link(cluster: dict[str, Node], expected: float) -> None:
    assert placement_speed(slots(("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])), cluster) == pytest.approx(expected)


def test_the_same_gang_on_one_model_is_measured_against_that_model() -> None:
    # Two 4-GPU PCIe servers alone: 8 GPUs cannot share one, so the NIC is already their ideal.
    assert placement_speed(slots(("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])), nodes(pcie("a"), pcie("b"))) == 1.0
    # Mixed with an 8-GPU NVSwitch server, the gang is charged against that server's ideal.
    assert placement_speed(slots(("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])), nodes(sxm("a"), pcie("b"))) < 0.75


def test_unlabelled_nodes_are_assumed_far_apart() -> None:
    cluster = nodes(Node("x", "H100-SXM5-80GB", 8, fabric=IB), Node("y", "H100-SXM5-80GB", 8, fabric=IB))
    assert slowest_link_gbps({"x": (0,), "y": (0,)}, cluster, Fabric(oversubscription=4)) == 50.0 / 4


def test_the_hook_slows_only_training() -> None:
    cluster = nodes(sxm("a"), sxm("b"))
    spread = slots(("a", [0]), ("b", [0]))
    speed = topology_speed()
    training = Job("t", "team", Request(gpus=1), kind=JobKind.TRAINING, replicas=2)
    serving = Job("s", "team", Request(gpus=1), kind=JobKind.INFERENCE, replicas=2)
    assert speed(training, spread, cluster) < 1.0
    assert speed(serving, spread, cluster) == 1.0


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="oversubscription"):
        Fabric(oversubscription=0.5)
    with pytest.raises(ValueError, match="mfu"):
        StepProfile(mfu=0)


def test_a_multi_node_job_without_a_fabric_is_charged_tcp_speed() -> None:
    eight = slots(("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3]))
    ideal = A100_COMPUTE_S + 2 * 7 / 8 * 2e9 / 300e9  # the ideal keeps its NVSwitch node
    on_tcp = A100_COMPUTE_S + 2 * 7 / 8 * 2e9 / (TCP_GBPS * 1e9)
    tcp = nodes(sxm("a", fabric=NodeFabric.TCP), sxm("b", fabric=NodeFabric.TCP))
    assert slowest_link_gbps({"a": (0,), "b": (0,)}, tcp, Fabric()) == TCP_GBPS
    assert placement_speed(eight, tcp) == pytest.approx(ideal / on_tcp)
    assert placement_speed(eight, tcp) < placement_speed(eight, nodes(sxm("a"), sxm("b")))
    # Two fabrics cannot talk to each other: TCP too; one TCP node drags the whole gang to TCP.
    for other in (NodeFabric.EFA, NodeFabric.TCP):
        assert slowest_link_gbps({"a": (0,), "b": (0,)}, nodes(sxm("a"), sxm("b", fabric=other)), Fabric()) == TCP_GBPS
    # One node needs no network: its fabric does not matter.
    assert placement_speed(slots(("a", [0, 1, 2, 3])), tcp) == 1.0


def test_tcp_is_the_slowest_link_across_the_spine_too() -> None:
    far = nodes(sxm("a", "leaf-1", fabric=NodeFabric.TCP), sxm("b", "leaf-2", fabric=NodeFabric.TCP))
    assert slowest_link_gbps({"a": (0,), "b": (0,)}, far, Fabric(oversubscription=4)) == TCP_GBPS
