"""Plain-text tables for terminals: the one formatter ``ehingest run``/``status`` and the
demo's report print with."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["format_cell", "format_table"]


def format_cell(value: object) -> str:
    """A table cell: ``-`` for nothing, floats to one decimal, anything else as ``str``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def format_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, rule: bool = False
) -> list[str]:
    """The lines of a table: columns padded to their widest cell, two spaces apart, no trailing
    spaces; ``rule`` puts a line of dashes under the header."""
    table = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
