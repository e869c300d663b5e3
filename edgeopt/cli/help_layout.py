"""``--help`` that reads whole at any terminal width and in pipes.

typer's rich layout puts every option in a table whose columns rich shrinks to fit the terminal: at
80 columns it cuts option names (``--insecure-no-a…``) and wraps descriptions to a word a line. Click's
plain layout never cuts a name (a long one moves its description to the next line). So each command
renders the rich layout only where it comes out whole (stdout a terminal, and a trial render at the
terminal's width that cuts nothing); anywhere else (narrow terminals, pipes, CI logs) the plain one.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# Recent typer (0.29 here) carries its own copy of click, so click's classes are not the ones its commands
# are made of: commands, contexts and parameters are duck-typed here (params, param_type_name, opts).
Command = Any
Context = Any
Formatter = Any

# Below this many columns the rich table leaves too little room for descriptions to read well, even
# when nothing is cut.
MIN_RICH_COLUMNS = 100
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CUT_MARK = "…"  # rich's ellipsis where it cut a cell


def rich_help_fits(command: Command, ctx: Context, markup_mode: str | None) -> bool:
    """Whether typer's rich help of ``command`` shows whole at this terminal's width."""
    if markup_mode is None or not sys.stdout.isatty():
        return False
    width = shutil.get_terminal_size().columns
    if width < MIN_RICH_COLUMNS:
        return False
    text = _ANSI.sub("", _render_rich_help(command, ctx, markup_mode, width))
    return _CUT_MARK not in text and all(_shows_whole(name, text) for name in option_names(command))


def option_names(command: Command) -> list[str]:
    """Every flag spelling of ``command``'s options (``--prefix-cache``, ``--no-prefix-cache``, ``-c``)."""
    return [name for param in command.params if getattr(param, "param_type_name", "") == "option"
            for name in (*param.opts, *param.secondary_opts)]


def _shows_whole(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def _render_rich_help(command: Command, ctx: Context, markup_mode: str, width: int) -> str:
    # typer builds a fresh rich Console per help, sized by its module-level MAX_WIDTH and writing to
    # sys.stdout; a trial render borrows both for the duration of the call.
    from typer import rich_utils

    saved = rich_utils.MAX_WIDTH
    buffer = io.StringIO()
    rich_utils.MAX_WIDTH = width
    try:
        with contextlib.redirect_stdout(buffer):
            rich_utils.rich_format_help(obj=command, ctx=ctx, markup_mode=markup_mode)  # type: ignore[arg-type]
    finally:
        rich_utils.MAX_WIDTH = saved
    return buffer.getvalue()


class ReadableCommand(TyperCommand):
    def format_help(self, ctx: Context, formatter: Formatter) -> None:
        _format_help(self, ctx, formatter, super().format_help)


class ReadableGroup(TyperGroup):
    def format_help(self, ctx: Context, formatter: Formatter) -> None:
        _format_help(self, ctx, formatter, super().format_help)


def _format_help(command: TyperCommand | TyperGroup, ctx: Context, formatter: Formatter,
                 typer_format_help: Callable[[Context, Formatter], None]) -> None:
    """typer's own help, rich where it fits, else with markup off: typer's plain (click) layout."""
    mode = command.rich_markup_mode
    if rich_help_fits(command, ctx, mode):
        typer_format_help(ctx, formatter)
        return
    command.rich_markup_mode = None
    try:
        typer_format_help(ctx, formatter)
    finally:
        command.rich_markup_mode = mode


def use_readable_help(app: typer.Typer) -> None:
    """Give ``app``, its commands and its sub-apps (recursively) the readable help layout."""
    # typer fills in its own classes (or a Default placeholder) where none was asked for; a command that
    # chose a class of its own keeps it.
    app.info.cls = ReadableGroup
    for command in app.registered_commands:
        if not isinstance(command.cls, type) or command.cls is TyperCommand:
            command.cls = ReadableCommand
    for group in app.registered_groups:
        if not isinstance(group.cls, type) or group.cls is TyperGroup:
            group.cls = ReadableGroup
        if group.typer_instance is not None:
            use_readable_help(group.typer_instance)
