"""Text a spreadsheet would run as a formula is written as text; numbers and plain text are left as they are."""

from __future__ import annotations

import pytest
from openpyxl import Workbook

from billing.spreadsheet_cells import csv_cell, keep_as_text


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("=1+1", "'=1+1"),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("-1.5", "-1.5"),
        ("+3", "+3"),
        ("pretrain-7b", "pretrain-7b"),
        ("", ""),
    ],
)
def test_csv_cell(text: str, written: str) -> None:
    assert csv_cell(text) == written


def test_keep_as_text_stores_a_formula_looking_string_as_a_string() -> None:
    sheet = Workbook().worksheets[0]
    sheet.append(["=1+1", "plain", 3])
    formula, plain, number = sheet[1]
    assert formula.data_type == "f"  # what openpyxl makes of it on its own
    for cell in (formula, plain, number):
        keep_as_text(cell)
    assert (formula.data_type, formula.value) == ("s", "=1+1")
    assert (plain.data_type, number.data_type, number.value) == ("s", "n", 3)
