"""``--plan`` / ``--max-cost`` / ``--price``: the plan's numbers are what the run then sends
(counted by a server on 127.0.0.1), and a plan sends and stores nothing."""

import json
import re
import sqlite3

import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders import budget
from embedeval.embedders.cache import EmbeddingCache
from embedeval.embedders.registry import load_embedder
from embedeval.embedders.requests import Texts
from embedeval.embedders.tokens import load_provider_counter, load_token_counter
from embedeval.errors import ConfigError
from embedeval.plan import EmbedderPlan, check_max_cost, format_plans, parse_prices, plans_json
from embedeval.plan import plan_of as plan_of_model

from fake_api import FakeEmbeddingServer
from test_nolima import SMALL_GROUPS

SMALL = ["--groups", ",".join(SMALL_GROUPS), "--lengths", "128,512", "--depths", "2", "--negatives", "4"]


def grid_args(books_dir, out):
    return ["nolima", *SMALL, "--corpus", f"dir:{books_dir}", "--out", str(out), "-q"]


def plan_of(books_dir, out, *extra) -> dict:
    result = CliRunner().invoke(app, [*grid_args(books_dir, out), "--plan", "--json", *extra])
    assert result.exit_code == 0, result.output
    return {row["embedder"]: row for row in json.loads(result.output)["embedders"]}


def cache_rows(cache_dir) -> dict[str, int]:
    """Rows of each table of the embedding cache: vectors, token prefixes, model facts."""
    cache = EmbeddingCache(cache_dir)
    cache.close()
    with sqlite3.connect(cache.path) as db:
        return {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("embeddings", "token_prefixes", "model_facts")}


@pytest.mark.slow
def test_a_local_plan_counts_what_the_run_embeds_and_stores_nothing(books_dir, tmp_path, isolated_cache):
    out = tmp_path / "run"
    before = cache_rows(isolated_cache)
    plan = plan_of(books_dir, out)["st:all-MiniLM-L6-v2"]
    assert cache_rows(isolated_cache) == before and not out.exists()  # no vectors, token prefixes, model facts, run files
    assert plan["cached"] == 0 and plan["to_embed"] == plan["texts"] > 0 and plan["tokens"] > plan["texts"]
    assert plan["seconds"] > 0 and "timed here" in plan["time_basis"] and plan["usd"] == 0
    run = CliRunner().invoke(app, grid_args(books_dir, out))
    assert run.exit_code == 0, run.output
    assert (f"st:all-MiniLM-L6-v2: {plan['to_embed']:,} texts newly embedded, 0 found in the cache: the {plan['texts']:,} "
            "distinct texts the run needs (what --plan counts)") in run.output
    again = plan_of(books_dir, out)["st:all-MiniLM-L6-v2"]
    assert again["cached"] == again["texts"] == plan["texts"] and again["to_embed"] == 0 and again["tokens"] == 0
    rerun = CliRunner().invoke(app, grid_args(books_dir, out))  # the same count of texts, all of them cached now
    assert f"st:all-MiniLM-L6-v2: 0 texts newly embedded, {plan['texts']:,} found in the cache: the {plan['texts']:,} " in rerun.output


@pytest.mark.slow
def test_a_plan_leaves_no_cache_file_where_there_was_none(books_dir, tmp_path, isolated_cache):
    """A plan stores nothing: where the embedding cache was not made yet, it reads an empty one in
    memory instead of creating an empty SQLite file (the audit: a plan left embeddings.sqlite)."""
    from embedeval.embedders.cache import CACHE_FILENAME

    plan = plan_of(books_dir, tmp_path / "run")["st:all-MiniLM-L6-v2"]
    assert plan["cached"] == 0 and plan["to_embed"] == plan["texts"] > 0
    assert not (isolated_cache / CACHE_FILENAME).exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("options", ["", "?max_seq_length=128"])
def test_the_bundled_models_facts_read_from_its_folder_are_the_loaded_models(options):
    """A plan of the bundled model counts with facts read from its folder and tokenizer
    (:func:`~embedeval.embedders.local_folder.folder_facts`): they must be the ones the loaded model gives,
    its fingerprint aside (a plan uses it only to find cached vectors, and uses these only when
    there are none)."""
    from embedeval.embedders.local import from_spec_model
    from embedeval.embedders.local_folder import folder_facts

    model = from_spec_model(f"all-MiniLM-L6-v2{options}")
    planned = folder_facts(model.path, model.options, load_token_counter(), model.name)
    live = model._live_facts()
    assert planned == {key: value for key, value in live.items() if key != "fingerprint"}


