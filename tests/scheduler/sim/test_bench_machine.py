"""The record every benchmark payload starts with (scheduler/sim/bench/machine.py)."""

from __future__ import annotations

from scheduler.sim.bench.machine import RunRecord, started_line, with_flags


def test_flags_that_are_set_join_the_command_in_order() -> None:
    assert with_flags("bench x", {"json": True, "strict": False}, "strict", "json") == "bench x --json"
    assert with_flags("bench x", {"json": True, "strict": True}, "strict", "json") == "bench x --strict --json"
    assert with_flags("bench x", {}, "json") == "bench x"


def test_the_head_records_the_load_at_the_end_and_the_start() -> None:
    record = RunRecord("demo", "python manage.py bench demo")
    assert "load_average_at_end" not in record.machine
    head = record.head()
    assert head["benchmark"] == "demo" and head["command"] == "python manage.py bench demo"
    assert set(head["machine"]) == {"nproc", "cpu_model", "python", "load_average_at_start", "load_average_at_end"}
    line = started_line(head)
    assert line.startswith("machine: ") and line.endswith(f"at end; started {head['date']}")
