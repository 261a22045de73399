"""The engine runs as Python source unless a compiled build was asked for (setup.py, ``MICROCOSM_COMPILE=1``):
the suite, its coverage and CI run the pure engine, and ``bench scale`` says which one ran."""

from __future__ import annotations

import pkgutil
import runpy
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import setuptools

import scheduler.core
from scheduler import engine

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_is_pure_python_by_default() -> None:
    modules = ["scheduler.core", *(i.name for i in pkgutil.walk_packages(scheduler.core.__path__, "scheduler.core."))]
    origins = {name: getattr(find_spec(name), "origin", None) or "" for name in modules}
    compiled = sorted(name for name, origin in origins.items() if not origin.endswith(".py"))
    assert len(modules) > 50 and not compiled, f"a compiled engine is in the tree ({compiled[:3]}): make clean-compiled"
    assert not engine.compiled()
    assert engine.engine_label() == "pure Python"


def test_a_compiled_engine_is_named_with_the_mypyc_that_built_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine.cycle, "__file__", "/x/scheduler/core/planning/cycle.cpython-311-x86_64-linux-gnu.so")
    monkeypatch.setattr(engine, "COMPILED_BY", tmp_path / "compiled_by.txt")
    assert engine.compiled()
    assert engine.engine_label() == "compiled (mypyc)"  # a build that left no record
    (tmp_path / "compiled_by.txt").write_text("mypyc 1.19.1\n")
    assert engine.engine_label() == "compiled (mypyc 1.19.1)"


def _setup_arguments(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    """What setup.py hands ``setuptools.setup`` when run with ``argv``."""
    given: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: given.update(kwargs))
    monkeypatch.setattr(sys, "argv", ["setup.py", *argv])
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return given


def test_a_plain_build_is_pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MICROCOSM_COMPILE", raising=False)
    assert _setup_arguments(monkeypatch, ["bdist_wheel"]) == {}


def test_a_compiled_build_asks_for_mypy_first_and_refuses_to_build_pure_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MICROCOSM_COMPILE", "1")
    monkeypatch.setitem(sys.modules, "mypyc.build", None)  # mypyc not installed: its import fails
    (requirement,) = _setup_arguments(monkeypatch, ["egg_info"])["setup_requires"]
    assert requirement.startswith("mypy==")
    with pytest.raises(SystemExit, match="needs mypyc"):
        _setup_arguments(monkeypatch, ["bdist_wheel"])


def test_the_development_install_holds_the_mypy_setup_py_compiles_with(monkeypatch: pytest.MonkeyPatch) -> None:
    # `make compile` (and CI's compiled-check) builds with the installed mypyc; setup.py asks for its pinned
    # release, so a different one would send the build to fetch it. constraints/lowest.txt pins the same release.
    monkeypatch.delenv("MICROCOSM_COMPILE", raising=False)
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    pinned = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_pin")["MYPY"]
    lowest = [
        line for line in (ROOT / "constraints" / "lowest.txt").read_text().splitlines() if line.startswith("mypy==")
    ]
    assert lowest == [pinned]