@pytest.mark.slow
def test_a_plan_counts_without_the_weights_and_times_them_in_a_process_of_their_own(books_dir, tmp_path, isolated_cache,
                                                                                     monkeypatch):
    """Loading all-MiniLM-L6-v2 (PyTorch, sentence-transformers, the weights) was most of a plan's
    fixed cost: the plan's own process counts without them, and the model loads to be
    timed in a process of its own; the counts are those of the plan made with the model loaded."""
    import subprocess
    import sys

    code = ("import sys\nfrom embedeval.cli import main\nsys.argv = ['embedeval', *sys.argv[1:]]\ntry:\n    main()\n"
            "finally:\n    print('heavy:', *[m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules])")
    apart = subprocess.run([sys.executable, "-c", code, *grid_args(books_dir, tmp_path / "run"), "--plan", "--json"],
                           capture_output=True, text=True, timeout=600)
    assert apart.returncode == 0, apart.stderr[-2000:]
    *output, heavy = apart.stdout.splitlines()
    assert heavy == "heavy:"
    planned = json.loads("\n".join(output))["embedders"][0]
    assert planned["seconds"] > 0 and "timed here" in planned["time_basis"]
    from embedeval.embedders.local import SentenceTransformerEmbedder

    monkeypatch.setattr(SentenceTransformerEmbedder, "_planned_facts", lambda self: None)  # its facts from the loaded model
    loaded = CliRunner().invoke(app, [*grid_args(books_dir, tmp_path / "run"), "--plan", "--json"])
    assert loaded.exit_code == 0, loaded.output
    counts = ("texts", "cached", "to_embed", "inputs", "tokens")
    assert {k: planned[k] for k in counts} == {k: json.loads(loaded.output)["embedders"][0][k] for k in counts}


def test_the_timing_process_starts_as_the_command_reads_its_options_and_the_plan_takes_it(monkeypatch, isolated_cache):
    """``--plan`` starts each local model's timing process before it imports the sweep and builds the
    haystacks (``start_early``); the plan takes that process instead of starting another, a lexical
    scorer or an API model gets none, and those no plan took end."""
    from embedeval.embedders import timing

    started = []

    class Recorded:
        def __init__(self, spec):
            self.spec, self.closed = spec, False
            started.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(timing, "SampleTimer", Recorded)
    timing.start_early(["st:all-MiniLM-L6-v2", "bm25", "openai:text-embedding-3-small", "st:all-MiniLM-L6-v2"])
    assert [t.spec for t in started] == ["st:all-MiniLM-L6-v2"]
    assert timing.timer_for("st:all-MiniLM-L6-v2") is started[0]  # taken, not started again
    assert timing.timer_for("st:all-MiniLM-L6-v2") is not started[0] and len(started) == 2  # a second plan: a new one
    timing.start_early(["st:all-MiniLM-L6-v2"])
    timing.close_early()
    assert started[2].closed and not started[0].closed and timing._EARLY == {}
    timing.start_early(["st:/a/folder/of/its/own", "st:./model?max_seq_length=128"])  # the plan loads these itself
    assert len(started) == 3 and timing._EARLY == {}
    timing.start_early(["st:sentence-transformers/all-MiniLM-L6-v2?max_seq_length=128"])
    assert len(started) == 4
    timing.close_early()


@pytest.fixture
def server(monkeypatch):
    """A server counting each input's tokens with OpenAI's tokenizer, as OpenAI bills them."""
    budget.reset()
    counter = load_provider_counter("cl100k_base")
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
    with FakeEmbeddingServer() as fake:
        for provider in ("OPENAI", "JINA"):
            monkeypatch.setenv(f"{provider}_API_KEY", "sk-SECRET")
            monkeypatch.setenv(f"{provider}_BASE_URL", f"{fake.url}/v1")
        fake.script.count_tokens = counter.count
        yield fake
    budget.reset()


