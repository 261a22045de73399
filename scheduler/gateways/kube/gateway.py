"""The Kubernetes cluster gateway: :class:`~scheduler.gateways.protocol.ClusterGateway` on a real cluster.

:class:`KubeGateway` works on a cluster running the NVIDIA GPU Operator with the mixed MIG strategy. It reads
nodes and Microcosm's pods, creates one pod per replica with ``schedulerName: microcosm`` and binds it with the
``pods/binding`` subresource, evicts, and drives MIG reconfiguration through MIG Manager (the flow: the
:class:`~scheduler.gateways.kube.mig_flow.MigFlow` it holds; its states: :mod:`scheduler.gateways.kube.mig`).
What labels, taints, nodes and pod states mean lives in the pure modules :mod:`scheduler.gateways.kube.labels`,
:mod:`scheduler.gateways.kube.nodes` and :mod:`scheduler.gateways.kube.pods`; every API call, its retries and
what its failures mean are :class:`~scheduler.gateways.kube.client.KubeClient`'s, the only module that imports
``kubernetes``. This module decides what to call and checks a binding before it touches anything. The teams'
checkpoint claims, the jobs' report Secrets and the manifest fallback are the
:class:`~scheduler.gateways.kube.checkpoint_storage.CheckpointStorage` it holds. A multi-replica job's headless
Service (:mod:`scheduler.gateways.kube.rendezvous`) is created before its pods and deleted with them when the job
ends, like its report Secret; every pod's ``/dev/shm`` is sized from its node here
(:mod:`scheduler.gateways.kube.shared_memory`). A Binding names its pod's UID; a pod is stopped within its own
termination grace unless a deadline is shorter (:mod:`scheduler.gateways.kube.grace`); binds, evictions and why
jobs wait are recorded as Events (:mod:`scheduler.gateways.kube.events`, best effort). On-demand nodes are asked of
the cluster's autoscaler and given back by the :class:`~scheduler.gateways.kube.node_requests.NodeRequests` it holds
(:class:`~scheduler.gateways.protocol.ProvisioningGateway`); a node's pool is the autoscaler's label on it
(:func:`~scheduler.pool_labels.pool_of`). On a Dynamic Resource Allocation cluster (``dra``:
``KUBE_DRA``) a node's GPUs, MIG devices and EFA interfaces are read from the DRA drivers' ResourceSlices
(:mod:`scheduler.gateways.kube.dra_slices`) and each such node's devices are kept for the apply path
(:meth:`KubeGateway.dra_nodes`): a replica's devices there come through a ResourceClaim that is allocated and
reserved for its pod before the pod is bound, and released with it
(:class:`~scheduler.gateways.kube.claim_binding.ResourceClaims`, which it holds).

Nodes and Microcosm's pods are read from the client's list-then-watch caches
(:mod:`scheduler.gateways.kube.informer`): ``observe()`` and the MIG flow make no LIST once they have synced, and
an operation reads its job's pods and its nodes from them too, as kube-scheduler decides on its informers' cache
and leaves the last word to the API server (kubernetes pkg/scheduler/schedule_one.go: ``schedulingCycle`` on the
cache's snapshot, then ``bind``). What the caches cannot hold is read from the server: the pods of every owner on
a bind's nodes (a LIST the server filters by ``spec.nodeName``: another owner's GPU pod, or one another worker
bound a moment ago, counts), and the pods an undone bind removes (a binding of a moment ago decides their grace).
A team namespace's label and its checkpoint claims are read once a cycle
(:mod:`scheduler.gateways.kube.cycle_reads`). What stays one request per pod, and why: docs/deploy.md, Memory
and API traffic.

``consistent_reads`` (off by default, as in production) makes each cached read wait until the cache has reached
the server's current resourceVersion: what tests that change the cluster between two calls and read it back at
once opt in to; a worker 10 s apart from its last cycle does not need it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.core.model.snapshot import MigLayout
from scheduler.core.model.vocabulary import Fabric
from scheduler.errors import GatewayConflict, GatewayError, GatewayRetryable
from scheduler.gateways.kube.checkpoint_storage import CheckpointStorage
from scheduler.gateways.kube.claim_binding import ResourceClaims
from scheduler.gateways.kube.client import ApiClient, KubeClient, uid_of
from scheduler.gateways.kube.cycle_reads import CycleReads
from scheduler.gateways.kube.dra_claims import claim_name, pod_with_claim
from scheduler.gateways.kube.dra_devices import DraNode
from scheduler.gateways.kube.dra_memo import InventoryMemo
from scheduler.gateways.kube.dra_mig import LAYOUT_ANNOTATION, dynamic, layout_annotation, unpublished
from scheduler.gateways.kube.dra_slices import DraInventory, device_classes, read_slices
from scheduler.gateways.kube.events import Occurrence, Ref, Series, WaitNotes, scheduled, stopped
from scheduler.gateways.kube.events import waiting as waiting_event
from scheduler.gateways.kube.fabrics import (
    EFA_RESOURCE,
    MAIN_CONTAINER,
    NO_FABRIC_SETTINGS,
    FabricSettings,
    ReplicaFabric,
    fabric_requests,
    gang_fabric,
    multi_node,
    replica_fabric,
)
from scheduler.gateways.kube.host_resources import (
    DEFAULT_HOST_SETTINGS,
    HostResources,
    HostSettings,
    replica_host_resources,
)
from scheduler.gateways.kube.job_objects import job_object_existing, job_object_remove
from scheduler.gateways.kube.labels import DEFAULT_SHUTDOWN_GRACE_S, DEFAULT_TOPOLOGY_LABELS
from scheduler.gateways.kube.mig import CORDONED_BY_ADMIN, CORDONED_BY_US, FLOW_ANNOTATIONS
from scheduler.gateways.kube.mig_flow import MigEvent, MigFlow
from scheduler.gateways.kube.namespaces import team_level
from scheduler.gateways.kube.node_requests import NodeRequests
from scheduler.gateways.kube.nodes import (
    annotations_of,
    check_device,
    int_or_none,
    jobs_of,
    labels_of,
    name_of,
    node_observation,
    utilization_readings,
)
from scheduler.gateways.kube.pods import (
    DEVICES_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    REPLICA_LABEL,
    SCHEDULER_NAME,
    TEAM_LABEL,
    device_resources,
    finished,
    generation_of,
    gpu_requests,
    node_of,
    parse_devices,
    pod_manifest,
    pod_name,
    terminating,
)
from scheduler.gateways.kube.prometheus import PrometheusClient
from scheduler.gateways.kube.provisioning import DO_NOT_DISRUPT
from scheduler.gateways.kube.rendezvous import DEFAULT_PORT, needs_rendezvous, service_manifest, service_name
from scheduler.gateways.kube.shared_memory import DEFAULT_FRACTION, quantity_bytes, shm_size_limit
from scheduler.gateways.protocol import (
    FINAL_EVICTIONS,
    LOG_LIMIT_BYTES,
    BindRequest,
    Device,
    JobWaiting,
    LogSource,
    MaintenanceEvent,
    NodeObservation,
    NodeRequestSpec,
    Observation,
    ReplicaLog,
    UtilizationReading,
)
from scheduler.pool_labels import KARPENTER_POOL_LABEL, pool_of

logger = logging.getLogger(__name__)


class KubeGateway:
    """A :class:`~scheduler.gateways.protocol.ClusterGateway` over the Kubernetes API (module doc).

    ``api_client`` defaults to the in-cluster service account, else ``KUBECONFIG``/``~/.kube/config``
    (:func:`gateway_from_settings`). ``clock`` and ``sleep`` are injectable so tests need no real waits.
    ``consistent_reads`` and ``cache_sync_timeout_s``: the caches' (module doc, and
    :class:`~scheduler.gateways.kube.client.KubeClient`). ``dra_nodes``: the Dynamic Resource Allocation nodes'
    published devices by node name (a lookup called once per bind; None: no DRA node); their replicas get their
    devices through ResourceClaims (:class:`~scheduler.gateways.kube.claim_binding.ResourceClaims`).
    ``dra_fabric_class``: the DeviceClass of their fabric devices ("": the fabric driver's name).
    """

    name = "kubernetes"

    def __init__(
        self,
        api_client: ApiClient | None = None,
        *,
        topology_labels: Sequence[str] = DEFAULT_TOPOLOGY_LABELS,
        gpu_operator_namespace: str = "gpu-operator",
        mig_config_map: str = "microcosm-mig-config",
        mig_config_timeout_s: float = 900.0,
        mig_config_propagation_s: float = 120.0,
        mig_with_reboot: bool = False,
        eviction_grace_s: int = 30,
        default_image: str = "",
        prometheus_url: str = "",
        checkpoint_storage_class: str = "",
        checkpoint_size: str = "100Gi",
        report_url: str = "",
        checkpoint_root: str = "",
        fabric: FabricSettings = NO_FABRIC_SETTINGS,
        rendezvous_port: int = DEFAULT_PORT,
        shm_fraction: float = DEFAULT_FRACTION,
        host: HostSettings = DEFAULT_HOST_SETTINGS,
        namespace_create: bool = False,
        pod_security_level: str = "baseline",
        pod_security_team_levels: Mapping[str, str] | None = None,
        shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
        request_timeout_s: float = 30.0,
        attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        consistent_reads: bool = False,
        cache_sync_timeout_s: float = 60.0,
        node_requests: bool = False,
        dra: bool = False,
        dra_memo: bool = True,
        dra_nodes: Callable[[], Mapping[str, DraNode]] | None = None,
        dra_fabric_class: str = "",
    ) -> None:
        self.client = KubeClient(
            api_client,
            consistent_reads=consistent_reads,
            sync_timeout_s=cache_sync_timeout_s,
            operator_namespace=gpu_operator_namespace,
            mig_config_map=mig_config_map,
            request_timeout_s=request_timeout_s,
            attempts=attempts,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            sleep=sleep,
        )
        self.topology_labels = tuple(topology_labels)
        self.mig_config_timeout_s = mig_config_timeout_s
        self.eviction_grace_s = eviction_grace_s
        self.default_image = default_image
        self.prometheus = PrometheusClient(prometheus_url) if prometheus_url else None
        self.report_url = report_url
        self.fabric = fabric
        self.reads = CycleReads(clock)
        self.checkpoints = CheckpointStorage(
            self.client,
            storage_class=checkpoint_storage_class,
            size=checkpoint_size,
            root=checkpoint_root,
            reads=self.reads,
        )
        self.rendezvous_port = rendezvous_port
        self.shm_fraction = shm_fraction
        self.host = host
        # Team namespaces (docs/deploy.md, RBAC and Pod Security): checked, or created when the opt-in allows it.
        self.namespace_create = namespace_create
        self.pod_security_level = pod_security_level
        self.pod_security_team_levels = dict(pod_security_team_levels or {})
        self.shutdown_grace_s = shutdown_grace_s
        self.clock = clock
        self.mig = MigFlow(
            self.client,
            clock=clock,
            timeout_s=mig_config_timeout_s,
            eviction_grace_s=eviction_grace_s,
            propagation_s=mig_config_propagation_s,
            with_reboot=mig_with_reboot,
        )
        self._utilization_at: float | None = None
        # What the cluster records (scheduler.gateways.kube.events): client-go's reportingInstance is
        # "<controller>-<hostname>" (tools/events/event_broadcaster.go NewRecorder).
        self.event_instance = f"microcosm-{socket.gethostname()}"
        self.event_series = Series()
        self.wait_notes = WaitNotes()
        # On-demand nodes through the cluster's autoscaler (scheduler.gateways.kube.node_requests): observed only
        # where the deployment says pools can grow (KUBE_NODE_REQUESTS), so other clusters pay no LIST for them.
        self.node_requests_observed = node_requests
        self.requests = NodeRequests(self.client, clock=clock)
        # Dynamic Resource Allocation (scheduler.gateways.kube.dra_slices): the ResourceSlices are watched only where
        # the deployment says DRA drivers publish devices (KUBE_DRA), so other clusters pay no watch for them.
        self.dra = dra
        self._dra_nodes: dict[str, DraNode] | None = None  # as of the last observe(); None: not observed yet
        self._dra_inventories: dict[str, DraInventory] = {}  # the same read, whole: what a bind observes a node with
        # Each node's inventory until its slices change (scheduler.gateways.kube.dra_memo); ``dra_memo`` is the off
        # switch, and the inventories are the same either way.
        self._dra_memo = InventoryMemo() if dra_memo else None
        # A DRA node's replicas get their devices through ResourceClaims (scheduler.gateways.kube.claim_binding), from
        # the devices the last observe read from its ResourceSlices (``dra_nodes`` overrides that lookup in tests).
        # A node absent is a device-plugin node and keeps the extended resources; without DRA no claim call is made.
        lookup = dra_nodes if dra_nodes is not None else (self.dra_nodes if dra else None)
        self.claims = ResourceClaims(self.client, lookup=lookup, fabric_class=dra_fabric_class)
        # A static-MIG DRA node's relabel flow drains only the pods whose claims hold a changing GPU (mig_drain).
        self.mig.held_gpus = self.claims.gpus_held if lookup is not None else None

    def close(self) -> None:
        """Stop the node and pod caches' watch threads (:mod:`scheduler.gateways.kube.informer`)."""
        self.client.close()

    # -- observe ---------------------------------------------------------------------------------------------

    def observe(self) -> Observation:
        now = self.clock()
        self.reads.clear()  # a new cycle (scheduler.gateways.kube.cycle_reads)
        raw_nodes = self.client.nodes()
        pods = self.client.pods_ours()
        inventories = self._dra_read(raw_nodes)
        nodes = tuple(
            n for n in (self._node(raw, now, inventories.get(name_of(raw))) for raw in raw_nodes) if n is not None
        )
        live = {name_of(raw) for raw in raw_nodes}
        jobs = {job: self.checkpoints.observed(observed) for job, observed in jobs_of(pods, live).items()}
        requests = self.requests.observe(raw_nodes) if self.node_requests_observed else ()
        return Observation(observed_at=now, nodes=nodes, jobs=jobs, node_requests=requests)

    def _node(self, raw: Mapping[str, Any], now: float, dra: DraInventory | None = None) -> NodeObservation | None:
        found = node_observation(
            raw,
            now=now,
            topology_labels=self.topology_labels,
            mig_config_timeout_s=self.mig_config_timeout_s,
            fabric_settings=self.fabric,
            shutdown_grace_s=self.shutdown_grace_s,
            dra=dra,
        )
        pool = pool_of(labels_of(raw))  # scheduler.pool_labels
        return dataclasses.replace(found, pool=pool) if found is not None and pool else found

    # -- Dynamic Resource Allocation (scheduler.gateways.kube.dra_slices, dra_devices) ---------------------------

    def _dra_read(self, raw_nodes: Sequence[Mapping[str, Any]]) -> dict[str, DraInventory]:
        """The nodes' DRA inventories from the ResourceSlices cache (none without ``dra``); remembers each node's
        :class:`DraNode` for :meth:`dra_nodes`. Slices of nodes that are not in the cluster are ignored (a
        driver's slices outlive a deleted node until the garbage collector removes them)."""
        if not self.dra:
            self._dra_nodes, self._dra_inventories = {}, {}
            return {}
        read = read_slices(self.client.resource_slices(), memo=self._dra_memo)
        for problem in read.problems:
            logger.warning("DRA: %s (ignored; the API server should have refused it)", problem)
        live = {name_of(raw) for raw in raw_nodes}
        inventories = {node: found for node, found in read.inventories.items() if node in live}
        self._dra_nodes = {node: found.node for node, found in inventories.items() if not found.waiting}
        self._dra_inventories = inventories
        return inventories

    def dra_nodes(self) -> Mapping[str, DraNode]:
        """Every node with devices published through DRA (GPUs, MIG devices, EFA interfaces), by name, as the last
        :meth:`observe` read them: what a bind's ResourceClaims name (:mod:`scheduler.gateways.kube.dra_devices`). A
        node whose pools are incomplete or invalid is not here. Read from the slices cache when this gateway has not
        observed yet (a gateway built to apply only); empty unless ``dra``."""
        if self._dra_nodes is None:
            self._dra_read(self.client.nodes())
        assert self._dra_nodes is not None
        return self._dra_nodes

    def _dra_inventory(self, node: str) -> DraInventory | None:
        """What ``node``'s ResourceSlices published at the last observe (None: not a DRA node), so that a bind checks
        a DRA node as observe saw it (its GPUs, MIG layout, EFA) without reading the slices again."""
        if not self.dra:
            return None
        self.dra_nodes()  # a gateway that has not observed yet reads the slices cache once
        return self._dra_inventories.get(node)

    def dra_device_classes(self) -> frozenset[str]:
        """The DeviceClasses the cluster has (``gpu.nvidia.com``, ``mig.nvidia.com``, ``efa.networking.k8s.aws``...):
        a claim must name one that exists."""
        return device_classes(self.client.device_classes()) if self.dra else frozenset()

    # -- on-demand nodes (ProvisioningGateway; scheduler.gateways.kube.node_requests) -------------------------

    def nodes_request(self, *, request: NodeRequestSpec) -> None:
        self.requests.request(request, observed=self.node_requests_observed)

    def nodes_request_withdraw(self, *, request: str, namespace: str) -> None:
        self.requests.withdraw(request=request, namespace=namespace)

    def node_release(self, *, node: str) -> None:
        self.requests.release(node=node)

    # -- namespaces and binding ------------------------------------------------------------------------------

    def namespace_ensure(self, *, namespace: str, team: str, checkpoint_claim: str = "") -> None:
        if self.reads.team(namespace) != team:
            level = team_level(team, self.pod_security_level, self.pod_security_team_levels)
            self.client.namespace_ensure(namespace, team, create=self.namespace_create, level=level)
            self.reads.team_found(namespace, team)
        self.checkpoints.claim_ensure(namespace=namespace, team=team, checkpoint_claim=checkpoint_claim)

    def job_bind(self, *, request: BindRequest) -> None:
        self._start(request, generation=0)

    def job_move(self, *, request: BindRequest, generation: int) -> None:
        """The job's replicas again on the request's placement as pods of ``generation`` (``mc-<job>-g<n>-<r>``),
        beside the running ones, bound exactly as a bind binds (the same checks, devices and resources); the old
        pods' devices count as held, so the new placement never shares one with them."""
        if generation < 1:
            raise GatewayConflict(f"job {request.job}: a move starts a generation above 0, not {generation}")
        self._start(request, generation=generation)

    def _start(self, request: BindRequest, *, generation: int) -> None:
        """Create and bind the missing pods of ``generation`` (0: a bind): all of the generation or none."""
        placements = sorted(request.placements, key=lambda p: p.replica)
        if [p.replica for p in placements] != list(range(len(placements))) or not placements:
            raise GatewayConflict(f"job {request.job}: replicas must be numbered 0..n-1")
        image = request.image or self.default_image
        if not image:
            raise GatewayConflict(
                f"job {request.job} names no container image and KUBE_DEFAULT_IMAGE is not set; give the job an image"
            )
        pods = self.client.pods_ours(request.namespace, request.job)
        existing = {int(labels_of(p).get(REPLICA_LABEL, "-1")): p for p in pods if generation_of(p) == generation}
        if generation == 0:
            # A bind starts the job's run: a pod of another generation still there is an earlier run's.
            for other in (p for p in pods if generation_of(p) != 0):
                if terminating(other):
                    raise GatewayRetryable(
                        f"job {request.job}: pod {name_of(other)} of an earlier run is still terminating"
                    )
                if not finished(other):
                    raise GatewayConflict(
                        f"job {request.job}: pod {name_of(other)} of a move still runs; evict the job first"
                    )
        extra = sorted(set(existing) - {p.replica for p in placements})
        if extra:
            raise GatewayConflict(f"job {request.job} has replicas {extra} the request does not name")
        todo = []
        for placement in placements:
            pod = existing.get(placement.replica)
            if pod is None:
                todo.append(placement)
                continue
            if terminating(pod):
                raise GatewayRetryable(f"job {request.job}: pod {name_of(pod)} of an earlier run is still terminating")
            if finished(pod):
                raise GatewayConflict(f"job {request.job}: pod {name_of(pod)} already finished; evict the job first")
            if parse_devices(annotations_of(pod).get(DEVICES_ANNOTATION, "")) != placement.devices or node_of(
                pod
            ) not in (None, placement.node):
                raise GatewayConflict(
                    f"job {request.job} replica {placement.replica} is already on {node_of(pod)}, not {placement.node}"
                )
            if node_of(pod) is None:
                todo.append(placement)  # created by a call that stopped before binding it
        if not todo:
            return
        dra = self.claims.nodes()
        fabrics = self._fabrics(request, dra)
        nodes = self._check_placements(request, todo, fabrics, generation=generation, dra=dra)
        claims = self.claims.requests(request, todo, fabrics, dra, generation=generation)
        team = self.reads.team(request.namespace)
        if team is None:
            team = self.client.namespace_team(request.namespace)
            self.reads.team_found(request.namespace, team)
        self.checkpoints.claim_check(request)
        bound: list[tuple[Ref, str]] = []
        consumed: dict[str, str] | None = None
        try:
            # Inside the undo: a quota or admission refusal of either leaves nothing behind.
            if request.credential:
                self.checkpoints.credential_ensure(request, team=team)  # before the pods that mount it
            if needs_rendezvous(request):
                self._service_ensure(request, team=team)  # before the pods that resolve each other through it
            for placement in todo:
                last = placement is todo[-1]
                name = pod_name(request.job, placement.replica, generation)
                if placement.replica in existing:
                    uid = uid_of(existing[placement.replica])
                else:
                    if consumed is None:  # the job's node request, if its pods land on its nodes (node_requests)
                        pools = {name: observed.pool for name, (_raw, observed) in nodes.items()}
                        consumed = self.requests.consume(namespace=request.namespace, job=request.job, nodes=pools)
                    manifest = pod_manifest(
                        request,
                        placement,
                        team=team,
                        image=image,
                        grace_s=self.eviction_grace_s,
                        report_url=self.report_url,
                        fabric=fabrics.get(placement.replica),
                        rendezvous_port=self.rendezvous_port,
                        host=self._host_resources(request, nodes[placement.node], placement.devices),
                        generation=generation,
                    )
                    manifest["metadata"]["annotations"].update(consumed)
                    if placement.replica in claims:  # a DRA node: the devices come through the replica's claim
                        manifest = pod_with_claim(manifest, claim_name(request.job, placement.replica, generation))
                    if labels_of(nodes[placement.node][0]).get(KARPENTER_POOL_LABEL):
                        # Karpenter's consolidation and drift would evict the replica to repack its node; Microcosm
                        # moves its own work (aws/karpenter-provider-aws website/content/en/docs/concepts/
                        # disruption.md, Pod-level controls). Interruptions are involuntary and still come.
                        manifest["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
                    uid = self.client.pod_create(
                        request.namespace, request.job, placement.replica, manifest, generation=generation
                    )
                if placement.replica in claims:
                    # Allocated and reserved for the pod before the Binding, as kube-scheduler's PreBind does: the
                    # kubelet refuses a pod whose claim is not reserved for it (dra_claims module doc).
                    self.claims.reserve(
                        request,
                        placement,
                        claims[placement.replica],
                        pod=name,
                        uid=uid,
                        team=team,
                        generation=generation,
                    )
                # The last binding's pod is read back for the caches' sake (KubeClient.pod_bind): one read per gang.
                self.client.pod_bind(request.namespace, name, placement.node, uid=uid, remember=last)
                bound.append((Ref(request.namespace, name, uid), placement.node))
        except GatewayError as exc:
            self.reads.forget(request.namespace)  # it may be the namespace that refused: the next bind reads it
            self._undo(request, exc, generation=generation)
            raise
        for ref, node in bound:  # once the whole gang is bound: an undone bind is no "Scheduled"
            self._record(scheduled(ref, node))

    def _fabrics(self, request: BindRequest, dra: Mapping[str, DraNode]) -> dict[int, ReplicaFabric | None]:
        """What each replica of a multi-node job needs for its node's fabric (:mod:`.fabrics`); {} for a
        single-node job. GatewayConflict when the gang's nodes offer different fabrics or a setting is missing. A DRA
        node's fabric devices (``dra``) are EFA interfaces the EFA DRA driver publishes instead of advertising
        ``vpc.amazonaws.com/efa``: the replica gets EFA's settings and its share of them through its claim."""
        if not multi_node(request):
            return {}
        now = self.clock()
        nodes: dict[str, NodeObservation] = {}
        for name in sorted({p.node for p in request.placements}):
            node = self._node(self.client.node_cached(name), now, self._dra_inventory(name))
            if node is None:
                return {}  # not a GPU node Microcosm knows: _check_placements refuses it
            published = dra[name].fabrics() if name in dra else ()
            if published:
                node = dataclasses.replace(node, fabric=Fabric.EFA.value, fabric_devices=len(published))
            nodes[name] = node
        gang_fabric(request, nodes)
        return {p.replica: replica_fabric(request, p, nodes[p.node], self.fabric) for p in request.placements}

    def _check_placements(
        self,
        request: BindRequest,
        todo: Sequence[Any],
        fabrics: Mapping[int, ReplicaFabric | None],
        *,
        generation: int = 0,
        dra: Mapping[str, DraNode] | None = None,
    ) -> dict[str, tuple[Mapping[str, Any], NodeObservation]]:
        """Refuse (GatewayConflict) before touching anything: a node gone or closed, a device that does not
        exist or is held by another job's pod (or, for a move, by the job's own pods of another generation), or
        more GPU or fabric resources than the node has left. Returns the nodes read, raw and observed, by name.

        The node is the nodes cache's (module doc); the pods on it are read from the API server, a LIST it filters by
        ``spec.nodeName``: the cache holds Microcosm's pods only, and a pod another worker bound a moment ago
        counts."""
        now = self.clock()
        wanted: set[tuple[str, int, int | None]] = set()
        read: dict[str, tuple[Mapping[str, Any], NodeObservation]] = {}
        for node_name in sorted({p.node for p in todo}):
            raw = self.client.node_cached(node_name)
            node = self._node(raw, now, self._dra_inventory(node_name))
            if node is None or not node.schedulable:
                raise GatewayConflict(
                    f"node {node_name} takes no new work (cordoned, not ready, tainted, interrupted or changing MIG)"
                )
            read[node_name] = (raw, node)
            on_node = self.client.pods_on(node_name)
            held: set[tuple[int, int | None]] = set()
            for pod in on_node:
                ours = labels_of(pod).get(MANAGED_BY) == SCHEDULER_NAME and _holder(pod, request.job, generation)
                if ours and not finished(pod):
                    held.update(
                        (d.gpu, d.mig_start) for d in parse_devices(annotations_of(pod).get(DEVICES_ANNOTATION, ""))
                    )
            needed: dict[str, int] = {}
            for placement in (p for p in todo if p.node == node_name):
                for device in placement.devices:
                    check_device(node, device, held, wanted)
                fabric = fabrics.get(placement.replica)
                for resource, count in {
                    **device_resources(placement.devices),
                    **(fabric.resources if fabric is not None else {}),
                }.items():
                    needed[resource] = needed.get(resource, 0) + count
            # A DRA node advertises no extended resources: what other claims hold is ResourceClaims.requests' check.
            if node_name not in (dra or {}):
                self._check_allocatable(node_name, raw, needed, request.job, on_node, generation=generation)
        return read

    def _shm_size_limit(self, node: tuple[Mapping[str, Any], NodeObservation], devices: Sequence[Device]) -> str | None:
        """``/dev/shm``'s size for ``devices`` on ``node``: a share of the memory its capacity reports per GPU."""
        raw, observed = node
        return shm_size_limit(
            node_memory=((raw.get("status") or {}).get("capacity") or {}).get("memory"),
            gpu_count=observed.gpu_count,
            model=observed.gpu_model,
            devices=devices,
            fraction=self.shm_fraction,
        )

    def _host_resources(
        self, request: BindRequest, node: tuple[Mapping[str, Any], NodeObservation], devices: Sequence[Device]
    ) -> HostResources:
        """The CPU and memory of ``devices``' replica on ``node``, its ``/dev/shm`` inside the memory
        (:mod:`scheduler.gateways.kube.host_resources`)."""
        raw, observed = node
        shm = quantity_bytes(self._shm_size_limit(node, devices))
        return replica_host_resources(
            cpu=request.cpu,
            host_memory_gib=request.host_memory_gib,
            model=observed.gpu_model,
            devices=devices,
            gpu_count=observed.gpu_count,
            allocatable=(raw.get("status") or {}).get("allocatable"),
            shm_bytes=shm,
            shm_fraction=self.shm_fraction,
            settings=self.host,
        )

    # -- the job's headless Service (scheduler.gateways.kube.rendezvous) -----------------------------------

    def _service_ensure(self, request: BindRequest, *, team: str) -> None:
        """The job's headless Service (idempotent). One of that name that is not this job's is a conflict."""
        labels = {MANAGED_BY: SCHEDULER_NAME, JOB_LABEL: request.job, **({TEAM_LABEL: team} if team else {})}
        selector = {MANAGED_BY: SCHEDULER_NAME, JOB_LABEL: request.job}
        manifest = service_manifest(request, selector=selector, labels=labels, port=self.rendezvous_port)
        if self.client.service_create(manifest):
            return
        job_object_existing(
            kind="Service",
            purpose="rendezvous",
            namespace=request.namespace,
            name=service_name(request.job),
            job=request.job,
            read=self.client.service_read,
        )

    def _service_remove(self, *, job: str, namespace: str) -> None:
        """Delete the job's Service once it never runs again; one that is not ours is left alone."""
        job_object_remove(
            kind="Service",
            purpose="rendezvous Service",
            namespace=namespace,
            name=service_name(job),
            job=job,
            read=self.client.service_read,
            delete=self.client.service_delete,
        )

    def _check_allocatable(
        self,
        node: str,
        raw: Mapping[str, Any],
        needed: Mapping[str, int],
        job: str,
        on_node: Sequence[Mapping[str, Any]],
        *,
        generation: int = 0,
    ) -> None:
        allocatable = (raw.get("status") or {}).get("allocatable")
        if not allocatable:
            return  # the node reports nothing yet: the device plugin's own admission decides
        used: dict[str, int] = {}
        for pod in on_node:
            if terminating(pod) or finished(pod) or not _holder(pod, job, generation):
                continue
            fabric_names = {EFA_RESOURCE, self.fabric.rdma_resource} - {""}
            for resource, count in {**gpu_requests(pod), **fabric_requests(pod, fabric_names)}.items():
                used[resource] = used.get(resource, 0) + count
        for resource, count in needed.items():
            offered = int_or_none(allocatable.get(resource)) or 0
            if used.get(resource, 0) + count > offered:
                raise GatewayConflict(
                    f"node {node} offers {offered} {resource}, {used.get(resource, 0)} in use; job {job} needs {count}"
                )

    def _undo(self, request: BindRequest, cause: Exception, *, generation: int = 0) -> None:
        """A gang never runs partly: delete every pod of the job, and its Service and report Secret (the next bind
        creates them again; left behind, a job cancelled before it had pods again would keep them), then let
        ``cause`` propagate. A move's (``generation`` above 0) deletes only its own generation's pods: the older
        ones serve on, with the Service and Secret they use."""
        logger.warning("job %s: binding failed (%s); removing its pods", request.job, cause)
        try:
            for pod in self.client.pods_ours(request.namespace, request.job, from_server=True):
                if generation and generation_of(pod) != generation:
                    continue
                # A pod bound moments ago may be running already: it stops within its own grace, never forced.
                # One never bound, or finished, holds nothing and goes at once.
                never_ran = node_of(pod) is None or finished(pod)
                self.client.pod_delete(pod, grace_s=0 if never_ran else None)
            self.claims.release(request.namespace, request.job, keep=lambda g: generation > 0 and g != generation)
            if generation:
                return
            self._service_remove(job=request.job, namespace=request.namespace)
            self.checkpoints.credential_remove(job=request.job, namespace=request.namespace)
        except GatewayError as exc:  # the next cycle's reconcile finds and removes what is left
            logger.error("job %s: could not remove its pods after a failed bind: %s", request.job, exc)

    # -- eviction --------------------------------------------------------------------------------------------

    def job_evict(self, *, job: str, namespace: str, grace_s: float, reason: str) -> None:
        self.job_preempt(job=job, namespace=namespace, grace_s=grace_s, reason=reason, by="")

    def job_preempt(self, *, job: str, namespace: str, grace_s: float, reason: str, by: str) -> None:
        """:meth:`job_evict` that names the job ``by`` it makes room for on the pods' Events ("": none).

        ``grace_s`` is a deadline, not an override: each pod keeps its own termination grace unless ``grace_s`` is
        shorter (a spot notice), :mod:`scheduler.gateways.kube.grace`. Finished pods hold nothing and go at once."""
        for pod in self.client.pods_ours(namespace, job):
            if terminating(pod):
                continue
            if finished(pod):
                self.client.pod_delete(pod, grace_s=0)
                continue
            self.client.pod_delete(pod, grace_s=grace_s)
            logger.info("job %s: deleted pod %s/%s (%s, deadline %ss)", job, namespace, name_of(pod), reason, grace_s)
            ref = Ref(namespace, name_of(pod), uid_of(pod))
            self._record(stopped(ref, node=node_of(pod), reason=reason, by=by))
        self.claims.release(namespace, job)  # the pods gone at once free their devices now (dra_claims)
        if reason in FINAL_EVICTIONS:
            self.checkpoints.credential_remove(job=job, namespace=namespace)
            # Kept on every other reason: the job comes back under the same names.
            self._service_remove(job=job, namespace=namespace)

    def job_release(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is complete: delete the job's pods of every generation older than ``generation`` as an eviction
        deletes them (their own termination grace unless ``grace_s`` is shorter; the kubelet sends SIGTERM, so
        a server drains its connections). The job's Service and report Secret stay: the new pods use them."""
        self._generations_stop(
            job=job, namespace=namespace, keep=lambda g: g >= generation, reason="moved", grace_s=grace_s
        )

    def job_move_abandon(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is given up: delete the job's pods of ``generation`` and newer; the older ones serve on."""
        self._generations_stop(
            job=job, namespace=namespace, keep=lambda g: g < generation, reason="move-abandoned", grace_s=grace_s
        )

    def _generations_stop(
        self, *, job: str, namespace: str, keep: Callable[[int], bool], reason: str, grace_s: float
    ) -> None:
        for pod in self.client.pods_ours(namespace, job):
            if keep(generation_of(pod)) or terminating(pod):
                continue
            if finished(pod) or node_of(pod) is None:
                self.client.pod_delete(pod, grace_s=0)  # holds nothing: goes at once
                continue
            self.client.pod_delete(pod, grace_s=grace_s)
            logger.info("job %s: deleted pod %s/%s (%s)", job, namespace, name_of(pod), reason)
            self._record(stopped(Ref(namespace, name_of(pod), uid_of(pod)), node=node_of(pod), reason=reason))
        self.claims.release(namespace, job, keep=keep)

    # -- Events (scheduler.gateways.kube.events) ---------------------------------------------------------------

    def jobs_waiting(self, *, waiting: Sequence[JobWaiting], limit: int = 50) -> None:
        """:class:`~scheduler.gateways.protocol.RecordingGateway`: record why jobs wait, on the pod each job's first
        replica will be (it does not exist yet). Only an explanation whose kind changed is written, at most once per
        job per :data:`~scheduler.gateways.kube.events.WAITING_INTERVAL_S` and ``limit`` per call: the rest wait
        for a later call."""
        now = self.clock()
        self.wait_notes.keep_only({w.job for w in waiting})
        written = 0
        for job in waiting:
            if written >= limit:
                break
            if self.wait_notes.due(job.job, job.kind or job.reason, at=now):
                self._record(waiting_event(Ref(job.namespace, pod_name(job.job, 0)), job.reason))
                written += 1

    def _record(self, occurrence: Occurrence) -> None:
        """Write one Event, best effort: a failure is logged and never fails the bind or eviction it records."""
        write = self.event_series.record(occurrence, at=self.clock(), instance=self.event_instance)
        try:
            if not self.client.event_write(write):  # the series' Event is gone (expired): write it anew
                self.event_series.forget(occurrence)
                write = self.event_series.record(occurrence, at=self.clock(), instance=self.event_instance)
                self.client.event_write(write)
        except GatewayError as exc:
            logger.warning("could not record %s on %s/%s: %s", occurrence.reason, write.namespace, write.name, exc)

    # -- logs ------------------------------------------------------------------------------------------------

    def job_logs(
        self, *, job: str, namespace: str, replica: int, tail_lines: int, limit_bytes: int = LOG_LIMIT_BYTES
    ) -> ReplicaLog:
        """The job container's log of the replica's pod (the fabric daemon beside it has its own, not shown). A
        job that has been moved has its replica's pod under its generation's name (``mc-<job>-g<n>-<r>``): when the
        first pod's is gone, the newest generation's is read."""
        limit = max(1, min(limit_bytes, LOG_LIMIT_BYTES))
        name = pod_name(job, replica)
        try:
            text = self._log(namespace, name, tail_lines, limit)
            if text is None:
                generations = [
                    generation_of(pod)
                    for pod in self.client.pods_ours(namespace, job, from_server=True)  # the web tier keeps no cache
                    if labels_of(pod).get(REPLICA_LABEL) == str(replica) and generation_of(pod) > 0
                ]
                if generations:
                    name = pod_name(job, replica, max(generations))
                    text = self._log(namespace, name, tail_lines, limit)
        except GatewayConflict as exc:  # 400: the container has nothing to give yet
            return ReplicaLog(replica=replica, text="", source=LogSource.KUBERNETES, note=str(exc))
        if text is None:
            note = f"pod {namespace}/{name} is gone: its log went with it"
            return ReplicaLog(replica=replica, text="", source=LogSource.KUBERNETES, note=note)
        # The API server stops at the limit, mid-line perhaps: that many bytes means there was more.
        truncated = len(text.encode("utf-8")) >= limit
        return ReplicaLog(replica=replica, text=text, source=LogSource.KUBERNETES, truncated=truncated)

    def _log(self, namespace: str, name: str, tail_lines: int, limit: int) -> str | None:
        return self.client.pod_log(
            namespace, name, container=MAIN_CONTAINER, tail_lines=max(tail_lines, 1), limit_bytes=limit
        )

    # -- an admin's cordon -----------------------------------------------------------------------------------

    def node_cordon(self, *, node: str, cordoned: bool) -> None:
        """``kubectl cordon`` / ``uncordon`` (kubectl's drain.RunCordonOrUncordon: a patch of
        ``spec.unschedulable``), with Microcosm's mark so that only its own cordon is ever lifted. A MIG
        reconfiguration still running when the admin's cordon ends takes the cordon over (``CORDONED_BY_US``):
        the flow uncordons the node when the new layout is live."""
        raw = self.client.node_read(node)
        annotations = annotations_of(raw)
        closed = bool((raw.get("spec") or {}).get("unschedulable"))
        ours = CORDONED_BY_ADMIN in annotations
        if cordoned:
            if not closed:
                self.client.node_patch(
                    node, {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_BY_ADMIN: "true"}}}
                )
            return
        if not ours:
            return
        if any(key in annotations for key in FLOW_ANNOTATIONS):
            self.client.node_patch(
                node, {"metadata": {"annotations": {CORDONED_BY_ADMIN: None, CORDONED_BY_US: "true"}}}
            )
            return
        self.client.node_patch(
            node, {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_BY_ADMIN: None}}}
        )

    # -- MIG (the flow itself: scheduler.gateways.kube.mig_flow) -------------------------------------------

    def node_reconfigure(self, *, node: str, layouts: tuple[MigLayout, ...]) -> None:
        """Carry out the engine's layout for ``node``: on a DRA node whose driver creates MIG devices on allocation
        (dynamic MIG, :mod:`scheduler.gateways.kube.dra_mig`) by keeping the layout on the node, which the claims
        of the jobs placed in it then allocate, with no relabel and no drain; elsewhere (A100s, static MIG, device
        plugin) through MIG Manager's relabel flow."""
        found = self.dra_nodes().get(node) if self.dra else None
        if not dynamic(found):
            self.mig.apply(node=node, layouts=layouts)
            return
        assert found is not None
        missing = unpublished(found, layouts)
        if missing:
            raise GatewayConflict(
                f"node {node}: its DRA driver publishes no partition for {', '.join(missing)}; the next cycle re-plans"
            )
        value = layout_annotation(layouts)
        if annotations_of(self.client.node_cached(node)).get(LAYOUT_ANNOTATION) != value:  # applied twice: one write
            self.client.node_patch(node, {"metadata": {"annotations": {LAYOUT_ANNOTATION: value}}})
            logger.info("node %s: dynamic MIG layout %s (claims create the instances)", node, value)

    def mig_watch(self) -> tuple[MigEvent, ...]:
        """Move every node's MIG flow one step (:meth:`MigFlow.watch`); call it periodically."""
        return self.mig.watch()

    def maintain(self) -> tuple[MaintenanceEvent, ...]:
        """:class:`~scheduler.gateways.protocol.MaintainedGateway`: one step of every node's MIG flow."""
        events = tuple(MaintenanceEvent(node=e.node, step=str(e.step), detail=e.detail) for e in self.mig_watch())
        self.claims.sweep()
        return events

    # -- utilization -----------------------------------------------------------------------------------------

    def utilization(self) -> tuple[UtilizationReading, ...]:
        """Engine activity per node from Prometheus (DCGM exporter) since the previous call; () without
        ``PROMETHEUS_URL``. MIG instances weigh their compute share of the GPU (compute slices / 7)."""
        if self.prometheus is None:
            return ()
        now = self.clock()
        window = 300.0 if self._utilization_at is None else min(max(now - self._utilization_at, 60.0), 3600.0)
        self._utilization_at = now
        samples = self.prometheus.gpu_samples(int(window))
        return utilization_readings(samples, self.observe())


