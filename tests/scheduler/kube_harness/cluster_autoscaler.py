"""The Cluster Autoscaler with ProvisioningRequest support (``--enable-provisioning-requests``), stepped by the test on
its manual clock: what it does to ProvisioningRequests, and to the nodes of the node groups it scales.

Modelled on kubernetes/autoscaler ``cluster-autoscaler/`` (snapshot 2026): one :meth:`ClusterAutoscaler.step` is
one CA loop (``--scan-interval`` 10 s by default; the test calls it as often as it likes).

- **Accepted.** Each loop picks ProvisioningRequests of a supported class that are neither ``Provisioned=True``
  nor ``Failed=True`` and marks them ``Accepted`` ("ProvisioningRequest is accepted by ClusterAutoscaler"), one
  with ``Provisioned=False`` again at every loop (``processors/provreq/injector.go``: ``GetPodsFromNextRequest``,
  ``IsAvailableForProvisioning``, ``MarkAsAccepted``). A request whose PodTemplate is missing cannot give its
  pods: ``Failed``, reason ``FailedToCreatePods`` (``provisioningrequest/pods/pods.go``
  ``PodsForProvisioningRequest``; injector.go ``MarkAsFailed``). An unsupported class is left alone (injector.go logs
  "Provisioning Class %s is not supported").
- **Provisioned, all or nothing** (``provisioningrequest/besteffortatomic/provisioning_class.go``): the scale-up of
  every pod's node is asked of one node group at once; success is ``Provisioned=True, CapacityIsProvisioned``
  ("Capacity is found in the cluster") *as soon as it is asked* — the class "admits workload immediately after
  successful request, without waiting to verify that resources started" — and the nodes register ``boot_s``
  later. A group that cannot take them all (a stockout of an atomic increase, or its max size) leaves the request
  ``Provisioned=False, CapacityIsNotFound`` ("Capacity is not found, CA will try to find it later."), and the
  group is backed off: not tried for 5 min, doubling to 30 min (``clusterstate/clusterstate.go``, the node group
  backoff; ``--initial-node-group-backoff-duration``, ``--max-node-group-backoff-duration``). A node group is the one
  whose labels the template's ``nodeSelector`` matches.
- **BookingExpired**: ``Provisioned=True`` for ``booking_s`` (``defaultReservationTime`` 10 min) →
  ``CapacityReservationTimeExpired`` ("Capacity reservation time is expired"); or, sooner, once as many pods as the
  request counts run with ``autoscaling.x-k8s.io/consume-provisioning-request: <name>`` → ``CapacityBookingConsumed``
  (``processors/provreq/processor.go``: ``refresh``, ``bookCapacity``). **Failed/Expired**: not provisioned within
  ``expiration_s`` (``defaultExpirationTime`` 7 days) of its creation (processor.go ``refresh``).
- **The booking holds nodes**: while a request is Provisioned and not BookingExpired, its pods are simulated on
  the cluster (processor.go ``bookCapacity``): its nodes are not empty to scale-down.
- **Parameters** (types.go ``Parameters``): the open-source classes read none. ``processor.go`` keeps the booking
  (``defaultReservationTime``) and the expiry (``defaultExpirationTime``) fixed ("TODO(yaroslava): fetch reservation
  and expiration time from ProvisioningRequest"), so a ``ValidUntilSeconds`` changes nothing here: the loop's own
  timeout is what gives a request up. :attr:`ClusterAutoscaler.parameters_seen` records what each request carried.
- **GKE's queued provisioning** (``gke=True``: GKE's cluster autoscaler, which also serves
  ``queued-provisioning.gke.io``; cloud.google.com ``kubernetes-engine/docs/how-to/provisioningrequest``). A node
  group created with queued provisioning (``NodeGroup.queued``) takes nodes only through a request of that class
  (the GKE API's ``NodePool.QueuedProvisioning``: "nodes can be only obtained through queuing via the Cluster
  Autoscaler ProvisioningRequest API"); a request of another class finds no capacity there. The class is atomic as
  best-effort-atomic is, and its nodes carry the label ``cloud.google.com/gke-queued: "true"`` and the taint
  ``cloud.google.com/gke-queued=true:NoSchedule``.
- **Taints** (the CA simulates scheduling with kube-scheduler's filters, ``simulator/scheduling/
  hinting_simulator.go``; the TaintToleration plugin): a group whose nodes carry a ``NoSchedule`` or ``NoExecute``
  taint the template's pods do not tolerate cannot take them: ``Provisioned=False, CapacityIsNotFound``.
- **CapacityRevoked**: types.go defines it ("requested resources are not longer valid") and the CA core never sets
  it — providers do (GKE, when the nodes of a queued provisioning request are reclaimed). :meth:`revoke` is the
  test's "the cloud took the nodes back": they go, the condition is set.
- **Scale-down** (``core/scaledown/eligibility/eligibility.go``, ``core/scaledown/unneeded/nodes.go``): a node of a
  group is unneeded while its GPUs are below ``--scale-down-gpu-utilization-threshold`` (0.5) — here: no live pod
  holds a GPU on it and no booking holds it — and it is not annotated
  ``cluster-autoscaler.kubernetes.io/scale-down-disabled=true``; a cordon does not stop it. Unneeded for
  ``unneeded_s`` (``--scale-down-unneeded-time``, 10 min) it is deleted. A pod that is not replicated (Microcosm's
  bound pods have no controller) would block the drain (``simulator/drainability/rules``), so any live pod keeps the
  node: the CA removes only empty nodes here.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
SUPPORTED = ("best-effort-atomic-scale-up.autoscaling.x-k8s.io", "check-capacity.autoscaling.x-k8s.io")
QUEUED = "queued-provisioning.gke.io"  # GKE's cluster autoscaler only
QUEUED_LABEL = "cloud.google.com/gke-queued"  # label and taint key of a queued-provisioning node pool's nodes
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
GPU = "nvidia.com/gpu"
BACKOFF_S, MAX_BACKOFF_S = 300.0, 1800.0  # the node group backoff's defaults (main.go flags)


@dataclass
class NodeGroup:
    """One node group the CA scales (an ASG, a GKE node pool, an AKS agent pool): its nodes' labels and GPUs."""

    name: str
    labels: dict[str, str]
    gpus: int = 8
    max_size: int = 10
    stockout: bool = False  # the cloud refuses an atomic increase: no capacity of this type in the zone
    boot_s: float = 300.0  # from the scale-up to a Ready node (GPU nodes: minutes)
    queued: bool = False  # a GKE node pool created with queued provisioning (module doc)
    taints: list[dict[str, str]] = field(default_factory=list)  # its nodes' own, beside a queued pool's
    created: int = 0
    backoff_s: float = BACKOFF_S
    backed_off_until: float = 0.0


