"""The checkpoint manifest: which complete checkpoints a job's directory holds, newest last.

A job's ``CHECKPOINT_DIR`` looks like this::

    manifest.json             {"format": 1, "checkpoints": [{"step": 1200, "name": "step-000001200.ckpt", ...}, ...]}
    step-000001100.ckpt       complete checkpoints, each written to a temporary name, fsynced, then renamed
    step-000001200.ckpt
    .step-000001300.ckpt.tmp  a save in progress (or torn by a crash): never listed, never resumed from

The manifest is rewritten the same way (temporary file, fsync, rename) after every save, so a reader sees either
the old list or the new one. It is the contract between the job-side library and Microcosm: the Kubernetes
gateway reads it as a fallback when a job's reports do not arrive. Standard library only: this module runs inside
the job's container.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1
SUFFIX = ".ckpt"
TEMPORARY_SUFFIX = ".tmp"
_NAME = re.compile(r"step-(\d{9,})" + re.escape(SUFFIX))


@dataclass(frozen=True, slots=True)
class Entry:
    """One complete checkpoint: its training step, file name (inside the directory) and how it was saved."""

    step: int
    name: str
    saved_at: float  # epoch seconds when the rename made it visible
    size_bytes: int
    duration_s: float  # how long the save took (write and fsync): the checkpoint's cost
    sha256: str = ""


def file_name(step: int) -> str:
    """The file of the checkpoint at ``step``: sortable by name."""
    return f"step-{step:09d}{SUFFIX}"


def temporary_name(step: int) -> str:
    """Where the checkpoint at ``step`` is written before its rename: hidden, so no listing mistakes it."""
    return f".{file_name(step)}{TEMPORARY_SUFFIX}"


def step_of(name: str) -> int | None:
    """The step a complete checkpoint's file name carries (``step-000001200.ckpt`` → 1200); None for any other
    name, a temporary file's included."""
    match = _NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def read(directory: str | os.PathLike[str]) -> list[Entry]:
    """The checkpoints the manifest lists, oldest first; ``[]`` when it is missing or unreadable.

    Entries whose fields have the wrong type are skipped rather than trusted: a damaged manifest must never
    point a resume at a file that is not a checkpoint.
    """
    try:
        data = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("checkpoints"), list):
        return []
    entries = []
    for row in data["checkpoints"]:
        try:
            entry = Entry(
                step=int(row["step"]),
                name=str(row["name"]),
                saved_at=float(row["saved_at"]),
                size_bytes=int(row["size_bytes"]),
                duration_s=float(row["duration_s"]),
                sha256=str(row.get("sha256", "")),
            )
        except (KeyError, TypeError, ValueError):
            continue
        if "/" in entry.name or entry.name.startswith(".") or not entry.name.endswith(SUFFIX):
            continue
        entries.append(entry)
    return sorted(entries, key=lambda e: (e.step, e.saved_at))


def latest(directory: str | os.PathLike[str]) -> Entry | None:
    """The newest listed checkpoint whose file is present with the recorded size, or None."""
    for entry in reversed(read(directory)):
        try:
            if (Path(directory) / entry.name).stat().st_size == entry.size_bytes:
                return entry
        except OSError:
            continue
    return None


def write(directory: str | os.PathLike[str], entries: list[Entry]) -> None:
    """Replace the manifest with ``entries`` atomically (temporary file, fsync, rename, fsync the directory)."""
    folder = Path(directory)
    body = json.dumps({"format": FORMAT, "checkpoints": [asdict(e) for e in entries]}, indent=1)
    temporary = folder / f".{MANIFEST}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, folder / MANIFEST)
    fsync_directory(folder)


def fsync_directory(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (POSIX: the directory entry is data of the directory)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