def gateway_from_settings() -> KubeGateway:
    """The gateway ``settings.CLUSTER_BACKEND = "kubernetes"`` asks for (:mod:`scheduler.gateways`)."""
    from django.conf import settings

    kube = settings.KUBERNETES
    return KubeGateway(
        topology_labels=kube["topology_labels"],
        gpu_operator_namespace=kube["gpu_operator_namespace"],
        mig_config_map=kube["mig_config_map"],
        mig_config_timeout_s=kube["mig_config_timeout_s"],
        mig_config_propagation_s=kube["mig_config_propagation_s"],
        mig_with_reboot=kube["mig_with_reboot"],
        # The loop's eviction grace (SCHEDULER_EVICT_GRACE_S) is also the pods' termination grace period.
        eviction_grace_s=math.ceil(settings.SCHEDULER["evict_grace_s"]),
        default_image=kube["default_image"],
        prometheus_url=settings.PROMETHEUS_URL,
        checkpoint_storage_class=kube["checkpoint_storage_class"],
        checkpoint_size=kube["checkpoint_size"],
        report_url=kube["report_url"],
        checkpoint_root=kube["checkpoint_root"],
        fabric=fabric_settings_from_settings(),
        rendezvous_port=kube["rendezvous_port"],
        shm_fraction=kube["shm_fraction"],
        host=HostSettings(cpu_per_gpu=kube["cpu_per_gpu"], host_memory_gib_per_gpu=kube["host_memory_gib_per_gpu"]),
        namespace_create=kube["namespace_create"],
        pod_security_level=kube["pod_security_level"],
        pod_security_team_levels=kube["pod_security_team_levels"],
        shutdown_grace_s=kube["node_shutdown_grace_s"],
        # A worker reads nodes and pods from watch caches; a cycle 10 s apart needs no read-after-read consistency.
        consistent_reads=False,
        cache_sync_timeout_s=kube["cache_sync_timeout_s"],
        node_requests=kube["node_requests"],
        dra=kube["dra"],
        dra_fabric_class=kube["dra_fabric_class"],
    )


def fabric_settings_from_settings() -> FabricSettings:
    """What ``settings.KUBERNETES`` says about the cluster's fabrics (docs/deploy.md, Fabrics)."""
    from django.conf import settings

    kube = settings.KUBERNETES
    return FabricSettings(
        rdma_resource=kube["rdma_resource"],
        placement_group_label=kube["placement_group_label"],
        nccl_ib_hca=kube["nccl_ib_hca"],
        tcpx_daemon_image=kube["tcpx_daemon_image"],
        tcpxo_daemon_image=kube["tcpxo_daemon_image"],
        gke_networks=tuple(kube["gke_networks"]),
    )


def _holder(pod: Mapping[str, Any], job: str, generation: int) -> bool:
    """Does ``pod`` hold devices a start of ``job``'s ``generation`` must leave alone? Another job's pods do;
    for a move (``generation`` above 0), so do the job's own pods of other generations, which keep serving."""
    labels = labels_of(pod)
    if labels.get(JOB_LABEL) != job:
        return True
    return generation > 0 and generation_of(pod) != generation
