"""MIG maintenance on the MIG-watch beat: the gateway drives its in-flight changes, and the slow ones are reported.

Nothing here writes to the database: the MIG layouts a node ends up with reach the inventory by the next
cluster sync (:mod:`scheduler.services.sync`).
"""

from __future__ import annotations

import logging
from typing import Any

from scheduler.gateways.protocol import ClusterGateway, MaintainedGateway, MigConfigState, Observation

log = logging.getLogger(__name__)


def mig_watch(*, observation: Observation, stuck_after_s: float) -> dict[str, list[str]]:
    """MIG reconfigurations in flight, and those pending longer than ``stuck_after_s`` (the GPU Operator's known wedge,
    ``docs/gpu-facts.md``, MIG Manager reconfiguration flow: the Kubernetes gateway recovers them; here they are
    reported and logged)."""
    pending, stuck = [], []
    for obs in observation.nodes:
        status = obs.mig_status
        if status.state == MigConfigState.SUCCESS:
            continue
        pending.append(obs.name)
        if status.since is not None and observation.observed_at - status.since > stuck_after_s:
            stuck.append(obs.name)
            log.warning(
                "MIG reconfiguration on %s is %s for %.0f s",
                obs.name,
                status.state,
                observation.observed_at - status.since,
            )
    return {"pending": pending, "stuck": stuck}


def cluster_maintain(*, gateway: ClusterGateway, stuck_after_s: float) -> dict[str, Any]:
    """The MIG-watch period's work: let the gateway drive its own in-flight operations one step
    (:class:`~scheduler.gateways.protocol.MaintainedGateway`, e.g. the Kubernetes MIG relabel flow: drain, relabel,
    recover a wedged node, uncordon), then report from a fresh observation the MIG reconfigurations still in flight and
    the stuck ones (:func:`mig_watch`). A gateway without maintenance is only observed.

    Returns ``{"pending": [...], "stuck": [...], "steps": [{"node", "step", "detail"}, ...]}``. Raises what the
    gateway raises (:class:`~scheduler.errors.GatewayError` subclasses); nothing is written to the database.
    """
    steps = gateway.maintain() if isinstance(gateway, MaintainedGateway) else ()
    for event in steps:
        log.info("maintenance on %s: %s %s", event.node, event.step, event.detail)
    report: dict[str, Any] = dict(mig_watch(observation=gateway.observe(), stuck_after_s=stuck_after_s))
    report["steps"] = [{"node": e.node, "step": e.step, "detail": e.detail} for e in steps]
    return report
