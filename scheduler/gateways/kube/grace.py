"""How long a pod is given to stop when Microcosm deletes or evicts it: its own grace, unless a deadline is shorter.

A pod's ``spec.terminationGracePeriodSeconds`` is its owner's promise of how long it needs to exit cleanly (save a
checkpoint, drain connections). Sending no grace lets it apply: the API server uses the pod's own period when the
DeleteOptions carry none, and 0 for a pod never bound or already finished (kubernetes pkg/registry/core/pod/
strategy.go ``CheckGracefulDelete``); an eviction passes its DeleteOptions to that same delete (pkg/registry/core/
pod/storage/eviction.go). ``kubectl drain`` does the same by default (``--grace-period=-1``: "the default value
specified in the pod will be used", staging/src/k8s.io/kubectl/pkg/drain/drain.go). Microcosm overrides it only
when a deadline demands less (a spot notice whose node goes before the pod's own grace would end).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# The API's default when a pod names none (kubernetes pkg/apis/core/v1/defaults.go SetDefaults_PodSpec).
DEFAULT_GRACE_S = 30


def own_grace(pod: Mapping[str, Any]) -> int:
    """The pod's own termination grace period, in seconds."""
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_S if value is None else int(value)


def grace_to_send(pod: Mapping[str, Any], deadline_s: float | None) -> int | None:
    """The ``gracePeriodSeconds`` to send: None (the pod's own applies) unless ``deadline_s`` is shorter."""
    if deadline_s is None:
        return None
    deadline = math.ceil(max(deadline_s, 0))
    return deadline if deadline < own_grace(pod) else None
