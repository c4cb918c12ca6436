"""The ``embedeval`` command. Thin: parses options, calls the library, prints results.

Any :class:`~embedeval.errors.EmbedevalError` becomes one ``error: ...`` line on stderr and
exit status 1; no traceback for user mistakes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import click
import typer
from typer.core import TyperGroup

from embedeval import __version__
from embedeval.errors import EmbedevalError, InputError


class _UserErrorsAsOneLine(TyperGroup):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EmbedevalError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_UserErrorsAsOneLine,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Evaluate embedding models for retrieval over long contexts.",
)
cache_app = typer.Typer(no_args_is_help=True, help="Inspect or clear the embedding cache.")
app.add_typer(cache_app, name="cache")

CacheDir = Annotated[
    Optional[Path],
    typer.Option("--cache-dir", envvar="EMBEDEVAL_CACHE", help="Embedding cache folder [default: user cache dir]."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"embedeval {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Evaluate embedding models for retrieval over long contexts."""


@app.command("embedders")
def list_embedders() -> None:
    """List known embedder specs and whether each is usable now."""
    from embedeval.embedders.registry import PRESETS, availability, known_specs

    for spec in known_specs():
        usable, why = availability(spec)
        typer.echo(f"{spec:<36} {'ready' if usable else 'unavailable':<12} {why}")
    for name, specs in PRESETS.items():
        typer.echo(f"{name:<36} {'preset':<12} {', '.join(specs)}")


@app.command("embed")
def embed(
    input: Annotated[Path, typer.Option("--input", "-i", help="One text per line, or .jsonl with a \"text\" field.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output .npy or .parquet.")],
    embedder: Annotated[str, typer.Option("--embedder", "-e", help="Embedder spec.")] = "st:all-MiniLM-L6-v2",
    kind: Annotated[str, typer.Option(help="query or document.")] = "document",
    cache_dir: CacheDir = None,
    quiet: Quiet = False,
) -> None:
    """Embed the texts of a file (through the cache) and write the vectors."""
    from embedeval.embedders import load_embedder
    from embedeval.io import read_texts, write_embeddings

    if out.suffix not in (".npy", ".parquet"):
        raise InputError(f"output {out} must end in .npy or .parquet")
    texts = read_texts(input)
    model = load_embedder(embedder, cache_dir=cache_dir, progress=not quiet)
    vectors = model.embed(texts, kind=kind)
    write_embeddings(out, texts, vectors)
    if not quiet:
        typer.echo(f"wrote {len(texts)} x {vectors.shape[1]} vectors to {out} ({model.texts_embedded} newly embedded)")


@cache_app.command("info")
def cache_info(cache_dir: CacheDir = None) -> None:
    """Where the cache is, how big, and how many vectors per embedder."""
    from embedeval.embedders.cache import EmbeddingCache

    info = EmbeddingCache(cache_dir).info()
    typer.echo(f"path:    {info['path']}")
    typer.echo(f"size:    {info['bytes'] / 1e6:.1f} MB")
    typer.echo(f"vectors: {info['vectors']}")
    for spec, count in info["per_spec"].items():
        typer.echo(f"  {spec}: {count}")


@cache_app.command("clear")
def cache_clear(cache_dir: CacheDir = None) -> None:
    """Delete the cache file (works on a corrupt cache too)."""
    from embedeval.embedders.cache import clear_cache

    removed = clear_cache(cache_dir)
    typer.echo(f"removed {len(removed)} file(s)" + (f" from {removed[0].parent}" if removed else ""))


def main() -> None:
    """Console-script entry point."""
    app()
