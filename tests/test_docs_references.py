"""Comments, docstrings and documents stand alone: what they cite is in the repository.

A newcomer has the repository and nothing else, so a citation must point inside it (``docs/...``,
``BENCHMARKS.md``, ``RELIABILITY.md``) or name the outside project it points to. The rules, on every ``.py``,
``.html`` and ``.md`` file of the repository (``.venv``, ``node_modules`` and hidden directories skipped):

1. **No outside citations.** A line is an offender when it contains

   - ``facts`` followed within 25 characters on the same line by ``§`` (``facts §3.1``, ``gpu-facts §7.4``,
     ``the facts sheet (§1.2)``), the words ``facts sheet``, or the path ``shared/facts/`` — the platform
     facts live in ``docs/gpu-facts.md``, cited by heading;
   - ``issue N`` / ``issues N`` (any case, ``#`` allowed), unless the words just before it name a repository
     (``owner/repo issue 123``) or one of :data:`PROJECTS` (``Kubernetes issue 5229``): this project's own
     issue texts are not in the repository. ``owner/repo#123`` is never matched.

2. **Cited documents exist.** Every ``docs/<path>.md`` written in a file outside ``tests/`` names a file of the
   repository. Paths inside another path (``NVIDIA/k8s-device-plugin/docs/...``) and placeholders written in
   capitals (``docs/benchmarks/KEY.md``) are not citations. Tests are skipped: they create documents of
   their own in temporary directories.

3. **Cited headings exist.** ``docs/gpu-facts.md, <heading>`` (backticks and quotes allowed around either)
   must continue with one of that file's ``##`` headings, and a Markdown link ``gpu-facts.md#anchor`` must
   name one of their anchors — so renaming a heading breaks here, not in a reader's hands.

4. **BENCHMARKS.md matches its generator.** ``bench all --write`` builds it from the header in
   :mod:`scheduler.sim.bench.all_cli` and copies each ``docs/benchmarks/<key>.md`` under its section, so the
   file must hold that header and every such note verbatim.

5. **Named code exists.** In comments and docstrings (every string standing alone as a statement) of ``.py``
   files and in the whole text of ``.md`` files (skipped as above, ``tests`` included):

   - a dotted name starting with one of :data:`PACKAGES` (``scheduler.core.rules.reconfiguration``,
     ``billing.services.ledger_close_due``) resolves: the longest importable prefix is a module and the rest
     are attributes reached from it (a dataclass field counts), or the name is a Django model label
     (``billing.LedgerEntry``) or a Celery task's name (``@shared_task(name="scheduler.cycle_run")``);
   - a relative name in a role of a ``.py`` file (``:mod:`.spans```, ``:func:`~.find.find_slots```) resolves
     the same way in the file's package or in the file's module itself;
   - a file name ending ``.py``, bare or with folders (``speedups/trial.py``, ``scheduler/loop/cycle.py``),
     is the end of some file's path in the repository.

   A name preceded by a word character, ``.``, ``/`` or ``-`` is part of something longer and not checked;
   neither are folders. A module moved or renamed breaks here.
"""

from __future__ import annotations

import ast
import importlib
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {".venv", "node_modules", "__pycache__"}
SUFFIXES = {".py", ".html", ".md"}
THIS_FILE = Path(__file__).resolve()
FACTS = ROOT / "docs" / "gpu-facts.md"

PROJECTS = ("kubernetes", "kueue", "volcano", "karpenter", "nvidia", "github")
_FACTS_CITATION = re.compile(r"\bfacts\b[^\n§]{0,25}§|\bfacts sheet\b|shared/facts/", re.IGNORECASE)
_ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
_NAMED_BEFORE = re.compile(
    r"(?:\b[\w.-]+/[\w.-]+|\b(?:" + "|".join(PROJECTS) + r"))(?:'s)?\s*$",
    re.IGNORECASE,
)
_DOC_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]+\.md\b")
_FACTS_HEADING_CITATION = re.compile(r"docs/gpu-facts\.md(?:</code>|[`\"”])*,\s*[`\"“]*")
_FACTS_ANCHOR = re.compile(r"gpu-facts\.md#([\w-]+)")

PACKAGES = ("scheduler", "jobs", "billing", "teams", "portal", "demo", "benchmarks")
_DOTTED = re.compile(r"(?<![\w./-])(?:" + "|".join(PACKAGES) + r")(?:\.(?!(?:py|md|json|html)\b)[A-Za-z_]\w*)+")
_RELATIVE_ROLE = re.compile(r":[a-z]+:`~?(\.[A-Za-z_][\w.]*)")
_PY_FILE = re.compile(r"(?<![\w./-])(?:[\w-]+/)*[\w-]+\.py\b")
_TASK_NAME = re.compile(r"shared_task\(\s*name=\"([\w.]+)\"")


