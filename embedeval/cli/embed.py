"""``embedeval embedders`` (the embedders known, and whether each can run here) and ``embedeval
embed`` (a file's texts embedded)."""

from __future__ import annotations

import typer

from embedeval.cli.options import APIOptions, CacheDir, EmbedderOpt, Quiet, as_typer, out_option, with_option_groups
from embedeval.io import Force
from embedeval.options import CACHE_DIR, EMBEDDER, INPUT, KIND, QUIET
from embedeval.strategies import strategy_choices

commands = typer.Typer()


@commands.command("embedders")
def list_embedders() -> None:
    """List known embedder specs and whether each is usable now."""
    from embedeval.embedders.options import API_OPTION_CHOICES, LOCAL_OPTION_CHOICES
    from embedeval.embedders.registry import PRESETS, availability, known_specs

    for spec in known_specs():
        usable, why = availability(spec)
        typer.echo(f"{spec:<36} {'ready' if usable else 'unavailable':<12} {why}")
    for name, specs in PRESETS.items():
        typer.echo(f"{name:<36} {'preset':<12} {', '.join(specs)}")
    for prefix, choices in (("st:", LOCAL_OPTION_CHOICES), ("API", API_OPTION_CHOICES)):
        typer.echo(f"{prefix} options, in the spec (?name=value&...): " + "; ".join(f"{name} ({what})" for name, what in choices.items()))
    typer.echo("strategies (--strategy): " + "; ".join(f"{name} ({what})" for name, what in strategy_choices().items()))


@commands.command("embed")
@with_option_groups
def embed(
    *,
    input: as_typer(INPUT),
    out: out_option("embed"),
    embedder: EmbedderOpt = EMBEDDER.cli_default,
    kind: as_typer(KIND) = KIND.cli_default,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    api: APIOptions,
    quiet: Quiet = QUIET.cli_default,
    force: Force,
) -> None:
    """Embed the texts of a file (through the cache) and write the vectors."""
    from embedeval.embedders import load_embedder
    from embedeval.io import read_texts, write_embeddings

    texts = read_texts(input)
    model = load_embedder(embedder, cache_dir=cache_dir, progress=not quiet)
    vectors = model.embed(texts, kind=kind)
    write_embeddings(out, texts, vectors, force)
    if not quiet:
        typer.echo(f"wrote {len(texts)} x {vectors.shape[1]} vectors to {out} ({model.stats.embedded} newly embedded)")


