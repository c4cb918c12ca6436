"""``embedeval needles``: a needle set checked, a NoLiMa one converted, and needles drafted per
theme with a chat model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedeval.cli.options import CacheDir, ChatModelOpt, Quiet, as_typer, out_option, with_option_groups
from embedeval.errors import InputError
from embedeval.io import Force
from embedeval.options import (
    ATTEMPTS,
    CACHE_DIR,
    CHAT_PRICE,
    DRAFT_EMBEDDER,
    DRAFT_MAX_COST,
    DRAFT_PLAN,
    DRAFT_THEMES,
    JUDGE,
    JUDGE_PRICE,
    NQ_BAND,
    PER_THEME,
    QUIET,
    TEMPERATURE,
    THEME_IDS,
    split_list,
)

group = typer.Typer(no_args_is_help=True, help="Check, convert and draft needle sets.")


@group.command("check")
def needles_check(file: Annotated[Path, typer.Argument(help="Needle set JSON (ours, or NoLiMa's schema).")]) -> None:
    """Validate a needle set: a row per group (shared content words, if any) and the variants every
    group serves; exit 1 on any error."""
    from embedeval.needles import load_needle_set, needle_report

    rows, problems = needle_report(file)
    typer.echo(f"{'group':<20} {'category':<14} {'character':<16} {'forms':<16} {'onehop overlap':<18} inverted overlap")
    for row in rows:
        typer.echo(
            f"{row['id']:<20} {row['category']:<14} {row['character'][:16]:<16} {row['forms']:<16} "
            f"{row['onehop_overlap'] or '-':<18} {row['inverted_overlap'] or '-'}"
        )
    for group_id, reason in problems:
        typer.echo(f"{file}: group {group_id}: {reason}", err=True)
    if problems:
        typer.echo(f"error: {len(problems)} problem(s) in {file}", err=True)
        raise typer.Exit(1)
    served = load_needle_set(file).variants_served()  # the file is valid: it loads
    typer.echo(f"ok: {len(rows)} group{'' if len(rows) == 1 else 's'}, no problems; variants every group serves: {', '.join(served)}")


@group.command("convert")
@with_option_groups
def needles_convert(
    file: Annotated[Path, typer.Argument(help="A NoLiMa needle set (adobe-research/NoLiMa needlesets/*.json).")],
    out: out_option("needles convert"),
) -> None:
    """Convert a NoLiMa needle set to embedeval's format, with its provenance (source path and sha256)."""

    from embedeval.errors import NeedleSetError
    from embedeval.io import json_text, write_text_atomic
    from embedeval.needles import convert_nolima, is_nolima_schema, parse_needle_set, read_needle_json

    data = read_needle_json(file)
    if not is_nolima_schema(data):
        raise NeedleSetError(str(file), [("-", "is not a NoLiMa needle set (a list of entries with needle, questions and tests)")])
    converted = convert_nolima(data, str(file))
    needle_set = parse_needle_set(converted, str(file))  # the converted set must load, or nothing is written
    write_text_atomic(out, json_text(converted, ensure_ascii=False) + "\n")
    count = len(needle_set.groups)
    typer.echo(f"wrote {out}: {count} group{'' if count == 1 else 's'}, query forms {', '.join(needle_set.question_forms)}")


