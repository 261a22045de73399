"""What Microcosm records on the cluster: ``events.k8s.io/v1`` Events, as kube-scheduler writes them.

kube-scheduler records through client-go's ``tools/events`` recorder, which writes ``events.k8s.io/v1`` Events
whenever the API server serves that group (kubernetes staging/src/k8s.io/client-go/tools/events/
event_broadcaster.go, ``NewEventBroadcasterAdapterWithContext``); ``kubectl events`` and ``kubectl describe`` show
them. Microcosm writes the same kind of Event with ``reportingController: microcosm``:

- ``Scheduled`` on each pod it binds, with kube-scheduler's own words (kubernetes pkg/scheduler/schedule_one.go:
  ``Eventf(assumed, nil, Normal, "Scheduled", "Binding", "Successfully assigned %v/%v to %v", ...)``);
- ``Preempted`` on each pod it stops for other work (kubernetes pkg/scheduler/framework/preemption/
  preemption.go: ``Eventf(victim, preemptor, Normal, "Preempted", "Preempting", "Preempted by pod %v on node
  %v", ...)``), naming the preempting job where the loop knows it; every other eviction carries its own reason
  (:data:`EVICTION_REASONS`);
- ``Waiting`` for a job that waits: Microcosm creates pods only when it binds them, so the Event regards the pod
  the job's first replica will be (``mc-<job>-0``, not there yet): ``kubectl events -n <namespace> --for
  pod/mc-<job>-0`` shows it. It is written when the explanation's kind changes, not every cycle
  (:class:`WaitNotes`).

Repeats are a series, as client-go's broadcaster makes them (event_broadcaster.go ``recordToSink``): an Event
isomorphic to one written less than :data:`FINISH_S` ago (same type, reason, action, controller, instance,
regarding and related object) is not written again: the first one's ``series`` counts it, patched in place (with
the latest note, where client-go keeps the first: a waiting job's Event shows its current explanation).

Pure: builds bodies and decides create or patch; :class:`~scheduler.gateways.kube.client.KubeClient` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

REPORTING_CONTROLLER = "microcosm"
API_VERSION = "events.k8s.io/v1"

NORMAL = "Normal"
SCHEDULED = "Scheduled"  # kube-scheduler's reason and action for a binding (module doc)
BINDING = "Binding"
PREEMPTED = "Preempted"
PREEMPTING = "Preempting"
WAITING = "Waiting"  # the portal's word for a pending job's state
SCHEDULING = "Scheduling"
STOPPING = "Stopping"

# The Event reason of each eviction reason (scheduler.core.model.vocabulary.EvictionReason) that stops a pod still
# running; an unknown one is "Evicted". Preemption by other work reads as kube-scheduler's own "Preempted".
EVICTION_REASONS: Mapping[str, str] = {
    "priority": PREEMPTED,
    "production": PREEMPTED,
    "reclaim": PREEMPTED,
    "backfill": PREEMPTED,
    "spot-reclaim": "SpotInterruption",
    "node-drain": "NodeDrain",
    "repartition": "MigRepartition",
    "node-lost": "NodeLost",
    "admin": "Requeued",
    "app-failure": "Restarting",
    "bind-refused": "BindRefused",
    "cancelled": "Cancelled",
    "failed": "Failed",
    "completed": "Completed",
    "unknown-job": "UnknownJob",
    "moved": "Moved",
    "move-abandoned": "MoveAbandoned",
}
EVICTION_NOTES: Mapping[str, str] = {
    "priority": "higher-priority work of the same team",
    "production": "production inference",
    "reclaim": "the team whose guarantee it borrowed",
    "backfill": "the reservation it backfilled",
    "spot-reclaim": "the node's spot interruption notice",
    "node-drain": "a platform admin's drain of the node",
    "repartition": "a MIG reconfiguration on its GPUs",
    "node-lost": "its node being lost",
    "admin": "a platform admin's requeue",
    "app-failure": "a restart after its own failure",
    "bind-refused": "the cluster refusing part of its gang",
    "cancelled": "its cancellation",
    "moved": "its job's move to its right-sized capacity (the new pods are ready)",
    "move-abandoned": "its job's move being given up (the old pods serve on)",
}

# client-go's broadcaster ends a series this long after its last occurrence (event_broadcaster.go finishTime).
FINISH_S = 6 * 60.0
# A waiting job's Event is written at most this often, whatever its explanation does in between.
WAITING_INTERVAL_S = 5 * 60.0


@dataclass(frozen=True, slots=True)
class Ref:
    """An ``ObjectReference`` to a pod (``uid`` empty for a pod that does not exist yet)."""

    namespace: str
    name: str
    uid: str = ""
    kind: str = "Pod"

    def as_json(self) -> dict[str, str]:
        ref = {"apiVersion": "v1", "kind": self.kind, "namespace": self.namespace, "name": self.name}
        return {**ref, "uid": self.uid} if self.uid else ref


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One thing to record: what it regards, why, and the human note (at most 1 kB: the API's limit)."""

    regarding: Ref
    reason: str
    action: str
    note: str
    type: str = NORMAL
    related: Ref | None = None

    def key(self) -> tuple[Any, ...]:
        """client-go's ``getKey``: occurrences with equal keys are one series (the note is not part of it)."""
        return (self.type, self.action, self.reason, self.regarding, self.related)


