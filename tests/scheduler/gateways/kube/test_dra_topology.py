"""PCIe topology on DRA nodes, pure: the ``resource.kubernetes.io/pcieRoot`` the drivers publish read into
:class:`DraDevice`, the choice of a replica's EFA devices on its GPUs' roots and the claim's matchAttribute constraint
(scheduler/gateways/kube/dra_slices.py, dra_claims.py), and the emulator's check of constraints
(tests/scheduler/kube_harness/device_constraints.py). Slices as the harness drivers publish them."""

from __future__ import annotations

from typing import Any

from scheduler.gateways.kube.dra_claims import PCIE_ROOT, claim_manifest, replica_requests
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_slices import read_slices
from scheduler.gateways.protocol import Device
from tests.scheduler.kube_harness import device_constraints
from tests.scheduler.kube_harness.dra_driver import A100, DraGpus, pcie_root, pool_slices
from tests.scheduler.kube_harness.efa_dra_driver import efa_slice

NODE = "p5-a"
LOW, HIGH = "pci0000:00", "pci0000:80"


def _node(*, roots: int = 2, efa: int = 4, **gpus: Any) -> DraNode:
    slices = [*pool_slices(DraGpus(NODE, pcie_roots=roots, **gpus)), efa_slice(NODE, efa, ena=True, roots=roots)]
    return read_slices(slices).inventories[NODE].node


def _fabric_roots(node: DraNode, names: tuple[str, ...]) -> list[str]:
    by_name = {d.name: d.pcie_root for d in node.fabrics()}
    return [by_name[n] for n in names]


def _manifest(requests) -> dict[str, Any]:
    return claim_manifest(name="c", namespace="ns", requests=requests, labels={}, pod="p", pod_uid="u")


def test_the_harness_layout_puts_half_the_gpus_and_half_the_efa_interfaces_under_each_root() -> None:
    assert [pcie_root(i, 8, 2) for i in range(8)] == [LOW] * 4 + [HIGH] * 4
    assert [pcie_root(i, 32, 2) for i in (0, 15, 16, 31)] == [LOW, LOW, HIGH, HIGH]
    assert pcie_root(0, 8, 1) == LOW


def test_gpus_efa_interfaces_and_mig_devices_are_read_with_their_pcie_root() -> None:
    node = _node(mig=[[], [], [], [], [], [("3g.40gb", 0), ("3g.40gb", 4)]])
    assert [g.pcie_root for g in sorted(node.gpus(), key=lambda g: g.gpu_index or 0)] == [LOW] * 4 + [HIGH] * 3
    assert {m.pcie_root for m in node.migs()} == {HIGH}  # mig.go CommonAttributesMig: the parent's
    assert sorted(d.pcie_root for d in node.fabrics()) == [LOW, LOW, HIGH, HIGH]  # the ENA interface is no fabric


def test_a_partition_without_its_own_pcie_root_is_under_its_gpu_s() -> None:
    slices = pool_slices(DraGpus(NODE, count=2, dynamic_mig=True))
    for raw in slices:
        for device in raw["spec"].get("devices") or []:
            if device["attributes"]["type"]["string"] == "mig":
                del device["attributes"][PCIE_ROOT]
    node = read_slices(slices).inventories[NODE].node
    assert {p.pcie_root for p in node.partitions() if p.gpu_index == 1} == {HIGH}


def test_partitions_of_a_gpu_the_driver_does_not_publish_whole_carry_their_own_root() -> None:
    # An A100 already in MIG mode under dynamic MIG: its partitions only (nvlib.go), each with the copied attribute.
    slices = pool_slices(DraGpus(NODE, A100, count=2, mig=[[], [("7g.80gb", 0)]], dynamic_mig=True))
    node = read_slices(slices).inventories[NODE].node
    assert not [g for g in node.gpus() if g.gpu_index == 1]
    assert {p.pcie_root for p in node.partitions() if p.gpu_index == 1} == {HIGH}


def test_a_node_that_publishes_no_pcie_root_reads_as_none() -> None:
    node = _node(roots=0)
    assert {d.pcie_root for d in node.devices} == {""}


def test_a_part_node_replica_gets_the_efa_devices_on_its_gpus_root_and_a_constraint() -> None:
    node = _node()
    requests = replica_requests(tuple(Device(i) for i in (4, 5, 6, 7)), node, fabric_count=2)
    fabric = requests[-1]
    assert {d.pcie_root for d in fabric.devices} == {HIGH}  # name order alone would give the first root's
    assert all(r.aligned for r in requests)
    assert _manifest(requests)["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "fabric"], "matchAttribute": PCIE_ROOT}
    ]
    low = replica_requests((Device(1),), node, fabric_count=1)
    assert low[-1].devices[0].pcie_root == LOW and all(r.aligned for r in low)


def test_a_mig_replica_is_aligned_through_its_gpu_s_root() -> None:
    node = _node(mig=[[], [], [], [], [], [("3g.40gb", 0), ("3g.40gb", 4)]])
    requests = replica_requests((Device(5, "3g.40gb", 4),), node, fabric_count=1)
    assert [r.name for r in requests] == ["mig-0", "fabric"] and requests[-1].devices[0].pcie_root == HIGH
    assert _manifest(requests)["spec"]["devices"]["constraints"][0]["requests"] == ["mig-0", "fabric"]


