"""Plain-text tables for the reproductions: GitHub markdown and CSV (no extra dependency)."""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["fmt", "markdown_table", "csv_text", "write_table", "parse_markdown_table"]


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: floats with ``digits`` decimals, ``None`` / NaN as an empty cell."""
    if value is None:
        return ""
    if isinstance(value, float | int) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            return ""
        if isinstance(value, int):
            return str(value)
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, digits: int = 4) -> str:
    """A GitHub-markdown table; numeric columns are right-aligned."""
    cells = [[fmt(v, digits) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[j], float | int) or row[j] is None for row in rows) and bool(rows)
        for j in range(len(header))
    ]
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]], *, digits: int = 6) -> str:
    """The same table as CSV (more digits than the markdown version)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([fmt(v, digits) for v in row])
    return buf.getvalue()


def write_table(
    path_stem: str | os.PathLike,
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    caption: str = "",
    digits: int = 4,
) -> tuple[Path, Path]:
    """Write ``<stem>.md`` (caption + markdown table) and ``<stem>.csv``; return both paths."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, cs = stem.with_suffix(".md"), stem.with_suffix(".csv")
    text = (caption.rstrip() + "\n\n" if caption else "") + markdown_table(
        header, rows, digits=digits
    )
    md.write_text(text, encoding="utf-8")
    cs.write_text(csv_text(header, rows), encoding="utf-8")
    return md, cs


def parse_markdown_table(text: str) -> tuple[list[str], list[list[str]]]:
    """Parse the first markdown table in ``text`` into ``(header, rows)`` of strings.

    Raises:
        ValueError: no table, or a row whose number of cells differs from the header's.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("|")]
    if len(lines) < 2:
        raise ValueError("no markdown table found.")

    def cells(line: str) -> list[str]:
        inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]

    header = cells(lines[0])
    rows = [cells(ln) for ln in lines[2:]]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, header {len(header)}: {row}")
    return header, rows
