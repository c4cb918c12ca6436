"""``embedeval expand``: a chat model's search terms per question, stored for offline sweeps."""

from __future__ import annotations

import typer

from embedeval.cli.options import ChatModelOpt, NeedleOptions, Quiet, as_typer, out_option, with_option_groups
from embedeval.options import BASE_URL, EXPANSION_SIZES, QUIET, TEMPERATURE

commands = typer.Typer()


@commands.command("expand")
@with_option_groups
def expand_command(
    out: out_option("expand"),
    llm: ChatModelOpt,
    needles: NeedleOptions,
    sizes: as_typer(EXPANSION_SIZES) = EXPANSION_SIZES.cli_default,
    base_url: as_typer(BASE_URL) = BASE_URL.cli_default,
    temperature: as_typer(TEMPERATURE) = TEMPERATURE.cli_default,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Ask a chat model for N search terms per question and store them for offline sweeps."""
    from embedeval.expansion import build_expansion_file, write_expansions
    from embedeval.llm import ChatLLM

    size_list = EXPANSION_SIZES.value(sizes)
    EXPANSION_SIZES.check(size_list)  # before the chat model is asked (build_expansion_file checks them so too)
    if base_url is not None:
        typer.echo("warning: --base-url is deprecated; use --llm 'openai:MODEL?base_url=URL' (with key_env=VAR for a key)", err=True)
    chat = ChatLLM(llm, base_url, temperature)  # a bad spec or a missing key: one line before any work
    needle_set = needles.load()
    checkpoint = out.with_name(f".{out.name}.partial")  # finished questions, so a rerun asks only for the rest
    data = build_expansion_file(needle_set, size_list, chat, progress=not quiet, checkpoint=checkpoint)
    write_expansions(data, out)
    checkpoint.unlink(missing_ok=True)  # only once the file is safely written
    typer.echo(f"wrote {len(needle_set.groups)} questions x sizes {', '.join(map(str, size_list))} to {out}")


