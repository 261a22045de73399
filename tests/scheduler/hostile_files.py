"""Hostile and broken files for the commands that read a person's file (test_cli_hostile_files.py).

Each :class:`Case` writes one file into a folder and returns the path to hand the command: files that are
not text, text that is not JSON/YAML, JSON/YAML that the standard parsers crash on or expand without limit,
documents whose top level is not an object, and valid documents with hostile values at real keys. The
cases are data: every command gets the same reading cases, so a count per command is comparable.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MISSING = "missing"


@dataclass(frozen=True)
class Case:
    id: str
    write: Callable[[Path], str]  # folder → the path argument for the command


def file_of(name: str, data: bytes | Callable[[], bytes]) -> Callable[[Path], str]:
    def write(folder: Path) -> str:
        path = folder / name
        path.write_bytes(data() if callable(data) else data)
        return str(path)

    return write


def _missing(name: str) -> Callable[[Path], str]:
    return lambda folder: str(folder / name)


def _directory(name: str) -> Callable[[Path], str]:
    def write(folder: Path) -> str:
        (folder / name).mkdir()
        return str(folder / name)

    return write


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, indent=1, ensure_ascii=False).encode()


def file_cases(name: str, valid: bytes, *, text_ok: bool = True) -> list[Case]:
    """What is wrong with the file as a file or as text, whatever its format (``valid``: a good file)."""
    garbage = random.Random(8).randbytes(4096)
    cases = [
        Case("missing", _missing(name)),
        Case("directory", _directory(name)),
        Case("empty", file_of(name, b"")),
        Case("latin-1", file_of(name, valid.replace(b"e", b"\xe9", 1) if b"e" in valid else b"\xe9" + valid)),
        Case("utf-16-bom", file_of(name, valid.decode().encode("utf-16"))),
        Case("utf-16-no-bom", file_of(name, valid.decode().encode("utf-16-le"))),
        Case("binary-garbage", file_of(name, garbage)),
        Case("gzip", file_of(name, gzip.compress(valid, mtime=0))),
        Case("nul-appended", file_of(name, valid + b"\0")),
        Case("nul-inside", file_of(name, valid[: len(valid) // 2] + b"\0" + valid[len(valid) // 2 :])),
        Case("dev-zero", lambda folder: "/dev/zero"),
        Case("dev-urandom", lambda folder: "/dev/urandom"),
    ]
    if text_ok:
        cases += [Case("whitespace-only", file_of(name, b"  \n\t\n"))]
    return cases


def json_cases(name: str, valid: dict[str, Any], key: str) -> list[Case]:
    """Reading cases for a command that takes a JSON object; ``key`` is one of its real keys."""
    text = dumps(valid)

    def with_raw(raw: str) -> bytes:
        """``valid`` with ``raw`` (JSON text, possibly not JSON at all) as the value at ``key``."""
        marker = "__HOSTILE__"
        return dumps({**valid, key: marker}).replace(f'"{marker}"'.encode(), raw.encode())

    deep = 100_000
    cases = [
        *file_cases(name, text),
        Case("oversized", file_of(name, lambda: text + b" " * (8 * 2**20))),
        Case("deep-arrays", file_of(name, b"[" * deep + b"]" * deep)),
        Case("deep-objects", file_of(name, b'{"a":' * deep + b"1" + b"}" * deep)),
        Case("deep-under-recursion-limit", file_of(name, with_raw("[" * 900 + "]" * 900))),
        Case("deep-at-key", file_of(name, with_raw('{"a":' * 40 + "1" + "}" * 40))),
        Case("int-5000-digits-at-key", file_of(name, with_raw("1" * 5000))),
        Case("int-5000-digits-top-level", file_of(name, b"9" * 5000)),
        Case("fraction-5000-digits-at-key", file_of(name, with_raw("0." + "0" * 4999 + "1"))),
        Case("exponent-overflow-at-key", file_of(name, with_raw("1e999999"))),
        Case("nan-at-key", file_of(name, with_raw("NaN"))),
        Case("infinity-at-key", file_of(name, with_raw("Infinity"))),
        Case("minus-infinity-at-key", file_of(name, with_raw("-Infinity"))),
        Case("escaped-nul-at-key", file_of(name, with_raw('"a\\u0000b"'))),
        Case("lone-surrogate-at-key", file_of(name, with_raw('"\\ud800"'))),
        Case("lone-surrogate-in-a-key", file_of(name, text.replace(b"{", b'{"\\udfff": 1, ', 1))),
        Case("top-level-list", file_of(name, b"[" + text + b"]")),
        Case("top-level-string", file_of(name, b'"spec"')),
        Case("top-level-number", file_of(name, b"42")),
        Case("top-level-null", file_of(name, b"null")),
        Case("top-level-true", file_of(name, b"true")),
        Case("truncated", file_of(name, text[: len(text) // 2])),
        Case("trailing-garbage", file_of(name, text + b" }{")),
        Case("duplicate-key", file_of(name, text.replace(b"{", f'{{"{key}": 1, '.encode(), 1))),
        Case("single-quotes", file_of(name, text.replace(b'"', b"'"))),
        Case("comments", file_of(name, b"// a spec\n" + text)),
        Case("yaml-in-a-json-file", file_of(name, f"{key}: 1\n".encode())),
        Case("ten-thousand-unknown-keys", file_of(name, dumps({**valid, **{f"k{i}": i for i in range(10_000)}}))),
        Case("megabyte-string-at-key", file_of(name, with_raw(json.dumps("x" * 2**20)))),
    ]
    return cases


def yaml_cases(name: str, valid_yaml: str) -> list[Case]:
    """Reading cases only YAML has (plus the file cases for a .yaml name)."""
    laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    deep = 100_000
    nested_block = "".join("  " * i + f"k{i}:\n" for i in range(2000)) + "  " * 2000 + "v\n"
    docs = {
        "billion-laughs": laughs,
        "billion-laughs-under-teams": laughs.replace("i: &i", "teams: &i"),
        "recursive-alias": "teams: &a [*a]\n",
        "recursive-alias-mapping": "teams: &a {x: *a}\n",
        "undefined-alias": "teams: *nowhere\n",
        "python-object-apply": "teams: !!python/object/apply:os.system ['true']\n",
        "python-name": "teams: !!python/name:os.system\n",
        "python-object-new": "teams: !!python/object/new:dict {}\n",
        "binary-tag": "teams: !!binary aGVsbG8=\n",
        "set-tag": "teams: !!set {a, b}\n",
        "omap-tag": "teams: !!omap [a: 1]\n",
        "custom-tag": "teams: !custom x\n",
        "deep-flow": "teams: " + "[" * deep + "]" * deep + "\n",
        "deep-block": nested_block,
        "int-5000-digits": "teams: " + "1" * 5000 + "\n",
        "hex-10000-digits": "teams: 0x" + "f" * 10000 + "\n",
        "float-5000-digits": "teams: 1." + "1" * 5000 + "\n",
        "sexagesimal": "teams: " + ":".join(["59"] * 100) + "\n",
        "infinity": "teams: [{name: a, slug: a, namespace: a, weight: .inf}]\n",
        "nan": "teams: [{name: a, slug: a, namespace: a, weight: .nan}]\n",
        "two-documents": valid_yaml + "---\n" + valid_yaml,
        "int-key": "1: x\n",
        "bool-key": "yes: x\n",
        "null-key": "~: x\n",
        "list-key": "? [a, b]\n: x\n",
        "mapping-key": "? {a: b}\n: x\n",
        "duplicate-key": "teams: []\nteams: []\n",
        "merge-of-a-scalar": "teams:\n  - <<: 1\n",
        "tab-indentation": "teams:\n\t- name: x\n",
        "bell-character": "teams: \x07\n",
        "escaped-nul": 'teams: [{name: "a\\0b", slug: a, namespace: a}]\n',
        "escaped-surrogate": 'teams: [{name: "\\ud800", slug: a, namespace: a}]\n',
        "comments-only": "# nothing here\n",
        "document-marker-only": "---\n",
        "top-level-list": "- teams\n",
        "top-level-scalar": "teams\n",
        "timestamp-as-name": "teams: [{name: 2024-01-01, slug: a, namespace: a}]\n",
        "unterminated-quote": 'teams: "abc\n',
        "very-long-key": "k" * 100_000 + ": 1\n",
    }
    return file_cases(name, valid_yaml.encode()) + [
        Case(f"yaml-{key}", file_of(name, doc.encode())) for key, doc in docs.items()
    ]


# Values a person (or a fuzzer) puts where a number, a string or a list belongs.
HOSTILE_VALUES: tuple[Any, ...] = (
    None,
    True,
    -1,
    0,
    0.001,
    1e-300,
    1e308,
    -1e308,
    2**63,
    10**30,
    "",
    " ",
    "x" * 10_000,
    "\u202e\u0007\u001b[31m",
    [],
    {},
    [[]],
    {"a": {"b": {}}},
)


def value_cases(name: str, valid: dict[str, Any], paths: Iterable[tuple[str | int, ...]]) -> list[Case]:
    """``valid`` with each of :data:`HOSTILE_VALUES` at each key path (a valid document with a bad value)."""
    cases = []
    for path in paths:
        for index, value in enumerate(HOSTILE_VALUES):
            doc = json.loads(json.dumps(valid))
            target = doc
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = value
            label = ".".join(str(part) for part in path)
            cases.append(Case(f"value-{label}-{index}", file_of(name, dumps(doc))))
    return cases


def csv_cases(name: str, valid: bytes, *, oversize_bytes: int, integer_column: int | None = None) -> list[Case]:
    """Reading cases for a CSV trace; ``integer_column`` (index) gets an integer of 5,000 digits, and the
    oversized file is ``oversize_bytes`` long (the test lowers the trace cap to keep it small)."""
    header, _, rows = valid.partition(b"\n")
    first = rows.split(b"\n", 1)[0]
    width = first.count(b",") + 1
    cases = [
        *file_cases(name, valid),
        Case("header-only", file_of(name, header + b"\n")),
        Case("wrong-header", file_of(name, b"a,b,c\n" + rows)),
        Case("header-of-garbage", file_of(name, b"x" * 100_000 + b"\n" + rows)),
        Case("field-beyond-the-csv-limit", file_of(name, valid + b"9" * 200_000 + b"\n")),
        Case("long-row", file_of(name, valid + b",".join([b"1"] * (width + 3)) + b"\n")),
        Case("unbalanced-quote", file_of(name, valid + b'"abc\n')),
        Case("crlf-and-bare-cr", file_of(name, valid.replace(b"\n", b"\r\n") + b"1\r2\r")),
        Case("number-nan", file_of(name, valid + b",".join([b"nan"] * width) + b"\n")),
        Case("number-inf", file_of(name, valid + b",".join([b"inf"] * width) + b"\n")),
        Case("number-1e999", file_of(name, valid + b",".join([b"1e999"] * width) + b"\n")),
        Case("number-negative", file_of(name, valid + b",".join([b"-5"] * width) + b"\n")),
        Case("oversized", file_of(name, lambda: valid + b"\n" * oversize_bytes)),
    ]
    if width > 1:  # a one-column file has no short row
        cases.append(Case("short-row", file_of(name, valid + b"1\n")))
    if integer_column is not None:
        fields = first.split(b",")
        fields[integer_column] = b"1" * 5000
        cases.append(Case("integer-5000-digits", file_of(name, valid + b",".join(fields) + b"\n")))
    return cases


def nul_in_path(name: str) -> Case:
    """A path holding a NUL, which ``open`` refuses with ValueError (only call_command can pass one)."""
    return Case("nul-in-the-path", lambda folder: str(folder / f"a\0{name}"))


def unreadable(name: str, valid: bytes) -> Case | None:
    """A file without read permission; None when running as root, who reads it anyway."""
    if os.geteuid() == 0:
        return None

    def write(folder: Path) -> str:
        path = folder / name
        path.write_bytes(valid)
        path.chmod(0)
        return str(path)

    return Case("no-read-permission", write)
