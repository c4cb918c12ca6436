"""``embedeval similarity``: needle-question, distractor-question and needle-haystack similarity
across embedders, and the corpus chunks nearest each question (whether the corpus answers it)."""

from __future__ import annotations

from pathlib import Path

import typer

from embedeval.cli.options import (
    APIOptions,
    CacheDir,
    ChromaUrlOpt,
    ChunkOptions,
    DistractorsFileOpt,
    EmbedderOpt,
    EmbedderOptions,
    NeedleOptions,
    PairOptions,
    PlanOptions,
    Quiet,
    as_typer,
    out_option,
    with_option_groups,
)
from embedeval.errors import InputError
from embedeval.options import ABSENCE_THEMES, ABSENCE_TOP_K, CACHE_DIR, CHROMA_PATH, EMBEDDER, INDEX, QUIET, TOP_K

group = typer.Typer(no_args_is_help=True, help="Needle-question / needle-haystack similarity across embedders.")


def write_rows(frame, out: Path) -> None:
    from embedeval.io import write_table

    write_table(frame, out)
    typer.echo(f"wrote {len(frame)} rows to {out}")


@group.command("needle-question")
@with_option_groups
def similarity_needle_question(out: out_option("similarity needle-question"), needles: NeedleOptions, pairs: PairOptions, embedders: EmbedderOptions,
                               plan: PlanOptions = PlanOptions(), quiet: Quiet = QUIET.cli_default) -> None:
    """Cosine of each question with each of its needles, per embedder, with mean and std across them.

    Rows come from a needle set (one per group x variant) or a --pairs file (one per pair, keeping
    id and topic); `shared_words` lists the lemmas a question and its needle share."""
    from embedeval.experiments.context_rot import needle_question_similarity

    source = pairs.load(needles)
    models = plan.models_after(embedders, quiet, lambda models: needle_question_similarity(source, models))
    if models is not None:
        write_rows(needle_question_similarity(source, models), out)


@group.command("distractor-question")
@with_option_groups
def similarity_distractor_question(out: out_option("similarity distractor-question"), needles: NeedleOptions, embedders: EmbedderOptions,
                                   distractors_file: DistractorsFileOpt = None, plan: PlanOptions = PlanOptions(),
                                   quiet: Quiet = QUIET.cli_default) -> None:
    """Cosine of each distractor with its question, per embedder, with mean and std across them.

    Distractors come from the needle set (a group's `distractors`: a list, or lists by query form,
    as NoLiMa's) or from `--distractors-file`; a distractor shares its question's keyword, so this
    shows how close a lexical decoy comes to the question (Context Rot's distractor analysis)."""
    from embedeval.experiments.context_rot import distractor_question_similarity
    from embedeval.needles import grid_needle_set

    needle_set = grid_needle_set(needles.path, needles.group_ids, distractors_file=distractors_file)
    if not any(g.distractors for g in needle_set.groups):
        raise InputError(f"needle set {needle_set.name!r} has no distractors")
    models = plan.models_after(embedders, quiet, lambda models: distractor_question_similarity(needle_set, models))
    if models is not None:
        write_rows(distractor_question_similarity(needle_set, models), out)


@group.command("needle-haystack")
@with_option_groups
def similarity_needle_haystack(
    out: out_option("similarity needle-haystack"),
    needles: NeedleOptions,
    pairs: PairOptions,
    chunking: ChunkOptions,
    embedders: EmbedderOptions,
    top_k: as_typer(TOP_K) = TOP_K.cli_default,
    index: as_typer(INDEX) = INDEX.cli_default,
    chroma_url: ChromaUrlOpt = None,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Mean cosine of each needle with its top-k corpus chunks, per embedder, with mean and std.

    Needles come from a needle set or a --pairs file, as for needle-question."""
    from embedeval.experiments.context_rot import means_by_topic, needle_haystack_similarity
    from embedeval.index import INDEXES

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
    write_rows(table, out)
    summary = means_by_topic(table, [model.name for model in models])
    typer.echo(f"mean needle-haystack similarity (mean cosine of the top-{top_k} chunks) by {summary.index.name}:")
    typer.echo(summary.reset_index().to_string(index=False, float_format=lambda value: f"{value:.3f}"))


@group.command("absence")
@with_option_groups
def similarity_absence(
    out: out_option("similarity absence"),
    needles: NeedleOptions,
    pairs: PairOptions,
    chunking: ChunkOptions,
    api: APIOptions,
    embedder: EmbedderOpt = EMBEDDER.cli_default,
    top_k: as_typer(ABSENCE_TOP_K) = ABSENCE_TOP_K.cli_default,
    chroma_path: as_typer(CHROMA_PATH) = CHROMA_PATH.cli_default,
    chroma_url: ChromaUrlOpt = None,
    themes: as_typer(ABSENCE_THEMES) = ABSENCE_THEMES.cli_default,
    cache_dir: CacheDir = CACHE_DIR.cli_default,
    plan: PlanOptions = PlanOptions(),
    quiet: Quiet = QUIET.cli_default,
) -> None:
    """Each distinct question's top-k corpus chunks (chromadb), flagging those that contain its keyword.

    A question shared by several needles is listed once, with the group or pair ids that ask it."""
    from embedeval.embedders.registry import load_embedder, select_embedders
    from embedeval.experiments.context_rot import answer_absence
    from embedeval.plan import plan_work

    if chroma_url and chroma_path:
        raise InputError("--chroma-url and --chroma-path: give one or the other")
    chunking.check()
    source = pairs.load(needles)
    if themes is not None:  # the chunks the themes were found in: the Context Rot flow in one place
        from embedeval.experiments.themes.chunks import themes_chunks

        chunks, origin = themes_chunks(themes)
    else:
        chunks, origin = chunking.chunks(progress=not quiet), chunking.origin  # before the model: a corpus mistake is reported at once
    select_embedders([embedder], keys=plan.run_follows)  # a model that cannot run here: one line, before its plan
    if plan.settle(plan_work([embedder], lambda models: answer_absence(source, chunks, models[0], top=top_k, index="faiss"), cache_dir,
                             plan.prices, calibrate=plan.plan, progress=not quiet)):  # a plan's stand-in vectors stay out of chroma
        return
    model = load_embedder(embedder, cache_dir=cache_dir, progress=not quiet)
    table = answer_absence(source, chunks, model, top=top_k, path=chroma_path, chroma_url=chroma_url, chunk_origin=origin)
    write_rows(table, out)
    n_questions = table["question"].nunique()
    if pairs.pairs is not None:
        typer.echo(f"{n_questions} distinct questions, top-{top_k} chunks each; a pair file names no keywords "
                   f"or characters, so nothing is flagged: review {out}")
        return
    flagged = table[(table["contains_keyword"] | table["contains_character"]).fillna(False)]
    typer.echo(f"{flagged['question'].nunique()} of {n_questions} distinct questions have a top-{top_k} chunk "
               f"containing their keyword or a character name ({len(flagged)} chunks); review {out}")


