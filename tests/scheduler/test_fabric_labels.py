from __future__ import annotations

import pytest

from scheduler.core.model.vocabulary import Fabric
from scheduler.fabric_labels import FABRIC_NAMES, fabric_label


@pytest.mark.parametrize(
    ("fabric", "devices", "label"),
    [
        ("tcp", 0, "TCP only"),
        ("efa", 32, "EFA × 32"),
        ("infiniband", 8, "InfiniBand × 8"),
        ("gpudirect-tcpx", 4, "GPUDirect-TCPX × 4"),
        ("gpudirect-tcpxo", 0, "GPUDirect-TCPXO"),  # a fabric whose device count was not observed
    ],
)
def test_fabric_label(fabric: str, devices: int, label: str) -> None:
    assert fabric_label(fabric, devices) == label


def test_every_fabric_has_a_name() -> None:
    assert set(FABRIC_NAMES) == set(Fabric)
