"""On-demand capacity that can be asked for: what the engine is told of the cloud's autoscaled pools and the node
requests in flight, and what it decides about them (docs/scheduling-rules.md §9, On-demand capacity for peaks).

A cluster's reserved and spot nodes exist; on-demand capacity for peaks is *asked for* through the autoscaler the
cloud runs (a Cluster Autoscaler ``ProvisioningRequest``, Karpenter's NodePools) and arrives minutes later, or not
at all (a stockout). The engine sees that capacity as :class:`Offering` s (a pool's node type, its price, its ceiling
and how long its nodes take to arrive) and :class:`NodeRequest` s (nodes asked for and not arrived yet), and
answers with :class:`Provision` (ask for nodes for one waiting job, all or nothing), :class:`Withdraw` (give up a
request nobody needs any more) and :class:`Release` (give back a node that has stood empty). The loop, the
simulator and the gateways carry them out; a request's nodes, once they arrive, are ordinary on-demand
:class:`~scheduler.core.model.snapshot.Node` s whose ``pool`` names the pool.

Everything here is immutable plain data, as the rest of the snapshot and the plan are.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model.vocabulary import Fabric, Interconnect


@dataclass(frozen=True, slots=True)
class Offering:
    """A node type one autoscaled pool can add on request (a Karpenter NodePool's instance type, a Cluster
    Autoscaler node group behind a ProvisioningRequest class)."""

    pool: str  # the pool's name, unique in the snapshot; a node the pool added carries it in ``Node.pool``
    gpu_model: str  # a catalog model name (scheduler.core.gpus.catalog)
    gpu_count: int  # GPUs per node
    price_per_gpu_hour: float
    arrival_s: float  # expected seconds from a request to a node ready for work (observed, or a documented default)
    max_nodes: int  # the pool's ceiling: its nodes plus the nodes requested from it never exceed this
    interconnect: Interconnect = Interconnect.NVSWITCH
    fabric: Fabric = Fabric.TCP  # the network a gang spanning the pool's nodes talks over
    # Nodes of one request share one placement group (one leaf) when the pool can promise it: a gang's request
    # asks for it, and the engine counts the nodes as one leaf.
    placement_group: bool = False


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """Nodes asked of a pool for one job and not arrived yet."""

    id: str
    job: str  # the waiting job the nodes were asked for
    pool: str
    nodes: int
    requested_at: float
    arrives_at: float  # the estimate: requested_at + the offering's arrival_s when it was asked


@dataclass(frozen=True, slots=True)
class Provisioning:
    """The snapshot's part about on-demand capacity that can be asked for. Empty (the default): no pool can grow,
    and the engine plans exactly as it would without this module."""

    offerings: tuple[Offering, ...] = ()
    requests: tuple[NodeRequest, ...] = ()  # in flight
    # (job, when) of requests that failed or timed out: the job asks again only ``Policy.provision_retry_s`` later.
    failed: tuple[tuple[str, float], ...] = ()
    # (node, since when it has held no work) of the pools' nodes that are empty: released after Policy.release_idle_s.
    idle_since: tuple[tuple[str, float], ...] = ()
    # GPU-hours of on-demand node time left today, per team ("" the whole cluster); a missing key: no budget set.
    budget_gpu_hours: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Provision:
    """Ask pool ``pool`` for ``nodes`` nodes for waiting ``job``: all of them or none (a gang needs every node at
    once), in one placement group when ``placement_group`` is set."""

    job: str
    pool: str
    nodes: int
    gpu_model: str
    gpus_per_node: int
    placement_group: bool
    gpu_hours: float  # what the request is expected to cost the budget (nodes × GPUs × the job's expected hours)
    arrives_at: float  # the engine's estimate, which the job's ETA reads
    team: str = ""  # the job's team, whose budget the request is charged to


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Give up request ``request``: its job no longer waits for it (bound elsewhere, gone)."""

    request: str
    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Release:
    """Give autoscaled node ``node`` back to its pool: it has held no work for ``Policy.release_idle_s`` and nothing
    binds to it this cycle. The node is cordoned first so nothing new lands on it, then the autoscaler removes it."""

    node: str
    pool: str
    idle_since: float
