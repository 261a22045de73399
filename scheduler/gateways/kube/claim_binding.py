"""Binding replicas on Dynamic Resource Allocation nodes: their ResourceClaims, from allocation to deletion.

:class:`ResourceClaims` is what :class:`~scheduler.gateways.kube.gateway.KubeGateway` holds for the replicas it places
on DRA nodes (the claims themselves: :mod:`scheduler.gateways.kube.dra_claims`). Before anything is written it works
out each replica's requests and refuses a device another claim holds (:meth:`ResourceClaims.requests`); between
creating a replica's pod and binding it, it creates the claim and writes its allocation and the pod's reservation
(:meth:`ResourceClaims.reserve`): kube-scheduler's PreBind, and what KAI's binder does too (NVIDIA/KAI-Scheduler
pkg/binder/plugins/k8s-plugins/dynamicresources/dra.go ``bindResourceClaim``: the allocation set when there is none,
the pod added to ``reservedFor``, one status update, retried on conflict). When the pods go (eviction, completion, a
move's release, a failed bind's undo) it deallocates and deletes their claims (:meth:`ResourceClaims.release`), and
a maintenance step releases those whose pod has gone since (:meth:`ResourceClaims.sweep`). With no DRA node lookup
it makes no call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.kube.client import KubeClient, uid_of
from scheduler.gateways.kube.dra_claims import (
    DELETE_PROTECTION,
    ClaimRequest,
    DeviceKey,
    allocation,
    claim_manifest,
    claim_name,
    consumer,
    device_key,
    owner_of,
    replica_requests,
    reserved_for,
    results_of,
)
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_slices import device_classes
from scheduler.gateways.kube.fabrics import EFA_RESOURCE, ReplicaFabric
from scheduler.gateways.kube.mig_drain import HeldGpus, claim_gpus
from scheduler.gateways.kube.nodes import labels_of, name_of
from scheduler.gateways.kube.pods import (
    GENERATION_LABEL,
    JOB_LABEL,
    MANAGED_BY,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    TEAM_LABEL,
    finished,
    generation_of,
)
from scheduler.gateways.protocol import BindRequest, ReplicaPlacement

logger = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5  # a status write refused with 409 is read again and retried (client-go retry.DefaultRetry)


class ResourceClaims:
    """The claims of Microcosm's replicas on DRA nodes (module doc). ``lookup``: the DRA nodes' published devices by
    node name, called once per bind (None: the cluster has no DRA node); ``fabric_class``: the DeviceClass of their
    fabric devices ("": the fabric driver's name)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        lookup: Callable[[], Mapping[str, DraNode]] | None = None,
        fabric_class: str = "",
    ) -> None:
        self.client = client
        self.lookup = lookup
        self.fabric_class = fabric_class
        # The cluster's DeviceClasses, read once and again only when a claim would name one not among them.
        self._classes: frozenset[str] | None = None

    def nodes(self) -> Mapping[str, DraNode]:
        return self.lookup() if self.lookup is not None else {}

    def requests(
        self,
        request: BindRequest,
        todo: Sequence[ReplicaPlacement],
        fabrics: Mapping[int, ReplicaFabric | None],
        dra: Mapping[str, DraNode],
        *,
        generation: int,
    ) -> dict[int, tuple[ClaimRequest, ...]]:
        """The claim requests of each replica in ``todo`` on a DRA node, by replica (before anything is written:
        GatewayConflict when a device is not published or another claim holds it). The devices every other claim
        has allocated, whoever's, are read from the client's ResourceClaims cache (a LIST once, then a WATCH): a
        LIST per bind would read every claim of the cluster for each of a big cycle's binds."""
        mine = [p for p in todo if p.node in dra]
        if not mine:
            return {}
        taken = self._taken(request, generation)
        found: dict[int, tuple[ClaimRequest, ...]] = {}
        for placement in mine:
            node = dra[placement.node]
            held = [d for d in node.devices if device_key(d) in taken]
            for device in placement.devices:
                published = node.device_for(device)
                if published is not None and device_key(published) in taken:
                    raise GatewayConflict(
                        f"node {placement.node}: device {published.name} of pool {published.pool} is allocated to "
                        f"another ResourceClaim; job {request.job} cannot have it"
                    )
                # Dynamic MIG: an allocated partition (or whole GPU) of the same GPU whose memory slices overlap
                # leaves no counters for this one (KEP-4815; the allocator checks counters, not names).
                clash = next((h for h in held if published is not None and published.overlaps(h)), None)
                if clash is not None and published is not None:
                    raise GatewayConflict(
                        f"node {placement.node}: device {published.name} shares memory slices with {clash.name}, "
                        f"allocated to another ResourceClaim; job {request.job} cannot have it"
                    )
            fabric = fabrics.get(placement.replica)
            requests = replica_requests(
                placement.devices,
                node,
                fabric_count=fabric.resources.get(EFA_RESOURCE, 0) if fabric is not None else 0,
                taken=taken,
                fabric_class=self.fabric_class,
            )
            taken |= {device_key(d) for r in requests for d in r.devices}
            found[placement.replica] = requests
        self._classes_check(request, {r.device_class for requests in found.values() for r in requests})
        return found

    def gpus_held(self, node: str) -> HeldGpus:
        """For a MIG drain on ``node`` (a static-MIG DRA node's relabel flow): which of its GPUs a pod holds through its
        claims, from their allocation results in the claims cache (read once, when a pod first asks:
        :func:`~scheduler.gateways.kube.mig_drain.claim_gpus`); None when that cannot be told."""
        published = self.nodes().get(node)
        claims: dict[tuple[str, str], Mapping[str, Any]] | None = None

        def held(pod: Mapping[str, Any]) -> frozenset[int] | None:
            nonlocal claims
            if self.lookup is None:
                return None
            if claims is None:
                claims = {
                    (str(meta.get("namespace", "")), str(meta.get("name", ""))): claim
                    for claim in self.client.resource_claims_cached()
                    for meta in [claim.get("metadata") or {}]
                }
            return claim_gpus(pod, claims, published)

        return held

    def _classes_check(self, request: BindRequest, wanted: set[str]) -> None:
        """GatewayConflict when a claim would name a DeviceClass the cluster does not have. The API server accepts
        such a claim, and kube-scheduler would leave it unallocatable ("could not retrieve device class",
        k8s.io/dynamic-resource-allocation structured allocator); Microcosm allocates it itself, so it checks here.
        A LIST only when a class is not among those read before (a driver installed since, or a wrong setting)."""
        if self._classes is None or not wanted <= self._classes:
            self._classes = device_classes(self.client.device_classes())
        missing = sorted(wanted - self._classes)
        if missing:
            raise GatewayConflict(
                f"job {request.job}: the cluster has no DeviceClass {', '.join(missing)} for its claims: install the "
                "DRA driver's chart, or set KUBE_DRA_FABRIC_CLASS to the fabric driver's class (kubectl get "
                "deviceclasses)"
            )

    def _taken(self, request: BindRequest, generation: int) -> set[DeviceKey]:
        """The devices allocated to every claim but this start's own (left by a call that stopped before binding)."""
        own = {claim_name(request.job, p.replica, generation) for p in request.placements}
        taken: set[DeviceKey] = set()
        for claim in self.client.resource_claims_cached():
            meta = claim.get("metadata") or {}
            if meta.get("namespace") == request.namespace and meta.get("name") in own:
                continue
            taken |= results_of(claim)
        return taken

    def reserve(
        self,
        request: BindRequest,
        placement: ReplicaPlacement,
        requests: Sequence[ClaimRequest],
        *,
        pod: str,
        uid: str,
        team: str,
        generation: int,
    ) -> None:
        """The replica's claim exists, is allocated ``requests``' devices and reserved for the pod ``uid``; written
        as kube-scheduler's bindClaim writes it: the allocation and the reservation in one status update (the
        claim's finalizer is set at creation, which bindClaim adds in an update before). Idempotent: a claim left by
        a call that stopped half-way is completed, not duplicated."""
        name = claim_name(request.job, placement.replica, generation)
        labels = {MANAGED_BY: SCHEDULER_NAME, JOB_LABEL: request.job, REPLICA_LABEL: str(placement.replica)}
        if team:
            labels[TEAM_LABEL] = team
        if generation:
            labels[GENERATION_LABEL] = str(generation)
        manifest = claim_manifest(
            name=name, namespace=request.namespace, requests=requests, labels=labels, pod=pod, pod_uid=uid
        )
        self.client.resource_claim_create(manifest)
        wanted = {device_key(d) for r in requests for d in r.devices}
        for _attempt in range(CONFLICT_ATTEMPTS):  # client-go's retry.DefaultRetry: 5 steps
            claim = self.client.resource_claim_read(request.namespace, name)
            if claim is None:
                raise GatewayRetryable(f"ResourceClaim {request.namespace}/{name} vanished while being created")
            if owner_of(claim) != (pod, uid):
                # An earlier pod's claim of the same name: released if that pod is done; the next cycle binds again.
                self.release(request.namespace, request.job)
                raise GatewayRetryable(f"ResourceClaim {request.namespace}/{name} of an earlier pod is still there")
            status = claim.get("status") or {}
            if not status.get("allocation"):
                written = self.client.resource_claim_status(
                    claim, {"allocation": allocation(requests, placement.node), "reservedFor": [consumer(pod, uid)]}
                )
            elif results_of(claim) != wanted:
                raise GatewayConflict(
                    f"ResourceClaim {request.namespace}/{name} is allocated other devices than job {request.job} "
                    f"replica {placement.replica} was placed on"
                )
            elif not reserved_for(claim, uid):
                reserved = [*(status.get("reservedFor") or []), consumer(pod, uid)]
                written = self.client.resource_claim_status(claim, {**status, "reservedFor": reserved})
            else:
                return
            if written is not None:
                return
        raise GatewayRetryable(f"ResourceClaim {request.namespace}/{name} kept changing while being reserved")

    def release(self, namespace: str, job: str, *, keep: Callable[[int], bool] = lambda _g: False) -> None:
        """Deallocate and delete the job's claims (of the generations ``keep`` does not keep) whose pod is gone, was
        replaced or has finished: what the resourceclaim controller does for such a pod's claims (controller.go
        syncClaim: reservedFor without it, the allocation cleared with the last reservation, the finalizer removed,
        a claim generated for the pod deleted), done by Microcosm at once rather than left to the controller. A
        claim whose pod still runs (terminating within its grace) keeps its devices: the controller, or
        :meth:`sweep`, releases it once the pod is gone."""
        if self.lookup is None:
            return
        selector = f"{MANAGED_BY}={SCHEDULER_NAME},{JOB_LABEL}={job}"
        claims = [
            c for c in self.client.resource_claims(namespace, label_selector=selector) if not keep(generation_of(c))
        ]
        if not claims:
            return
        pods = {name_of(p): p for p in self.client.pods_ours(namespace, job, from_server=True)}
        for claim in claims:
            owner, uid = owner_of(claim)
            pod = pods.get(owner)
            if pod is not None and uid_of(pod) == uid and not finished(pod):
                continue
            self._release_one(claim)

    def _release_one(self, claim: Mapping[str, Any]) -> None:
        """Deallocate one claim (reservations and allocation cleared together: the API server refuses a reservation
        without an allocation), drop its finalizer and delete it."""
        meta = claim.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        for _attempt in range(CONFLICT_ATTEMPTS):
            status = claim.get("status") or {}
            if not (status.get("allocation") or status.get("reservedFor")):
                break
            written = self.client.resource_claim_status(claim, {})
            if written is not None:
                claim = written
                break
            again = self.client.resource_claim_read(namespace, name)
            if again is None:
                return  # deleted meanwhile: nothing left to release
            claim = again
        else:
            raise GatewayRetryable(f"ResourceClaim {namespace}/{name} kept changing while being released")
        finalizers = (claim.get("metadata") or {}).get("finalizers") or []
        if DELETE_PROTECTION in finalizers:
            rest = [f for f in finalizers if f != DELETE_PROTECTION]
            self.client.resource_claim_patch(namespace, name, {"metadata": {"finalizers": rest or None}})
        self.client.resource_claim_delete(namespace, name)
        logger.info("deallocated and deleted ResourceClaim %s/%s", namespace, name)

    def sweep(self) -> None:
        """Release every Microcosm claim whose pod is gone or done (:meth:`release`), once a maintenance step: a
        pod that was terminating when its job was evicted has gone since. One LIST of claims, checked against the pod
        cache; only a job with a claim the cache says is free is read again from the server (the cache may lag a
        pod created a moment ago), as the resourceclaim controller checks with the API server before it removes a
        reservation whose pod it has not seen."""
        if self.lookup is None:
            return
        live = {
            (str((p.get("metadata") or {}).get("namespace", "")), name_of(p)): p
            for p in self.client.pods_ours()
            if not finished(p)
        }
        jobs: set[tuple[str, str]] = set()
        for claim in self.client.resource_claims(label_selector=f"{MANAGED_BY}={SCHEDULER_NAME}"):
            namespace = str((claim.get("metadata") or {}).get("namespace", ""))
            owner, uid = owner_of(claim)
            pod = live.get((namespace, owner))
            if pod is None or uid_of(pod) != uid:
                jobs.add((namespace, labels_of(claim).get(JOB_LABEL, "")))
        for namespace, job in sorted(jobs):
            if job:
                self.release(namespace, job)
