"""``bench all``: runs every registered benchmark's ``ALL_RUNS``, and ``--write`` regenerates the file section by
section, keeping sections it did not run and the people-written notes."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks import kube_bench, loop_bench, portal_bench
from scheduler.sim.bench import all_cli, registry

FAKE = "tests.scheduler.sim.fake_bench"


@pytest.fixture(autouse=True)
def _fake_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "MODULES", (FAKE, "scheduler.sim.bench.all_cli"))
    monkeypatch.setattr(portal_bench, "ALL_RUNS", {}, raising=False)  # the command adds it; it needs a database
    monkeypatch.setattr(kube_bench, "SLOW_RUNS", {})  # the command adds it too; it runs minutes
    monkeypatch.setattr(loop_bench, "ALL_RUNS", {})  # the command adds it too; it seeds a database of its own
    monkeypatch.setattr(loop_bench, "SLOW_RUNS", {})
    monkeypatch.chdir(tmp_path)  # docs/benchmarks/ and BENCHMARKS.md are relative to the working directory


def _bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", "all", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_default_sweep_skips_the_slow_runs() -> None:
    payload = json.loads(_bench("--json"))
    assert sorted(payload["runs"]) == ["fake", "fake-big"]
    assert payload["runs"]["fake-big"]["size"] == 3
    assert payload["claims"] == [
        {"run": "fake", "claim": "size is even", "measured": "2", "reproduced": True},
        {"run": "fake-big", "claim": "size is even", "measured": "3", "reproduced": False},
    ]


def test_only_names_runs_including_slow_ones() -> None:
    payload = json.loads(_bench("--only", "fake-slow", "--json"))
    assert list(payload["runs"]) == ["fake-slow"]
    assert payload["command"] == "python manage.py bench all --only fake-slow --json"


def test_an_unknown_run_is_named_with_the_known_ones() -> None:
    with pytest.raises(CommandError, match=r"unknown nope; known: fake, fake-big, fake-slow"):
        _bench("--only", "nope")


def test_write_makes_one_marked_section_per_run_with_claims_and_notes(tmp_path: Path) -> None:
    (tmp_path / "docs/benchmarks").mkdir(parents=True)
    (tmp_path / "docs/benchmarks/fake.md").write_text("Why size 2: it is even.\n", encoding="utf-8")
    _bench("--write")
    text = (tmp_path / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n")
    assert text.index("<!-- bench:fake -->") < text.index("<!-- bench:fake-big -->")
    assert "- Command: `python manage.py bench fake --size 2`" in text
    assert "- size is even: **reproduced** — measured 2" in text
    assert "- size is even: **not reproduced** — measured 3" in text
    assert "Why size 2: it is even." in text
    assert "fake-slow" not in text


def test_write_only_keeps_the_other_sections(tmp_path: Path) -> None:
    _bench("--write")
    before = (tmp_path / "BENCHMARKS.md").read_text(encoding="utf-8")
    big = before[before.index("<!-- bench:fake-big -->") :]
    _bench("--write", "--only", "fake-slow")
    after = (tmp_path / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert big.split("<!-- bench:fake-slow -->")[0] in after  # fake-big untouched
    assert after.index("<!-- bench:fake-big -->") < after.index("<!-- bench:fake-slow -->")  # registry order
    assert after.count("<!-- bench:fake -->") == 1
    assert not list(tmp_path.glob("*.partial"))


def test_a_registry_mistake_is_reported_not_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.scheduler.sim import fake_bench

    monkeypatch.setattr(fake_bench, "ALL_RUNS", {"fake": ["--size", "two"]})
    with pytest.raises(CommandError, match="arguments of run 'fake' do not parse"):
        _bench()


def test_the_real_registry_lists_every_benchmark_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    keys = [run.key for run in all_cli.runs()]
    assert len(keys) == len(set(keys))
    assert "scale" in keys
