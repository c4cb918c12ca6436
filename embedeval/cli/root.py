"""The ``embedeval`` app: its options before any command (``--version``, ``--force``), the help's
width, the console-script entry point, and a user's mistake as one line.

Any :class:`~embedeval.errors.EmbedevalError`, and any mistake the option parser finds itself (an
unknown option, a value of the wrong type, a missing value), becomes one ``error: ...`` line on
stderr and exit status 1; no traceback and no boxed usage message for user mistakes. The commands
are the other modules of :mod:`embedeval.cli`, a module per command group.
"""

from __future__ import annotations

import os
import re
import sys

import typer
from typer.core import TyperGroup

try:  # newer typer carries its own copy of click (typer._click)
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

from embedeval.cli.options import as_typer, in_flag_words
from embedeval.errors import EmbedevalError
from embedeval.io import Force
from embedeval.net.keys import forget_run_keys, scrub_printed
from embedeval.options import FORCE, VERSION


def usage_error_line(exc: click_errors.UsageError, where: str = "embedeval") -> str:
    """One line for a mistake the option parser found in command ``where`` (click's boxed,
    multi-line message otherwise): ``no such option --lenghts; did you mean --lengths?``,
    ``invalid value for --depths: input should be a valid integer, ...``, ``option --lengths
    requires an argument; `embedeval nolima --help` lists the options``."""
    if isinstance(exc, click_errors.NoSuchOption):
        closest = exc.possibilities[0] if exc.possibilities else None  # difflib's closest first
        return (f"no such option {exc.option_name}; " +
                (f"did you mean {closest}?" if closest else f"`{where} --help` lists the options"))
    message = " ".join(exc.format_message().split())
    message = re.sub(r"'(--?[A-Za-z][\w-]*)'", r"\1", message)  # '--depths' -> --depths
    message = re.sub(r"^(Invalid value for [^:]+: )(\w)", lambda m: m[1] + m[2].lower(), message)
    message = message.replace(". Did you mean", "; did you mean")  # an unknown command's suggestion
    message = message[:1].lower() + message[1:]
    return message if "did you mean" in message else f"{message.rstrip('.')}; `{where} --help` lists the options"


def _command_path(ctx: typer.Context, words: list[str]) -> str:
    """The command the words after ``ctx``'s name lead to (``embedeval cache info``): where a
    usage error raised without a context happened (click's parser raises a missing value so)."""
    command, path = ctx.command, [ctx.command_path]
    for word in words:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        path.append(word)
    return " ".join(path)


class _UserErrorsAsOneLine(TyperGroup):
    """The ``embedeval`` group: a user's mistake is one ``error:`` line and exit status 1, whether
    the library refused it (an :class:`~embedeval.errors.EmbedevalError`) or the option parser
    did (a click usage error, raised while this group or a command below it parses its
    arguments). ``embedeval`` alone, or a group alone, still prints its help."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click_errors.UsageError as exc:
            _refuse_usage(exc, exc.ctx.command_path if exc.ctx is not None else info_name)

    def invoke(self, ctx: typer.Context):
        words = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the command and its arguments, before invoke takes them
        forget_run_keys()  # a command is a run: the keys it reads are the ones scrubbed from what it prints, writes and sends
        try:
            return super().invoke(ctx)
        except EmbedevalError as exc:
            typer.echo(f"error: {scrub_printed(in_flag_words(exc))}", err=True)  # no key of the run, in any encoding
            raise typer.Exit(1) from None
        except click_errors.UsageError as exc:
            _refuse_usage(exc, exc.ctx.command_path if exc.ctx is not None else _command_path(ctx, words))


def _refuse_usage(exc: click_errors.UsageError, where: str):
    if isinstance(exc, getattr(click_errors, "NoArgsIsHelpError", ())):  # a group given no command: its help, as before
        raise exc
    typer.echo(f"error: {usage_error_line(exc, where)}", err=True)
    raise typer.Exit(1) from None


app = typer.Typer(
    cls=_UserErrorsAsOneLine,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Evaluate embedding models for retrieval over long contexts.",
)


def _version(value: bool) -> None:
    if value:
        from embedeval import __version__

        typer.echo(f"embedeval {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    version: as_typer(VERSION, callback=_version, is_eager=True) = VERSION.cli_default,
    force: as_typer(FORCE) = FORCE.cli_default,
) -> None:
    """Evaluate embedding models for retrieval over long contexts."""
    from embedeval.messages import show_on_stderr

    show_on_stderr()  # the library's warnings and notes, as the lines they were
    ctx.obj = Force(force)  # the command's writers replace a file embedeval did not write only so (cli.options.with_option_groups)


#: Columns of the help when stdout is not a terminal (piped to a file, a pager or grep): rich
#: would render 80 and cut long defaults (``[default: 128,256,512,1024,2048,4096,819…]``).
PIPED_HELP_WIDTH = 200


def _help_width() -> None:
    """Render help :data:`PIPED_HELP_WIDTH` columns wide when stdout is not a terminal and neither
    ``TERMINAL_WIDTH`` (typer's) nor ``COLUMNS`` says otherwise; a terminal's own width otherwise."""
    if sys.stdout.isatty() or os.environ.get("TERMINAL_WIDTH") or os.environ.get("COLUMNS"):
        return
    os.environ["TERMINAL_WIDTH"] = str(PIPED_HELP_WIDTH)  # typer reads it when it first renders help
    rendering = sys.modules.get("typer.rich_utils")
    if rendering is not None:  # already imported: it read the variable then
        rendering.MAX_WIDTH = PIPED_HELP_WIDTH


def main() -> None:
    """Console-script entry point."""
    _help_width()
    app()