@group.command("draft")
@with_option_groups
def needles_draft(
    *,
    themes: as_typer(DRAFT_THEMES),
    llm: ChatModelOpt,
    out: out_option("needles draft"),
    per_theme: as_typer(PER_THEME) = PER_THEME.cli_default,
    themes_ids: as_typer(THEME_IDS) = THEME_IDS.cli_default,
    attempts: as_typer(ATTEMPTS) = ATTEMPTS.cli_default,
    embedder: as_typer(DRAFT_EMBEDDER) = DRAFT_EMBEDDER.cli_default,
    nq_band: as_typer(NQ_BAND) = NQ_BAND.cli_default,
    temperature: as_typer(TEMPERATURE) = TEMPERATURE.cli_default,
    plan: as_typer(DRAFT_PLAN) = DRAFT_PLAN.cli_default,
    judge: as_typer(JUDGE) = JUDGE.cli_default,
    max_cost: as_typer(DRAFT_MAX_COST) = DRAFT_MAX_COST.cli_default,
    chat_price: as_typer(CHAT_PRICE) = CHAT_PRICE.cli_default,
    judge_price: as_typer(JUDGE_PRICE) = JUDGE_PRICE.cli_default,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    quiet: Quiet = QUIET.cli_default,
    force: Force,
) -> None:
    """Draft needle groups per theme with a chat model and keep those that pass every check: no content
    word shared with the question, not already answered by the corpus, blending into the theme, inside
    --nq-band if given, not a near-duplicate, and with --judge, said by the judge to answer its question.
    Without --judge no check tests whether a needle answers its question (the needle set's description
    says so). Rejected drafts are sent back with their reasons."""
    from embedeval.experiments.drafting.config import DraftConfig
    from embedeval.experiments.drafting.loop import run_draft
    from embedeval.experiments.drafting.planning import EMBEDDED_FIRST, check_draft_cost, format_draft_plan, plan_draft, plan_draft_embedding
    from embedeval.experiments.judging import JUDGE_TEMPERATURE
    from embedeval.llm import ChatLLM, parse_chat_spec
    from embedeval.plan import forecast_line, parse_ceiling, parse_price

    band = None
    if nq_band is not None:
        try:
            lo, hi = (float(x) for x in split_list(nq_band))
        except ValueError:
            raise InputError(f"--nq-band takes LO,HI (two numbers), not {nq_band!r}") from None
        band = (lo, hi)
    ids = None if themes_ids is None else tuple(split_list(themes_ids))
    config = DraftConfig(str(themes), llm, str(out), per_theme, ids, attempts, embedder, band, temperature=temperature, judge=judge)
    config.validate()
    ceiling = parse_ceiling(max_cost)
    chat_price = parse_price(chat_price, "chat_price")
    judge_price = parse_price(judge_price, "judge_price")
    if (chat_price is not None or judge_price is not None) and not (plan or ceiling is not None):
        raise InputError("--chat-price and --judge-price go with --plan or --max-cost")
    if judge_price is not None and judge is None:
        raise InputError("--judge-price goes with --judge")
    if plan or ceiling is not None:
        draft_plan = plan_draft(config, parse_chat_spec(llm).name, chat_price, judge_price, force)  # no key needed to plan
        if plan:
            typer.echo(format_draft_plan(draft_plan))
        check_draft_cost(draft_plan, ceiling)

    def say_first(plans: list, err: bool = True) -> None:  # what the draft embeds first: part of the plan, else said before it embeds
        for line in plans:
            typer.echo(forecast_line(line, EMBEDDED_FIRST), err=err)

    if plan:
        say_first(plan_draft_embedding(config, cache_dir, calibrate=False), err=False)
        return
    chat = ChatLLM(llm, temperature=temperature)  # a bad spec or a missing key: one line before any work
    judge_llm = ChatLLM(judge, temperature=JUDGE_TEMPERATURE) if judge else None
    result = run_draft(config, chat, progress=not quiet, cache_dir=cache_dir, judge=judge_llm, max_cost=ceiling,
                       chat_price=chat_price, judge_price=judge_price, say_first=say_first, force=force)
    for theme, kept in result.accepted.items():
        typer.echo(f"theme {theme}: {kept} of {per_theme} groups accepted, {result.rejected_now[theme]} draft(s) rejected")
    count = len(result.needle_set["groups"])
    judged = f", {result.judge_requests} judge request(s)" if judge else "; no judge: nothing checked whether a needle answers its question"
    typer.echo(f"wrote {out}: {count} group{'' if count == 1 else 's'} ({result.requests} chat request(s){judged}); "
               f"rejected drafts with their reasons in {result.rejected_path}")


