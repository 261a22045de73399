"""``manage.py bench kube`` outside a source checkout says it needs the test emulator, instead of an ImportError."""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from benchmarks import kube_bench


def test_without_the_emulator_bench_kube_says_where_it_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, kube_bench.EMULATOR, None)  # an image without tests/: the import fails
    with pytest.raises(CommandError, match="run it from a source checkout") as raised:
        call_command("bench", "kube", "--nodes", "1", "--pods", "0", "--cycles", "1", stdout=StringIO())
    assert "tests/scheduler/kube_emulator.py" in str(raised.value)


def test_in_a_source_checkout_the_emulator_is_found() -> None:
    assert hasattr(kube_bench.emulator(), "Cluster")
