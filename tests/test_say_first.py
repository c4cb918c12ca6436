"""A command that embeds a corpus says on stderr, before it embeds, how many texts
it will embed and how many the cache holds already (its plan, a line per embedder); ``--plan`` prints
the plan and stops, embedding and writing nothing. The counts are checked against a count made here
of the distinct texts the command needs that the cache does not hold, and against what the cache
holds afterwards. (``themes``, ``themes membership`` and ``needles draft``: tests/experiments;
``export --format prompts``: tests/test_export.py.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.chunking import corpus_chunks
from embedeval.cli import app
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_CHUNKER
from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.registry import load_embedder

from fakes import said_first, write_word_books

SPEC = "st:all-MiniLM-L6-v2"
WORDS = "harbour lantern meadow orchard bridge river candle window garden market winter morning quiet ancient".split()
#: Three pairs; the last two share their needle (embedded once) and ask one question twice, spelled apart.
PAIRS = [("Which character has been to Dresden?", "Actually, Yuki lives next to the Semper Opera House."),
         ("Which character knows the opera?", "Stuart sang at the harbour concert hall."),
         ("Which  character knows the opera?", "Stuart sang at the harbour concert hall.")]


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """Three short books (a few dozen chunks: a quick embedding)."""
    return write_word_books(tmp_path_factory.mktemp("books"), WORDS, (6, 12), seed=3, n_books=3, n_sentences=12)


@pytest.fixture
def pairs(tmp_path):
    path = tmp_path / "pairs.csv"
    pd.DataFrame({"id": ["a", "b", "c"], "question": [q for q, _ in PAIRS], "needle": [n for _, n in PAIRS]}).to_csv(path, index=False)
    return path


def chunk_texts(books) -> list[str]:
    """The distinct texts of the corpus's chunks, as the similarity commands cut them."""
    return sorted({chunk.text for chunk in corpus_chunks(load_corpus(f"dir:{books}"), DEFAULT_CHUNKER, seed=0)})


def vectors_held(cache_dir) -> int:
    """The vectors of :data:`SPEC` the cache holds (none where there is no cache file yet)."""
    cache = EmbeddingCache(cache_dir, create=False)
    try:
        return cache.info()["per_spec"].get(SPEC, 0)
    finally:
        cache.close()


def cache_some(cache_dir, documents: list[str], queries: list[str]) -> set[tuple[str, str]]:
    """Embed ``documents`` and ``queries`` into the cache; returns them as (kind, text)."""
    model = load_embedder(SPEC, cache_dir=cache_dir)
    model.embed(documents, kind="document")
    model.embed(queries, kind="query")
    return {("document", text) for text in documents} | {("query", text) for text in queries}


def plan_and_run(args: list[str], cache_dir) -> tuple[dict, object, int]:
    """The command's ``--plan --json`` (which must embed and write nothing), then the command: (its
    plan, its result, the vectors the run added to the cache)."""
    before = vectors_held(cache_dir)
    planned = CliRunner().invoke(app, [*args, "--plan", "--json"])
    assert planned.exit_code == 0, planned.output
    (plan,) = json.loads(planned.stdout)["embedders"]
    assert vectors_held(cache_dir) == before
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 0, run.output
    return plan, run, vectors_held(cache_dir) - before


@pytest.mark.slow
def test_needle_haystack_says_first_what_it_will_embed_and_its_plan_counts_the_same(books, pairs, tmp_path, isolated_cache):
    chunks, needles = chunk_texts(books), [needle for _, needle in PAIRS]
    held = cache_some(isolated_cache, chunks[:5], needles[:1])  # a needle is searched with as a query
    needed = {("document", text) for text in chunks} | {("query", needle) for needle in needles}
    expected = (len(needed - held), len(needed & held), len(needed))
    out = tmp_path / "nh.csv"
    args = ["similarity", "needle-haystack", "--pairs", str(pairs), "--corpus", f"dir:{books}", "--min-books", "3", "--out", str(out)]
    plan, run, added = plan_and_run(args, isolated_cache)
    assert (plan["to_embed"], plan["cached"], plan["texts"]) == expected
    assert said_first(run.stderr) == expected and added == expected[0]  # what it said is what it embedded
    lines = run.stderr.splitlines()
    said = next(i for i, line in enumerate(lines) if " texts to embed, " in line)
    assert said == 0 and lines[said + 1].startswith(f"loading {SPEC} on ")  # before the model is even loaded
    assert pd.read_csv(out)["id"].tolist() == ["a", "b", "c"]


