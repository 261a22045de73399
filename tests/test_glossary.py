"""One word per idea (docs/glossary.md): a retired word does not come back.

The glossary's ``- **Retired:**`` lines are the one list: each backticked word on them is searched for, without
regard to case and anywhere in a word (``MIG change`` finds "MIG changes"; ``repartition`` finds
"repartitioning"), in the code (every ``.py`` file), the templates, ``deploy/``, ``docs/``, README.md,
BENCHMARKS.md and RELIABILITY.md. Skipped: the glossary itself (it names what it retires), this file (its
allow-list quotes them), hidden directories, ``.venv``, ``node_modules`` and ``static/`` (vendored code), and
the Django migrations (history: what the database was once told, never rewritten).

:data:`ALLOWED` is the rest of the exceptions, each a stored value that a rename would break. Every entry must
still match something, so that the list cannot outlive its reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
SKIPPED_DIRS = {".venv", "node_modules", "static", "migrations", "__pycache__"}
TOP_DOCS = ("README.md", "BENCHMARKS.md", "RELIABILITY.md")

# (the file's path from the root, or "*" for any file; a regular expression around the word; why it stays).
ALLOWED: tuple[tuple[str, str, str], ...] = (
    (
        "*",
        r"""["'`]repartition["'`]""",
        "the stored eviction reason of a reconfiguration (EvictionReason.RECONFIGURE): job events, the ledger, "
        "the preemptions metric's label",
    ),
    ("*", r"MigRepartition", "the Kubernetes Event reason of that eviction, which alert rules and filters match"),
    (
        "scheduler/models.py",
        r"""help_text=["']MIG changes""",
        "a field's help text is in its migration: changing it needs a new migration, for no stored change",
    ),
)


def retired_words(text: str) -> list[str]:
    """The backticked words of every ``- **Retired:**`` line of the glossary ``text`` (continuations included)."""
    words: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("- **Retired:**"):
            continue
        block = [line]
        for follow in lines[i + 1 :]:
            if not follow.startswith("  ") or not follow.strip():
                break
            block.append(follow)
        words.extend(re.findall(r"`([^`]+)`", " ".join(block)))
    return words


def scanned_files() -> Iterator[Path]:
    """Every file the rule covers (module doc), in a stable order."""
    here = Path(__file__).resolve()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        for name in sorted(names):
            path = Path(folder) / name
            relative = path.relative_to(ROOT)
            top = relative.parts[0]
            if path in (here, GLOSSARY):
                continue
            if (
                path.suffix == ".py"
                or (top in ("templates", "deploy") and len(relative.parts) > 1)
                or (top == "docs" and path.suffix == ".md")
                or str(relative) in TOP_DOCS
            ):
                yield path


def offenders(word: str, files: dict[str, str]) -> list[str]:
    """``path:line: text`` for each line of ``files`` (path → text) where ``word`` stands, allow-list aside."""
    found: list[str] = []
    pattern = re.compile(re.escape(word), re.IGNORECASE)
    for name, text in files.items():
        if word.lower() not in text.lower():
            continue
        allowed = [re.compile(regex, re.IGNORECASE) for where, regex, _ in ALLOWED if where in ("*", name)]
        for number, line in enumerate(text.splitlines(), start=1):
            spans = [match.span() for regex in allowed for match in regex.finditer(line)]
            for match in pattern.finditer(line):
                if not any(start <= match.start() and match.end() <= end for start, end in spans):
                    found.append(f"{name}:{number}: {line.strip()}")
                    break
    return found


def _read_all() -> dict[str, str]:
    texts: dict[str, str] = {}
    for path in scanned_files():
        try:
            texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file under deploy/ (none today): no words to check
            continue
    return texts


FILES = _read_all()
RETIRED = retired_words(GLOSSARY.read_text(encoding="utf-8"))


def test_the_glossary_retires_words() -> None:
    assert len(RETIRED) >= 10 and len(set(map(str.lower, RETIRED))) == len(RETIRED), RETIRED
    assert "README.md" in FILES and "docs/architecture.md" in FILES and "scheduler/core/model/plan.py" in FILES


@pytest.mark.parametrize("word", RETIRED)
def test_a_retired_word_is_gone(word: str) -> None:
    found = offenders(word, FILES)
    assert not found, f"{word!r} is retired (docs/glossary.md); use the glossary's word:\n" + "\n".join(found)


@pytest.mark.parametrize(("where", "regex", "why"), ALLOWED)
def test_every_allowance_is_still_needed(where: str, regex: str, why: str) -> None:
    pattern = re.compile(regex, re.IGNORECASE)
    names = FILES if where == "*" else {where: FILES[where]}
    assert any(pattern.search(text) for text in names.values()), f"unused allowance ({why}): drop it"


def test_the_rule_sees_a_word_and_its_allowance() -> None:
    files = {
        "a.py": 'reason = "repartition"  # stored\nplan = repartition_plan()',
        "b.md": "a MIG Change in flight",
    }
    assert offenders("repartition", files) == ["a.py:2: plan = repartition_plan()"]
    assert offenders("MIG change", files) == ["b.md:1: a MIG Change in flight"]
    assert retired_words("- **Retired:** `a`, `b`\n  `c`\n\n- **Retired:** `d`\n") == ["a", "b", "c", "d"]
