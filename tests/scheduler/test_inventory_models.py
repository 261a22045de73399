"""Node and GPU rows: database constraints and the MIG layout check on GPUs."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from scheduler.models import Gpu
from tests.factories import GpuFactory, GpuModelFactory, NodeFactory

pytestmark = pytest.mark.django_db


def test_gpu_layout_is_checked_against_the_catalog() -> None:
    gpu = GpuFactory.build(node=NodeFactory(), index=0, mig_layout=[["3g.40gb", 2]])
    with pytest.raises(ValidationError) as caught:
        gpu.full_clean()
    assert "3g.40gb cannot start at memory slice 2" in str(caught.value.message_dict["mig_layout"])


def test_gpu_index_must_exist_on_the_node() -> None:
    gpu = GpuFactory.build(node=NodeFactory(gpu_count=4), index=5)
    with pytest.raises(ValidationError) as caught:
        gpu.full_clean()
    assert "has 4 GPUs" in str(caught.value.message_dict["index"])


def test_non_mig_gpu_cannot_have_a_layout() -> None:
    pcie = GpuModelFactory(name="H100-PCIE-80GB", gpu_class="H100", mig_capable=True)
    gpu = Gpu(node=NodeFactory(gpu_model=pcie), index=0, mig_layout=[["7g.80gb", 0]])
    gpu.full_clean()  # MIG-capable: accepted


def test_one_gpu_per_index() -> None:
    gpu = GpuFactory(index=3)
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.create(node=gpu.node, index=3)


@pytest.mark.parametrize(
    "fields",
    [{"gpu_count": 0}, {"gpu_count": 17}, {"tier": "cheap"}, {"state": "broken"}, {"interconnect": "ethernet"}],
)
def test_node_constraints(fields: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        NodeFactory(**fields)


def test_node_labels_must_be_strings() -> None:
    node = NodeFactory.build(gpu_model=GpuModelFactory(), labels={"nvidia.com/gpu.count": 8})
    with pytest.raises(ValidationError) as caught:
        node.full_clean()
    assert "Labels must be an object of strings" in str(caught.value)


def test_gpu_of_an_unsaved_node_is_still_validated() -> None:
    node = NodeFactory.build(gpu_model=GpuModelFactory(), gpu_count=2)
    gpu = Gpu(node=node, index=5)
    with pytest.raises(ValidationError) as caught:
        gpu.full_clean(exclude=["node"])
    assert "has 2 GPUs" in str(caught.value.message_dict["index"])