@pytest.mark.slow
def test_absence_says_first_what_it_will_embed_and_its_plan_counts_the_same(books, pairs, tmp_path, isolated_cache):
    chunks = chunk_texts(books)
    questions = {" ".join(question.split()) for question, _ in PAIRS}  # searched once per question, however spelled
    assert len(questions) == 2
    held = cache_some(isolated_cache, chunks[-3:], [PAIRS[0][0]])
    needed = {("document", text) for text in chunks} | {("query", question) for question in questions}
    expected = (len(needed - held), len(needed & held), len(needed))
    out = tmp_path / "absence.csv"
    args = ["similarity", "absence", "--pairs", str(pairs), "--corpus", f"dir:{books}", "--min-books", "3", "--top-k", "2",
            "--out", str(out), "-q"]
    plan, run, added = plan_and_run(args, isolated_cache)
    assert (plan["to_embed"], plan["cached"], plan["texts"]) == expected
    assert said_first(run.stderr) == expected and added == expected[0]
    assert len(run.stderr.splitlines()) == 1  # -q: no step lines, but what it embeds is said
    assert pd.read_csv(out)["question"].nunique() == 2


def test_the_line_of_an_api_model_says_its_tokens_requests_cost_and_least_time():
    from embedeval.plan import EmbedderPlan, forecast_line

    common = dict(inputs=101, tokenizer="cl100k_base", token_margin=0.1, requests=2, seconds=42.0, time_basis="its budget",
                  price_source="listed")
    plan = EmbedderPlan("openai:text-embedding-3-small", texts=120, cached=20, to_embed=100, tokens=5_000, usd_per_million=0.4,
                        usd=0.002, usd_high=0.0022, **common)
    assert forecast_line(plan) == ("openai:text-embedding-3-small: 100 texts to embed, 20 found in the cache: the 120 distinct texts "
                                   "the command needs; 5,000 tokens ±10% in 2 requests, $0.0020 (≤ $0.0022), at least 42 s at its budget")
    own = EmbedderPlan("openai:m?base_url=http://127.0.0.1:9/v1", texts=7, cached=None, to_embed=7, tokens=70, usd_per_million=None,
                       usd=None, usd_high=None, **common)
    assert forecast_line(own, "chunks") == ("openai:m?base_url=http://127.0.0.1:9/v1: 7 distinct chunks; which of them the cache "
                                            "holds is known once its server answers; 70 tokens ±10% in 2 requests, cost unknown "
                                            "(no price known), at least 42 s at its budget")
    nothing = EmbedderPlan("openai:text-embedding-3-small", texts=120, cached=120, to_embed=0, tokens=5, usd_per_million=0.4,
                           usd=0.0, usd_high=0.0, **common)
    assert forecast_line(nothing) == ("openai:text-embedding-3-small: 0 texts to embed, 120 found in the cache: the 120 distinct "
                                      "texts the command needs")  # nothing to send: no tokens or cost to say


@pytest.mark.parametrize("flags, says", [(["--plan"], "error: --plan goes with --format prompts (an MTEB export embeds nothing)"),
                                         (["--max-cost", "1"], "error: --max-cost goes with --format prompts (an MTEB export embeds nothing)"),
                                         (["--price", f"{SPEC}=1"], "error: --price goes with --plan or --max-cost")])
def test_an_mteb_export_embeds_nothing_so_it_takes_no_plan(flags, says, tmp_path):
    result = CliRunner().invoke(app, ["export", str(tmp_path / "no-run"), "--format", "mteb", "--out", str(tmp_path / "m"), *flags])
    assert result.exit_code == 1 and result.output.splitlines() == [says], result.output
