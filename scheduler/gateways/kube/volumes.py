"""What a checkpointed job's pods mount, as plain JSON (no ``kubernetes`` import): the team's checkpoint volume
and the job's report credential (docs/deploy.md, Checkpoint storage).

- Each team namespace holds one checkpoint volume claim, ``microcosm-checkpoints`` (or a claim the team names),
  ReadWriteMany because a gang's pods on several nodes write to it; every checkpointed pod mounts it at
  ``/checkpoints`` and keeps its checkpoints in ``CHECKPOINT_DIR=/checkpoints/job-<id>``.
- A job that reports its checkpoints gets a Secret ``mc-<job>-report`` with its token (key ``token``), mounted
  read-only at ``/var/run/secrets/microcosm``; the pods learn the file from ``MICROCOSM_TOKEN_FILE`` and the
  portal's address from ``MICROCOSM_URL``. A mounted file, unlike an env variable, is not shown by ``kubectl
  describe pod`` and not inherited by every child process.

Where the controller sees the teams' volumes too (``KUBE_CHECKPOINT_ROOT``: ``<root>/<namespace>/job-<id>/``),
:func:`manifest_checkpoint` reads a job's newest complete checkpoint from its manifest
(:mod:`microcosm_checkpoint.manifest`): the fallback when the job's own reports do not arrive.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from microcosm_checkpoint import manifest
from scheduler.gateways.protocol import CHECKPOINT_MOUNT, job_checkpoint_dir

logger = logging.getLogger(__name__)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

CHECKPOINT_CLAIM = "microcosm-checkpoints"  # the claim Microcosm creates in a team namespace
CHECKPOINT_VOLUME = "checkpoints"  # the pod's volume name for it
REPORT_VOLUME = "report-credential"
REPORT_MOUNT = "/var/run/secrets/microcosm"
TOKEN_KEY = "token"


def report_secret_name(job: str) -> str:
    return f"mc-{job}-report"


def claim_manifest(
    namespace: str, name: str, *, labels: Mapping[str, str], storage_class: str, size: str
) -> dict[str, Any]:
    """A ReadWriteMany claim of ``size``; ``storage_class`` "" leaves the class to the cluster's default."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        # An empty storageClassName would mean "no class" (static volumes only), not the default: leave it out.
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def report_secret_manifest(namespace: str, job: str, token: str, *, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": report_secret_name(job), "namespace": namespace, "labels": dict(labels)},
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode("ascii")},
    }


def secret_token(secret: Mapping[str, Any]) -> str | None:
    """The token a report Secret holds, or None when it holds none that decodes."""
    encoded = (secret.get("data") or {}).get(TOKEN_KEY)
    try:
        return base64.b64decode(str(encoded), validate=True).decode() if encoded else None
    except (ValueError, UnicodeDecodeError):
        return None


def pod_volumes(job: str, *, claim: str, credential: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(volumes, mounts)`` of a replica: the checkpoint claim ("" none) and the report Secret (if any)."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if claim:
        volumes.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT})
    if credential:
        volumes.append({"name": REPORT_VOLUME, "secret": {"secretName": report_secret_name(job)}})
        mounts.append({"name": REPORT_VOLUME, "mountPath": REPORT_MOUNT, "readOnly": True})
    return volumes, mounts


@dataclass(frozen=True, slots=True)
class ManifestCheckpoint:
    """A job's newest complete checkpoint as its manifest lists it; ``path`` as the job's pods see it."""

    saved_at: float
    step: int
    path: str


def manifest_checkpoint(root: str, namespace: str, job: str) -> ManifestCheckpoint | None:
    """The newest complete checkpoint in ``<root>/<namespace>/job-<job>/``, or None: no manifest, a damaged or
    unreadable one, a listed file missing or of the wrong size. Never raises: a volume that cannot be read must
    not stop the cluster from being observed."""
    if not (job.isdigit() and _NAMESPACE.match(namespace)):
        return None  # not a name of ours: never turned into a path
    directory = Path(root) / namespace / f"job-{job}"
    try:
        entry = manifest.latest(directory)
    except Exception as exc:  # a fallback: whatever a broken volume raises, observe goes on
        logger.warning("job %s: cannot read the checkpoint manifest in %s: %s", job, directory, exc)
        return None
    if entry is None:
        return None
    return ManifestCheckpoint(saved_at=entry.saved_at, step=entry.step, path=f"{job_checkpoint_dir(job)}/{entry.name}")
