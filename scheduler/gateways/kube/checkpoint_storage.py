"""Checkpoint storage on Kubernetes, as :class:`~scheduler.gateways.kube.gateway.KubeGateway` keeps it
(docs/deploy.md, Checkpoint storage; what the objects look like: :mod:`scheduler.gateways.kube.volumes`).

- Each team namespace gets the claim ``microcosm-checkpoints`` with the namespace, unless the team names a claim
  of its own; a checkpointed job is bound only once its claim exists (its pods would otherwise wait forever).
- A job that reports its checkpoints gets its report Secret before its pods, and loses it when its pods are
  removed for good (:data:`~scheduler.gateways.protocol.FINAL_EVICTIONS`); a preempted, interrupted or lost job
  keeps it, since it comes back.
- With ``checkpoint_root`` set, an observed job carries the newest complete checkpoint its manifest lists.
"""

from __future__ import annotations

import dataclasses
import logging

from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.kube.client import KubeClient
from scheduler.gateways.kube.cycle_reads import CycleReads
from scheduler.gateways.kube.job_objects import job_object_existing, job_object_remove
from scheduler.gateways.kube.pods import JOB_LABEL, MANAGED_BY, SCHEDULER_NAME, TEAM_LABEL
from scheduler.gateways.kube.volumes import (
    CHECKPOINT_CLAIM,
    claim_manifest,
    manifest_checkpoint,
    report_secret_manifest,
    report_secret_name,
    secret_token,
)
from scheduler.gateways.protocol import BindRequest, JobObservation

logger = logging.getLogger(__name__)


class CheckpointStorage:
    """The teams' checkpoint claims and the jobs' report Secrets through ``client`` (module doc).

    ``storage_class`` ("": the cluster's default) and ``size`` shape the claims Microcosm creates; ``root`` is
    where this process sees the teams' volumes as ``<root>/<namespace>/job-<id>/`` ("": it does not). A claim
    found is remembered in ``reads`` for the rest of the cycle (:mod:`scheduler.gateways.kube.cycle_reads`).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        storage_class: str = "",
        size: str = "100Gi",
        root: str = "",
        reads: CycleReads | None = None,
    ) -> None:
        self.client = client
        self.reads = reads
        self.storage_class = storage_class
        self.size = size
        self.root = root

    # -- the team's claim ------------------------------------------------------------------------------------

    def claim_ensure(self, *, namespace: str, team: str, checkpoint_claim: str) -> None:
        """Create ``microcosm-checkpoints`` in ``namespace`` if missing; a team naming its own claim gets none."""
        if checkpoint_claim or self._claim_exists(namespace, CHECKPOINT_CLAIM):
            return
        labels = {MANAGED_BY: SCHEDULER_NAME, TEAM_LABEL: team}
        manifest = claim_manifest(
            namespace, CHECKPOINT_CLAIM, labels=labels, storage_class=self.storage_class, size=self.size
        )
        self.client.claim_create(manifest)
        if self.reads is not None:
            self.reads.claim_found(namespace, CHECKPOINT_CLAIM)
        logger.info("namespace %s: created checkpoint claim %s (%s)", namespace, CHECKPOINT_CLAIM, self.size)

    def claim_check(self, request: BindRequest) -> None:
        """Raise :class:`GatewayConflict` when a checkpointed job's claim is missing from its namespace."""
        if not request.checkpoint_dir:
            return
        claim = request.checkpoint_claim or CHECKPOINT_CLAIM
        if not self._claim_exists(request.namespace, claim):
            raise GatewayConflict(
                f"job {request.job} is checkpointed but namespace {request.namespace} has no PersistentVolumeClaim "
                f"{claim}: create it, or clear the team's checkpoint claim so that Microcosm creates {CHECKPOINT_CLAIM}"
            )

    def _claim_exists(self, namespace: str, name: str) -> bool:
        """Is the claim there? Read once a cycle when it is (:mod:`scheduler.gateways.kube.cycle_reads`)."""
        if self.reads is not None and self.reads.claim(namespace, name):
            return True
        found = self.client.claim_read(namespace, name) is not None
        if found and self.reads is not None:
            self.reads.claim_found(namespace, name)
        return found

    # -- the job's report credential -------------------------------------------------------------------------

    def credential_ensure(self, request: BindRequest, *, team: str) -> None:
        """The job's report Secret holding ``request.credential`` (idempotent; the pods mount it)."""
        labels = {MANAGED_BY: SCHEDULER_NAME, JOB_LABEL: request.job, **({TEAM_LABEL: team} if team else {})}
        manifest = report_secret_manifest(request.namespace, request.job, request.credential, labels=labels)
        name = report_secret_name(request.job)
        if self.client.secret_create(manifest):
            return
        found = job_object_existing(
            kind="Secret",
            purpose="report credential",
            namespace=request.namespace,
            name=name,
            job=request.job,
            read=self.client.secret_read,
        )
        if secret_token(found) != request.credential:
            # Written under an earlier SECRET_KEY (tokens derive from it): replace it. The role grants no update
            # verb (docs/deploy.md, RBAC), so delete and create again.
            self.client.secret_delete(request.namespace, name)
            if not self.client.secret_create(manifest):
                raise GatewayRetryable(f"Secret {request.namespace}/{name} was created again by someone else")

    def credential_remove(self, *, job: str, namespace: str) -> None:
        """Take the job's credential off the cluster: the job never runs again. (The API refuses its token as
        soon as the job has ended; this removes the copy its pods could still read.)"""
        job_object_remove(
            kind="Secret",
            purpose="report credential",
            namespace=namespace,
            name=report_secret_name(job),
            job=job,
            read=self.client.secret_read,
            delete=self.client.secret_delete,
        )

    # -- the manifest fallback -------------------------------------------------------------------------------

    def observed(self, job: JobObservation) -> JobObservation:
        """``job`` with the newest complete checkpoint its manifest lists, when ``root`` is set and there is one."""
        if not self.root:
            return job
        found = manifest_checkpoint(self.root, job.namespace, job.job)
        if found is None:
            return job
        return dataclasses.replace(
            job, last_checkpoint_at=found.saved_at, last_checkpoint_step=found.step, last_checkpoint_path=found.path
        )
