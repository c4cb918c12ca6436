"""``embedeval expand``: a chat model's search terms per question, stored for offline sweeps."""

from __future__ import annotations

import typer

from embedeval.cli.options import ChatModelOpt, NeedleOptions, Quiet, option_group, out_option, with_option_groups
from embedeval.options import BASE_URL, EXPANSION_SIZES, QUIET, TEMPERATURE

commands = typer.Typer()

#: What the chat model is asked for (the sizes), where (the deprecated --base-url) and how (its temperature).
ExpandOptions = option_group("ExpandOptions", (EXPANSION_SIZES, BASE_URL, TEMPERATURE),
                             "The expansion sizes and the chat model's server and temperature.")


@commands.command("expand")
@with_option_groups
def expand_command(
    out: out_option("expand"),
    llm: ChatModelOpt,
    needles: NeedleOptions,
    asked: ExpandOptions = ExpandOptions(),  # noqa: B008 - an option group (pyproject.toml: extend-immutable-calls)
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Ask a chat model for N search terms per question and store them for offline sweeps."""
    from embedeval.expansion import build_expansion_file, write_expansions
    from embedeval.llm import ChatLLM

    settings = asked.settings()
    size_list, base_url = settings[EXPANSION_SIZES.parameter], settings[BASE_URL.parameter]
    EXPANSION_SIZES.check(size_list)  # before the chat model is asked (build_expansion_file checks them so too)
    if base_url is not None:
        typer.echo("warning: --base-url is deprecated; use --llm 'openai:MODEL?base_url=URL' (with key_env=VAR for a key)", err=True)
    chat = ChatLLM(llm, base_url, settings[TEMPERATURE.parameter])  # a bad spec or a missing key: one line before any work
    needle_set = needles.load()
    checkpoint = out.with_name(f".{out.name}.partial")  # finished questions, so a rerun asks only for the rest
    data = build_expansion_file(needle_set, size_list, chat, progress=not quiet, checkpoint=checkpoint)
    write_expansions(data, out)
    checkpoint.unlink(missing_ok=True)  # only once the file is safely written
    typer.echo(f"wrote {len(needle_set.groups)} questions x sizes {', '.join(map(str, size_list))} to {out}")


