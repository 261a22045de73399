"""Kubernetes resource quantities as the admission plugins read and print them (k8s.io/apimachinery
pkg/api/resource/quantity.go): cpu in millicores, everything else in whole units, printed canonically."""

from __future__ import annotations

from scheduler.gateways.kube.host_resources import cpu_milli
from scheduler.gateways.kube.shared_memory import quantity_bytes

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def amount(resource: str, value: object) -> int:
    """``value`` of ``resource`` as an integer: millicores for cpu (``requests.cpu``, ``limits.cpu``), else units."""
    if resource.endswith("cpu"):
        return cpu_milli(value) or 0
    return quantity_bytes(value) or 0


def text(resource: str, value: int) -> str:
    """The canonical form Quantity.String() prints: ``8`` or ``500m`` for cpu, the largest exact binary suffix for
    byte amounts (``64Gi``), a plain count otherwise."""
    if resource.endswith("cpu"):
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource.endswith(("memory", "storage")):
        for suffix, factor in _BINARY:
            if value and value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
