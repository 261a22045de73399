"""``gpu_set_mig_layout``: checked against the catalog, refused while a live allocation holds the GPU, a save (so
audited) only when it is reconfigured; and the layout in NVIDIA's notation."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler.errors import InventoryError
from scheduler.mig_layouts import gpu_set_mig_layout, layout_text, node_layouts_text
from tests.audit.helpers import entries_for
from tests.factories import AllocationFactory, GpuFactory, NodeFactory

HALVES = [["3g.40gb", 0], ["3g.40gb", 4]]


@pytest.mark.django_db
def test_sets_a_valid_layout_sorted_by_start() -> None:
    gpu = GpuFactory(node=NodeFactory(), index=0)
    gpu_set_mig_layout(gpu=gpu, layout=[("3g.40gb", 4), ("4g.40gb", 0)])
    gpu.refresh_from_db()
    assert gpu.mig_layout == [["4g.40gb", 0], ["3g.40gb", 4]]


@pytest.mark.django_db
def test_an_invalid_layout_writes_nothing_and_says_how_to_write_one() -> None:
    gpu = GpuFactory(node=NodeFactory(), index=0, mig_layout=HALVES)
    with pytest.raises(InventoryError, match=r"allowed starts: 0, 4\. Write PROFILE@START items"):
        gpu_set_mig_layout(gpu=gpu, layout=[["3g.40gb", 2]])
    gpu.refresh_from_db()
    assert gpu.mig_layout == HALVES


@pytest.mark.django_db
def test_a_held_gpu_keeps_its_layout_and_the_error_names_the_job() -> None:
    gpu = GpuFactory(node=NodeFactory(), index=3, mig_layout=HALVES)
    allocation = AllocationFactory(node=gpu.node, gpu_index=3, mig_profile="3g.40gb", mig_start=0)
    with pytest.raises(InventoryError, match=rf"job {allocation.job_id} \(.*\) holds MIG instance 3g.40gb@0"):
        gpu_set_mig_layout(gpu=gpu, layout=[])
    gpu.refresh_from_db()
    assert gpu.mig_layout == HALVES
    # The same layout again is no change, held or not: nothing is written.
    before = len(entries_for(gpu))
    gpu_set_mig_layout(gpu=gpu, layout=[["3g.40gb", 4], ["3g.40gb", 0]])
    assert len(entries_for(gpu)) == before

    allocation.ended_at = timezone.now()
    allocation.save()
    gpu_set_mig_layout(gpu=gpu, layout=[])
    gpu.refresh_from_db()
    assert gpu.mig_layout == []


def test_layout_text_is_nvidia_notation_or_mig_off() -> None:
    assert layout_text([["3g.40gb", 0], ["2g.20gb", 4], ["1g.10gb", 6]]) == "3g.40gb@0,2g.20gb@4,1g.10gb@6"
    assert layout_text([]) == "MIG off"


def test_node_layouts_text_groups_consecutive_gpus_with_one_layout() -> None:
    layouts = {0: HALVES, 1: HALVES, 2: [], 4: HALVES}  # GPU 3 has no row: MIG off, as the observation reads it
    assert node_layouts_text(layouts, 5) == [
        "GPU 0–1: 3g.40gb@0,3g.40gb@4",
        "GPU 2–3: MIG off",
        "GPU 4: 3g.40gb@0,3g.40gb@4",
    ]
    assert node_layouts_text({}, 8) == ["GPU 0–7: MIG off"]
