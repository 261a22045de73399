"""Multi-node gangs and fabrics: never mixed, a real fabric before TCP, then one placement group; one node first."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node, Running
from scheduler.core.model.vocabulary import Fabric
from scheduler.core.placement import find_slots
from tests.scheduler.properties.builders import job, node, running, state_of, whole

POLICY = Policy()


def _on(name: str, fabric: Fabric = Fabric.TCP, placement_group: str = "", **kwargs: object) -> Node:
    return dataclasses.replace(node(name, **kwargs), fabric=fabric, placement_group=placement_group)  # type: ignore[arg-type]


def _busy(node_name: str, *gpus: int) -> Running:
    return running(job(f"busy-{node_name}", gpus=len(gpus)), (whole(node_name, *gpus),))


def _nodes(slots: tuple[tuple[object, ...], ...] | None) -> list[str]:
    assert slots is not None
    return sorted({s.node for replica in slots for s in replica})  # type: ignore[attr-defined]


def test_a_gang_never_mixes_fabrics_even_when_only_a_mix_would_fit() -> None:
    nodes = [_on("efa-1", Fabric.EFA), _on("ib-1", Fabric.INFINIBAND)]
    assert find_slots(state_of(nodes), job("g", gpus=8, replicas=2), POLICY) is None


def test_a_real_fabric_before_tcp_even_under_one_leaf() -> None:
    nodes = [
        _on("tcp-1", leaf="A"),
        _on("tcp-2", leaf="A"),
        _on("efa-1", Fabric.EFA, leaf="B"),
        _on("efa-2", Fabric.EFA, leaf="C"),
    ]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=8, replicas=2), POLICY)) == ["efa-1", "efa-2"]


def test_tcp_nodes_when_no_fabric_holds_the_gang() -> None:
    nodes = [_on("tcp-1"), _on("tcp-2"), _on("efa-1", Fabric.EFA), _on("efa-2", Fabric.EFA)]
    slots = find_slots(state_of(nodes, [_busy("efa-2", 0, 1, 2, 3, 4)]), job("g", gpus=8, replicas=2), POLICY)
    assert _nodes(slots) == ["tcp-1", "tcp-2"]


def test_one_node_first_whatever_its_fabric() -> None:
    nodes = [_on("tcp-1"), _on("efa-1", Fabric.EFA), _on("efa-2", Fabric.EFA)]
    state = state_of(nodes, [_busy("efa-1", 0), _busy("efa-2", 0)])
    assert _nodes(find_slots(state, job("g", gpus=4, replicas=2), POLICY)) == ["tcp-1"]


def test_one_placement_group_before_crossing_groups() -> None:
    nodes = [
        _on("a-1", Fabric.EFA, "pg-a"),
        _on("b-1", Fabric.EFA, "pg-b"),
        _on("b-2", Fabric.EFA, "pg-b"),
        _on("c-1", Fabric.EFA, "pg-c"),
    ]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=8, replicas=2), POLICY)) == ["b-1", "b-2"]


def test_one_leaf_before_one_placement_group() -> None:
    nodes = [
        _on("g-1", Fabric.EFA, "pg", leaf="L1"),
        _on("g-2", Fabric.EFA, "pg", leaf="L2"),
        _on("x-1", Fabric.EFA, "", leaf="L3"),
        _on("x-2", Fabric.EFA, "other", leaf="L3"),
    ]
    assert _nodes(find_slots(state_of(nodes), job("g", gpus=8, replicas=2), POLICY)) == ["x-1", "x-2"]


def test_a_fleet_of_one_fabric_places_as_the_topology_rule_alone() -> None:
    plain = [node("n0", leaf="A", gpus=4), node("n1", leaf="B", gpus=4), node("n2", leaf="A", gpus=4)]
    efa = [dataclasses.replace(n, fabric=Fabric.EFA, placement_group="pg") for n in plain]
    gang = job("g", gpus=4, replicas=2)
    assert find_slots(state_of(efa), gang, POLICY) == find_slots(state_of(plain), gang, POLICY)


_FABRICS = st.sampled_from([Fabric.TCP, Fabric.EFA, Fabric.INFINIBAND])


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            _FABRICS, st.sampled_from(["", "pg-1", "pg-2"]), st.sampled_from(["", "L1", "L2"]), st.integers(0, 8)
        ),
        min_size=2,
        max_size=7,
    ),
    gpus=st.sampled_from([2, 4, 8]),
    replicas=st.integers(2, 5),
)
def test_a_placed_gang_never_mixes_fabrics_and_prefers_a_real_one(
    shapes: list[tuple[Fabric, str, str, int]], gpus: int, replicas: int
) -> None:
    nodes = [_on(f"n{i}", fab, pg, leaf=leaf) for i, (fab, pg, leaf, _) in enumerate(shapes)]
    busy = [_busy(f"n{i}", *range(used)) for i, (_, _, _, used) in enumerate(shapes) if used]
    fabric_of = {f"n{i}": fab for i, (fab, _, _, _) in enumerate(shapes)}
    slots = find_slots(state_of(nodes, busy), job("g", gpus=gpus, replicas=replicas), POLICY)
    if slots is None:
        return
    used = _nodes(slots)
    if len(used) > 1:
        assert len({fabric_of[n] for n in used}) == 1
        if fabric_of[used[0]] == Fabric.TCP:  # TCP only when no real fabric's free nodes hold the gang
            for real in (Fabric.EFA, Fabric.INFINIBAND):
                free = [8 - u for (f, _, _, u) in shapes if f == real]
                assert sum(k // gpus for k in free) < replicas
