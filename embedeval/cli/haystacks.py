"""``embedeval haystacks``: the haystack grid built, and one haystack shown."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedeval.cli.options import GridOptions, NeedleOptions, Quiet, as_typer, out_option, with_option_groups
from embedeval.errors import InputError
from embedeval.options import CONTROLS, HAYSTACK_ID, QUIET

group = typer.Typer(no_args_is_help=True, help="Build and inspect haystacks.")


@group.command("build")
@with_option_groups
def haystacks_build(
    out: out_option("haystacks build"),
    needles: NeedleOptions,
    grid: GridOptions,
    controls: as_typer(CONTROLS) = CONTROLS.cli_default,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Build the deterministic haystack grid and write it as Parquet."""
    from embedeval.haystacks import build_haystacks
    from embedeval.io import write_table

    haystack_grid = grid.haystack_grid(controls)
    needle_set = grid.needle_set(needles)  # before the corpus is read
    frame = build_haystacks(needle_set, haystack_grid, progress=not quiet)
    write_table(frame, out)
    typer.echo(f"wrote {len(frame)} haystacks to {out}")


@group.command("show")
def haystacks_show(
    id: as_typer(HAYSTACK_ID),
    file: Annotated[Path, typer.Argument(help="A haystacks.parquet file.")],
) -> None:
    """Print one haystack with its needle highlighted as [[...]]."""
    import pandas as pd

    from embedeval.run import HAYSTACKS, read_run_table
    from embedeval.schema import HAYSTACK_COLUMNS, LATER_HAYSTACK_COLUMNS

    # older files lack the later columns; a file of any name is checked as a run's haystacks.parquet
    frame = read_run_table(file, [c for c in HAYSTACK_COLUMNS if c not in LATER_HAYSTACK_COLUMNS], table=HAYSTACKS)
    match = frame[frame["id"] == id]
    if match.empty:
        raise InputError(f"no haystack with id {id!r} in {file} (ids look like {frame['id'].iloc[0]!r})")
    row = match.iloc[0]
    depth = "-" if pd.isna(row["depth"]) else f"{row['depth']:.3f}"
    typer.echo(f"{row['id']}  variant={row['variant']}  tokens={row['n_tokens']}/{row['length']}  depth={depth}")
    typer.echo(f"sources: {', '.join(row['sources'])}\n")
    text = row["text"]
    if pd.isna(row["needle_start"]):
        typer.echo(text)
        return
    start, end = int(row["needle_start"]), int(row["needle_end"])
    typer.echo(text[:start] + typer.style(f"[[{text[start:end]}]]", fg="yellow", bold=True) + text[end:])


