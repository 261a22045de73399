"""The manifest: the list of complete checkpoints a job directory holds, read defensively, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from microcosm_checkpoint import manifest
from microcosm_checkpoint.manifest import Entry


def entry(step: int, size: int = 4) -> Entry:
    return Entry(step=step, name=manifest.file_name(step), saved_at=1000.0 + step, size_bytes=size, duration_s=0.5)


def test_names_sort_by_step_and_only_complete_checkpoints_parse() -> None:
    assert manifest.file_name(1200) == "step-000001200.ckpt"
    assert sorted(manifest.file_name(s) for s in (10, 9, 1_000_000_000)) == [
        manifest.file_name(9),
        manifest.file_name(10),
        manifest.file_name(1_000_000_000),
    ]
    assert manifest.step_of("step-000001200.ckpt") == 1200
    assert manifest.step_of(manifest.file_name(1_000_000_000)) == 1_000_000_000
    assert manifest.temporary_name(1200) == ".step-000001200.ckpt.tmp"
    for other in (manifest.temporary_name(1200), "step-12.ckpt", "step-000001200.ckpt.bak", "manifest.json"):
        assert manifest.step_of(other) is None, other


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    entries = [entry(200), entry(100)]
    manifest.write(tmp_path, entries)
    assert manifest.read(tmp_path) == [entry(100), entry(200)]  # oldest first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize(
    "text",
    ["", "{not json", "[]", '{"format": 2, "checkpoints": []}', '{"format": 1, "checkpoints": {}}'],
)
def test_a_missing_or_damaged_manifest_reads_as_empty(tmp_path: Path, text: str) -> None:
    assert manifest.read(tmp_path) == []
    (tmp_path / manifest.MANIFEST).write_text(text)
    assert manifest.read(tmp_path) == []


def test_entries_that_could_point_outside_the_directory_or_at_a_temporary_file_are_dropped(tmp_path: Path) -> None:
    good = {"step": 1, "name": manifest.file_name(1), "saved_at": 1.0, "size_bytes": 3, "duration_s": 0.1}
    rows = [
        good,
        {**good, "step": "two"},
        {**good, "name": "../other/step-000000002.ckpt"},
        {**good, "name": manifest.temporary_name(3)},
        {**good, "name": "notes.txt"},
        {k: v for k, v in good.items() if k != "size_bytes"},
    ]
    (tmp_path / manifest.MANIFEST).write_text(json.dumps({"format": 1, "checkpoints": rows}))
    assert [e.name for e in manifest.read(tmp_path)] == [manifest.file_name(1)]


def test_latest_is_the_newest_listed_file_present_with_its_size(tmp_path: Path) -> None:
    manifest.write(tmp_path, [entry(100), entry(200), entry(300)])
    (tmp_path / manifest.file_name(100)).write_bytes(b"1234")
    (tmp_path / manifest.file_name(200)).write_bytes(b"1234")
    (tmp_path / manifest.file_name(300)).write_bytes(b"12")  # not the size the manifest says
    latest = manifest.latest(tmp_path)
    assert latest is not None and latest.step == 200
    assert manifest.latest(tmp_path / "elsewhere") is None
