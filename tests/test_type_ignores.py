"""Every ``# type: ignore`` in the source names the error it silences and says why on the same line
(``# type: ignore[code]  # reason``): a bare one hides any later error on its line, and one without a reason
leaves the next reader to rediscover whether it is still needed."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("portal", "teams", "jobs", "billing", "scheduler", "demo", "benchmarks")
_IGNORE = re.compile(r"type:\s*ignore")
_EXPLAINED = re.compile(r"type:\s*ignore\[[a-z0-9_-]+(?:,\s*[a-z0-9_-]+)*\]\s*#\s*\w")


def unexplained_ignores(source: str) -> Iterator[int]:
    """The line of every ``type: ignore`` comment in ``source`` without an error code or a reason after it
    (comments only: the words inside a string are not an ignore)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and _IGNORE.search(token.string) and not _EXPLAINED.search(token.string):
            yield token.start[0]


def _python_files() -> Iterator[Path]:
    for folder in SOURCE_DIRS:
        yield from (p for p in sorted((ROOT / folder).rglob("*.py")) if "migrations" not in p.parts)


def test_every_type_ignore_in_the_source_has_a_code_and_a_reason() -> None:
    files = list(_python_files())
    assert len(files) > 100, "the scan found too few source files: SOURCE_DIRS or ROOT is wrong"
    bad = [f"{path.relative_to(ROOT)}:{line}" for path in files for line in unexplained_ignores(path.read_text())]
    assert not bad, "type: ignore without an error code or a reason (`# type: ignore[code]  # why`):\n" + "\n".join(bad)


def test_the_scan_flags_a_bare_ignore_and_one_without_a_reason() -> None:
    sample = "\n".join(
        [
            "a = f()  # type: ignore",  # 1: no code, no reason
            "b = f()  # type: ignore[misc]",  # 2: no reason
            "c = f()  # type: ignore[misc]  #",  # 3: an empty reason
            "d = f()  # type: ignore  # no code given",  # 4: a reason, no code
            "e = f()  # type: ignore[arg-type, misc]  # stubs lag the runtime",  # fine
            "g = f()  # type:ignore[attr-defined]  # set by the test harness",  # fine
            "h = '# type: ignore'",  # a string, not a comment
            "i = f()  # noqa: E501  # type: ignore[misc]",  # 8: after another comment, still no reason
            "",
        ]
    )
    assert list(unexplained_ignores(sample)) == [1, 2, 3, 4, 8]