@dataclass(frozen=True, slots=True)
class Write:
    """What to send: a new Event (``patch`` False, ``body`` the whole Event) or its series (``patch`` True)."""

    namespace: str
    name: str
    body: dict[str, Any]
    patch: bool = False


def micro_time(at: float) -> str:
    """``metav1.MicroTime`` as the API writes it (RFC 3339, microseconds, UTC)."""
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(occurrence: Occurrence, *, at: float, instance: str, stamp_ns: int | None = None) -> dict[str, Any]:
    """A new ``events.k8s.io/v1`` Event, named as client-go names it (``<regarding>.<unix nanoseconds, hex>``,
    tools/events/event_recorder.go ``makeEvent``; ``stamp_ns`` instead of ``at`` when given), in the regarded
    object's namespace."""
    ref = occurrence.regarding
    stamp = int(at * 1e9) if stamp_ns is None else stamp_ns
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Event",
        "metadata": {"name": f"{ref.name}.{stamp:x}", "namespace": ref.namespace},
        "eventTime": micro_time(at),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": occurrence.action,
        "reason": occurrence.reason,
        "regarding": ref.as_json(),
        "note": occurrence.note[:1024],
        "type": occurrence.type,
    }
    if occurrence.related is not None:
        body["related"] = occurrence.related.as_json()
    return body


@dataclass
class Series:
    """Repeats of isomorphic occurrences (module doc): the Events written recently, by :meth:`Occurrence.key`."""

    finish_s: float = FINISH_S
    _written: dict[tuple[Any, ...], tuple[dict[str, Any], int, float]] = field(default_factory=dict)
    _stamp_ns: int = 0  # the last name stamp given: names stay unique when the clock has not moved

    def record(self, occurrence: Occurrence, *, at: float, instance: str) -> Write:
        """The write for ``occurrence`` at ``at``: a new Event, or a patch of the series of the one it repeats."""
        self._finish(at)
        key = occurrence.key()
        found = self._written.get(key)
        if found is None:
            self._stamp_ns = max(int(at * 1e9), self._stamp_ns + 1)
            body = event_body(occurrence, at=at, instance=instance, stamp_ns=self._stamp_ns)
            self._written[key] = (body, 1, at)
            meta = body["metadata"]
            return Write(namespace=meta["namespace"], name=meta["name"], body=body)
        body, count, _last = found
        count += 1
        patch: dict[str, Any] = {"series": {"count": count, "lastObservedTime": micro_time(at)}}
        note = occurrence.note[:1024]
        if note != body["note"]:
            # client-go keeps the first note; a waiting job's explanation is what its Event is for, so the
            # series carries the latest one.
            body = {**body, "note": note}
            patch["note"] = note
        self._written[key] = (body, count, at)
        meta = body["metadata"]
        return Write(namespace=meta["namespace"], name=meta["name"], body=patch, patch=True)

    def forget(self, occurrence: Occurrence) -> None:
        """The Event of ``occurrence`` is gone (a patch found none): the next one is written anew."""
        self._written.pop(occurrence.key(), None)

    def _finish(self, now: float) -> None:
        # event_broadcaster.go finishSeries: a series quiet for finishTime is dropped from the cache.
        for key in [k for k, (_b, _c, last) in self._written.items() if now - last > self.finish_s]:
            del self._written[key]


@dataclass
class WaitNotes:
    """Which waiting explanations are worth an Event: one whose kind (``capacity``, ``quota``, … — the text
    changes every cycle with the queue position) differs from the last one written for the job, at most once per
    ``interval_s`` per job. Jobs no longer waiting are forgotten."""

    interval_s: float = WAITING_INTERVAL_S
    _last: dict[str, tuple[str, float]] = field(default_factory=dict)

    def due(self, job: str, kind: str, *, at: float) -> bool:
        last = self._last.get(job)
        if last is not None and (last[0] == kind or at - last[1] < self.interval_s):
            return False
        self._last[job] = (kind, at)
        return True

    def keep_only(self, jobs: set[str]) -> None:
        for job in set(self._last) - jobs:
            del self._last[job]


def scheduled(pod: Ref, node: str) -> Occurrence:
    return Occurrence(
        regarding=pod,
        reason=SCHEDULED,
        action=BINDING,
        note=f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
    )


def stopped(pod: Ref, *, node: str | None, reason: str, by: str = "", by_pod: Ref | None = None) -> Occurrence:
    """The Event of an eviction of ``pod`` for ``reason``; ``by``: the job it makes room for, when known."""
    where = f" on node {node}" if node else ""
    if by:
        who = f"pod {by_pod.namespace}/{by_pod.name} (job {by})" if by_pod is not None else f"job {by}"
        note = f"Preempted by {who}{where}"
        return Occurrence(regarding=pod, reason=PREEMPTED, action=PREEMPTING, note=note, related=by_pod)
    event_reason = EVICTION_REASONS.get(reason, "Evicted")
    cause = EVICTION_NOTES.get(reason, reason)
    action = PREEMPTING if event_reason == PREEMPTED else STOPPING
    return Occurrence(regarding=pod, reason=event_reason, action=action, note=f"Stopped{where} for {cause}")


def waiting(pod: Ref, explanation: str) -> Occurrence:
    return Occurrence(regarding=pod, reason=WAITING, action=SCHEDULING, note=explanation)
