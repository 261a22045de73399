"""The beat schedules (production and demo) and the demo broker's folders.

A beat entry naming a task no worker has registered is silently dropped by the worker ("Received
unregistered task"), so every entry is checked against the tasks the Celery app discovers. kombu's
filesystem transport writes its exchange tables into ``./control`` unless told otherwise: every folder it
uses must be under ``VAR_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from kombu import Connection

from portal import demo_settings
from portal.celery import app
from portal.settings import filesystem_broker_options

FOLDER_OPTIONS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")


def _registered_tasks() -> set[str]:
    app.loader.import_default_modules()  # what a worker does at start-up: autodiscover every app's tasks.py
    return {name for name in app.tasks if not name.startswith("celery.")}


@pytest.mark.parametrize(
    "schedule",
    [settings.CELERY_BEAT_SCHEDULE, demo_settings.CELERY_BEAT_SCHEDULE],
    ids=["settings", "demo_settings"],
)
def test_the_beat_schedule_names_only_registered_tasks(schedule) -> None:
    registered = _registered_tasks()
    unknown = {entry: spec["task"] for entry, spec in schedule.items() if spec["task"] not in registered}
    assert unknown == {}, f"not registered: {unknown}; registered: {sorted(registered)}"


def test_the_ledger_is_closed_every_five_minutes() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["ledger-close"]
    assert entry == {"task": "billing.ledger_close", "schedule": 300.0, "options": {"expires": 300}}
    assert "ledger-close" in demo_settings.CELERY_BEAT_SCHEDULE


def test_the_mig_watch_entry_runs_the_maintenance_task() -> None:
    assert settings.CELERY_BEAT_SCHEDULE["mig-watch"]["task"] == "scheduler.mig_watch"


def _under(path: str, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


def test_the_demo_broker_keeps_every_folder_under_var() -> None:
    options = demo_settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert set(FOLDER_OPTIONS) <= set(options)
    assert all(_under(str(options[key]), Path(demo_settings.VAR_DIR)) for key in FOLDER_OPTIONS), options


def test_the_production_settings_with_a_filesystem_broker_keep_every_folder_under_var() -> None:
    code = "import json, portal.settings as s; print(json.dumps([str(s.VAR_DIR), s.CELERY_BROKER_TRANSPORT_OPTIONS]))"
    env = {**os.environ, "CELERY_BROKER_URL": "filesystem://", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    var_dir, options = json.loads(done.stdout)
    assert set(FOLDER_OPTIONS) <= set(options)
    assert all(_under(options[key], Path(var_dir)) for key in FOLDER_OPTIONS), options


def test_kombu_writes_nothing_into_the_working_directory(tmp_path, monkeypatch) -> None:
    """A real round trip through kombu's filesystem transport, started in an empty working directory."""
    var_dir, workdir = tmp_path / "var", tmp_path / "cwd"
    options = filesystem_broker_options(var_dir)
    for key in ("data_folder_in", "processed_folder"):
        Path(str(options[key])).mkdir(parents=True)  # as `manage.py demo run` does
    workdir.mkdir()
    monkeypatch.chdir(workdir)

    with Connection("filesystem://", transport_options=options) as connection:
        queue = connection.SimpleQueue("microcosm")
        queue.put({"ping": 1})
        message = queue.get(timeout=5)
        message.ack()
        queue.close()

    assert message.payload == {"ping": 1}
    assert list(workdir.iterdir()) == []
    assert sorted(p.name for p in (var_dir / "celery" / "control").iterdir()) == ["microcosm.exchange"]
