"""Generate docs/cli.md from the real ``--help`` of every embedeval command.

    python docs/make_cli_docs.py           # rewrite docs/cli.md
    python docs/make_cli_docs.py --check   # exit 1 if docs/cli.md differs from the help output

Help is rendered at a fixed width (``TERMINAL_WIDTH=100``, set before typer is imported) so the
file is the same on every machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TERMINAL_WIDTH"] = "100"
os.environ["NO_COLOR"] = "1"

import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from embedeval.cli import app  # noqa: E402

TARGET = Path(__file__).resolve().parent / "cli.md"


def command_paths(command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    if hasattr(command, "commands"):  # a group
        for name in sorted(command.commands):
            paths += command_paths(command.commands[name], prefix + (name,))
    return paths


def render() -> str:
    runner = CliRunner()
    parts = ["# embedeval command line", "",
             "Generated from the real `--help` output by `python docs/make_cli_docs.py`; a test fails when",
             "this file and the code disagree.", ""]
    for path in command_paths(typer.main.get_command(app)):
        result = runner.invoke(app, [*path, "--help"], prog_name="embedeval")
        if result.exit_code != 0:
            raise SystemExit(f"`embedeval {' '.join(path)} --help` failed: {result.output}")
        help_text = "\n".join(line.rstrip() for line in result.output.strip().splitlines())
        parts += [f"## `{' '.join(('embedeval', *path))}`", "", "```text", help_text, "```", ""]
    return "\n".join(parts)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.is_file() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is out of date: run python docs/make_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
