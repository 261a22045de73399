"""Which node label names a node's autoscaled pool: the vocabulary that the pools' model (:mod:`scheduler.autoscaled`,
checking a pool's node selector) and the Kubernetes gateway (:mod:`scheduler.gateways.kube`, reading a node's pool)
share, kept apart from both so that a model depends on no gateway (tests/test_boundaries.py).

Each autoscaler labels the nodes it adds with the name of the pool it added them to: Karpenter its NodePool
(kubernetes-sigs/karpenter ``pkg/apis/v1/labels.go``, ``NodePoolLabelKey``), GKE its node pool, EKS its managed node
group, AKS its agent pool. A node's pool is the value of the first of those labels it carries (:func:`pool_of`), and
an autoscaled pool in Microcosm is named after it (docs/deploy.md, On-demand capacity through the cloud's
autoscaler). Pure data: no Django, no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping

# In the order pool_of reads them.
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
)
KARPENTER_POOL_LABEL = POOL_LABELS[0]


def pool_of(labels: Mapping[str, str]) -> str:
    """The pool a node belongs to: the value of the first of :data:`POOL_LABELS` it carries ("" none)."""
    return next((labels[key] for key in POOL_LABELS if labels.get(key)), "")
