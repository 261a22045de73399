"""One line per job event for the job page's timeline, in the portal's words.

A spot interruption reads as its story: "Checkpointed (step 1200)" → "Draining: spot notice on node X" → "Preempted
(spot interruption)" → "Requeued" → "Resumed from step 1200 on node Y". The words come from the events' details
(``jobs.services.checkpoint_record``, ``scheduler.loop.notice``, ``jobs.services.loop``), never from guesses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.models import JobEvent
from jobs.selectors.moves import placement_text
from jobs.selectors.preemptions import preempted_words
from scheduler.bridge.vocabulary import ADMIN_DRAIN
from scheduler.core.model.vocabulary import EventType, EvictionReason

# Stored reasons whose value predates the glossary's word (docs/glossary.md): a page shows the word.
_REASON_WORDS = {
    EvictionReason.SPOT_INTERRUPTION.value: "spot interruption",
    EvictionReason.RECONFIGURE.value: "reconfiguration",
}


def event_text(event: JobEvent) -> str:
    """What ``event`` says, in one short sentence without a final stop."""
    details: Mapping[str, Any] = event.details if isinstance(event.details, dict) else {}
    kind = str(event.type)
    if kind == EventType.CHECKPOINTED:
        step = details.get("step")
        return f"Checkpointed (step {step})" if isinstance(step, int) else "Checkpointed"
    if kind == EventType.DRAINING:
        node = details.get("node") or "unknown"
        if details.get("source") == ADMIN_DRAIN:
            return f"Draining: node {node} drained by an admin"
        return f"Draining: spot notice on node {node}"
    if kind == EventType.PREEMPTED:
        return preempted_text(details)
    if kind == EventType.BOUND:
        return _bound(details)
    if kind == EventType.MOVED:
        return _moved(details)
    if kind == EventType.NODE_REQUEST:
        return node_request_text(details)
    if kind in (EventType.PRIORITY_CHANGED, EventType.RANK_CHANGED):
        return f"{_words(kind)}: {details.get('old')} → {details.get('new')}"
    text = _words(kind)
    why = details.get("reason") or details.get("message")
    if details.get("exit_reason"):  # a restart after an application failure (jobs.services.restarts)
        return f"{text}: {why} — {details['exit_reason']} ({details.get('message', '')})"
    return f"{text}: {why}" if why else text


def preempted_text(details: Mapping[str, Any], words: str | None = None) -> str:
    """ "Preempted by a production inference job of team Vision (production)": the preempting job's team and
    kind (``words``, else the event's own details: :mod:`jobs.selectors.preemptions`), never its id, which the victim's
    viewers may not open; "another job" for an old event that stored the id alone."""
    reason = _reason(details.get("reason"))
    if not details.get("by"):
        return f"Preempted ({reason})"
    return f"Preempted by {words or preempted_words(details) or 'another job'} ({reason})"


def _bound(details: Mapping[str, Any]) -> str:
    nodes = details.get("nodes")
    if not isinstance(nodes, list) or not nodes:  # recorded before bound events named their nodes
        nodes = list(dict.fromkeys(s.get("node") for replica in details.get("placements") or [] for s in replica))
    where = f" on node {', '.join(str(n) for n in nodes)}" if nodes else ""
    if not details.get("resumed"):
        return f"Bound{where}"
    step = details.get("resumed_from_step")
    if isinstance(step, int):
        return f"Resumed from step {step}{where}"
    return f"Restarted from the beginning{where} (no checkpoint to resume from)"


def _moved(details: Mapping[str, Any]) -> str:
    """A move's step: "Moving from a100-1 GPU 3 to mig-1 GPU 0 (3g.40gb)", "Moved to …", "Move to … abandoned: why"."""
    source, target = placement_text(details.get("from")), placement_text(details.get("to"))
    outcome = details.get("outcome")
    if outcome == "completed":
        return f"Moved to {target}" + (f" (from {source})" if source else "")
    if outcome == "abandoned":
        why = details.get("reason") or "unknown"
        return f"Move to {target} abandoned: {why}; it serves on from {source}" if source else f"Move abandoned: {why}"
    return f"Moving from {source} to {target}: the old replicas serve until the new ones are ready"


def node_request_text(details: Mapping[str, Any]) -> str:
    """A node request's step (``scheduler.loop.provisioning_events``): "On-demand nodes requested: 2 × 8 GPUs of pool
    h100-od (request 7)", "… failed: <the autoscaler's words>", "On-demand node n-1 released (request 7)"."""
    request = f"request {details.get('request', '?')}"
    state = str(details.get("state") or "")
    said = f": {details['message']}" if details.get("message") else ""
    if state == "released":
        return f"On-demand node {details.get('node') or 'unknown'} released, its cost stops ({request})"
    if state == "pending":
        nodes, gpus = details.get("nodes"), details.get("gpus_per_node")
        return f"On-demand nodes requested: {nodes} × {gpus} GPUs of pool {details.get('pool', '?')} ({request})"
    names = details.get("node_names")
    joined = f": {', '.join(str(n) for n in names)}" if isinstance(names, list) and names else ""
    if state == "provisioned":
        return f"On-demand nodes provisioned{joined or said} ({request})"
    if state == "fulfilled":
        return f"On-demand nodes joined the cluster{joined} ({request})"
    words = state.replace("-", " ") or "changed"  # failed, revoked, timed out, withdrawn
    return f"On-demand node request {words}{said} ({request})"


def _reason(value: object) -> str:
    text = str(value or "unknown")
    return _REASON_WORDS.get(text) or text.replace("-", " ").replace("_", " ")


def _words(value: str) -> str:
    text = value.replace("_", " ")
    return text[:1].upper() + text[1:]
