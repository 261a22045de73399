"""The suite's slowest-first order (tests/slow_first.py): every file it names exists, and the order it gives."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.slow_first import SLOW_FILES, slowest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_file_is_a_test_file_of_the_suite_once() -> None:
    missing = [path for path in SLOW_FILES if not (ROOT / path).is_file()]
    assert not missing, f"remove or rename in tests/slow_first.py: {missing}"
    assert len(set(SLOW_FILES)) == len(SLOW_FILES)


def test_listed_files_go_first_in_the_lists_order_and_each_files_tests_keep_theirs() -> None:
    first, second = SLOW_FILES[0], SLOW_FILES[1]
    names = [
        "tests/a_test.py::one",
        f"{second}::x",
        "tests/b_test.py::two",
        f"{first}::y",
        f"{second}::z",
        "tests/a_test.py::three",
    ]
    items = cast(list[pytest.Item], [SimpleNamespace(nodeid=name) for name in names])
    slowest_first(items)
    assert [cast(Any, item).nodeid for item in items] == [
        f"{first}::y",
        f"{second}::x",
        f"{second}::z",
        "tests/a_test.py::one",
        "tests/b_test.py::two",
        "tests/a_test.py::three",
    ]


def test_make_test_hands_files_out_in_collection_order() -> None:
    # Without it xdist puts the files with the most tests first, whatever this order says.
    assert "--no-loadscope-reorder" in (ROOT / "Makefile").read_text()
