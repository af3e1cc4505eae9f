"""One Markdown table writer for every benchmark report (header, separator, rows)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def md_table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """``| a | b |`` lines: the header, its ``|---|`` separator, then one line per row."""
    return [_line(head), "|" + "---|" * len(head), *(_line(r) for r in rows)]


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