def test_when_the_aligned_efa_devices_are_taken_the_others_serve_without_a_constraint() -> None:
    node = _node()
    high = [d for d in node.fabrics() if d.pcie_root == HIGH]
    taken = {(d.driver, d.pool, d.name) for d in high[:1]}
    requests = replica_requests((Device(6), Device(7)), node, fabric_count=2, taken=taken)
    assert sorted(d.pcie_root for d in requests[-1].devices) == [LOW, HIGH]  # the free aligned one first
    assert not any(r.aligned for r in requests)
    assert "constraints" not in _manifest(requests)["spec"]["devices"]


def test_gpus_on_two_roots_or_the_whole_node_get_no_constraint() -> None:
    node = _node()
    split = replica_requests((Device(3), Device(4)), node, fabric_count=1)
    assert split[-1].devices[0].pcie_root in (LOW, HIGH) and not any(r.aligned for r in split)
    whole = replica_requests(tuple(Device(i) for i in range(8)), node, fabric_count=4)
    assert not any(r.aligned for r in whole) and "constraints" not in _manifest(whole)["spec"]["devices"]


def test_without_pcie_roots_the_efa_devices_are_taken_in_name_order_without_a_constraint() -> None:
    node = _node(roots=0)
    requests = replica_requests((Device(6), Device(7)), node, fabric_count=2)
    names = sorted(d.name for d in node.fabrics())
    assert [d.name for d in requests[-1].devices] == names[:2]
    assert "constraints" not in _manifest(requests)["spec"]["devices"]


def test_no_fabric_no_constraint() -> None:
    requests = replica_requests((Device(0),), _node(), fabric_count=0)
    assert not requests[0].aligned and "constraints" not in _manifest(requests)["spec"]["devices"]


# -- the emulator's constraint rules (device_constraints.py) --------------------------------------------------


def _spec(constraints: list[dict[str, Any]]) -> dict[str, Any]:
    requests = [{"name": n, "exactly": {"deviceClassName": "x"}} for n in ("gpu-0", "fabric")]
    return {"devices": {"requests": requests, "constraints": constraints}}


def test_constraint_validation_follows_validation_go() -> None:
    assert device_constraints.spec_errors(_spec([{"requests": ["gpu-0"], "matchAttribute": PCIE_ROOT}])) == []
    errors = device_constraints.spec_errors(
        _spec([{"requests": ["gpu-0", "gpu-0", "nope"]}, {"matchAttribute": "pcieRoot"}])
    )
    assert errors == [
        'spec.devices.constraints[0].requests[1]: Duplicate value: "gpu-0"',
        'spec.devices.constraints[0].requests[2]: Invalid value: "nope": must be the name of a request in the claim',
        "spec.devices.constraints[0].matchAttribute: Required value",
        'spec.devices.constraints[1].matchAttribute: Invalid value: "pcieRoot": a fully qualified name must be a '
        "domain and a name separated by a slash",
    ]


def test_an_allocation_must_keep_the_claim_s_match_attribute() -> None:
    published = {
        ("d", "p", "a"): {"attributes": {PCIE_ROOT: {"string": LOW}}},
        ("d", "p", "b"): {"attributes": {PCIE_ROOT: {"string": LOW}, "d/x": {"int": 1}}},
        ("d", "p", "c"): {"attributes": {PCIE_ROOT: {"string": HIGH}, "x": {"int": 1}}},
        ("d", "p", "n"): {"attributes": {}},
    }

    def results(*pairs: tuple[str, str]) -> dict[str, Any]:
        return {"devices": {"results": [{"request": r, "driver": "d", "pool": "p", "device": n} for r, n in pairs]}}

    spec = _spec([{"requests": ["gpu-0", "fabric"], "matchAttribute": PCIE_ROOT}])
    assert device_constraints.allocation_errors(spec, results(("gpu-0", "a"), ("fabric", "b")), published) == []
    (error,) = device_constraints.allocation_errors(spec, results(("gpu-0", "a"), ("fabric", "c")), published)
    assert error.startswith('status.allocation.devices.results[1]: Invalid value: "c": its ' + PCIE_ROOT)
    assert f"'{HIGH}' differs from '{LOW}' of results[0]" in error
    (missing,) = device_constraints.allocation_errors(spec, results(("gpu-0", "n")), published)
    assert "has no attribute resource.kubernetes.io/pcieRoot" in missing
    # Only the listed requests; an empty list means all; the driver's own domain also finds the bare name.
    listed = _spec([{"requests": ["gpu-0"], "matchAttribute": PCIE_ROOT}])
    assert device_constraints.allocation_errors(listed, results(("gpu-0", "a"), ("fabric", "c")), published) == []
    every = _spec([{"matchAttribute": "d/x"}])
    assert device_constraints.allocation_errors(every, results(("gpu-0", "b"), ("fabric", "c")), published) == []
    other = _spec([{"matchAttribute": "e/x"}])
    assert len(device_constraints.allocation_errors(other, results(("gpu-0", "c")), published)) == 1
