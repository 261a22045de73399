"""The cluster gateways and which one the loop drives: ``settings.CLUSTER_BACKEND``.

The protocol every gateway implements is :mod:`scheduler.gateways.protocol`. ``simulated`` (default) is
:class:`scheduler.gateways.simulated.SimulatedFleet` on the database inventory; ``kubernetes`` is
:mod:`scheduler.gateways.kube.gateway` (imported only then: its client is the only importer of
``kubernetes``), which must offer ``gateway_from_settings() -> ClusterGateway``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from scheduler.errors import GatewayNotConfigured
from scheduler.gateways.protocol import ClusterGateway

KUBE_MODULE = "scheduler.gateways.kube.gateway"

_override_lock = threading.Lock()
_override: ClusterGateway | None = None


def gateway_get() -> ClusterGateway:
    """The configured gateway (a fresh one per call: gateways hold no state a cycle must share).

    Raises :class:`GatewayNotConfigured` when the Kubernetes backend is asked for and cannot be loaded.
    """
    if _override is not None:
        return _override
    backend = settings.CLUSTER_BACKEND
    if backend == "simulated":
        # Imported here, not at the top: the fleet reads the database models, and the pure gateway modules
        # (the protocol, kube's label and pod rules) must stay importable without Django's app registry.
        from scheduler.gateways.simulated import FleetSettings, SimulatedFleet

        return SimulatedFleet(FleetSettings.from_mapping(settings.SCHEDULER))
    try:
        module = importlib.import_module(KUBE_MODULE)
    except ModuleNotFoundError as exc:
        raise GatewayNotConfigured(
            f"CLUSTER_BACKEND=kubernetes needs the module {KUBE_MODULE}, which cannot be imported ({exc}); "
            "install Microcosm with its dependencies (pip install -e .) or set CLUSTER_BACKEND=simulated"
        ) from exc
    factory = getattr(module, "gateway_from_settings", None)
    if factory is None:
        raise GatewayNotConfigured(f"{KUBE_MODULE} offers no gateway_from_settings(): this build is incomplete")
    return factory()


@contextmanager
def gateway_override(gateway: ClusterGateway) -> Iterator[ClusterGateway]:
    """Make :func:`gateway_get` return ``gateway`` in every thread of this process (tests, benchmarks)."""
    global _override
    with _override_lock:
        previous, _override = _override, gateway
    try:
        yield gateway
    finally:
        with _override_lock:
            _override = previous
