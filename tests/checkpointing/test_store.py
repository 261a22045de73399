"""The checkpoint directory: atomic saves, the last N kept, and a restore that never takes a torn or damaged
checkpoint."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from microcosm_checkpoint import manifest, store
from microcosm_checkpoint.store import CheckpointError, CheckpointStore, restore


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_save_leaves_the_file_under_its_name_and_lists_it_with_size_hash_and_cost(tmp_path: Path) -> None:
    directory = tmp_path / "team" / "job-1"  # created, parents too
    entry = CheckpointStore(directory).save(1200, b"weights")
    assert files(directory) == ["manifest.json", "step-000001200.ckpt"]
    assert (directory / "step-000001200.ckpt").read_bytes() == b"weights"
    assert manifest.read(directory) == [entry]
    assert (entry.step, entry.name, entry.size_bytes) == (1200, "step-000001200.ckpt", 7)
    assert entry.sha256 == hashlib.sha256(b"weights").hexdigest()
    assert entry.duration_s >= 0 and entry.saved_at > 0


def test_a_payload_may_be_streamed_in_chunks(tmp_path: Path) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"abc"
        yield bytearray(b"def")

    entry = CheckpointStore(tmp_path).save(5, chunks())
    assert (entry.size_bytes, entry.sha256) == (6, hashlib.sha256(b"abcdef").hexdigest())
    restored = restore(tmp_path)
    assert restored is not None and restored.payload == b"abcdef"


def test_only_the_last_n_stay_and_a_dropped_file_is_deleted_only_after_the_manifest_stops_listing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    real_write = manifest.write

    def write(directory: Path, entries: list[manifest.Entry]) -> None:
        seen.append(files(directory))  # what the directory held when the manifest was replaced
        real_write(directory, entries)

    monkeypatch.setattr(store.manifest, "write", write)
    writer = CheckpointStore(tmp_path, keep=2)
    for step in (10, 20, 30):
        writer.save(step, f"state {step}".encode())
    assert [e.step for e in manifest.read(tmp_path)] == [20, 30]
    assert files(tmp_path) == ["manifest.json", manifest.file_name(20), manifest.file_name(30)]
    assert manifest.file_name(10) in seen[-1]  # still there while the old manifest listed it


def test_keep_must_leave_something_to_resume_from(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep at least 1"):
        CheckpointStore(tmp_path, keep=0)
    with pytest.raises(ValueError, match="give 0 or more"):
        CheckpointStore(tmp_path).save(-1, b"x")


def test_a_save_at_an_earlier_step_replaces_the_abandoned_later_ones(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path, keep=5)
    for step in (100, 200, 300):
        writer.save(step, b"first run")
    writer.save(200, b"resumed from 100")
    assert [e.step for e in manifest.read(tmp_path)] == [100, 200]
    assert files(tmp_path) == ["manifest.json", manifest.file_name(100), manifest.file_name(200)]
    restored = restore(tmp_path)
    assert restored is not None and (restored.step, restored.payload) == (200, b"resumed from 100")


def test_a_failed_save_leaves_no_file_and_the_previous_checkpoints_intact(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path)
    writer.save(1, b"good")

    def broken() -> Iterator[bytes]:
        yield b"half of it"
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space"):
        writer.save(2, broken())
    assert files(tmp_path) == ["manifest.json", manifest.file_name(1)]
    assert [e.step for e in manifest.read(tmp_path)] == [1]


def test_opening_the_store_deletes_what_a_killed_save_left_and_restore_never_reads_it(tmp_path: Path) -> None:
    CheckpointStore(tmp_path).save(1, b"complete")
    (tmp_path / manifest.temporary_name(2)).write_bytes(b"torn")
    (tmp_path / ".manifest.json.tmp").write_bytes(b"{")
    restored = restore(tmp_path)  # a reader leaves the directory alone
    assert restored is not None and restored.step == 1
    assert manifest.temporary_name(2) in files(tmp_path)
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        restore(tmp_path / manifest.temporary_name(2))
    CheckpointStore(tmp_path)
    assert files(tmp_path) == ["manifest.json", manifest.file_name(1)]


def test_restore_takes_the_newest_checkpoint_of_a_directory_or_the_file_it_is_given(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path)
    for step in (1, 2, 3):
        writer.save(step, f"state {step}".encode())
    newest = restore(tmp_path)
    assert newest is not None and (newest.step, newest.path, newest.payload) == (
        3,
        tmp_path / newest.path.name,
        b"state 3",
    )
    older = restore(str(tmp_path / manifest.file_name(2)))
    assert older is not None and (older.step, older.payload) == (2, b"state 2")


def test_a_checkpoint_that_fails_verification_is_skipped_for_the_next_older(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path)
    for step in (1, 2, 3):
        writer.save(step, f"state {step}".encode())
    (tmp_path / manifest.file_name(3)).write_bytes(b"state X")  # same size, other bytes
    (tmp_path / manifest.file_name(2)).write_bytes(b"state")  # truncated
    restored = restore(tmp_path)
    assert restored is not None and (restored.step, restored.payload) == (1, b"state 1")
    from_file = restore(tmp_path / manifest.file_name(3))
    assert from_file is not None and from_file.step == 1


def test_when_every_checkpoint_fails_verification_restore_refuses_to_start_over(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path)
    writer.save(1, b"state 1")
    (tmp_path / manifest.file_name(1)).write_bytes(b"state 9")
    with pytest.raises(CheckpointError, match=r"step-000000001\.ckpt"):
        restore(tmp_path)


def test_without_a_manifest_restore_takes_the_newest_file_whose_name_parses(tmp_path: Path) -> None:
    (tmp_path / manifest.file_name(7)).write_bytes(b"seven")
    (tmp_path / manifest.file_name(12)).write_bytes(b"twelve")
    (tmp_path / manifest.temporary_name(13)).write_bytes(b"torn")
    (tmp_path / "step-14.ckpt").write_bytes(b"not ours")
    restored = restore(tmp_path)
    assert restored is not None and (restored.step, restored.payload) == (12, b"twelve")


def test_nothing_to_resume_from_is_none(tmp_path: Path) -> None:
    assert restore(tmp_path) is None
    assert restore(tmp_path / "never-created") is None
    os.mkdir(tmp_path / "job-2")
    assert restore(tmp_path / "job-2") is None


def test_a_file_the_manifest_lists_but_that_is_gone_is_skipped(tmp_path: Path) -> None:
    writer = CheckpointStore(tmp_path)
    writer.save(1, b"one")
    writer.save(2, b"two")
    (tmp_path / manifest.file_name(2)).unlink()
    restored = restore(tmp_path)
    assert restored is not None and restored.step == 1


def test_a_checkpoint_file_deleted_since_it_was_named_gives_way_to_the_newest_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = CheckpointStore(tmp_path, keep=1)
    writer.save(1, b"one")
    writer.save(2, b"two")  # deletes step 1, which a resume may still name
    restored = restore(tmp_path / manifest.file_name(1))
    assert restored is not None and restored.step == 2
    monkeypatch.chdir(tmp_path.parent)
    relative = restore(Path(tmp_path.name) / manifest.file_name(2))  # verified against the manifest all the same
    assert relative is not None and relative.step == 2
    (tmp_path / manifest.file_name(2)).write_bytes(b"tw0")
    with pytest.raises(CheckpointError):
        restore(Path(tmp_path.name) / manifest.file_name(2))
