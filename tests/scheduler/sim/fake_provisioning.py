"""A test planner for the replay's autoscaler before the engine's provisioning rule exists: it wraps any planner
and adds the plan elements the engine rule will emit (scheduler/core/model/provisioning.py), by simple rules —
a job still waiting after the wrapped plan gets one node request (enough whole nodes of the first offering of its
GPU model) unless it has one in flight or failed within ``provision_retry_s``; a request whose job no longer waits
is withdrawn; an autoscaled node idle for ``release_idle_s`` is released."""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.provisioning import Provision, Release, Withdraw
from scheduler.core.model.snapshot import Snapshot
from scheduler.sim.planners import Planner


def provisioning(planner: Planner, *, max_nodes_per_request: int = 8) -> Planner:
    def wrapped(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        plan = planner(snapshot, policy, now)
        state = snapshot.provisioning
        bound = {bind.job for bind in plan.binds}
        waiting = {job.id: job for job in snapshot.pending if job.id not in bound}
        withdrawals = tuple(
            Withdraw(request.id, request.job, "the job no longer waits")
            for request in state.requests
            if request.job not in waiting
        )
        asked = {request.job for request in state.requests if request.job in waiting}
        recently_failed = {job for job, at in state.failed if now - at < policy.provision_retry_s}
        held: dict[str, int] = {}
        for node in snapshot.nodes:
            if node.pool:
                held[node.pool] = held.get(node.pool, 0) + 1
        for request in state.requests:
            if request.job in waiting:
                held[request.pool] = held.get(request.pool, 0) + request.nodes
        provisions = []
        for job in waiting.values():
            if job.id in asked or job.id in recently_failed:
                continue
            gpus = (job.request.gpus or 1) * job.replicas
            want = job.gpu_model
            offer = next((o for o in state.offerings if not want or o.gpu_model.startswith(want)), None)
            if offer is None:
                continue
            nodes = min(max_nodes_per_request, math.ceil(gpus / offer.gpu_count))
            if held.get(offer.pool, 0) + nodes > offer.max_nodes:
                continue
            held[offer.pool] = held.get(offer.pool, 0) + nodes
            provisions.append(
                Provision(
                    job.id,
                    offer.pool,
                    nodes,
                    offer.gpu_model,
                    offer.gpu_count,
                    nodes > 1,
                    nodes * offer.gpu_count * (job.duration_s or 3600.0) / 3600.0,
                    now + offer.arrival_s,
                )
            )
        busy = {s.node for r in snapshot.running for rep in r.slots for s in rep}
        busy |= {s.node for b in plan.binds for rep in b.slots for s in rep}
        pools = {node.name: node.pool for node in snapshot.nodes}
        releases = tuple(
            Release(name, pools[name], since)
            for name, since in state.idle_since
            if now - since >= policy.release_idle_s and name not in busy and name in pools
        )
        return replace(plan, provisions=tuple(provisions), withdrawals=withdrawals, releases=releases)

    return wrapped
