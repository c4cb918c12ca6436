"""The ``embedeval`` command. Thin: parses options, calls the library, prints results.

Any :class:`~embedeval.errors.EmbedevalError`, and any mistake the option parser finds itself (an
unknown option, a value of the wrong type, a missing value), becomes one ``error: ...`` line on
stderr and exit status 1; no traceback and no boxed usage message for user mistakes.

This module imports only the light part of the package: the library behind a command is imported
inside the command, so ``embedeval --help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # newer typer carries its own copy of click (typer._click)
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

from embedeval.cli_options import (
    in_flag_words,
    APIOptions, CacheDir, ChatModelOpt, ChromaUrlOpt, ChunkOptions, DistractorsFileOpt, EmbedderOpt, ThemeOptions, EmbedderOptions, GridOptions,
    NeedleOptions, PairOptions, PlanOptions, Quiet, RunPlanOptions, SweepOptions, as_typer, with_option_groups,
)
from embedeval.defaults import (
    DEFAULT_ABSENCE_TOP_K, DEFAULT_INDEX,
    DEFAULT_TOP_K,
)
from embedeval.errors import EmbedevalError, InputError
from embedeval.io import check_output_file
from embedeval.net.keys import forget_run_keys, scrub_printed
from embedeval.options import (
    ATTEMPTS, CACHE_DIR, COMMIT_EVERY, EMBEDDER, EXPANSION_SIZES, MAX_COST, MIN_OUTSIDE_PERCENTILE, NOLIMA_OUT, PER_THEME, PLAN, QUIET, TEMPERATURE, THEME_IDS, THRESHOLD,
    split_list,
)
from embedeval.strategies import strategy_choices


def usage_error_line(exc: click_errors.UsageError, where: str = "embedeval") -> str:
    """One line for a mistake the option parser found in command ``where`` (click's boxed,
    multi-line message otherwise): ``no such option --lenghts; did you mean --lengths?``,
    ``invalid value for --depths: input should be a valid integer, ...``, ``option --lengths
    requires an argument; `embedeval nolima --help` lists the options``."""
    if isinstance(exc, click_errors.NoSuchOption):
        closest = exc.possibilities[0] if exc.possibilities else None  # difflib's closest first
        return (f"no such option {exc.option_name}; " +
                (f"did you mean {closest}?" if closest else f"`{where} --help` lists the options"))
    message = " ".join(exc.format_message().split())
    message = re.sub(r"'(--?[A-Za-z][\w-]*)'", r"\1", message)  # '--depths' -> --depths
    message = re.sub(r"^(Invalid value for [^:]+: )(\w)", lambda m: m[1] + m[2].lower(), message)
    message = message.replace(". Did you mean", "; did you mean")  # an unknown command's suggestion
    message = message[:1].lower() + message[1:]
    return message if "did you mean" in message else f"{message.rstrip('.')}; `{where} --help` lists the options"


def _command_path(ctx: typer.Context, words: list[str]) -> str:
    """The command the words after ``ctx``'s name lead to (``embedeval cache info``): where a
    usage error raised without a context happened (click's parser raises a missing value so)."""
    command, path = ctx.command, [ctx.command_path]
    for word in words:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        path.append(word)
    return " ".join(path)


class _UserErrorsAsOneLine(TyperGroup):
    """The ``embedeval`` group: a user's mistake is one ``error:`` line and exit status 1, whether
    the library refused it (an :class:`~embedeval.errors.EmbedevalError`) or the option parser
    did (a click usage error, raised while this group or a command below it parses its
    arguments). ``embedeval`` alone, or a group alone, still prints its help."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click_errors.UsageError as exc:
            _refuse_usage(exc, exc.ctx.command_path if exc.ctx is not None else info_name)

    def invoke(self, ctx: typer.Context):
        words = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the command and its arguments, before invoke takes them
        forget_run_keys()  # a command is a run: the keys it reads are the ones scrubbed from what it prints, writes and sends
        try:
            return super().invoke(ctx)
        except EmbedevalError as exc:
            typer.echo(f"error: {scrub_printed(in_flag_words(exc))}", err=True)  # no key of the run, in any encoding
            raise typer.Exit(1) from None
        except click_errors.UsageError as exc:
            _refuse_usage(exc, exc.ctx.command_path if exc.ctx is not None else _command_path(ctx, words))


def _refuse_usage(exc: click_errors.UsageError, where: str):
    if isinstance(exc, getattr(click_errors, "NoArgsIsHelpError", ())):  # a group given no command: its help, as before
        raise exc
    typer.echo(f"error: {usage_error_line(exc, where)}", err=True)
    raise typer.Exit(1) from None


app = typer.Typer(
    cls=_UserErrorsAsOneLine,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Evaluate embedding models for retrieval over long contexts.",
)
cache_app = typer.Typer(no_args_is_help=True, help="Inspect or clear the embedding cache.")
needles_app = typer.Typer(no_args_is_help=True, help="Check, convert and draft needle sets.")
haystacks_app = typer.Typer(no_args_is_help=True, help="Build and inspect haystacks.")
app.add_typer(cache_app, name="cache")
app.add_typer(needles_app, name="needles")
app.add_typer(haystacks_app, name="haystacks")
similarity_app = typer.Typer(no_args_is_help=True, help="Needle-question / needle-haystack similarity across embedders.")
app.add_typer(similarity_app, name="similarity")
themes_app = typer.Typer(help="A corpus's themes (UMAP + HDBSCAN + MMR, Chroma's Context Rot recipe), and whether needles blend into them.")
app.add_typer(themes_app, name="themes")

TABLE_SUFFIXES = (".csv", ".parquet")
OutTable = Annotated[Path, typer.Option("--out", help="Output .csv or .parquet.")]


def _version(value: bool) -> None:
    if value:
        from embedeval import __version__

        typer.echo(f"embedeval {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing output file that embedeval did not write (or that was "
                           "changed since), saying so in one note per file; without it such a file is never replaced. "
                           "Give it before the command: embedeval --force COMMAND ... (embedeval knows the files it wrote "
                           "by a record in its cache folder, outputs/, named by each file's path: nothing is written beside "
                           "them; a run folder keeps its own record inside it)")
    ] = False,
) -> None:
    """Evaluate embedding models for retrieval over long contexts."""
    from embedeval.io import allow_replacing
    from embedeval.messages import show_on_stderr

    show_on_stderr()  # the library's warnings and notes, as the lines they were
    allow_replacing(force)


@app.command("embedders")
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


@app.command("embed")
@with_option_groups
def embed(
    *,
    input: Annotated[Path, typer.Option("--input", "-i", help="One text per line, or .jsonl with a \"text\" field.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output .npy or .parquet.")],
    embedder: EmbedderOpt = EMBEDDER.cli_default,
    kind: Annotated[str, typer.Option(help="query or document.")] = "document",
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    api: APIOptions,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Embed the texts of a file (through the cache) and write the vectors."""
    from embedeval.embedders import load_embedder
    from embedeval.io import read_texts, write_embeddings

    check_output_file(out, (".npy", ".parquet"))
    texts = read_texts(input)
    model = load_embedder(embedder, cache_dir=cache_dir, progress=not quiet)
    vectors = model.embed(texts, kind=kind)
    write_embeddings(out, texts, vectors)
    if not quiet:
        typer.echo(f"wrote {len(texts)} x {vectors.shape[1]} vectors to {out} ({model.stats.embedded} newly embedded)")


@cache_app.command("info")
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
    if info["legacy_vectors"]:
        typer.echo(f"older:   {info['legacy_vectors']} vectors of cache format 1: the bundled model's texts are reused as they are read, the rest embedded again")
    typer.echo(f"check:   integrity {check['integrity']}, {check['bad_checksums']} vector(s) failing their checksum")
    _echo_damage(check)


def _echo_damage(check: dict) -> None:
    """The specs whose cached vectors mix sizes and the ONNX graphs that fail their sha256, a line each."""
    for spec, sizes in check["mixed_sizes"].items():
        typer.echo(f"mixed sizes: {spec}: " + ", ".join(f"{n} vector(s) of {dim} values" for dim, n in sorted(sizes.items())))
    for path, problem in check["bad_graphs"].items():
        typer.echo(f"ONNX graph {path} {problem}")


@cache_app.command("verify")
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


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    embedder: as_typer(EMBEDDER, cli_type=Optional[str], help="Remove only this embedder's vectors (its name as the cache lists it).") = None,
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


@needles_app.command("check")
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


@needles_app.command("convert")
def needles_convert(
    file: Annotated[Path, typer.Argument(help="A NoLiMa needle set (adobe-research/NoLiMa needlesets/*.json).")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the needle set in embedeval's format (.json).")],
) -> None:
    """Convert a NoLiMa needle set to embedeval's format, with its provenance (source path and sha256)."""

    from embedeval.errors import NeedleSetError
    from embedeval.io import json_text, write_text_atomic
    from embedeval.needles import convert_nolima, is_nolima_schema, parse_needle_set, read_needle_json

    if out.resolve() == file.resolve():
        raise InputError(f"--out {out} is the NoLiMa file itself; write the converted set elsewhere")
    check_output_file(out, (".json",))
    data = read_needle_json(file)
    if not is_nolima_schema(data):
        raise NeedleSetError(str(file), [("-", "is not a NoLiMa needle set (a list of entries with needle, questions and tests)")])
    converted = convert_nolima(data, str(file))
    needle_set = parse_needle_set(converted, str(file))  # the converted set must load, or nothing is written
    write_text_atomic(out, json_text(converted, ensure_ascii=False) + "\n")
    count = len(needle_set.groups)
    typer.echo(f"wrote {out}: {count} group{'' if count == 1 else 's'}, query forms {', '.join(needle_set.question_forms)}")


@needles_app.command("draft")
def needles_draft(
    themes: Annotated[Path, typer.Option("--themes", help="A directory written by embedeval themes: the themes to draft needles for.")],
    llm: ChatModelOpt,
    out: Annotated[Path, typer.Option("--out", help="The needle set to write (.json); an earlier draft there, from the same themes, chat model and judge, is resumed; a second draft into it while one runs is refused. Rejected drafts go to NAME.rejected.csv beside it.")],
    per_theme: as_typer(PER_THEME) = PER_THEME.cli_default,
    themes_ids: as_typer(THEME_IDS) = THEME_IDS.cli_default,
    attempts: as_typer(ATTEMPTS) = ATTEMPTS.cli_default,
    embedder: as_typer(EMBEDDER, cli_type=Optional[str], help="Embedder of the needle-question similarity recorded for every needle (default: the themes run's).") = None,
    nq_band: Annotated[Optional[str], typer.Option("--nq-band", help="LO,HI: keep only groups whose one-hop and inverted needles' needle-question similarity lies in [LO, HI] (Context Rot's needles: 0.445-0.775; default: no band).")] = None,
    temperature: as_typer(TEMPERATURE) = TEMPERATURE.cli_default,
    plan: as_typer(PLAN, help="Print the chat requests and tokens the draft would send and what it would embed first (the themes run's chunks), and stop: nothing is sent or written.") = PLAN.cli_default,
    judge: Annotated[Optional[str], typer.Option("--judge", help="A chat model, named as --llm names one (it may be the same), asked per one-hop and inverted needle whether the needle alone lets a careful reader answer the question with the character; a needle it says does not answer is rejected with its reason, and its verdicts are recorded. Default: no judge, and then no check tests whether a needle answers its question.")] = None,
    max_cost: as_typer(MAX_COST, help="Refuse to start when the draft could cost more than this many USD, and stop before any request that could take it past this while it runs (needs --chat-price).") = MAX_COST.cli_default,
    chat_price: Annotated[Optional[str], typer.Option("--chat-price", metavar="<float>", help="The chat model's price in USD per million tokens (sent and received), for --plan and --max-cost.")] = None,
    judge_price: Annotated[Optional[str], typer.Option("--judge-price", metavar="<float>", help="The judge's price in USD per million tokens (default: --chat-price).")] = None,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Draft needle groups per theme with a chat model and keep those that pass every check: no content
    word shared with the question, not already answered by the corpus, blending into the theme, inside
    --nq-band if given, not a near-duplicate, and with --judge, said by the judge to answer its question.
    Without --judge no check tests whether a needle answers its question (the needle set's description
    says so). Rejected drafts are sent back with their reasons."""
    from embedeval.experiments.drafting import (
        EMBEDDED_FIRST, DraftConfig, check_draft_cost, format_draft_plan, plan_draft, plan_draft_embedding, run_draft,
    )
    from embedeval.experiments.judging import JUDGE_TEMPERATURE
    from embedeval.llm import ChatLLM, parse_chat_spec
    from embedeval.plan import forecast_line, parse_ceiling, parse_price

    check_output_file(out, (".json",))
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
        draft_plan = plan_draft(config, parse_chat_spec(llm).name, chat_price, judge_price)  # no key needed to plan
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
                       chat_price=chat_price, judge_price=judge_price, say_first=say_first)
    for theme, kept in result.accepted.items():
        typer.echo(f"theme {theme}: {kept} of {per_theme} groups accepted, {result.rejected_now[theme]} draft(s) rejected")
    count = len(result.needle_set["groups"])
    judged = f", {result.judge_requests} judge request(s)" if judge else "; no judge: nothing checked whether a needle answers its question"
    typer.echo(f"wrote {out}: {count} group{'' if count == 1 else 's'} ({result.requests} chat request(s){judged}); "
               f"rejected drafts with their reasons in {result.rejected_path}")


@haystacks_app.command("build")
@with_option_groups
def haystacks_build(
    out: Annotated[Path, typer.Option("--out", help="Output .parquet (e.g. runs/NAME/haystacks.parquet).")],
    needles: NeedleOptions,
    grid: GridOptions,
    controls: Annotated[bool, typer.Option("--controls/--no-controls", help="One needle-free control per condition.")] = True,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Build the deterministic haystack grid and write it as Parquet."""
    from embedeval.haystacks import build_haystacks
    from embedeval.io import write_table

    check_output_file(out, (".parquet",))
    haystack_grid = grid.haystack_grid(controls)
    needle_set = grid.needle_set(needles)  # before the corpus is read
    frame = build_haystacks(needle_set, haystack_grid, progress=not quiet)
    write_table(frame, out)
    typer.echo(f"wrote {len(frame)} haystacks to {out}")


@haystacks_app.command("show")
def haystacks_show(
    id: Annotated[str, typer.Option("--id", help="Haystack id, e.g. loc-dresden:onehop:512:d03.")],
    file: Annotated[Path, typer.Argument(help="A haystacks.parquet file.")],
) -> None:
    """Print one haystack with its needle highlighted as [[...]]."""
    import pandas as pd

    from embedeval.haystacks import HAYSTACK_COLUMNS, LATER_HAYSTACK_COLUMNS
    from embedeval.run import HAYSTACKS, read_run_table

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


@app.command("nolima")
@with_option_groups
def nolima(
    embedders: EmbedderOptions,
    needles: NeedleOptions,
    grid: GridOptions,
    out: as_typer(NOLIMA_OUT) = NOLIMA_OUT.cli_default,
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


@app.command("report")
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write (default: the run dir, or runs/compare): a new or empty folder, a run folder, or one a report was written into; any other folder is refused.")] = None,
) -> None:
    """Rebuild report.md, report.html and figures of a run, or compare several runs on the same figures."""
    from embedeval.report import compare_runs

    typer.echo(f"wrote {compare_runs(run_dirs, out)}")


@app.command("export")
@with_option_groups
def export(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (embedeval nolima --out).")],
    format: Annotated[str, typer.Option("--format", help="mteb (MTEB result files under --out, a folder) or prompts (an LLM prompt set with similarity covariates, --out .csv or .parquet).")],
    out: Annotated[Path, typer.Option("--out", help="A folder for mteb (new, empty, or one exported into before); a .csv or .parquet file for prompts (new, or a prompt set written before). Anything else is refused.")],
    template: Annotated[Optional[Path], typer.Option("--template", help="prompts: a text file with {haystack} and {question} (default: NoLiMa's task template).")] = None,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
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
    prompts = PromptSet.read(run_dir, out, template)
    if plan.settle(prompts.plan(cache_dir, plan.prices, calibrate=plan.plan, progress=not quiet)):
        return
    table = prompts.write(cache_dir, progress=not quiet)
    typer.echo(f"wrote {len(table)} prompts to {out}")


@app.command("expand")
@with_option_groups
def expand_command(
    out: Annotated[Path, typer.Option("--out", help="Expansion file to write (queries/expansions/<set>.json).")],
    llm: ChatModelOpt,
    needles: NeedleOptions,
    sizes: as_typer(EXPANSION_SIZES) = EXPANSION_SIZES.cli_default,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Deprecated: use --llm 'openai:MODEL?base_url=URL'. The same: a server of your own, sent no OPENAI_API_KEY.")] = None,
    temperature: as_typer(TEMPERATURE) = TEMPERATURE.cli_default,
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Ask a chat model for N search terms per question and store them for offline sweeps."""
    from embedeval.expansion import build_expansion_file, write_expansions
    from embedeval.llm import ChatLLM

    check_output_file(out, (".json",))
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


def _write_similarity_table(frame, out: Path) -> None:
    from embedeval.io import write_table

    write_table(frame, out)
    typer.echo(f"wrote {len(frame)} rows to {out}")


@similarity_app.command("needle-question")
@with_option_groups
def similarity_needle_question(out: OutTable, needles: NeedleOptions, pairs: PairOptions, embedders: EmbedderOptions,
                               plan: PlanOptions = PlanOptions(), quiet: Quiet = QUIET.cli_default) -> None:
    """Cosine of each question with each of its needles, per embedder, with mean and std across them.

    Rows come from a needle set (one per group x variant) or a --pairs file (one per pair, keeping
    id and topic); `shared_words` lists the lemmas a question and its needle share."""
    from embedeval.experiments.context_rot import needle_question_similarity

    check_output_file(out, TABLE_SUFFIXES)
    source = pairs.load(needles)
    models = plan.models_after(embedders, quiet, lambda models: needle_question_similarity(source, models))
    if models is not None:
        _write_similarity_table(needle_question_similarity(source, models), out)


@similarity_app.command("distractor-question")
@with_option_groups
def similarity_distractor_question(out: OutTable, needles: NeedleOptions, embedders: EmbedderOptions,
                                   distractors_file: DistractorsFileOpt = None, plan: PlanOptions = PlanOptions(),
                                   quiet: Quiet = QUIET.cli_default) -> None:
    """Cosine of each distractor with its question, per embedder, with mean and std across them.

    Distractors come from the needle set (a group's `distractors`: a list, or lists by query form,
    as NoLiMa's) or from `--distractors-file`; a distractor shares its question's keyword, so this
    shows how close a lexical decoy comes to the question (Context Rot's distractor analysis)."""
    from embedeval.experiments.context_rot import distractor_question_similarity
    from embedeval.needles import grid_needle_set

    check_output_file(out, TABLE_SUFFIXES)
    needle_set = grid_needle_set(needles.path, needles.group_ids, distractors_file=distractors_file)
    if not any(g.distractors for g in needle_set.groups):
        raise InputError(f"needle set {needle_set.name!r} has no distractors")
    models = plan.models_after(embedders, quiet, lambda models: distractor_question_similarity(needle_set, models))
    if models is not None:
        _write_similarity_table(distractor_question_similarity(needle_set, models), out)


@similarity_app.command("needle-haystack")
@with_option_groups
def similarity_needle_haystack(
    out: OutTable,
    needles: NeedleOptions,
    pairs: PairOptions,
    chunking: ChunkOptions,
    embedders: EmbedderOptions,
    top_k: Annotated[int, typer.Option("--top-k", help="Chunks averaged per needle.")] = DEFAULT_TOP_K,
    index: Annotated[str, typer.Option("--index", help="faiss or chroma.")] = DEFAULT_INDEX,
    chroma_url: ChromaUrlOpt = None,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Mean cosine of each needle with its top-k corpus chunks, per embedder, with mean and std.

    Needles come from a needle set or a --pairs file, as for needle-question."""
    from embedeval.experiments.context_rot import means_by_topic, needle_haystack_similarity
    from embedeval.index import INDEXES

    check_output_file(out, TABLE_SUFFIXES)
    if index not in INDEXES or top_k < 1:
        raise InputError(f"--index must be one of {', '.join(INDEXES)} and --top-k >= 1")
    if chroma_url and index != "chroma":
        raise InputError("--chroma-url needs --index chroma")
    chunking.check()
    source = pairs.load(needles)
    chunks = chunking.chunks(progress=not quiet)  # before the models: a corpus mistake is reported at once
    models = plan.models_after(embedders, quiet, lambda models: needle_haystack_similarity(
        source, chunks, models, top=top_k, chunk_origin=chunking.origin))  # a plan's stand-in vectors stay out of chroma
    if models is None:
        return
    table = needle_haystack_similarity(source, chunks, models, top=top_k, index=index, chroma_url=chroma_url,
                                       chunk_origin=chunking.origin)
    _write_similarity_table(table, out)
    summary = means_by_topic(table, [model.name for model in models])
    typer.echo(f"mean needle-haystack similarity (mean cosine of the top-{top_k} chunks) by {summary.index.name}:")
    typer.echo(summary.reset_index().to_string(index=False, float_format=lambda value: f"{value:.3f}"))


@similarity_app.command("absence")
@with_option_groups
def similarity_absence(
    out: OutTable,
    needles: NeedleOptions,
    pairs: PairOptions,
    chunking: ChunkOptions,
    api: APIOptions,
    embedder: EmbedderOpt = EMBEDDER.cli_default,
    top_k: Annotated[int, typer.Option("--top-k", help="Chunks listed per question.")] = DEFAULT_ABSENCE_TOP_K,
    chroma_path: Annotated[Optional[Path], typer.Option("--chroma-path", help="Keep the chromadb index here (default: temporary).")] = None,
    chroma_url: ChromaUrlOpt = None,
    themes: Annotated[Optional[Path], typer.Option("--themes", help="Search the chunks of this embedeval themes run directory instead of cutting --corpus again.")] = None,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Each distinct question's top-k corpus chunks (chromadb), flagging those that contain its keyword.

    A question shared by several needles is listed once, with the group or pair ids that ask it."""
    from embedeval.embedders.registry import load_embedder, select_embedders
    from embedeval.experiments.context_rot import answer_absence
    from embedeval.plan import plan_work

    check_output_file(out, TABLE_SUFFIXES)
    if chroma_url and chroma_path:
        raise InputError("--chroma-url and --chroma-path: give one or the other")
    chunking.check()
    source = pairs.load(needles)
    if themes is not None:  # the chunks the themes were found in: the Context Rot flow in one place
        from embedeval.experiments.themes import themes_chunks

        chunks, origin = themes_chunks(themes)
    else:
        chunks, origin = chunking.chunks(progress=not quiet), chunking.origin  # before the model: a corpus mistake is reported at once
    select_embedders([embedder], keys=plan.run_follows)  # a model that cannot run here: one line, before its plan
    if plan.settle(plan_work([embedder], lambda models: answer_absence(source, chunks, models[0], top=top_k, index="faiss"), cache_dir,
                             plan.prices, calibrate=plan.plan, progress=not quiet)):  # a plan's stand-in vectors stay out of chroma
        return
    model = load_embedder(embedder, cache_dir=cache_dir, progress=not quiet)
    table = answer_absence(source, chunks, model, top=top_k, path=chroma_path, chroma_url=chroma_url, chunk_origin=origin)
    _write_similarity_table(table, out)
    n_questions = table["question"].nunique()
    if pairs.pairs is not None:
        typer.echo(f"{n_questions} distinct questions, top-{top_k} chunks each; a pair file names no keywords "
                   f"or characters, so nothing is flagged: review {out}")
        return
    flagged = table[(table["contains_keyword"] | table["contains_character"]).fillna(False)]
    typer.echo(f"{flagged['question'].nunique()} of {n_questions} distinct questions have a top-{top_k} chunk "
               f"containing their keyword or a character name ({len(flagged)} chunks); review {out}")


@themes_app.callback(invoke_without_command=True)
@with_option_groups
def themes(
    ctx: typer.Context,
    settings: ThemeOptions,
    out: Annotated[Optional[Path], typer.Option("--out", help="Run directory for chunks.parquet, clusters.csv, report.md, figures/map.png and the fitted models.")] = None,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Find a corpus's themes: 1-3-sentence chunks, embedded, UMAP, HDBSCAN, MMR representatives and top
    terms per cluster (defaults: Chroma's Context Rot study). `embedeval themes membership DIR` then checks
    needles against them."""
    if ctx.invoked_subcommand is not None:
        return
    from embedeval.experiments.themes import check_themes_out, cut_corpus, plan_themes, run_themes

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


@themes_app.command("membership")
@with_option_groups
def themes_membership(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by embedeval themes.")],
    out: OutTable,
    needles: NeedleOptions,
    pairs: PairOptions,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="The target theme of every needle whose pair file row names none in a cluster (or theme) column, by its number or by a term of its top terms, e.g. writing (default 0: the largest cluster).")] = None,
    threshold: as_typer(THRESHOLD) = THRESHOLD.cli_default,
    min_outside_percentile: as_typer(MIN_OUTSIDE_PERCENTILE) = MIN_OUTSIDE_PERCENTILE.cli_default,
    embedder: as_typer(EMBEDDER, cli_type=Optional[str], help="Must be the run's embedder if given (the default is the run's).") = None,
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
    from embedeval.experiments.themes import MembershipCheck

    check_output_file(out, TABLE_SUFFIXES)
    source = pairs.load(needles)
    rows = pair_rows(source)
    if pairs.pairs is not None and any(pair.target_cluster is not None for pair in source):
        rows["target_cluster"] = [pair.target_cluster for pair in source]
    check = MembershipCheck.read(run_dir, rows, cluster, threshold, min_outside_percentile, embedder)
    if plan.settle(check.plan(cache_dir, plan.prices, calibrate=plan.plan, progress=not quiet)):
        return
    table = check.table(cache_dir, progress=not quiet)
    _write_similarity_table(table, out)
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


#: Columns of the help when stdout is not a terminal (piped to a file, a pager or grep): rich
#: would render 80 and cut long defaults (``[default: 128,256,512,1024,2048,4096,819…]``).
PIPED_HELP_WIDTH = 200


def _help_width() -> None:
    """Render help :data:`PIPED_HELP_WIDTH` columns wide when stdout is not a terminal and neither
    ``TERMINAL_WIDTH`` (typer's) nor ``COLUMNS`` says otherwise; a terminal's own width otherwise."""
    if sys.stdout.isatty() or os.environ.get("TERMINAL_WIDTH") or os.environ.get("COLUMNS"):
        return
    os.environ["TERMINAL_WIDTH"] = str(PIPED_HELP_WIDTH)  # typer reads it when it first renders help
    rendering = sys.modules.get("typer.rich_utils")
    if rendering is not None:  # already imported: it read the variable then
        rendering.MAX_WIDTH = PIPED_HELP_WIDTH


def main() -> None:
    """Console-script entry point."""
    _help_width()
    app()
