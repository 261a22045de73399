"""The cluster gateways and which one the loop drives: ``settings.CLUSTER_BACKEND``.

The protocol every gateway implements is :mod:`scheduler.gateways.protocol`. ``simulated`` (default) is
:class:`scheduler.gateways.simulated.SimulatedFleet` on the database inventory; ``kubernetes`` is
:mod:`scheduler.gateways.kube.gateway` (imported only then: its client is the only importer of
``kubernetes``), which must offer ``gateway_from_settings() -> ClusterGateway``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from scheduler.errors import GatewayNotConfigured
from scheduler.gateways.protocol import ClusterGateway

KUBE_MODULE = "scheduler.gateways.kube.gateway"

_override_lock = threading.Lock()
_override: ClusterGateway | None = None
# The Kubernetes gateway of this process: one API client (one connection pool) and one pair of node and pod
# caches per process, not per call. A forked child (a Celery prefork worker) must not share its parent's sockets
# or watch threads (threads do not survive a fork): it builds its own.
_kube_lock = threading.Lock()
_kube: tuple[int, ClusterGateway] | None = None


def _forget_kube_after_fork() -> None:
    global _kube, _kube_lock
    _kube, _kube_lock = None, threading.Lock()  # the parent's lock may have been held at the fork


os.register_at_fork(after_in_child=_forget_kube_after_fork)


def gateway_get() -> ClusterGateway:
    """The configured gateway: the simulated fleet afresh per call (it holds no state a cycle must share); the
    Kubernetes gateway once per process, for its connection pool and caches.

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
    global _kube
    with _kube_lock:
        if _kube is not None and _kube[0] == os.getpid():  # the pid also catches a fork the hook missed
            return _kube[1]
        gateway = _kube_gateway()
        _kube = (os.getpid(), gateway)
        return gateway


def _kube_gateway() -> ClusterGateway:
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
