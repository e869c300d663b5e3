"""Tables the CLI prints (plan candidates, device profiles) that never cut their first column.

The first column names the row (``gguf:Q4_K_M``, ``jetson-orin-nano-8gb``): the one thing a reader
looks for, so it is never wrapped or shortened. On a terminal the table is drawn with rich at the
first layout that fits the width whole: every column, then the columns marked ``essential``, then a
stacked list (a line per row, ``header value`` pairs wrapped under it). When stdout is not a terminal
(a pipe, a CI log, a file) the table is plain text: every column, space-aligned, no box characters, no
colour and no wrapping, so it greps and diffs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a table is printed: `edgeopt serve` prints none (resident memory)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

Cell = "str | Text"


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"  # "left" or "right"
    essential: bool = True  # kept when a narrow terminal cannot show every column


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], console: Console | None = None,
                title: str | None = None) -> None:
    if console is None:
        from rich.console import Console

        console = Console()
    if not console.is_terminal:
        console.print(plain_table(columns, rows, title), markup=False, highlight=False, soft_wrap=True)
        return
    natural = [_natural_width(col, [row[i] for row in rows]) for i, col in enumerate(columns)]
    needed = [_needed_width(col, [row[i] for row in rows]) for i, col in enumerate(columns)]
    for keep in (list(range(len(columns))), [i for i, c in enumerate(columns) if c.essential or i == 0]):
        if _drawn_width(natural, keep) <= console.width:  # headers on one line
            console.print(_rich_table(columns, rows, keep, None, title))
            return
        if _drawn_width(needed, keep) <= console.width:  # headers wrapped between words
            console.print(_rich_table(columns, rows, keep, needed, title))
            return
    console.print(_stacked(columns, rows, title, console.width), markup=False, highlight=False)


def print_line(console: Console, markup: str) -> None:
    """A line of prose beside a table: rich markup on a terminal, plain and unwrapped elsewhere."""
    console.print(markup, soft_wrap=not console.is_terminal)


def plain_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], title: str | None = None) -> str:
    """Every column, aligned with two spaces between them; numbers right-aligned."""
    cells = [[c.header for c in columns]] + [[_plain(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [title] if title else []
    for line in cells:
        parts = [cell.rjust(w) if col.justify == "right" else cell.ljust(w)
                 for cell, w, col in zip(line, widths, columns)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _drawn_width(widths: list[int], keep: list[int]) -> int:
    # rich's box: a border left of every column and one at the end, one space of padding each side
    return sum(widths[i] + 3 for i in keep) + 1


def _natural_width(column: Column, cells: Sequence[Cell]) -> int:
    return max([len(_plain(cell)) for cell in cells] + [len(column.header)])


def _needed_width(column: Column, cells: Sequence[Cell]) -> int:
    """Narrowest width that cuts nothing: the longest cell, and the header's longest word (a header may
    wrap between words, never inside one)."""
    return max([len(_plain(cell)) for cell in cells] + [len(word) for word in column.header.split()])


def _rich_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], keep: list[int],
                widths: list[int] | None, title: str | None) -> Table:
    """``widths``: exact column widths, where rich's own shrinking (which cuts cells, not only headers)
    must not decide them."""
    from rich.table import Table

    table = Table(title=title)
    for i in keep:
        col = columns[i]
        table.add_column(col.header, justify=col.justify, no_wrap=i == 0,  # type: ignore[arg-type]
                         width=widths[i] if widths else None)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _stacked(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], title: str | None, width: int) -> str:
    """One block per row: its name on a line of its own, then its ``header: value`` pairs packed into
    indented lines (a pair is never split)."""
    lines = [title] if title else []
    for row in rows:
        lines.append(_plain(row[0]))
        line = " "
        for col, cell in zip(columns[1:], row[1:]):
            pair = f" {col.header}: {_plain(cell)};"
            if len(line) + len(pair) > width and line.strip():
                lines.append(line.rstrip(";"))
                line = " "
            line += pair
        lines.append(line.rstrip(";"))
    return "\n".join(lines)


def _plain(cell: Cell) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else cell
