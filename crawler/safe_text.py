"""Names a third party chose, made harmless where they are shown.

GeoIP databases are third-party files, tracker URLs come from whoever wrote a
magnet, and torrent names are chosen by anyone: a city called
``=HYPERLINK("http://…")`` runs as a formula when an export is opened in a
spreadsheet, and one called ``\\x1b]0;pwned\\x07`` rewrites a terminal's title
when ``stats`` prints it. What is stored stays as it came (it is a count's
key); these functions change only what is written out for a reader.

- ``csv_cell``: a text cell that a spreadsheet would read as a formula
  (first character ``=``, ``+``, ``-``, ``@``, tab or carriage return) gets a
  leading ``'``, as OWASP's "CSV Injection" page recommends; the csv module
  then quotes separators and quotes. Numbers are written as they are.
- ``terminal``: C0 and C1 control characters (escape sequences begin with
  one) and the Unicode bidirectional overrides (which reorder what a reader
  sees) become ``?``.
"""

from __future__ import annotations

import re

# What makes a spreadsheet (Excel, LibreOffice, Google Sheets) evaluate a cell.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# C0, DEL, C1; the bidi embeddings, overrides and isolates (U+202A-202E,
# U+2066-2069); line and paragraph separators, which break a table's rows.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def csv_cell(value: object) -> object:
    """``value`` as a CSV cell no spreadsheet evaluates: text that would start a formula is
    prefixed with ``'``; anything that is not text comes back unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_row(values) -> list:
    """Every cell of a row through ``csv_cell``."""
    return [csv_cell(v) for v in values]


def terminal(value: str) -> str:
    """``value`` with every control character, bidirectional override and line separator
    replaced by ``?``, so printing it cannot move the cursor, recolour, retitle or reorder."""
    return _UNSHOWABLE.sub("?", value)
