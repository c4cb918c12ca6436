"""``embedeval themes``: a corpus's themes found, and needles checked against them (``themes membership``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedeval.cli.options import CacheDir, NeedleOptions, PairOptions, PlanOptions, Quiet, ThemeOptions, as_typer, out_option, with_option_groups
from embedeval.cli.similarity import write_rows
from embedeval.errors import InputError
from embedeval.options import CACHE_DIR, CLUSTER, MEMBERSHIP_EMBEDDER, MIN_OUTSIDE_PERCENTILE, QUIET, THRESHOLD

group = typer.Typer(help="A corpus's themes (UMAP + HDBSCAN + MMR, Chroma's Context Rot recipe), and whether needles blend into them.")


@group.callback(invoke_without_command=True)
@with_option_groups
def themes(
    ctx: typer.Context,
    settings: ThemeOptions,
    out: out_option("themes") = None,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Find a corpus's themes: 1-3-sentence chunks, embedded, UMAP, HDBSCAN, MMR representatives and top
    terms per cluster (defaults: Chroma's Context Rot study). `embedeval themes membership DIR` then checks
    needles against them."""
    if ctx.invoked_subcommand is not None:
        return
    from embedeval.experiments.themes.chunks import cut_corpus
    from embedeval.experiments.themes.run import check_themes_out, plan_themes, run_themes

    if out is None:
        raise InputError("--out is required: the run directory for the themes")
    config = settings.config(out)
    config.validate()
    if plan.run_follows:
        check_themes_out(config)  # before the corpus is read
    chunks = cut_corpus(config, progress=not quiet)
    if plan.settle(plan_themes(config, cache_dir, plan.prices, calibrate=plan.plan, progress=not quiet, chunks=chunks)):
        return
    result = run_themes(config, progress=not quiet, cache_dir=cache_dir, chunks=chunks)
    clusters, chunks = result.clusters, result.chunks
    every = f" ({int((clusters['stability'] == 1).sum())} of them in all {config.runs} clusterings)" if config.runs > 1 else ""
    typer.echo(f"{len(chunks)} chunks, {len(clusters)} clusters{every}, noise {(chunks['cluster'] == -1).mean():.1%}; "
               f"largest: cluster 0, {clusters['size'].iloc[0]} chunks ({clusters['top_terms'].iloc[0].replace(';', ', ')})")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    typer.echo(f"time: {timings}")
    typer.echo(f"wrote {out}/report.md")


@group.command("membership")
@with_option_groups
def themes_membership(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by embedeval themes.")],
    out: out_option("themes membership"),
    needles: NeedleOptions,
    pairs: PairOptions,
    cluster: as_typer(CLUSTER) = CLUSTER.cli_default,
    threshold: as_typer(THRESHOLD) = THRESHOLD.cli_default,
    min_outside_percentile: as_typer(MIN_OUTSIDE_PERCENTILE) = MIN_OUTSIDE_PERCENTILE.cli_default,
    embedder: as_typer(MEMBERSHIP_EMBEDDER) = MEMBERSHIP_EMBEDDER.cli_default,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Each needle (every variant; or each pair's needle) projected onto the run's themes: its predicted
    cluster, its probability, its mean cosine to the target theme's nearest chunks with that value's
    percentile among the corpus outside the theme (and inside it), and whether it blends into the
    target theme (probability > threshold and outside percentile >= its minimum); beside them, the
    theme it is nearest (best_cluster) with the same measures.

    A pair file may name each needle's target in a cluster (or theme) column, so needles written for
    several themes are checked in one run. A theme is named by its number or by a term of its top
    terms (writing): a term names one theme, and keeps naming it when another machine numbers the
    clusters otherwise."""
    from embedeval.experiments.context_rot import pair_rows
    from embedeval.experiments.themes.membership import MembershipCheck

    source = pairs.load(needles)
    rows = pair_rows(source)
    if pairs.pairs is not None and any(pair.target_cluster is not None for pair in source):
        rows["target_cluster"] = [pair.target_cluster for pair in source]
    check = MembershipCheck.read(run_dir, rows, cluster, threshold, min_outside_percentile, embedder)
    if plan.settle(check.plan(cache_dir, plan.prices, calibrate=plan.plan, progress=not quiet)):
        return
    table = check.table(cache_dir, progress=not quiet)
    write_rows(table, out)
    rule = f"(probability > {threshold} and outside percentile >= {min_outside_percentile:g})"
    targets = table["target_cluster"].unique()
    if len(targets) == 1:
        typer.echo(f"{int(table['blends_in'].sum())} of {len(table)} needles blend into cluster {targets[0]} {rule}")
    else:
        each = "; ".join(f"cluster {target}: {int(group['blends_in'].sum())} of {len(group)}"
                         for target, group in table.groupby("target_cluster", sort=True))
        typer.echo(f"{int(table['blends_in'].sum())} of {len(table)} needles blend into their target clusters {rule}: {each}")
    elsewhere = table[table["best_cluster"] != table["target_cluster"]]
    if len(elsewhere):
        typer.echo(f"{len(elsewhere)} needle(s) sit nearer another theme than their target (best_cluster in {out})")


