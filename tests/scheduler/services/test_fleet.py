"""Fleet inventory services: the catalog sync and node registration are declarative and idempotent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.errors import InventoryError
from scheduler.models import Gpu, GpuModel, Node
from scheduler.services.fleet import gpu_models_sync, node_register
from tests.factories import AllocationFactory

pytestmark = pytest.mark.django_db

BALANCED_80GB = [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]


def _node(**overrides: Any) -> Node:
    args: dict[str, Any] = {
        "name": "h100-od-01",
        "gpu_model": "H100-SXM5-80GB",
        "gpu_count": 8,
        "interconnect": "nvswitch",
        "leaf_switch": "leaf-1",
        "spine": "spine-1",
        "tier": "on-demand",
        "price_per_gpu_hour": Decimal("6.88"),
        "zone": "us-east-1a",
        "labels": {"nvidia.com/gpu.count": "8"},
        "mig_layouts": {0: BALANCED_80GB},
    }
    return node_register(**{**args, **overrides})


def _snapshot() -> list[tuple[Any, ...]]:
    nodes = list(Node.objects.values_list("name", "gpu_model__name", "gpu_count", "tier", "price_per_gpu_hour"))
    gpus = list(Gpu.objects.values_list("node__name", "index", "mig_layout"))
    return [*nodes, *gpus]


def test_gpu_models_sync_creates_the_catalog_then_changes_nothing():
    assert gpu_models_sync() == len(GPU_MODELS) == 8
    rows = {m.name: m for m in GpuModel.objects.all()}
    for spec in GPU_MODELS:
        row = rows[spec.name]
        assert (row.gpu_class, row.memory_mib, row.mig_capable) == (spec.gpu_class, spec.memory_mib, spec.mig_capable)
    assert gpu_models_sync() == 0
    assert GpuModel.objects.count() == 8


def test_gpu_models_sync_repairs_a_drifted_row():
    GpuModel.objects.create(name="H100-SXM5-80GB", gpu_class="H100", memory_mib=1, mig_capable=False)
    assert gpu_models_sync() == 7
    row = GpuModel.objects.get(name="H100-SXM5-80GB")
    assert (row.memory_mib, row.mig_capable) == (81559, True)


def test_node_register_creates_the_node_and_its_gpus():
    node = _node()
    node.refresh_from_db()
    assert node.gpu_model.name == "H100-SXM5-80GB"
    assert (node.gpu_count, node.interconnect, node.tier, node.leaf_switch, node.spine, node.zone) == (
        8,
        "nvswitch",
        "on-demand",
        "leaf-1",
        "spine-1",
        "us-east-1a",
    )
    assert node.price_per_gpu_hour == Decimal("6.8800")
    assert node.labels == {"nvidia.com/gpu.count": "8"}
    assert list(node.gpus.values_list("index", flat=True)) == list(range(8))
    assert node.gpus.get(index=0).mig_layout == BALANCED_80GB
    assert all(g.mig_layout == [] for g in node.gpus.exclude(index=0))


def test_node_register_twice_is_a_no_op():
    _node()
    before = _snapshot()
    updated_at = Node.objects.get().updated_at
    _node()
    assert _snapshot() == before
    assert Node.objects.get().updated_at == updated_at
    assert Gpu.objects.count() == 8


def test_node_register_normalises_layout_order():
    _node(mig_layouts={0: list(reversed(BALANCED_80GB))})
    assert Gpu.objects.get(index=0).mig_layout == BALANCED_80GB


def test_node_register_updates_fields_and_layouts():
    _node()
    _node(tier="spot", price_per_gpu_hour="2.71", leaf_switch="leaf-2", mig_layouts={3: [["7g.80gb", 0]]})
    node = Node.objects.get()
    assert (node.tier, node.price_per_gpu_hour, node.leaf_switch) == ("spot", Decimal("2.7100"), "leaf-2")
    layouts = dict(node.gpus.values_list("index", "mig_layout"))
    # The call states every GPU: GPU 0 is no longer listed, so its MIG is off.
    assert layouts[0] == []
    assert layouts[3] == [["7g.80gb", 0]]


def test_node_register_grows_and_shrinks_the_gpus():
    _node(gpu_count=4, mig_layouts={})
    assert Gpu.objects.count() == 4
    _node(gpu_count=8, mig_layouts={})
    assert sorted(Gpu.objects.values_list("index", flat=True)) == list(range(8))
    _node(gpu_count=2, mig_layouts={})
    assert sorted(Gpu.objects.values_list("index", flat=True)) == [0, 1]
    assert Node.objects.get().gpu_count == 2


def test_node_register_refuses_to_drop_a_gpu_a_live_allocation_holds():
    node = _node(mig_layouts={})
    AllocationFactory(node=node, gpu_index=5)
    with pytest.raises(InventoryError, match="GPU 5 is held by a running allocation"):
        _node(gpu_count=4, mig_layouts={})
    assert Gpu.objects.count() == 8


def test_node_register_accepts_a_gpu_model_missing_from_the_table():
    # The catalog is the authority: registering creates the model row if the sync has not run yet.
    assert not GpuModel.objects.exists()
    _node()
    assert GpuModel.objects.get().name == "H100-SXM5-80GB"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gpu_model": "H100-SXM9-1TB"}, "unknown GPU model 'H100-SXM9-1TB'; use one of: A100-SXM4-40GB"),
        ({"tier": "preemptible"}, "unknown tier 'preemptible'; use one of: reserved, on-demand, spot"),
        ({"interconnect": "infiniband"}, "unknown interconnect 'infiniband'; use one of: nvswitch, nvlink-pairs, pcie"),
        ({"gpu_count": 0}, "gpu_count must be a whole number from 1 to 16"),
        ({"gpu_count": 17}, "gpu_count must be a whole number from 1 to 16"),
        ({"price_per_gpu_hour": "-1"}, "price_per_gpu_hour must be between 0"),
        ({"price_per_gpu_hour": "cheap"}, "price_per_gpu_hour 'cheap' is not a number"),
        ({"name": "Node_1"}, "'Node_1' is not a Kubernetes node name"),
        ({"labels": {"nvidia.com/gpu.count": 8}}, "labels must map strings to strings"),
        ({"mig_layouts": {8: BALANCED_80GB}}, "mig_layouts names GPU 8, but the node has GPUs 0 to 7"),
        ({"mig_layouts": {1: [["3g.40gb", 2]]}}, "GPU 1: 3g.40gb cannot start at memory slice 2; allowed starts: 0, 4"),
        (
            {"mig_layouts": {0: [["4g.40gb", 0], ["3g.40gb", 0]]}},
            "GPU 0: 3g.40gb@0 overlaps another instance at memory slice 0",
        ),
        ({"mig_layouts": {0: [["1g.5gb", 0]]}}, "GPU 0: '1g.5gb' is not a MIG profile of H100-SXM5-80GB"),
        ({"fabric": "myrinet"}, "unknown fabric 'myrinet'; use one of: tcp, efa"),
        ({"fabric": "efa", "fabric_devices": -1}, "fabric_devices must be a whole number from 0"),
        ({"fabric": "tcp", "fabric_devices": 4}, "a node without a fabric (tcp) has no fabric devices, got 4"),
    ],
)
def test_node_register_rejects_bad_input_and_writes_nothing(overrides, message):
    with pytest.raises(InventoryError) as excinfo:
        _node(**overrides)
    assert message in str(excinfo.value)
    assert not Node.objects.exists()
    assert not Gpu.objects.exists()
    assert not GpuModel.objects.exists()


def test_a_rejected_update_leaves_the_existing_node_as_it_was():
    _node()
    before = _snapshot()
    with pytest.raises(InventoryError, match=r"not MIG-capable|not a MIG profile"):
        _node(gpu_count=4, mig_layouts={2: [["1g.5gb", 0]]})
    assert _snapshot() == before


def test_node_register_records_the_fabric_and_placement_group():
    node = _node(fabric="efa", fabric_devices=32, placement_group="pg-train-1")
    node.refresh_from_db()
    assert (node.fabric, node.fabric_devices, node.placement_group) == ("efa", 32, "pg-train-1")
    node = _node()  # a re-registration without a fabric states that the node has none
    node.refresh_from_db()
    assert (node.fabric, node.fabric_devices, node.placement_group) == ("tcp", 0, "")


def test_the_database_refuses_fabric_devices_on_a_node_without_a_fabric():
    from django.db import IntegrityError, transaction

    node = _node()
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(fabric_devices=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(fabric="token-ring")
