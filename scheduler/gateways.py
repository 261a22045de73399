"""Which :class:`~scheduler.gateway.ClusterGateway` the loop drives: ``settings.CLUSTER_BACKEND``.

``simulated`` (default) is :class:`scheduler.simulated.SimulatedFleet` on the database inventory;
``kubernetes`` is ``scheduler.kube`` (imported only then, since it is the only importer of ``kubernetes``),
which must offer ``gateway_from_settings() -> ClusterGateway``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from scheduler.errors import GatewayNotConfigured
from scheduler.gateway import ClusterGateway
from scheduler.simulated import FleetSettings, SimulatedFleet

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
        return SimulatedFleet(FleetSettings.from_mapping(settings.SCHEDULER))
    try:
        module = importlib.import_module("scheduler.kube")
    except ModuleNotFoundError as exc:
        raise GatewayNotConfigured(
            f"CLUSTER_BACKEND=kubernetes needs the module scheduler.kube, which cannot be imported ({exc}); "
            "install Microcosm with its dependencies (pip install -e .) or set CLUSTER_BACKEND=simulated"
        ) from exc
    factory = getattr(module, "gateway_from_settings", None)
    if factory is None:
        raise GatewayNotConfigured("scheduler.kube offers no gateway_from_settings(): this build is incomplete")
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