def _files(root: Path = ROOT, suffixes: set[str] | None = SUFFIXES) -> Iterator[Path]:
    """The repository's files (of ``suffixes``; None: every file) but this one, skipped directories left out."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(names):
            path = Path(folder) / name
            if (suffixes is None or path.suffix in suffixes) and path.resolve() != THIS_FILE:
                yield path


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def outside_citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line citing something outside the repository (module doc, rule 1)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        issues = [m for m in _ISSUE.finditer(line) if not _NAMED_BEFORE.search(line[: m.start()])]
        if _FACTS_CITATION.search(line) or issues:
            found.append((number, line.strip()))
    return found


def facts_headings() -> list[str]:
    return [line[3:].strip() for line in FACTS.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, blanks as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def unknown_facts_headings(text: str, headings: list[str]) -> list[str]:
    """The heading citations of ``docs/gpu-facts.md`` in ``text`` that name no heading (module doc, rule 3)."""
    flat = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)  # a citation may wrap, in prose or in a comment
    bad = []
    for match in _FACTS_HEADING_CITATION.finditer(flat):
        rest = flat[match.end() : match.end() + 80]
        if not any(rest.startswith(heading) for heading in headings):
            bad.append(rest.split(")")[0][:60])
    anchors = {anchor(heading) for heading in headings}
    bad += [f"#{name}" for name in _FACTS_ANCHOR.findall(text) if name not in anchors]
    return bad


def test_the_rules_catch_what_they_should_and_nothing_else() -> None:
    offending = [
        "# MIG Manager (facts §3.1) pauses the plugin",
        "see gpu-facts §7.4 for the inputs",
        "Not included (as in the facts sheet, §7.4)",
        "from ``../shared/facts/gpu-facts.md``",
        "targets of issue 14",
        "Issue 3, §8: drain first",
        "(see issues #12)",
    ]
    fine = [
        "the known wedge (NVIDIA/gpu-operator#2833)",
        "upstream kubernetes/kubernetes issue 5229 says so",
        "Kubernetes issue 5229",
        "see docs/gpu-facts.md, MIG Manager reconfiguration flow",
        "two facts about that lower work",
        "dl.facts { display: grid; }",
        "an issue with the tissue 3",
    ]
    assert [line for line in offending if not outside_citations(line)] == []
    assert [line for line in fine if outside_citations(line)] == []
    assert _DOC_PATH.findall("see `docs/deploy.md`, NVIDIA/k8s-device-plugin/docs/x.md, ../docs/y.md") == [
        "docs/deploy.md"
    ]
    headings = ["Prices", "Spot and preemption signals"]
    assert unknown_facts_headings("(``docs/gpu-facts.md``, Spot and\n    # preemption signals)", headings) == []
    assert unknown_facts_headings("docs/gpu-facts.md, Price list", headings) == ["Price list"]
    assert unknown_facts_headings("[x](gpu-facts.md#spot-and-preemption-signals)", headings) == []
    assert unknown_facts_headings("[x](gpu-facts.md#spot-signals)", headings) == ["#spot-signals"]


def test_no_file_cites_what_is_outside_the_repository() -> None:
    offenders = [
        f"{_relative(path)}:{number}: {line}"
        for path in _files()
        for number, line in outside_citations(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "cite docs/gpu-facts.md or the repository's docs instead:\n" + "\n".join(offenders)


def test_every_cited_document_exists() -> None:
    missing = sorted(
        {
            f"{_relative(path)}: {cited}"
            for path in _files()
            if path.relative_to(ROOT).parts[0] != "tests"
            for cited in _DOC_PATH.findall(path.read_text(encoding="utf-8"))
            if not Path(cited).stem.isupper() and not (ROOT / cited).is_file()
        }
    )
    assert missing == []


def test_every_cited_facts_heading_exists() -> None:
    headings = facts_headings()
    assert "MIG Manager reconfiguration flow" in headings
    bad = [
        f"{_relative(path)}: {cited!r}"
        for path in _files()
        for cited in unknown_facts_headings(path.read_text(encoding="utf-8"), headings)
    ]
    assert bad == [], "name a '## ' heading of docs/gpu-facts.md:\n" + "\n".join(bad)


def test_benchmarks_md_holds_its_generators_header_and_notes() -> None:
    from scheduler.sim.bench.all_cli import HEADER, NOTES_DIR

    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert text.startswith(HEADER)
    sections = set(re.findall(r"<!-- bench:([\w-]+) -->", text))
    stale = [
        note.name
        for note in sorted((ROOT / NOTES_DIR).glob("*.md"))
        if note.stem in sections and note.read_text(encoding="utf-8").rstrip() not in text
    ]
    assert stale == [], "regenerate BENCHMARKS.md (bench all --write --only KEY) or copy the notes in"


def prose(path: Path, text: str) -> list[tuple[int, str]]:
    """(first line, text) of every comment and docstring of a ``.py`` file; the whole text of any other file."""
    if path.suffix != ".py":
        return [(1, text)]
    comments = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    docstrings = [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    ]
    return comments + docstrings


def resolves(name: str, task_names: set[str]) -> bool:
    """Whether a dotted name of :data:`PACKAGES` names a module, an attribute, a model or a task (module doc, 5)."""
    from django.apps import apps

    if name in task_names:
        return True
    parts = name.split(".")
    if len(parts) == 2:
        try:
            apps.get_model(name)
            return True
        except LookupError:
            pass
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if attribute in getattr(found, "__dataclass_fields__", {}) and not hasattr(found, attribute):
                return attribute == parts[-1]  # a field without a default: nothing to look into further
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def unknown_code_names(
    chunks: list[tuple[int, str]], file_paths: list[str], task_names: set[str], module: str | None = None
) -> list[str]:
    """``line: name`` for every dotted name, relative name in a role of ``module`` (a ``.py`` file's dotted name)
    or ``.py`` file in ``chunks`` that names nothing (module doc, 5)."""
    base = module.removesuffix(".__init__") if module else ""  # a package's __init__ is the package
    package = base if module and module.endswith(".__init__") else base.rpartition(".")[0]
    bad = []
    for first_line, chunk in chunks:
        for match in _DOTTED.finditer(chunk):
            if not resolves(match.group(), task_names):
                bad.append(f"{first_line + chunk.count(chr(10), 0, match.start())}: {match.group()}")
        for match in _RELATIVE_ROLE.finditer(chunk) if module else ():
            name = match.group(1).rstrip(".")
            if not any(resolves(prefix + name, set()) for prefix in (package, base)):
                bad.append(f"{first_line + chunk.count(chr(10), 0, match.start())}: {name}")
        for match in _PY_FILE.finditer(chunk):
            name = match.group()
            if not any(path == name or path.endswith("/" + name) for path in file_paths):
                bad.append(f"{first_line + chunk.count(chr(10), 0, match.start())}: {name}")
    return bad


def test_the_code_name_rule_catches_what_it_should_and_nothing_else() -> None:
    source = (
        '"""Changed by :func:`scheduler.core.rules.reconfiguration.nodes_per_cycle` (rules/reconfiguration.py), not\n'
        "by scheduler.core.reshuffle, scheduler.kube or portal/demo.py; ``jobs.Job``, billing.ledger_close,\n"
        'demo.py and billing.py, a path like ../x/jobs.py or a name like owner/scheduler.gateway are fine."""\n'
        'LOCK = "scheduler.locks.CYCLE_LOCK"  # a value, not prose; scheduler.loop.locks.CYCLE_LOCK is real\n'
        "# but scheduler.locks is not, nor placement/reshuffle.py\n"
    )
    files = ["scheduler/core/rules/reconfiguration.py", "scheduler/loop/locks.py", "demo/billing.py", "demo/x/demo.py"]
    bad = unknown_code_names(prose(Path("x.py"), source), files, {"billing.ledger_close"}, "scheduler.core.x")
    assert sorted(bad) == sorted(
        [
            "2: scheduler.core.reshuffle",
            "2: scheduler.kube",
            "2: portal/demo.py",
            "5: scheduler.locks",
            "5: placement/reshuffle.py",
        ]
    )
    assert unknown_code_names([(1, "`scheduler.core.model.policy.Policy.mig_reconfigure_s`")], files, set()) == []
    roles = [(1, ":mod:`.placement.spans`, :func:`~.find.find_slots`, :mod:`.spans`, :func:`.find_slots`")]
    assert unknown_code_names(roles, files, set(), "scheduler.core.placement.spans") == ["1: .placement.spans"]
    assert unknown_code_names(roles, files, set(), "scheduler.core.placement.__init__") == ["1: .placement.spans"]
    assert unknown_code_names(roles, files, set(), "scheduler.core.__init__") == [
        "1: .find.find_slots",
        "1: .spans",
        "1: .find_slots",
    ]


def _module(path: Path) -> str | None:
    """The dotted name of a ``.py`` file of the repository; None for any other file."""
    return _relative(path).removesuffix(".py").replace("/", ".") if path.suffix == ".py" else None


def test_every_named_module_and_python_file_exists() -> None:
    every_file = [_relative(path) for path in _files(suffixes=None)] + [_relative(THIS_FILE)]
    sources = {path: path.read_text(encoding="utf-8") for path in _files() if path.suffix in (".py", ".md")}
    task_names = {name for path, text in sources.items() if path.suffix == ".py" for name in _TASK_NAME.findall(text)}
    bad = [
        f"{_relative(path)}:{found}"
        for path, text in sources.items()
        for found in unknown_code_names(prose(path, text), every_file, task_names, _module(path))
    ]
    assert bad == [], "name a module, attribute or file that exists:\n" + "\n".join(bad)
