"""A checkpoint directory: saving a checkpoint atomically, keeping the last few, and finding the one to resume
from.

A save writes the payload to a hidden temporary file, fsyncs it, renames it to its final name, fsyncs the
directory (so the rename survives a power loss) and only then lists it in the manifest. A process killed at any
moment therefore leaves either the previous state or the new one, plus at most a torn temporary file that no
reader looks at and the next writer deletes. Old checkpoints are deleted only after the manifest that no longer
lists them is in place, so the manifest never names a missing file on purpose.

Restoring reads the manifest (checking each file's size and SHA-256) and falls back to the newest file whose name
parses when the manifest is missing. Standard library only: this module runs inside the job's container.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from microcosm_checkpoint import manifest
from microcosm_checkpoint.manifest import Entry

logger = logging.getLogger("microcosm_checkpoint")

DEFAULT_KEEP = 3


class CheckpointError(Exception):
    """Checkpoints are present but none can be trusted: resuming from the beginning would silently lose them."""


@dataclass(frozen=True, slots=True)
class Restored:
    """The checkpoint a run resumes from: its step, its file and its bytes (verified when the manifest could)."""

    step: int
    path: Path
    payload: bytes


class CheckpointStore:
    """The writer of one checkpoint directory (one per job: only one process may write a directory).

    Opening it creates the directory and deletes temporary files a killed save left behind: they are torn by
    definition, and nobody else writes here.
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: keep at least 1 checkpoint, or there is nothing to resume from.")
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(f".*{manifest.TEMPORARY_SUFFIX}"):
            logger.info("deleting %s, left by a save that did not finish", leftover)
            leftover.unlink(missing_ok=True)

    def save(self, step: int, payload: bytes | Iterable[bytes]) -> Entry:
        """Save ``payload`` as the checkpoint at ``step`` and return its manifest entry.

        ``payload`` is the checkpoint's bytes or an iterable of chunks (streamed to disk, so a large state need not
        be held in memory twice). A save at a step the directory already holds or has passed replaces those
        checkpoints: it means the run resumed from an earlier one, and what came after belongs to an abandoned
        run. Then only the newest ``keep`` checkpoints stay. A save that fails raises and leaves no file behind.
        """
        if step < 0:
            raise ValueError(f"step={step}: a step is a count of training steps, give 0 or more.")
        name = manifest.file_name(step)
        temporary = self.directory / manifest.temporary_name(step)
        chunks = [payload] if isinstance(payload, bytes | bytearray | memoryview) else payload
        digest = hashlib.sha256()
        size = 0
        started = time.monotonic()
        try:
            with open(temporary, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.directory / name)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        manifest.fsync_directory(self.directory)
        entry = Entry(
            step=step,
            name=name,
            saved_at=time.time(),
            size_bytes=size,
            duration_s=round(time.monotonic() - started, 6),
            sha256=digest.hexdigest(),
        )
        listed = manifest.read(self.directory)
        kept = [*(e for e in listed if e.step < step), entry][-self.keep :]
        manifest.write(self.directory, kept)
        self._prune({e.name for e in kept})
        return entry

    def _prune(self, kept: set[str]) -> None:
        """Delete every complete checkpoint the manifest no longer lists (dropped by ``keep``, replaced, or left
        unlisted by a run killed between its rename and its manifest)."""
        for path in self.directory.iterdir():
            if manifest.step_of(path.name) is not None and path.name not in kept:
                try:
                    path.unlink()
                except OSError as error:  # a checkpoint too many wastes space, it does not stop training
                    logger.warning("could not delete old checkpoint %s: %s", path, error)


def restore(resume_from: str | os.PathLike[str]) -> Restored | None:
    """The newest trustworthy checkpoint at ``resume_from``, or None when there is none to resume from.

    ``resume_from`` is a checkpoint directory (then its newest complete checkpoint) or a checkpoint file (then
    that one; when it is gone, the newest beside it: a checkpoint is deleted only by a save after it). A file the
    manifest lists must have the listed size and SHA-256; one that does not is skipped for the next older one.
    Without a manifest, the files whose names parse are taken newest first. A directory that does not exist or
    holds no checkpoint gives None: a job stopped before its first save has nothing to resume. Raises
    :class:`CheckpointError` when checkpoints exist but none verifies, and ``ValueError`` when ``resume_from`` is
    a file that is not a complete checkpoint (a temporary file is never resumed from).
    """
    path = Path(resume_from)
    named = manifest.step_of(path.name)
    if path.is_file():
        if named is None:
            raise ValueError(
                f"RESUME_FROM={resume_from} is not a complete checkpoint: give a checkpoint directory or one of its "
                f"step-NNNNNNNNN{manifest.SUFFIX} files."
            )
        directory = path.parent
        candidates = _candidates(directory)
        given = [c for c in candidates if c[1].name == path.name] or [(named, path, None)]
        candidates = given + [c for c in candidates if c[0] < named]
    elif named is not None and not path.exists():
        # Deleted by a later save (keeping the last N): what that save left is the better start.
        logger.warning("%s is gone: resuming from the newest checkpoint beside it", resume_from)
        directory = path.parent
        candidates = _candidates(directory)
    else:
        directory = path
        candidates = _candidates(directory)
    rejected = []
    for step, file, entry in candidates:
        try:
            payload = file.read_bytes()
        except FileNotFoundError:  # deleted since the manifest was read, or by hand: nothing to distrust
            logger.warning("skipping checkpoint %s: it is gone", file)
            continue
        except OSError as error:
            logger.warning("skipping checkpoint %s: %s", file, error)
            rejected.append(file.name)
            continue
        if _verified(file, payload, entry):
            return Restored(step=step, path=file, payload=payload)
        rejected.append(file.name)
    if rejected:
        raise CheckpointError(
            f"No checkpoint in {directory} verifies ({', '.join(rejected)}: wrong size or SHA-256, or unreadable). "
            "Starting over would overwrite them: check the volume, or delete them to start from the beginning."
        )
    return None


def _candidates(directory: Path) -> list[tuple[int, Path, Entry | None]]:
    """The directory's checkpoints, newest first: the manifest's entries, or the parsed file names without one."""
    entries = manifest.read(directory)
    if entries:
        return [(e.step, directory / e.name, e) for e in reversed(entries)]
    try:
        names = [(manifest.step_of(p.name), p) for p in directory.iterdir()]
    except OSError:  # missing, or not a directory
        return []
    return sorted(((step, p, None) for step, p in names if step is not None), key=lambda c: c[0], reverse=True)


def _verified(path: Path, payload: bytes, entry: Entry | None) -> bool:
    """Whether a file's bytes match its manifest entry (there is nothing to check them against without one)."""
    if entry is None:
        return True
    if len(payload) != entry.size_bytes:
        logger.warning("skipping checkpoint %s: %d bytes, the manifest says %d", path, len(payload), entry.size_bytes)
        return False
    if entry.sha256 and hashlib.sha256(payload).hexdigest() != entry.sha256:
        logger.warning("skipping checkpoint %s: its SHA-256 differs from the manifest's", path)
        return False
    return True
