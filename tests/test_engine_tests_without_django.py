"""The engine's tests run without Django: with pytest-django switched off, collecting them (which imports every
test module and every conftest above them) loads no ``django`` module. A Django import in the root conftest, in
a helper they share, or in one of their modules fails here, rather than slowing the inner loop unseen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The folders whose tests need nothing but the engine (the simulator's tests mix in management commands).
ENGINE_TESTS = ("tests/scheduler/core", "tests/scheduler/properties")

# Collects the engine's tests with pytest-django off, then reports what was collected and which Django modules
# were loaded by then.
PROBE = """
import json, sys, pytest

class Probe:
    def pytest_collection_finish(self, session):
        self.collected = len(session.items)
        self.django = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))

probe = Probe()
options = ["--collect-only", "-q", "-p", "no:django", "-p", "no:cacheprovider"]
status = pytest.main([*options, *sys.argv[1:]], plugins=[probe])
print(json.dumps({"status": int(status), "collected": probe.collected, "django": probe.django}))
"""


def test_the_engine_tests_import_no_django() -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *ENGINE_TESTS], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert report["collected"] > 1000, "the engine's tests must be collected, or the check proves nothing"
    assert report["django"] == [], "the engine's tests must run without Django"
