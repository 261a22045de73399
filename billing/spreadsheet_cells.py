"""Text a spreadsheet shows and never runs (OWASP, CSV injection).

Team, project and job names and audit values are typed by people, and a spreadsheet opening a download runs a
cell that starts with ``=`` (CSV also ``+``, ``-``, ``@``, a tab or a carriage return) as a formula. Every CSV
and XLSX the portal writes passes its text through here: a CSV cell gets a leading apostrophe, an XLSX cell is
stored as a string, and numbers such as ``-1.5`` stay numbers.
"""

from __future__ import annotations

from openpyxl.cell import Cell, MergedCell

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """``text`` as a CSV cell a spreadsheet reads as text."""
    return "'" + text if text.startswith(_FORMULA_STARTS) and not _is_number(text) else text


def keep_as_text(cell: Cell | MergedCell) -> None:
    """An XLSX cell openpyxl took for a formula (a string starting with ``=``) stored as the string it was."""
    if cell.data_type == "f":  # openpyxl's data types: "f" formula, "s" string
        cell.data_type = "s"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