@pytest.mark.slow
def test_an_api_plan_is_what_the_run_sends_and_costs_tokens_times_price(server, books_dir, tmp_path):
    out = tmp_path / "run"
    spec = "openai:text-embedding-3-small"
    plan = plan_of(books_dir, out, "-e", spec, "-e", "bm25")[spec]
    assert server.requests == []  # a plan sends nothing
    run = CliRunner().invoke(app, [*grid_args(books_dir, out), "-e", spec, "-e", "bm25"])
    assert run.exit_code == 0, run.output
    sent = [r for r in server.requests if r["path"].endswith("/embeddings")]
    assert plan["to_embed"] == sum(len(r["inputs"]) for r in sent) - 1  # all but the connection check
    assert plan["requests"] == len(sent) and plan["tokens"] == server.script.tokens_received
    assert plan["usd"] == pytest.approx(plan["tokens"] / 1e6 * 0.02)
    assert plan["tokenizer"].startswith("cl100k_base") and plan["token_margin"] == 0 and plan["usd_high"] == plan["usd"]
    assert plan["seconds"] == pytest.approx(60 * max(plan["tokens"] / 1_000_000, plan["requests"] / 3_000))
    overridden = plan_of(books_dir, out, "-e", spec, "--price", f"{spec}=1.5")[spec]
    assert overridden["cached"] == overridden["texts"] and overridden["to_embed"] == 0
    assert overridden["requests"] == 1 and 0 < overridden["tokens"] < 10  # only the connection check is left to send
    assert overridden["usd"] == pytest.approx(overridden["tokens"] / 1e6 * 1.5)


