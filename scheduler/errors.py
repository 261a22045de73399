"""Typed errors of the scheduler's services; the edge turns them into 400/409 with the same message."""

from __future__ import annotations


class InventoryError(ValueError):
    """A fleet inventory write that cannot be made as asked; the message says what to change."""


class GatewayError(Exception):
    """A cluster gateway could not do what it was asked; the message names the operation and the object.

    Base class of every error a :class:`scheduler.gateways.protocol.ClusterGateway` raises on purpose. Anything else a
    gateway raises is a bug in the gateway.
    """


class GatewayRetryable(GatewayError):
    """A transient failure (timeout, connection reset, HTTP 429/5xx, optimistic-concurrency 409).

    The operation changed nothing it could not finish or undo, so calling it again is safe; the caller
    retries with backoff and, once its attempts are spent, leaves the repair to the next cycle.
    """


class GatewayConflict(GatewayError):
    """The cluster contradicts the request: the node is gone or cordoned, a device is held by another job's
    pod, the job's pods are bound elsewhere, the MIG layout is not valid for the GPU.

    Retrying the same request will fail the same way; the caller re-plans (requeues the job) instead.
    """


class GatewayNotConfigured(GatewayError):
    """``CLUSTER_BACKEND`` names a gateway that cannot be built here (its module or its credentials are
    missing); the message says what to install or set."""


class LockNotAcquired(Exception):
    """Another scheduling cycle holds the single-flight lock; this attempt did nothing."""


class FencingError(Exception):
    """A cycle tried to record decisions after a newer cycle took the lock (its lease expired mid-cycle).

    Nothing of the stale cycle was written: its transaction was rolled back.
    """
