"""The library runs inside a job's container: standard library only, nothing of Microcosm's own stack; and the
documentation shows the example the tests run."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import microcosm_checkpoint

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "microcosm_checkpoint"


def module_level_imports(path: Path) -> set[str]:
    """The top-level packages a module imports when it is imported (not inside functions, not for type checking)."""
    found = set()
    pending = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.If | ast.Try | ast.With):
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_package_imports_only_the_standard_library_and_itself() -> None:
    outside = {
        f"{path.name}: {name}"
        for path in sorted(PACKAGE.glob("*.py"))
        for name in module_level_imports(path)
        if name not in sys.stdlib_module_names and name != "microcosm_checkpoint" and name != "__future__"
    }
    assert outside == set()


def test_the_package_saves_and_restores_with_no_installed_package_at_all(tmp_path: Path) -> None:
    """In an interpreter without site-packages (-S) and without the environment (-I): what a bare image has."""
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import microcosm_checkpoint, microcosm_checkpoint.torch
from microcosm_checkpoint import Checkpointer
ck = Checkpointer.from_env({{"CHECKPOINT_DIR": {str(tmp_path)!r}}})
ck.save(3, {{"w": [1.5]}})
assert Checkpointer.from_env({{"CHECKPOINT_DIR": {str(tmp_path)!r}}}).restore() == (3, {{"w": [1.5]}})
assert not {{"django", "numpy", "torch"}} & set(sys.modules), sorted(sys.modules)
print("ok")
"""
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr


def test_all_names_the_public_api() -> None:
    public = {
        name
        for name, value in vars(microcosm_checkpoint).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert sorted(microcosm_checkpoint.__all__) == sorted(public)


def test_the_documentation_shows_the_example_the_tests_run() -> None:
    example = (ROOT / "docs" / "examples" / "checkpointed_training.py").read_text(encoding="utf-8")
    document = (ROOT / "docs" / "checkpointing.md").read_text(encoding="utf-8")
    assert f"```python\n{example}```\n" in document, "copy docs/examples/checkpointed_training.py into the page"