def test_a_provider_tokenizer_not_at_hand_is_an_estimate_with_a_margin(server, books_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("VOYAGE_API_KEY", "pa-SECRET")
    plan = plan_of(books_dir, tmp_path / "run", "-e", "voyage:voyage-3-large")["voyage:voyage-3-large"]
    assert "the reference, an estimate" in plan["tokenizer"] and plan["token_margin"] == 0.2
    assert plan["usd"] == pytest.approx(plan["tokens"] / 1e6 * 0.18) and plan["usd_high"] == pytest.approx(plan["usd"] * 1.2)
    assert server.requests == []


@pytest.mark.slow
def test_max_cost_refuses_before_anything_is_sent(server, books_dir, tmp_path):
    args = [*grid_args(books_dir, tmp_path / "run"), "-e", "openai:text-embedding-3-large"]
    refused = CliRunner().invoke(app, [*args, "--max-cost", "0.000001"])
    assert refused.exit_code != 0
    assert refused.output.startswith("error: the run would cost up to $") and "over --max-cost" in refused.output
    assert server.requests == [] and not (tmp_path / "run" / "similarities.parquet").exists()
    within = CliRunner().invoke(app, [*args, "--max-cost", "5"])
    assert within.exit_code == 0, within.output
    assert (tmp_path / "run" / "similarities.parquet").exists()


def test_a_model_without_a_price_cannot_keep_a_max_cost():
    plan = EmbedderPlan("openai:m?base_url=http://127.0.0.1:1/v1&max_tokens=8", 3, None, 3, 4, 30, "reference", 0.2, 2, 1.0, "", None, "",
                        None, None)
    with pytest.raises(ConfigError, match="no price known for openai:m"):
        check_max_cost([plan], 1.0)
    check_max_cost([plan], None)
    local = EmbedderPlan("st:x", 3, 0, 3, 3, 30, "own", 0.0, None, 1.0, "", 0.0, "a local model", 0.0, 0.0)
    check_max_cost([local], 0.0)


def test_prices_are_checked_and_named_by_canonical_spec():
    assert parse_prices(["openai:text-embedding-3-small=0.5"]) == {"openai:text-embedding-3-small": 0.5}
    for bad in ["0.5", "openai:text-embedding-3-small=cheap", "openai:text-embedding-3-small=-1", "openai:text-embedding-3-small=inf"]:
        with pytest.raises(ConfigError, match="SPEC=USD"):
            parse_prices([bad])


def test_a_similarity_plan_is_what_the_command_then_sends(server, tmp_path):
    spec = "openai:text-embedding-3-small"
    args = ["similarity", "needle-question", "-e", spec, "--groups", ",".join(SMALL_GROUPS), "--out", str(tmp_path / "nq.csv"), "-q"]
    planned = CliRunner().invoke(app, [*args, "--plan", "--json"])
    assert planned.exit_code == 0, planned.output
    (plan,) = json.loads(planned.output)["embedders"]
    assert server.requests == [] and not (tmp_path / "nq.csv").exists()
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 0, run.output
    assert plan["requests"] == len(server.requests) and plan["tokens"] == server.script.tokens_received
    assert plan["to_embed"] == sum(len(r["inputs"]) for r in server.requests) - 1  # all but the connection check


def plan_then_run(server, books_dir, out, spec, *extra):
    """The plan of a run, then the run: (the plan's row, requests and tokens the server received)."""
    row = plan_of(books_dir, out, "-e", spec, *extra)[spec]
    run = CliRunner().invoke(app, [*grid_args(books_dir, out), "-e", spec, *extra])
    assert run.exit_code == 0, run.output
    return row, len(server.embedding_requests()) + 1, server.script.tokens_received


@pytest.mark.slow
def test_the_plan_sends_misses_in_the_runs_commit_chunks(server, books_dir, tmp_path):
    row, requests, tokens = plan_then_run(server, books_dir, tmp_path / "run", "openai:text-embedding-3-small",
                                          "--commit-every", "5")
    assert (row["requests"], row["tokens"]) == (requests, tokens) and requests > 5


@pytest.mark.slow
def test_late_chunking_windows_sent_again_are_counted_again(server, books_dir, tmp_path):
    server.script.count_tokens = load_token_counter().count  # Jina's tokens are estimated with the reference tokenizer
    row, requests, tokens = plan_then_run(server, books_dir, tmp_path / "run", "jina:jina-embeddings-v3",
                                          "--strategy", "late-chunking", "--chunk-tokens", "32", "--commit-every", "40")
    assert (row["requests"], row["tokens"]) == (requests, tokens)
    assert row["texts"] == row["cached"] + row["to_embed"] and row["to_embed"] > row["inputs"]  # chunks; fewer windows


def test_a_plan_finds_what_it_recorded_as_a_run_finds_what_it_stored(server, tmp_path):
    calls = [["a one", "b two"], ["a one", "b two", "c three", "d four", "e five", "f six"]]
    planned = load_embedder("openai:text-embedding-3-small", cache_dir=tmp_path, commit_every=4, plan=True)
    for texts in calls:
        planned.embed(texts)
    plan = plan_of_model(planned, calibrate=False)
    real = load_embedder("openai:text-embedding-3-small", cache_dir=tmp_path, commit_every=4)
    for texts in calls:
        real.embed(texts)
    assert plan.requests == len(server.requests) == 3 and (plan.texts, plan.cached, plan.to_embed) == (6, 0, 6)


@pytest.mark.parametrize("args, says", [(["--max-cost", "nan"], "error: --max-cost must be a number of USD >= 0"),
                                        (["--max-cost", "-1"], "error: --max-cost must be a number of USD >= 0"),
                                        (["--max-cost", "inf"], "error: --max-cost must be a number of USD >= 0"),
                                        (["--max-cost", "abc"], "error: --max-cost must be a number of USD >= 0, not 'abc'"),
                                        (["--max-cost", "١"], "error: --max-cost must be a number of USD >= 0, not '١'"),
                                        (["--json"], "error: --json goes with --plan"),
                                        # nolima takes a price alone too (decision.csv's USD): this run has no such embedder
                                        (["--price", "openai:text-embedding-3-small=1"],
                                         "error: --price names openai:text-embedding-3-small, which this run does not embed with"),
                                        (["--plan", "--price", "openai:text-embedding-3-small=x"], "error: --price takes SPEC=USD")])
def test_the_plans_options_are_checked_before_any_work(args, says, tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--corpus", f"dir:{tmp_path / 'no-such-folder'}", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code != 0 and result.output.startswith(says), result.output  # before the corpus is looked at


def test_a_price_for_an_embedder_the_run_does_not_have_is_a_mistake(server, books_dir, tmp_path):
    result = CliRunner().invoke(app, [*grid_args(books_dir, tmp_path / "run"), "-e", "openai:text-embedding-3-small", "--plan",
                                      "--price", "openai:text-embedding-3-large=0.1"])
    assert result.exit_code != 0 and "--price names openai:text-embedding-3-large, which this run does not embed with" in result.output


@pytest.mark.slow
def test_a_price_matches_the_embedder_however_its_other_options_are_written(tmp_path):
    """``device`` and ``max_batch_tokens`` change where and how fast, not the embedder: a price
    names the embedder as the plan does; an option that changes a vector names another one."""
    assert parse_prices(["st:all-MiniLM-L6-v2?device=cpu&max_batch_tokens=64=0.5"]) == {"st:all-MiniLM-L6-v2": 0.5}
    assert parse_prices(["st:all-MiniLM-L6-v2?max_seq_length=128&device=cpu=1"]) == {"st:all-MiniLM-L6-v2?max_seq_length=128": 1.0}
    args = ["similarity", "needle-question", "-e", "st:all-MiniLM-L6-v2?device=cpu", "--groups", ",".join(SMALL_GROUPS),
            "--out", str(tmp_path / "nq.csv"), "-q", "--plan", "--json", "--price", "st:all-MiniLM-L6-v2?max_batch_tokens=64=0.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (plan,) = json.loads(result.output)["embedders"]
    assert (plan["embedder"], plan["usd_per_million"], plan["price_source"]) == ("st:all-MiniLM-L6-v2", 0.5, "--price")


def test_a_price_for_an_embedder_not_in_the_run_is_refused_before_any_planning(server, tmp_path):
    result = CliRunner().invoke(app, ["nolima", "--corpus", f"dir:{tmp_path / 'no-such-folder'}", "--out", str(tmp_path / "run"),
                                      "-e", "openai:text-embedding-3-small", "--plan", "--price", "openai:text-embedding-3-large=0.1"])
    assert result.exit_code == 1 and result.output.startswith(  # before the corpus is looked at
        "error: --price names openai:text-embedding-3-large, which this run does not embed with"), result.output
    assert server.requests == [] and not (tmp_path / "run").exists()


def test_an_unknown_price_makes_the_total_unknown_not_zero():
    priced = EmbedderPlan("openai:text-embedding-3-small", 3, 0, 3, 4, 30, "cl100k_base", 0.0, 2, 1.0, "", 0.02, "list", 6e-7, 6e-7)
    unpriced = EmbedderPlan("openai:m?base_url=http://127.0.0.1:1/v1&max_tokens=64", 3, None, 3, 4, 30, "reference", 0.2, 2, 1.0, "",
                            None, "no price known (give --price SPEC=USD)", None, None)
    both = json.loads(plans_json([priced, unpriced]))
    assert both["total_usd"] is None and both["unpriced"] == [unpriced.embedder]
    assert format_plans([priced, unpriced]).splitlines()[-1] == (
        f"total: unknown: no price known for {unpriced.embedder} (give --price SPEC=USD); the others $0.0000 (nothing was sent or stored)")
    known = json.loads(plans_json([priced]))
    assert known["total_usd"] == pytest.approx(6e-7) and known["unpriced"] == []


def test_a_local_plan_counts_the_tokens_the_model_reads_at_most_its_window(tmp_path, minilm):
    """A long expanded query (an expanded-250 question runs past all-MiniLM-L6-v2's 256-token
    window) counts the content tokens the model reads, not its whole length with special tokens."""
    short = "Which character has been to Dresden?"
    expanded = short + " " + " ".join(f"term{i}" for i in range(250))
    planned = load_embedder("st:all-MiniLM-L6-v2", cache_dir=tmp_path, plan=True)
    planned.embed([expanded, short], kind="query")
    plan = plan_of_model(planned, calibrate=False)
    content = [len(minilm.model.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in (expanded, short)]
    window = minilm.model.max_seq_length - 2  # [CLS] and [SEP] are not content
    assert content[0] > minilm.model.max_seq_length and plan.inputs == 2
    assert plan.tokens == window + content[1]  # before: the whole expanded query and the special tokens, 2 * 2 more


@pytest.fixture
def keyless(monkeypatch):
    """A fake provider on 127.0.0.1 and no API key set: what a plan may be made with."""
    budget.reset()
    with FakeEmbeddingServer() as fake:
        for provider in ("OPENAI", "JINA", "VOYAGE"):
            monkeypatch.delenv(f"{provider}_API_KEY", raising=False)
            monkeypatch.setenv(f"{provider}_BASE_URL", f"{fake.url}/v1")
        yield fake
    budget.reset()


def test_a_plan_needs_no_api_key_and_names_the_keys_the_run_will_need(keyless, books_dir, tmp_path):
    """Pricing a run must not need the access it prices: a plan sends nothing. The run itself is
    refused without its key, before any work, as before."""
    out, spec = tmp_path / "run", "openai:text-embedding-3-small"
    text = CliRunner().invoke(app, [*grid_args(books_dir, out), "-e", spec, "-e", "jina:jina-embeddings-v3", "--plan"])
    assert text.exit_code == 0, text.output  # before: error: cannot run openai:... (OPENAI_API_KEY is not set)
    assert "the run will need OPENAI_API_KEY (not set here), JINA_API_KEY (not set here); this plan needed no key" in text.output
    planned = CliRunner().invoke(app, [*grid_args(books_dir, out), "-e", spec, "--plan", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.output)
    (row,) = plan["embedders"]
    assert plan["keys_needed"] == {"OPENAI_API_KEY": False} and (row["key_env"], row["key_set"]) == ("OPENAI_API_KEY", False)
    assert row["tokens"] > 0 and row["usd"] == pytest.approx(row["tokens"] / 1e6 * 0.02)
    assert keyless.requests == [] and not out.exists()
    for args in ([], ["--max-cost", "5"]):  # a run, or a plan a run follows: the key first
        run = CliRunner().invoke(app, [*grid_args(books_dir, out), "-e", spec, *args])
        assert run.exit_code == 1 and run.output.startswith("error: cannot run openai:text-embedding-3-small (OPENAI_API_KEY is not set)")
    assert keyless.requests == [] and not out.exists()


@pytest.mark.slow
def test_a_plan_counted_from_sentences_is_the_plan_counted_text_by_text(keyless, books_dir, tmp_path, monkeypatch):
    """The plan counts and cuts each haystack from its sentences, each tokenised once for every
    API model (4-5 minutes per API model on the default grid, tokenising every haystack
    whole two or three times); its numbers are those of counting every text whole. Windows of 300
    tokens make the models cut the 512-token haystacks (the reference tokenizer where a strategy
    cuts, OpenAI's own where the model fits its inputs)."""
    from embedeval.embedders.tokens import TokenCounter

    specs = ["openai:text-embedding-3-small?max_tokens=300", "openai:text-embedding-3-large", "voyage:voyage-3-large?max_tokens=300",
             "jina:jina-embeddings-v3"]
    args = [*grid_args(books_dir, tmp_path / "run"), *(x for spec in specs for x in ("-e", spec)),
            "-s", "truncate,windows-mean,chunks-max", "--plan", "--json"]
    by_parts = CliRunner().invoke(app, args)
    assert by_parts.exit_code == 0, by_parts.output
    monkeypatch.setattr(TokenCounter, "counts_by_parts", property(lambda self: False))
    whole = CliRunner().invoke(app, args)
    assert whole.exit_code == 0, whole.output
    assert json.loads(by_parts.output) == json.loads(whole.output)
    rows = json.loads(whole.output)["embedders"]
    assert [row["embedder"] for row in rows] == specs and all(row["tokens"] > row["texts"] > 0 for row in rows)


@pytest.mark.slow
def test_a_plan_with_keys_set_says_so(server, books_dir, tmp_path):
    result = CliRunner().invoke(app, [*grid_args(books_dir, tmp_path / "run"), "-e", "openai:text-embedding-3-small", "--plan"])
    assert result.exit_code == 0, result.output
    assert "the run will need OPENAI_API_KEY (set); this plan needed no key" in result.output
    local = CliRunner().invoke(app, [*grid_args(books_dir, tmp_path / "run"), "--plan"])
    assert "the run will need" not in local.output  # a local model sends no key


def test_a_similarity_plan_needs_no_api_key_either(keyless, tmp_path):
    args = ["similarity", "needle-question", "-e", "openai:text-embedding-3-small", "--groups", ",".join(SMALL_GROUPS),
            "--out", str(tmp_path / "nq.csv"), "-q"]
    planned = CliRunner().invoke(app, [*args, "--plan"])
    assert planned.exit_code == 0 and "the run will need OPENAI_API_KEY (not set here)" in planned.output, planned.output
    refused = CliRunner().invoke(app, [*args, "--max-cost", "5"])
    assert refused.exit_code == 1 and "OPENAI_API_KEY is not set" in refused.output
    assert keyless.requests == [] and not (tmp_path / "nq.csv").exists()


@pytest.mark.slow
def test_a_plan_shows_what_it_does_on_stderr(books_dir, tmp_path, isolated_cache):
    """A context-rot-5 plan was silent for minutes: each scorer's recording and a local model's
    timing now show a step line on stderr; stdout is the plan alone."""
    args = ["nolima", *SMALL, "--corpus", f"dir:{books_dir}", "--out", str(tmp_path / "run"), "--plan"]
    loud = CliRunner().invoke(app, args)
    assert loud.exit_code == 0, loud.output
    lines = [line.rsplit("\r", 1)[-1] for line in loud.stderr.splitlines()]
    done = r" \.\.\. done in \d+\.\d s"
    for step in [rf"st:all-MiniLM-L6-v2 \[truncate\]: what it would embed, recorded \(nothing sent\){done}",
                 rf"st:all-MiniLM-L6-v2: timing a sample of its [\d,]+ inputs{done}"]:
        assert any(re.fullmatch(step, line) for line in lines), (step, lines)
    assert loud.stdout.startswith("embedder ") and "what it would embed" not in loud.stdout


@pytest.mark.slow
def test_a_timing_process_whose_plan_is_gone_ends_without_loading_the_model():
    """A plan killed by SIGTERM or SIGKILL runs no atexit, so its timing processes only see their
    input close: each ends then, not after importing PyTorch and loading the weights for no one
    (the audit: they ran on, orphaned, for the seconds of a load)."""
    import time

    from embedeval.embedders.timing import SampleTimer

    timer = SampleTimer("st:all-MiniLM-L6-v2")
    try:
        start = time.perf_counter()
        timer._process.stdin.close()  # what the plan's death does to the pipe
        assert timer._process.wait(timeout=60) == 0
        took = time.perf_counter() - start
    finally:
        timer.close()
    full = SampleTimer("st:all-MiniLM-L6-v2")  # the same process asked: it loads the model first
    try:
        start = time.perf_counter()
        assert full.seconds([Texts(("a",))], [Texts(("b",))]) >= 0
        loading = time.perf_counter() - start
    finally:
        full.close()
    assert took < loading / 2, (took, loading)


def test_a_timing_process_that_dies_is_one_error_line():
    """A timing process killed (for memory, a crash in native code) is an EmbedevalError naming it,
    so the command says one error line, not a RuntimeError's traceback (the audit)."""
    from embedeval.embedders.timing import SampleTimer
    from embedeval.errors import EmbedevalError

    timer = SampleTimer("st:all-MiniLM-L6-v2")
    try:
        timer._process.kill()
        timer._process.wait()
        with pytest.raises(EmbedevalError, match=r"timing st:all-MiniLM-L6-v2 in a process of its own failed \(exit status -9\)"):
            timer.seconds([Texts(("a",))], [Texts(("b",))])
    finally:
        timer.close()


@pytest.mark.slow
def test_a_plan_reads_the_pace_a_run_measured_here_and_loads_nothing(books_dir, tmp_path, isolated_cache, monkeypatch):
    """A run keeps its local model's pace (document seconds per token) in the cache, for this
    machine and device setting; a later plan of another grid estimates from it without a timing
    process (none started early, none by the plan) and says so; another device setting, another
    machine, or a pace below LEAST_TOKENS tokens is timed as before."""
    from embedeval.embedders import speed, timing
    from embedeval.embedders.speed import known_speed

    first = CliRunner().invoke(app, [*grid_args(books_dir, tmp_path / "run")])
    assert first.exit_code == 0, first.output
    cache = EmbeddingCache(isolated_cache)
    kept = known_speed(cache, "st:all-MiniLM-L6-v2", "auto")
    cache.close()
    assert kept is not None and kept["tokens"] >= speed.LEAST_TOKENS and kept["seconds"] > 0
    timers = []
    monkeypatch.setattr(timing, "SampleTimer", lambda spec: timers.append(spec) or pytest.fail("a timing process started"))
    bigger = ["--lengths", "128,256,512,1024"]
    planned = plan_of(books_dir, tmp_path / "bigger", *bigger)["st:all-MiniLM-L6-v2"]
    assert not timers and "at the pace an earlier run measured here" in planned["time_basis"]
    assert planned["seconds"] == pytest.approx(kept["seconds"] / kept["tokens"] * planned["tokens"])
    monkeypatch.setattr(speed, "machine_id", lambda: "another machine")
    with pytest.raises(BaseException, match="a timing process started"):
        plan_of(books_dir, tmp_path / "bigger", *bigger)
    cache = EmbeddingCache(isolated_cache)
    assert known_speed(cache, "st:all-MiniLM-L6-v2", "cpu") is None  # another device setting: nothing kept
    speed.remember_speed(cache, "st:other", "auto", 1.0, speed.LEAST_TOKENS - 1)
    assert known_speed(cache, "st:other", "auto") is None
    cache.close()
