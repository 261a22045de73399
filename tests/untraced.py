"""``@untraced``: a test that runs a whole benchmark or simulation command, left out of coverage's tracing.

The suite measures branch coverage of the engine (``scheduler/core``, pyproject.toml) and fails below 100 %.
Coverage traces every line the engine runs, which makes a command that replays hours of a cluster about four times
slower (``bench cost``'s goodput test: 16 s untraced, 60 s traced, on one core). These tests check a command's
output and protocol, not the engine's rules: the engine's own tests cover every branch without them, which the
suite's 100 % gate keeps true (a branch only such a test reached would fail it). Their call is left untraced,
pytest-cov's ``no_cover`` marker; their fixtures are still traced.
"""

from __future__ import annotations

import pytest

untraced = pytest.mark.no_cover
