"""The declared lower bounds are the ones the suite runs at: constraints/lowest.txt pins each one pyproject.toml
declares, and under CI (``CI=true``, set by .ci/run) the installed release is that pin."""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> dict[str, Requirement]:
    """The runtime dependencies and the development extra's (the suite's own tools, pinned the same way)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {Requirement(r).name: Requirement(r) for r in requirements}


def _pinned() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints" / "lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.split(r"\s*==\s*", line)
            pins[name] = Version(version)
    return pins


def test_each_pin_is_the_declared_lower_bound() -> None:
    declared = _declared()
    for name, pinned in _pinned().items():
        (floor,) = [Version(s.version) for s in declared[name].specifier if s.operator == ">="]
        assert pinned == floor, f"constraints/lowest.txt pins {name} {pinned}, pyproject.toml's floor is {floor}"
        assert declared[name].specifier.contains(pinned)


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="a developer's venv may hold newer releases")
def test_ci_runs_at_the_lower_bounds() -> None:
    for name, pinned in _pinned().items():
        assert Version(importlib.metadata.version(name)) == pinned, f"{name}: the suite must run at {pinned}"
