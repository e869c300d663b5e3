"""The ``edgeopt`` command: wiring only. Each command lives in edgeopt/cli/commands/<name>.py.

Errors from the :class:`EdgeoptError` hierarchy are printed in one place (``main``) as one line with
the fix; a traceback appears only with ``--debug``.
"""

from __future__ import annotations

import sys

import typer

# Every command module keeps its heavy imports (torch, transformers, the server) inside its functions, so
# importing them all here costs `edgeopt --help` nothing it would notice (tests/cli/test_import_cost.py).
from edgeopt.cli.commands import (bench_cmd, demo_cmd, eval_cmd, import_cmd, inspect_cmd, monitor_cmd, optimize_cmd,
                              plan_cmd, profiles_cmd, serve_cmd, worker_cmd)
from edgeopt.errors import EdgeoptError
from edgeopt.cli.help_layout import use_readable_help

app = typer.Typer(
    name="edgeopt",
    help="Optimize a Hugging Face language model for a small device, serve it, and watch it run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_debug = {"on": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    _debug["on"] = debug


app.command("profiles")(profiles_cmd.profiles)
app.command("plan")(plan_cmd.plan)
app.command("optimize")(optimize_cmd.optimize)
app.command("inspect")(inspect_cmd.inspect)
app.command("serve")(serve_cmd.serve)
app.add_typer(bench_cmd.bench_app, name="bench")
app.command("eval")(eval_cmd.eval_bundle)
app.command("demo-model")(demo_cmd.demo_model)
app.command("import")(import_cmd.import_gguf)
app.command("monitor")(monitor_cmd.monitor)
app.command("worker")(worker_cmd.worker)
# commands register above this line: this gives every one of them (and bench's) the help layout that
# never cuts an option name at 80 columns or in a pipe
use_readable_help(app)


def main() -> None:
    try:
        app(standalone_mode=False)
    except EdgeoptError as exc:
        if _debug["on"]:
            raise
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        if exc.hint:
            typer.secho(f"  fix: {exc.hint}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # usage errors (unknown option, bad value) arrive here in non-standalone mode
        # click's, or those of the copy of click that recent typer carries: both can show themselves
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(exc.exit_code)
        raise

if __name__ == "__main__":
    main()
