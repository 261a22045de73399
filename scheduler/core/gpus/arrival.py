"""The provisioning model: how long an on-demand GPU node takes from a node request to a node ready for work, and
how often a request fails for want of capacity (a stockout). Documented defaults, each number with its source;
``docs/benchmarks/cost.md`` (The provisioning model) has the same table. Pure data and arithmetic, no Django.

**Arrival.** A requested GPU node is ready for work after (1) the cloud launches the instance and its kubelet
registers the node and (2) the GPU stack (driver, container toolkit, device plugin) is installed and the GPUs are
allocatable. The model draws the delay from a triangular distribution (``low_s``, ``mode_s``, ``high_s``):

- ``low_s`` 260 s = 80 s from instance launch to node registration (Karpenter maintainers' measurement,
  aws/karpenter-provider-aws#6128: "~70 seconds vs ~80 seconds from instance launch to node registration") + 180 s
  for the GPU stack at its fastest (NVIDIA maintainers: "it takes about 3-4minutes to setup/load drivers and
  toolkit", NVIDIA/gpu-operator#413; "around 3-5 minutes for the GPU stack to be ready", NVIDIA/gpu-operator#707).
- ``mode_s`` 420 s = 180 s to a Ready node (2 min 25 s to start, join and take pods on a general-purpose
  instance, awslabs/amazon-eks-ami#417; "GPU instance types often take much longer to boot within EC2",
  awslabs/amazon-eks-ami#1099 — no figure given, so 3 min is an assumption) + 240 s for the GPU stack (the middle of
  NVIDIA's 3–5 minutes).
- ``high_s`` 900 s: the Cluster Autoscaler's own bound, "When a machine with GPU becomes ready it can take up to
  15 minutes before it reports that GPU is allocatable" (kubernetes/autoscaler
  cluster-autoscaler/utils/gpu/gpu.go), the same as its ``max-node-provision-time`` default of 15 min (AKS's
  autoscaler profile: "The default is '15m'", learn.microsoft.com ManagedClusterAutoScalerProfile).

The expected arrival is the distribution's mean, (260 + 420 + 900) / 3 ≈ 527 s. No public source separates A100,
H100 and H200 nodes, or AWS, GCP and Azure: every (class, cloud) takes the same default, and a cloud with a
measured history (the loop's observed arrivals) overrides it.

**Stockouts.** No cloud publishes how often an on-demand GPU request fails for want of capacity. What is public
is qualitative: AWS "can be … unable to accommodate instance requests that are targeted to a specific Availability
Zone" (InsufficientInstanceCapacity, AWS EC2 forum advice quoted at shlomoswidler.com); on-demand is "Not
guaranteed for large GPU types (p4d, p5, p5e …)" and "Available immediately for common types" (awslabs/agent-plugins,
HyperPod capacity planning); SkyPilot's auto-failover docs show an A100 request failing zone after zone with
``ZONE_RESOURCE_POOL_EXHAUSTED`` (docs.skypilot.co, Auto-provisioning GPUs); GKE's queued provisioning exists because
large GPU requests must wait for capacity (cloud.google.com, Dynamic Workload Scheduler). So the per-node stockout
probabilities below are a **stated assumption**, ordered by scarcity (newer, larger parts are harder to get): A100
5 %, H100 10 %, H200 15 % per node asked. A request is all or nothing (a gang needs every node; a
``ProvisioningRequest`` of class ``best-effort-atomic-scale-up``), so a request of ``n`` nodes fails with
probability 1 − (1 − p)ⁿ. A failed request is known to have failed after ``FAIL_AFTER_S`` = 900 s, the Cluster
Autoscaler's ``max-node-provision-time`` default (above), after which it gives up on nodes that have not come.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME

ANY_CLOUD = "*"
CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")
# The Cluster Autoscaler's max-node-provision-time default (module doc): a request with no node by then has failed.
FAIL_AFTER_S = 900.0


@dataclass(frozen=True, slots=True)
class ArrivalModel:
    """One (GPU class, cloud)'s provisioning: the arrival delay's triangular distribution and the per-node stockout
    probability (module doc)."""

    gpu_class: str
    cloud: str
    low_s: float
    mode_s: float
    high_s: float
    stockout_per_node: float
    fail_after_s: float = FAIL_AFTER_S

    def __post_init__(self) -> None:
        if not 0 < self.low_s <= self.mode_s <= self.high_s or not math.isfinite(self.high_s):
            raise ValueError(
                f"arrival delays must satisfy 0 < low_s <= mode_s <= high_s, got {self.low_s!r}, {self.mode_s!r}, "
                f"{self.high_s!r}"
            )
        if not 0 <= self.stockout_per_node < 1:
            raise ValueError(f"stockout_per_node must be in [0, 1), got {self.stockout_per_node!r}")
        if not self.fail_after_s > 0:
            raise ValueError(f"fail_after_s must be a positive number of seconds, got {self.fail_after_s!r}")

    @property
    def expected_s(self) -> float:
        """The mean arrival delay (the triangular distribution's mean)."""
        return (self.low_s + self.mode_s + self.high_s) / 3.0

    def stockout(self, nodes: int) -> float:
        """The probability that an all-or-nothing request of ``nodes`` nodes fails."""
        return 1.0 - (1.0 - self.stockout_per_node) ** max(0, nodes)

    def draw(self, rng: random.Random, nodes: int) -> float | None:
        """One request's fate: seconds until its nodes are ready, or None when it stocks out (it is known to have
        failed ``fail_after_s`` after it was made). Two draws from ``rng``, whatever the outcome, so a seeded run's
        later draws do not depend on earlier outcomes."""
        failed = rng.random() < self.stockout(nodes)
        delay = rng.triangular(self.low_s, self.high_s, self.mode_s)
        return None if failed else delay


# Sources for every number: module doc. One default for every cloud: no public source separates them.
_LOW_S, _MODE_S, _HIGH_S = 260.0, 420.0, 900.0
STOCKOUT_PER_NODE: dict[str, float] = {"A100": 0.05, "H100": 0.10, "H200": 0.15}  # a stated assumption (module doc)

MODELS: dict[tuple[str, str], ArrivalModel] = {
    (gpu_class, ANY_CLOUD): ArrivalModel(gpu_class, ANY_CLOUD, _LOW_S, _MODE_S, _HIGH_S, stockout)
    for gpu_class, stockout in STOCKOUT_PER_NODE.items()
}


def arrival_model(gpu_model: str, cloud: str = ANY_CLOUD) -> ArrivalModel:
    """The provisioning model of ``gpu_model`` (a catalog model name) on ``cloud``: the cloud's own entry where one
    exists, else the class's default. A model the catalog does not know is an error naming the known ones."""
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    if spec is None:
        raise KeyError(f"unknown GPU model {gpu_model!r}; known: {', '.join(GPU_MODEL_BY_NAME)}")
    found = MODELS.get((spec.gpu_class, cloud)) or MODELS.get((spec.gpu_class, ANY_CLOUD))
    if found is None:
        raise KeyError(f"no provisioning model for GPU class {spec.gpu_class!r}; add one to MODELS")
    return found


def default_arrival_s(gpu_model: str, cloud: str = ANY_CLOUD) -> float:
    """Expected seconds from a node request to a ready ``gpu_model`` node: the documented default (module doc)."""
    return arrival_model(gpu_model, cloud).expected_s


def stockout_probability(gpu_model: str, nodes: int = 1, cloud: str = ANY_CLOUD) -> float:
    """The probability that an all-or-nothing request of ``nodes`` ``gpu_model`` nodes fails (module doc)."""
    return arrival_model(gpu_model, cloud).stockout(nodes)
