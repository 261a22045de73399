"""``manage.py mig``: profiles, layouts, validate, fit — JSON shapes, exit codes, no database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.core.sizing.layouts import maximal_layouts

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    out = StringIO()
    call_command("mig", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _fail(*args: str) -> tuple[CommandError, str]:
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("mig", *args, stdout=out, stderr=StringIO())
    return caught.value, out.getvalue()


def test_profiles_json_lists_every_profile_with_its_geometry() -> None:
    payload = json.loads(_run("profiles", "--gpu", "A100-SXM4-40GB", "--json"))
    assert payload["gpu_model"] == "A100-SXM4-40GB"
    assert payload["profiles"][0] == {
        "name": "1g.5gb",
        "compute_slices": 1,
        "memory_slices": 1,
        "memory_mib": 4864,
        "max_count": 7,
        "starts": [0, 1, 2, 3, 4, 5, 6],
    }
    assert [p["name"] for p in payload["profiles"]] == [
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    assert payload["profiles"][2] == {
        "name": "1g.10gb",
        "compute_slices": 1,
        "memory_slices": 2,
        "memory_mib": 9856,
        "max_count": 4,
        "starts": [0, 2, 4, 6],
    }


@pytest.mark.parametrize("model", [spec.name for spec in GPU_MODELS])
def test_profiles_table_for_every_model(model: str) -> None:
    text = _run("profiles", "--gpu", model)
    assert text.startswith(f"MIG profiles of {model}")
    assert "PROFILE" in text and "MEMORY MiB" in text
    assert len(text.strip().splitlines()) == 2 + 7


@pytest.mark.parametrize(("with_me", "flag"), [(False, ()), (True, ("--with-me",))])
def test_layouts_json_is_every_maximal_layout(with_me: bool, flag: tuple[str, ...]) -> None:
    payload = json.loads(_run("layouts", "--gpu", "H100-SXM5-80GB", "--json", *flag))
    assert payload["gpu_model"] == "H100-SXM5-80GB"
    expected = maximal_layouts("H100-SXM5-80GB", with_me=with_me)
    assert payload["layouts"] == [[[name, start] for name, start in layout] for layout in expected]
    assert [["4g.40gb", 0], ["3g.40gb", 4]] in payload["layouts"]
    assert any("+me" in name for layout in payload["layouts"] for name, _ in layout) == with_me


def test_layouts_table() -> None:
    text = _run("layouts", "--gpu", "A100-SXM4-80GB")
    assert text.splitlines()[0] == f"{len(maximal_layouts('A100-SXM4-80GB'))} maximal MIG layouts of A100-SXM4-80GB"
    assert "  4g.40gb@0,3g.40gb@4" in text.splitlines()


@pytest.mark.parametrize(
    ("layout", "text"),
    [
        ("4g.40gb@0,3g.40gb@4", "valid layout for A100-SXM4-80GB: 4g.40gb@0,3g.40gb@4"),
        ("3g.40gb@4,4g.40gb@0", "valid layout for A100-SXM4-80GB: 4g.40gb@0,3g.40gb@4"),
        ("", "valid layout for A100-SXM4-80GB: (empty: MIG off)"),
        ("all-balanced", "valid layout for A100-SXM4-80GB: 1g.10gb@0,1g.10gb@1,2g.20gb@2,3g.40gb@4"),
    ],
)
def test_validate_accepts_legal_layouts(layout: str, text: str) -> None:
    assert json.loads(_run("validate", "--gpu", "A100-SXM4-80GB", "--layout", layout, "--json")) == {"valid": True}
    assert _run("validate", "--gpu", "A100-SXM4-80GB", "--layout", layout).strip() == text


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("4g.40gb@0,3g.40gb@0", "3g.40gb@0 overlaps another instance at memory slice 0"),
        ("3g.40gb@2", "3g.40gb cannot start at memory slice 2; allowed starts: 0, 4"),
        ("1g.5gb@0", "'1g.5gb' is not a MIG profile of A100-SXM4-80GB"),
        ("4g.40gb", "'4g.40gb' is not PROFILE@START"),
        ("all-enabled", "all-enabled turns MIG on without instances"),
    ],
)
def test_validate_refuses_illegal_layouts_with_exit_1(layout: str, reason: str) -> None:
    error, out = _fail("validate", "--gpu", "A100-SXM4-80GB", "--layout", layout, "--json")
    assert error.returncode == 1
    payload = json.loads(out)
    assert payload["valid"] is False
    assert reason in payload["reason"]
    assert reason in str(error)


@pytest.mark.parametrize(
    ("model", "gib", "expected"),
    [
        ("A100-SXM4-40GB", "4", {"profile": "1g.5gb", "memory_mib": 4864}),
        ("A100-SXM4-40GB", "5", {"profile": "1g.10gb", "memory_mib": 9856}),
        ("H100-SXM5-80GB", "15", {"profile": "1g.20gb", "memory_mib": 20096}),
        ("H100-SXM5-80GB", "0.5", {"profile": "1g.10gb", "memory_mib": 9984}),
        ("H200-SXM-141GB", "100", {"profile": "7g.141gb", "memory_mib": 132096}),
    ],
)
def test_fit_json(model: str, gib: str, expected: dict[str, object]) -> None:
    assert json.loads(_run("fit", "--gpu", model, "--memory-gib", gib, "--json")) == expected
    assert _run("fit", "--gpu", model, "--memory-gib", gib).startswith(f"{expected['profile']} on {model}")


def test_fit_says_when_nothing_holds_the_memory() -> None:
    error, out = _fail("fit", "--gpu", "A100-SXM4-80GB", "--memory-gib", "90", "--json")
    assert error.returncode == 1
    assert json.loads(out) == {
        "error": "no MIG profile of A100-SXM4-80GB holds 90 GiB: the largest, 7g.80gb, has 76.0 GiB; "
        "request whole GPUs instead"
    }


@pytest.mark.parametrize("gib", ["0", "-3", "lots", "nan", "inf"])
def test_fit_refuses_a_nonsense_amount(gib: str) -> None:
    error, _ = _fail("fit", "--gpu", "H100-SXM5-80GB", "--memory-gib", gib)
    assert error.returncode == 2
    assert "--memory-gib must be a positive number of GiB" in str(error)


@pytest.mark.parametrize(
    "args",
    [
        ("profiles", "--gpu", "V100"),
        ("layouts", "--gpu", "V100", "--json"),
        ("validate", "--gpu", "V100", "--layout", "7g.80gb@0"),
        ("fit", "--gpu", "V100", "--memory-gib", "8"),
    ],
)
def test_unknown_model_lists_the_known_ones(args: tuple[str, ...]) -> None:
    error, out = _fail(*args)
    assert error.returncode == 2
    assert "unknown GPU model 'V100'; known: A100-SXM4-40GB, A100-SXM4-80GB" in str(error)
    if "--json" in args:
        assert json.loads(out)["error"] == str(error)


@pytest.mark.parametrize(
    ("layout", "returncode", "valid"),
    [("4g.40gb@0,3g.40gb@4", 0, True), ("4g.40gb@0,3g.40gb@0", 1, False)],
)
def test_validate_exit_codes_from_the_shell(layout: str, returncode: int, valid: bool) -> None:
    env = {**os.environ, "DEBUG": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "mig", "validate", "--gpu", "A100-SXM4-80GB", "--layout", layout, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == returncode, done.stderr
    assert json.loads(done.stdout)["valid"] is valid