@dataclass
class _Request:
    group: str = ""
    nodes_at: float | None = None  # when its nodes register
    nodes: list[str] = field(default_factory=list)


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class ClusterAutoscaler:
    """The CA's ProvisioningRequest processing and scale-down over the emulator (module doc)."""

    def __init__(
        self,
        cluster: Any,
        groups: list[NodeGroup],
        *,
        booking_s: float = 600.0,
        expiration_s: float = 7 * 24 * 3600.0,
        unneeded_s: float = 600.0,
        gke: bool = False,
    ) -> None:
        self.cluster = cluster
        self.groups = {g.name: g for g in groups}
        self.classes = (*SUPPORTED, QUEUED) if gke else SUPPORTED
        self.parameters_seen: dict[tuple[str, str], dict[str, str]] = {}
        self.booking_s = booking_s
        self.expiration_s = expiration_s
        self.unneeded_s = unneeded_s
        self.requests: dict[tuple[str, str], _Request] = {}
        self.unneeded_since: dict[str, float] = {}
        self.removed: list[str] = []  # nodes scaled down, in order
        self.created_at: dict[tuple[str, str], float] = {}

    # -- the API as the CA reads it -----------------------------------------------------------------------

    def _provisioning_requests(self) -> list[dict[str, Any]]:
        return list(self.cluster.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"])

    def _set(self, pr: dict[str, Any], kind: str, status: str, reason: str, message: str, now: float) -> None:
        """conditions.go ``AddOrUpdateCondition``: replace the condition of that type or append it; through the
        status subresource as the CA's client writes it."""
        meta = pr["metadata"]
        conditions = [c for c in (pr.get("status") or {}).get("conditions") or [] if c["type"] != kind]
        conditions.append(
            {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": iso(now)}
        )
        pr.setdefault("status", {})["conditions"] = conditions
        self.cluster.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": {"conditions": conditions}}
        )

    @staticmethod
    def condition(pr: dict[str, Any], kind: str) -> dict[str, Any] | None:
        return next((c for c in (pr.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)

    def _true(self, pr: dict[str, Any], kind: str) -> bool:
        found = self.condition(pr, kind)
        return found is not None and found["status"] == "True"

    def _template(self, pr: dict[str, Any]) -> dict[str, Any] | None:
        name = pr["spec"]["podSets"][0]["podTemplateRef"]["name"]
        try:
            found = self.cluster.core.read_namespaced_pod_template(name, pr["metadata"]["namespace"])
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self.cluster.api_client.sanitize_for_serialization(found))

    def _group_for(self, template: dict[str, Any]) -> NodeGroup | None:
        selector = (template["template"].get("spec") or {}).get("nodeSelector") or {}
        return next((g for g in self.groups.values() if all(g.labels.get(k) == v for k, v in selector.items())), None)

    def _live_pods(self) -> list[dict[str, Any]]:
        pods = [
            self.cluster.api_client.sanitize_for_serialization(p)
            for p in self.cluster.core.list_pod_for_all_namespaces().items
        ]
        return [
            p
            for p in pods
            if (p.get("spec") or {}).get("nodeName")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]

    # -- one loop ------------------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        self._register(now)
        prs = self._provisioning_requests()
        pods = self._live_pods()
        for pr in prs:
            key = (pr["metadata"]["namespace"], pr["metadata"]["name"])
            self.created_at.setdefault(key, now)
            if pr["spec"].get("provisioningClassName") not in self.classes:
                continue
            self.parameters_seen[key] = dict(pr["spec"].get("parameters") or {})
            self._refresh(pr, key, pods, now)
            self._provision(pr, key, now)
        self._scale_down(prs, pods, now)

    def _provision(self, pr: dict[str, Any], key: tuple[str, str], now: float) -> None:
        if self._true(pr, "Failed") or self._true(pr, "Provisioned"):
            return
        state = self.requests.setdefault(key, _Request())
        template = self._template(pr)
        if template is None:
            message = f"podtemplates {pr['spec']['podSets'][0]['podTemplateRef']['name']!r} not found"
            self._set(pr, "Failed", "True", "FailedToCreatePods", message, now)
            return
        self._set(pr, "Accepted", "True", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler", now)
        count = sum(int(s["count"]) for s in pr["spec"]["podSets"])
        group = self._group_for(template)
        if group is not None and not self._takes(group, pr, template):
            group = None
        if (
            group is None
            or now < group.backed_off_until
            or group.stockout
            or self._size(group) + count > group.max_size
        ):
            if group is not None and now >= group.backed_off_until and group.stockout:
                group.backed_off_until = now + group.backoff_s
                group.backoff_s = min(2 * group.backoff_s, MAX_BACKOFF_S)
            message = "Capacity is not found, CA will try to find it later."
            self._set(pr, "Provisioned", "False", "CapacityIsNotFound", message, now)
            return
        state.group = group.name
        for _ in range(count):
            group.created += 1
            state.nodes.append(f"{group.name}-{group.created}")
        state.nodes_at = now + group.boot_s
        self._set(pr, "Provisioned", "True", "CapacityIsProvisioned", "Capacity is found in the cluster", now)

    @staticmethod
    def _taints(group: NodeGroup) -> list[dict[str, str]]:
        queued = [{"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}] if group.queued else []
        return [*group.taints, *queued]

    def _takes(self, group: NodeGroup, pr: dict[str, Any], template: dict[str, Any]) -> bool:
        """A queued pool only for its class; and every repelling taint of the group tolerated by the template's pods
        (module doc)."""
        if group.queued != (pr["spec"].get("provisioningClassName") == QUEUED):
            return False
        tolerations = (template["template"].get("spec") or {}).get("tolerations") or []
        return all(
            _tolerates(tolerations, taint)
            for taint in self._taints(group)
            if taint.get("effect") in ("NoSchedule", "NoExecute")
        )

    def _size(self, group: NodeGroup) -> int:
        return sum(len(r.nodes) for r in self.requests.values() if r.group == group.name)

    def _register(self, now: float) -> None:
        """The cloud's VMs join the cluster as Ready GPU nodes, with the group's labels and the GPUs the device plugin
        advertises (capacity = allocatable); a withdrawn request's VMs come all the same."""
        for state in self.requests.values():
            if state.nodes_at is not None and state.nodes_at <= now:
                self._join(state)

    def _join(self, state: _Request) -> None:
        group = self.groups[state.group]
        labels = {**group.labels, **({QUEUED_LABEL: "true"} if group.queued else {})}
        for name in state.nodes:
            gpus = {GPU: str(group.gpus)}
            self.cluster.add_node(
                name, dict(labels), taints=self._taints(group), allocatable=dict(gpus), capacity=dict(gpus)
            )
        state.nodes_at = None

    def _refresh(self, pr: dict[str, Any], key: tuple[str, str], pods: list[dict[str, Any]], now: float) -> None:
        if self._true(pr, "BookingExpired") or self._true(pr, "Failed"):
            return
        provisioned = self.condition(pr, "Provisioned")
        if provisioned is not None and provisioned["status"] == "True":
            name = pr["metadata"]["name"]
            consumed = [
                p
                for p in pods
                if p["metadata"].get("namespace") == key[0]
                and (p["metadata"].get("annotations") or {}).get(CONSUME) == name
            ]
            count = sum(int(s["count"]) for s in pr["spec"]["podSets"])
            if len(consumed) >= count:
                self._set(pr, "BookingExpired", "True", "CapacityBookingConsumed", "Capacity booking is consumed", now)
            elif seconds(provisioned["lastTransitionTime"]) + self.booking_s < now:
                message = "Capacity reservation time is expired"
                self._set(pr, "BookingExpired", "True", "CapacityReservationTimeExpired", message, now)
        elif self.created_at[key] + self.expiration_s < now:
            self._set(pr, "Failed", "True", "Expired", "ProvisioningRequest is expired", now)

    def revoke(self, namespace: str, name: str, now: float) -> None:
        """The cloud takes the request's nodes back (module doc, CapacityRevoked)."""
        state = self.requests.get((namespace, name))
        for node in state.nodes if state else []:
            try:
                self.cluster.delete_node(node)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        pr = self.cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        self._set(pr, "CapacityRevoked", "True", "CapacityRevoked", "the provider reclaimed the nodes", now)

    # -- scale-down ----------------------------------------------------------------------------------------

    def _scale_down(self, prs: list[dict[str, Any]], pods: list[dict[str, Any]], now: float) -> None:
        booked: set[str] = set()
        for pr in prs:
            if self._true(pr, "Provisioned") and not self._true(pr, "BookingExpired") and not self._true(pr, "Failed"):
                state = self.requests.get((pr["metadata"]["namespace"], pr["metadata"]["name"]))
                booked.update(state.nodes if state else [])
        busy = {p["spec"]["nodeName"] for p in pods}
        ours = {n for r in self.requests.values() for n in r.nodes}
        for raw in self.cluster.core.list_node().items:
            node = self.cluster.api_client.sanitize_for_serialization(raw)
            name = node["metadata"]["name"]
            if name not in ours:
                continue  # not autoscaled: never a scale-down candidate (eligibility.go NotAutoscaled)
            disabled = (node["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true"
            if name in busy or name in booked or disabled:
                self.unneeded_since.pop(name, None)
                continue
            since = self.unneeded_since.setdefault(name, now)
            if now - since >= self.unneeded_s:
                self.cluster.delete_node(name)
                self.removed.append(name)
                self.unneeded_since.pop(name)


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """kubernetes ``pkg/apis/core/v1/helper`` ``TolerationsTolerateTaint``: a toleration of the taint's key (or of
    every key), with ``Exists`` or an equal value, and the taint's effect or none."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        if toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False
