"""``embedeval cache``: where the embedding cache is and what it holds, its check, and clearing it."""

from __future__ import annotations

import typer

from embedeval.cli.options import CacheDir, as_typer
from embedeval.options import CACHE_DIR, CLEARED_EMBEDDER

group = typer.Typer(no_args_is_help=True, help="Inspect or clear the embedding cache.")


@group.command("info")
def cache_info(cache_dir: CacheDir = CACHE_DIR.cli_default) -> None:
    """Where the cache is, how big, how many vectors per embedder, and whether it is intact."""
    from embedeval.embedders.cache import EmbeddingCache

    cache = EmbeddingCache(cache_dir)
    info, check = cache.info(), cache.verify()
    typer.echo(f"path:    {info['path']}")
    typer.echo(f"size:    {info['bytes'] / 1e6:.1f} MB")
    typer.echo(f"vectors: {info['vectors']}")
    for spec, count in info["per_spec"].items():
        typer.echo(f"  {spec}: {count}")
    typer.echo(f"check:   integrity {check['integrity']}, {check['bad_checksums']} vector(s) failing their checksum")
    _echo_damage(check)


def _echo_damage(check: dict) -> None:
    """The specs whose cached vectors mix sizes and the ONNX graphs that fail their sha256, a line each."""
    for spec, sizes in check["mixed_sizes"].items():
        typer.echo(f"mixed sizes: {spec}: " + ", ".join(f"{n} vector(s) of {dim} values" for dim, n in sorted(sizes.items())))
    for path, problem in check["bad_graphs"].items():
        typer.echo(f"ONNX graph {path} {problem}")


@group.command("verify")
def cache_verify(cache_dir: CacheDir = CACHE_DIR.cli_default) -> None:
    """Check the whole cache and the exported ONNX graphs; exit 1 on damage.

    SQLite's integrity check, every vector's checksum, one vector size per embedder, and every
    exported ONNX graph against the sha256 recorded at its export."""
    from embedeval.embedders.cache import EmbeddingCache

    cache = EmbeddingCache(cache_dir)
    report = cache.verify()
    typer.echo(f"{cache.path}: integrity {report['integrity']}, {report['rows']} vectors, "
               f"{report['bad_checksums']} failing their checksum")
    _echo_damage(report)
    if report["integrity"] != "ok" or report["bad_checksums"]:
        typer.echo("error: the cache is damaged; damaged vectors are re-embedded when read, "
                   "or remove the file with `embedeval cache clear`", err=True)
        raise typer.Exit(1)
    if report["mixed_sizes"]:
        specs = list(report["mixed_sizes"])
        typer.echo(f"error: the cached vectors of {', '.join(specs)} mix sizes; remove them with "
                   f"`embedeval cache clear --embedder {specs[0]}`" + (" (each)" if len(specs) > 1 else ""), err=True)
        raise typer.Exit(1)
    if report["bad_graphs"]:
        typer.echo(f"error: {len(report['bad_graphs'])} exported ONNX graph(s) are damaged; each is exported again "
                   "when next used, or remove them with `embedeval cache clear`", err=True)
        raise typer.Exit(1)


@group.command("clear")
def cache_clear(
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    embedder: as_typer(CLEARED_EMBEDDER) = CLEARED_EMBEDDER.cli_default,
) -> None:
    """Delete the cache file and the exported ONNX graphs (works on a corrupt cache too).

    With --embedder, only that embedder's vectors (what a refused vector size asks for)."""
    from embedeval.embedders.cache import EmbeddingCache, clear_cache

    if embedder is not None:
        cache = EmbeddingCache(cache_dir)
        held = cache.info()["per_spec"]
        if embedder not in held:
            typer.echo(f"error: the cache holds no vectors of {embedder}; it holds: {', '.join(held) or 'none'}", err=True)
            raise typer.Exit(1)
        typer.echo(f"removed {cache.remove_spec(embedder)} vector(s) of {embedder} from {cache.path}")
        return
    removed = clear_cache(cache_dir)
    typer.echo(f"removed {len(removed)} file(s)" + (f" from {removed[0].parent}" if removed else ""))


