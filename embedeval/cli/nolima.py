"""``embedeval nolima`` (the NoLiMa sweep), ``embedeval report`` (a run's report rebuilt, or runs
compared) and ``embedeval export`` (a run handed on to MTEB or as an LLM prompt set)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedeval.cli.options import (
    CacheDir,
    EmbedderOptions,
    GridOptions,
    NeedleOptions,
    PlanOptions,
    Quiet,
    RunPlanOptions,
    SweepOptions,
    as_typer,
    out_option,
    with_option_groups,
)
from embedeval.errors import InputError
from embedeval.io import Force
from embedeval.options import CACHE_DIR, COMMIT_EVERY, EXPORT_FORMAT, NOLIMA_OUT, QUIET, TEMPLATE

commands = typer.Typer()


@commands.command("nolima")
@with_option_groups
def nolima(
    embedders: EmbedderOptions,
    needles: NeedleOptions,
    grid: GridOptions,
    out: out_option("nolima") = NOLIMA_OUT.cli_default,
    sweep: SweepOptions = SweepOptions(),
    plan: RunPlanOptions = RunPlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Run the NoLiMa needle-in-a-haystack sweep and write tables, figures, decision.csv, report.md and report.html.

    `--embedder bm25` adds a lexical baseline (BM25 over the haystacks of each length).
    `--plan` prints what the sweep would embed, send, cost and take, and stops."""
    from embedeval.experiments.nolima_config import NolimaConfig

    settings = sweep.settings()
    commit_every = settings.pop("commit_every")
    COMMIT_EVERY.check(commit_every)  # not a setting of the sweep's config: run_nolima checks it so too
    config = NolimaConfig(
        embedders=embedders.specs, needles=str(needles.path), groups=needles.group_ids, grid=grid.haystack_grid(),
        distractors_file=None if grid.distractors_file is None else str(grid.distractors_file), out=str(out),
        skip_unavailable=embedders.skip_unavailable, executor=embedders.executor, workers=embedders.workers,
        ray_address=embedders.ray_address, prices=plan.prices, **settings,
    )
    usable, skipped = config.check(keys=plan.run_follows)  # a setting that cannot work: one line, before the sweep's libraries are imported
    from embedeval.embedders.timing import close_early, start_early

    if plan.plan:  # the local models' timing processes load while the plan imports and counts
        start_early(usable, embedders.cache_dir)
    try:
        from embedeval.experiments.nolima import plan_nolima, run_nolima
        from embedeval.report.which import closing_lines

        plans = plan_nolima(config, cache_dir=embedders.cache_dir, prices=plan.prices, calibrate=plan.plan, progress=not quiet,
                            commit_every=commit_every, keys=plan.run_follows) if plan.wanted else None
    finally:  # a plan that stopped early (a bad input file) ends the timing processes it started
        close_early()
    if plans is not None:
        for spec, why in skipped:
            typer.echo(f"skipped {spec} ({why})", err=True)
        if plan.settle(plans, config.memory(config.needle_set(), usable)):
            return
    result = run_nolima(config, progress=not quiet, cache_dir=embedders.cache_dir, commit_every=commit_every)
    for spec, why in result.skipped:
        typer.echo(f"skipped {spec} ({why})")
    for name, count in result.newly_embedded.items():
        texts = result.texts[name]
        typer.echo(f"{name}: {count:,} texts newly embedded, {texts - count:,} found in the cache: the {texts:,} distinct texts "
                   "the run needs (what --plan counts)")
    for line in closing_lines(result.breaks, result.decision, config.rule()):  # the report's words: the answer last
        typer.echo(line)
    typer.echo(f"wrote {out}/report.md and {out}/report.html")


@commands.command("report")
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: out_option("report") = None,
) -> None:
    """Rebuild report.md, report.html and figures of a run, or compare several runs on the same figures."""
    from embedeval.report import compare_runs

    typer.echo(f"wrote {compare_runs(run_dirs, out)}")


@commands.command("export")
@with_option_groups
def export(
    *,
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (embedeval nolima --out).")],
    format: as_typer(EXPORT_FORMAT),
    out: out_option("export"),
    template: as_typer(TEMPLATE) = TEMPLATE.cli_default,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
    force: Force,
) -> None:
    """Hand a run on: MTEB result files (one TaskResult per strategy and query form, a split per length) or an
    LLM prompt set in Context Rot's columns with needle-question and needle-haystack similarity beside each prompt.

    A prompt set's covariates embed the run's corpus chunks: it says first how many (`--plan`: what they would cost, and stop)."""
    from embedeval.export import FORMATS, PromptSet, export_mteb

    if format not in FORMATS:
        raise InputError(f"unknown export format {format!r}; use one of {', '.join(FORMATS)}")
    if format == "mteb":
        if template is not None:
            raise InputError("--template goes with --format prompts")
        if plan.given:
            raise InputError(f"{plan.given[0]} goes with --format prompts (an MTEB export embeds nothing)")
        written = export_mteb(run_dir, out)
        typer.echo(f"wrote {len(written)} MTEB result file(s) under {out}")
        return
    prompts = PromptSet.read(run_dir, out, template, force=force)
    if plan.settle(prompts.plan(cache_dir, plan.prices, calibrate=plan.plan, progress=not quiet)):
        return
    table = prompts.write(cache_dir, progress=not quiet)
    typer.echo(f"wrote {len(table)} prompts to {out}")


