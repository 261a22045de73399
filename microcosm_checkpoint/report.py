"""Telling Microcosm about each checkpoint: ``POST {MICROCOSM_URL}/api/v1/jobs/{MICROCOSM_JOB}/checkpoints/``.

The request carries the job's report credential (``Authorization: Bearer <token>``), read from the file Microcosm
mounts into the job's pods; the credential can do nothing but report checkpoints of this job, and stops working
when the job ends. A report is a courtesy, never a condition of training: a slow or unreachable server costs at
most a few seconds, is logged, and the job goes on. Microcosm also reads the directory's manifest, so a checkpoint
whose report was lost is still found. Standard library only: this module runs inside the job's container.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from microcosm_checkpoint.manifest import Entry

logger = logging.getLogger("microcosm_checkpoint")

DEFAULT_TOKEN_FILE = "/var/run/secrets/microcosm/token"
# Worth another try: the server is busy or restarting. Any other refusal (an invalid report, a revoked
# credential, an unknown job) would be refused again.
_RETRIED_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Reporter:
    """Posts checkpoint reports of one job to Microcosm's API."""

    url: str  # the job's checkpoints endpoint
    token_file: Path
    timeout_s: float = 2.0  # per attempt: the report after a save on SIGTERM must still fit in the grace period
    attempts: int = 2
    retry_pause_s: float = 0.5

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Reporter | None:
        """The reporter ``MICROCOSM_URL``, ``MICROCOSM_JOB`` and ``MICROCOSM_TOKEN_FILE`` describe, or None (reporting
        off) when the URL or the job is unset or the token file is absent: outside Microcosm, or a job without a
        credential."""
        base, job = environ.get("MICROCOSM_URL", "").strip(), environ.get("MICROCOSM_JOB", "").strip()
        token_file = Path(environ.get("MICROCOSM_TOKEN_FILE", "").strip() or DEFAULT_TOKEN_FILE)
        if not base or not job:
            logger.info("checkpoint reports are off: MICROCOSM_URL or MICROCOSM_JOB is not set")
            return None
        if not token_file.is_file():
            logger.info("checkpoint reports are off: no credential at %s", token_file)
            return None
        return cls(url=endpoint(base, job), token_file=token_file)

    def report(self, entry: Entry, *, path: str, replica: int) -> bool:
        """Post ``entry`` (saved at ``path`` as the pod sees it, by ``replica``); True when Microcosm recorded it.

        Never raises: a failure is logged and returns False.
        """
        try:
            return self._post(body(entry, path=path, replica=replica))
        except Exception:  # the report must never stop training, whatever went wrong
            logger.exception("checkpoint report for step %d failed; the manifest still lists it", entry.step)
            return False

    def _post(self, payload: dict[str, Any]) -> bool:
        token = self.token_file.read_text(encoding="utf-8").strip()
        if not token:
            logger.warning("checkpoint report skipped: the credential file %s is empty", self.token_file)
            return False
        data = json.dumps(payload).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for attempt in range(1, self.attempts + 1):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    response.read()
                return True
            except urllib.error.HTTPError as error:
                detail = _detail(error)
                retry = error.code in _RETRIED_STATUSES
                logger.warning("checkpoint report refused (HTTP %d): %s", error.code, detail)
            except (OSError, TimeoutError) as error:  # URLError, refused connection, timeout
                retry = True
                logger.warning("checkpoint report to %s failed: %s", self.url, error)
            if not retry or attempt == self.attempts:
                break
            time.sleep(self.retry_pause_s)
        logger.warning("checkpoint at step %d not reported; the manifest still lists it", payload["step"])
        return False


def _detail(error: urllib.error.HTTPError) -> str:
    """The start of an error response's body (the API says there what was wrong), or "" when unreadable."""
    try:
        return error.read(2000).decode("utf-8", "replace")
    except OSError:
        return ""


def endpoint(base_url: str, job: str) -> str:
    """The checkpoints endpoint of ``job`` under Microcosm's base URL."""
    return f"{base_url.rstrip('/')}/api/v1/jobs/{urllib.parse.quote(job, safe='')}/checkpoints/"


def body(entry: Entry, *, path: str, replica: int) -> dict[str, Any]:
    """The JSON the API takes for one checkpoint."""
    return {
        "step": entry.step,
        "saved_at": datetime.fromtimestamp(entry.saved_at, tz=UTC).isoformat(),
        "size_bytes": entry.size_bytes,
        "duration_s": entry.duration_s,
        "path": path,
        "replica": replica,
    }
