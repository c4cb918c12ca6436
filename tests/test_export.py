"""Exports: MTEB result files read back by the mteb package's own result
classes with metrics.csv's numbers, and a prompt set in Context Rot's columns whose covariates
equal a direct sentence-transformers computation."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.export import DEFAULT_TEMPLATE, MTEB_SCORES, PROMPT_COLUMNS

from conftest import own_cache
from fakes import said_first, write_word_books

GROUPS = "loc-dresden,loc-peru,diet-vegan"
WORDS = ("harbour lantern meadow orchard bridge river candle window garden market winter morning quiet ancient "
         "narrow distant gentle wooden silver golden patient careful crowded heavy").split()


@pytest.fixture(scope="module")
def small_books(tmp_path_factory):
    """Ten short books written here (a small corpus keeps the chunk search quick)."""
    return write_word_books(tmp_path_factory.mktemp("small-books"), WORDS, (8, 20), seed=11)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, small_books):
    """A run made in the corpus's parent folder with a relative `dir:` corpus and needle file: the exports
    read it from the tests' own working directory."""
    out = tmp_path_factory.mktemp("export") / "run"
    here = os.getcwd()
    shutil.copy(DEFAULT_NEEDLES, small_books.parent / "needles.json")
    os.chdir(small_books.parent)
    try:
        with own_cache(tmp_path_factory):
            result = CliRunner().invoke(app, ["nolima", "--groups", GROUPS, "--corpus", f"dir:{small_books.name}", "--needles", "needles.json",
                                          "--lengths", "128,256",
                                          "--depths", "2", "--negatives", "4", "--n-bootstrap", "50", "--variants", "onehop,inverted",
                                          "--strategy", "truncate,windows-mean", "--out", str(out), "-q"])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_a_run_records_its_corpus_and_needles_as_absolute_paths(run_dir, small_books):
    config = json.loads((run_dir / "config.json").read_text())
    assert config["grid"]["corpus"] == f"dir:{small_books.resolve()}"
    assert config["needles"] == str((small_books.parent / "needles.json").resolve())


@pytest.mark.slow
def test_an_older_run_with_a_relative_corpus_not_found_from_here_is_one_line(run_dir, tmp_path, monkeypatch):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    config = json.loads((old / "config.json").read_text())
    config["grid"]["corpus"] = "dir:books-of-then"
    (old / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["export", "old", "--format", "prompts", "--out", "p.csv"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0] == (f"error: old/config.json records the corpus dir:books-of-then at books-of-then relative to the folder that "
                        f"run was started in (not recorded), and {tmp_path / 'books-of-then'} does not exist; run this from that "
                        "folder, or write the absolute path into config.json"), lines[0]
    assert not (tmp_path / "p.csv").exists()
    result = CliRunner().invoke(app, ["report", "old"])  # the report needs no corpus: an older run still reads
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_mteb_reads_the_exported_results_with_the_numbers_of_metrics_csv(run_dir, tmp_path):
    from mteb.models.model_meta import ModelMeta
    from mteb.results import TaskResult

    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "mteb", "--out", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "results" / "sentence-transformers__all-MiniLM-L6-v2" / "no_revision_available"
    assert sorted(p.name for p in folder.iterdir()) == ["EmbedevalNoLiMa.json", "EmbedevalNoLiMa.windows-mean.json", "model_meta.json"]
    meta = ModelMeta.model_validate(json.loads((folder / "model_meta.json").read_text()))
    assert meta.name == "sentence-transformers/all-MiniLM-L6-v2" and meta.revision == "no_revision_available"
    metrics = pd.read_csv(run_dir / "metrics.csv")
    overall = metrics[(metrics["category"] == "all") & (metrics["depth_bucket"] == "all") & (metrics["query_form"] == "question")]
    for strategy, name in (("truncate", "EmbedevalNoLiMa"), ("windows-mean", "EmbedevalNoLiMa.windows-mean")):
        loaded = TaskResult.from_disk(folder / f"{name}.json")
        assert loaded.task_name == name and set(loaded.scores) == {"test_128", "test_256"}
        for split, entries in loaded.scores.items():
            assert sorted(e["hf_subset"] for e in entries) == ["inverted", "onehop"]
            for entry in entries:
                assert entry["languages"] == ["eng-Latn"] and entry["main_score"] == entry["ndcg_at_1"]
                cell = overall[(overall["strategy"] == strategy) & (overall["length"] == int(split.removeprefix("test_")))
                               & (overall["variant"] == entry["hf_subset"])].set_index("metric")["value"]
                for mteb_name, ours in MTEB_SCORES.items():
                    assert entry[mteb_name] == pytest.approx(cell[ours], abs=1e-6), (name, split, mteb_name)
        main = overall[(overall["strategy"] == strategy) & (overall["metric"] == "ndcg@1")]["value"].mean()
        assert loaded.get_score() == pytest.approx(main, abs=1e-6)  # mteb's own aggregation over splits and subsets


@pytest.mark.slow
def test_the_prompt_set_has_context_rots_columns_and_covariates_a_direct_computation_agrees_with(run_dir, small_books, tmp_path):
    from sentence_transformers import SentenceTransformer

    from embedeval.chunking import chunk_corpus
    from embedeval.corpus import load_corpus
    from embedeval.embedders.models import resolve_model_path

    out = tmp_path / "prompts.csv"
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "prompts", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert list(table.columns[:6]) == ["token_count", "approximate_input_length", "needle_depth", "prompt", "question", "answer"]
    assert list(table.columns[:len(PROMPT_COLUMNS)]) == PROMPT_COLUMNS
    haystacks = pd.read_parquet(run_dir / "haystacks.parquet")
    needled = haystacks[~haystacks["variant"].isin(["control", "negative"])].set_index("id")
    assert len(table) == len(needled) and set(table["haystack_id"]) == set(needled.index)
    row = table.iloc[len(table) // 2]
    haystack = needled.loc[row["haystack_id"]]
    assert row["prompt"] == DEFAULT_TEMPLATE.format(haystack=haystack["text"], question=row["question"])
    assert row["answer"] == haystack["character"] and row["needle"] in haystack["text"]
    assert row["token_count"] == haystack["n_tokens"] and row["approximate_input_length"] == haystack["length"]
    # covariates: one embedder, so the mean is its value; recomputed with sentence-transformers directly
    model = SentenceTransformer(str(resolve_model_path("all-MiniLM-L6-v2")), device="cpu")
    q, n = model.encode([row["question"], row["needle"]], normalize_embeddings=True)
    assert row["needle_question_sim"] == pytest.approx(float(q @ n), abs=1e-5)
    assert row["needle_question_sim:st:all-MiniLM-L6-v2"] == row["needle_question_sim"]
    chunks = chunk_corpus(load_corpus(f"dir:{small_books}"), "sentences:1-3", seed=0)
    vectors = model.encode([c.text for c in chunks], normalize_embeddings=True, batch_size=64)
    top = np.sort(vectors @ n)[-5:]
    assert row["needle_haystack_sim"] == pytest.approx(float(top.mean()), abs=1e-5)


@pytest.mark.slow
def test_a_prompt_set_says_first_what_its_covariates_embed_and_its_plan_stops_there(run_dir, small_books, tmp_path, isolated_cache):
    """`export --format prompts` embedded 31,923 corpus chunks without saying so first. Its
    covariates embed each distinct question (a query), needle (a document, and a query for the
    chunk search) and chunk of the run's corpus (a document): counted here from the prompt set."""
    from embedeval.chunking import chunk_corpus
    from embedeval.corpus import load_corpus

    from test_say_first import plan_and_run

    out = tmp_path / "prompts.csv"
    args = ["export", str(run_dir), "--format", "prompts", "--out", str(out), "-q"]
    plan, run, added = plan_and_run(args, isolated_cache)  # this test's cache holds nothing yet
    table = pd.read_csv(out)
    chunks = {c.text for c in chunk_corpus(load_corpus(f"dir:{small_books}"), "sentences:1-3", seed=0)}
    needed = ({("query", q) for q in table["question"]} | {("document", n) for n in table["needle"]}
              | {("query", n) for n in table["needle"]} | {("document", c) for c in chunks})
    assert (plan["to_embed"], plan["cached"], plan["texts"]) == said_first(run.stderr) == (len(needed), 0, len(needed)) == (added, 0, added)
    again, rerun, added = plan_and_run(args, isolated_cache)  # all of them cached now
    assert (again["to_embed"], again["cached"]) == said_first(rerun.stderr)[:2] == (0, len(needed)) and added == 0


@pytest.mark.parametrize("args, message", [
    (["--format", "excel", "--out", "x"], "error: unknown export format 'excel'; use one of mteb, prompts"),
    (["--format", "prompts", "--out", "p.txt"], "error: output p.txt must end in .csv or .parquet"),
    (["--format", "mteb", "--out", "r", "--template", "t.txt"], "error: --template goes with --format prompts"),
])
def test_bad_export_requests_are_one_line(run_dir, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["export", str(run_dir), *args])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not any(tmp_path.iterdir())


def test_an_unwritable_prompt_set_is_refused_before_the_run_is_read(run_dir, monkeypatch):
    """`export --format prompts` did all its work, then found it could not write."""
    import embedeval.export

    def never(*args, **kwargs):
        raise AssertionError("the run was read for an output that cannot be written")

    monkeypatch.setattr(embedeval.export.NolimaRun, "open", never)
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "prompts", "--out", "/sys/embedeval-test.csv", "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: cannot write /sys/embedeval-test.csv ("), \
        result.output


def test_exports_refuse_what_is_not_a_run_or_a_template(tmp_path):
    (tmp_path / "t.txt").write_text("no slots here")
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9 {haystack} {question}".encode("latin-1"))  # not UTF-8
    for args, message in ((["--format", "mteb", "--out", str(tmp_path / "r")], f"error: run directory {tmp_path / 'nope'} does not exist"),
                          (["--format", "prompts", "--out", str(tmp_path / "p.csv"), "--template", str(tmp_path / "t.txt")],
                           "lacks {haystack} and {question}"),
                          (["--format", "prompts", "--out", str(tmp_path / "p.csv"), "--template", str(tmp_path / "latin1.txt")],
                           "latin1.txt is not UTF-8 text (byte 3: invalid continuation byte)")):
        result = CliRunner().invoke(app, ["export", str(tmp_path / "nope"), *args])
        assert result.exit_code != 0 and message in result.output, result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["export", str(empty), "--format", "mteb", "--out", str(tmp_path / "r")])
    assert "is not a finished run directory (missing config.json, metrics.csv, similarities.parquet, haystacks.json)" in result.output


def test_exports_never_overwrite_a_file_or_folder_embedeval_did_not_write(run_dir, tmp_path):
    """An existing prompts file that is not a prompt set of embedeval's, a link, and an
    MTEB folder holding files of the user's are each one error line, and nothing is touched."""
    mine = tmp_path / "mine.csv"
    mine.write_text("a,b\n1,2\n")
    link = tmp_path / "link.csv"
    link.symlink_to(mine)
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "notes.txt").write_text("MINE")
    for args, says in ((["--format", "prompts", "--out", str(mine)], f"error: output {mine} exists and is not a file embedeval wrote"),
                       (["--format", "prompts", "--out", str(link)], f"error: output {link} is a link"),
                       (["--format", "mteb", "--out", str(folder)], f"error: --out {folder} holds files and is not a run folder embedeval wrote")):
        result = CliRunner().invoke(app, ["export", str(run_dir), *args])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(says), result.output
    assert mine.read_text() == "a,b\n1,2\n" and link.is_symlink() and [p.name for p in folder.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_a_users_csv_with_the_prompt_columns_is_not_overwritten_but_a_prompts_file_embedeval_wrote_is(run_dir, tmp_path):
    """The header is no proof of whose a file is; embedeval's marker beside the file is."""
    mine = tmp_path / "mine.csv"
    text = ",".join(PROMPT_COLUMNS) + "\n" + ",".join(["1"] * len(PROMPT_COLUMNS)) + "\n"
    mine.write_text(text)
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "prompts", "--out", str(mine)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: output {mine} exists and is not a file embedeval wrote") and mine.read_text() == text
    ours = tmp_path / "ours.csv"
    for _ in range(2):
        result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "prompts", "--out", str(ours)])
        assert result.exit_code == 0, result.output


def test_an_mteb_export_folder_embedeval_wrote_is_written_again(run_dir, tmp_path):
    out = tmp_path / "results"
    for _ in range(2):
        result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "mteb", "--out", str(out)])
        assert result.exit_code == 0, result.output
    listed = set(json.loads((out / "derived.json").read_text())["files"])
    model = "sentence-transformers__all-MiniLM-L6-v2/no_revision_available"
    assert listed == {f"{model}/EmbedevalNoLiMa.json", f"{model}/EmbedevalNoLiMa.windows-mean.json", f"{model}/model_meta.json"}
    assert not (out / ".embedeval.lock").exists()


def _strict_json(text: str):
    """``text`` parsed as JSON the way any other reader parses it: no NaN or Infinity."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
def test_a_score_the_run_has_none_of_is_exported_as_null_not_nan(run_dir, tmp_path):
    """A cell whose ndcg@1 the metrics lack (hand-edited, or an older run) was
    written ``"main_score": NaN`` (and ``Infinity`` for an infinite value), which no JSON reader takes;
    it is null, and every file the export writes is strict JSON."""
    edited = tmp_path / "run"
    shutil.copytree(run_dir, edited)
    metrics = pd.read_csv(edited / "metrics.csv")
    cell = (metrics["strategy"] == "truncate") & (metrics["length"] == 128) & (metrics["variant"] == "onehop")
    metrics[~(cell & (metrics["metric"] == "ndcg@1"))].to_csv(edited / "metrics.csv", index=False)
    result = CliRunner().invoke(app, ["export", str(edited), "--format", "mteb", "--out", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    for path in (tmp_path / "results").rglob("*.json"):
        _strict_json(path.read_text())
    folder = tmp_path / "results" / "sentence-transformers__all-MiniLM-L6-v2" / "no_revision_available"
    entries = _strict_json((folder / "EmbedevalNoLiMa.json").read_text())["scores"]["test_128"]
    onehop = next(entry for entry in entries if entry["hf_subset"] == "onehop")
    assert onehop["main_score"] is None and onehop["ndcg_at_1"] is None and onehop["recall_at_5"] is not None


def test_output_json_is_strict():
    from embedeval.io import json_text

    assert _strict_json(json_text({"a": [1.5, None]})) == {"a": [1.5, None]}
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            json_text({"score": value})


def test_an_mteb_export_rerun_into_the_folder_a_crashed_export_left_works(run_dir, tmp_path, monkeypatch):
    """Audit 2: an export that dies after writing result files, before its derived.json, leaves a folder
    the rerun writes into (it claimed the folder first); the same files in a folder of the user's stay refused."""
    import embedeval.export as export

    def crash(*args):
        raise RuntimeError("crashed before the record")
    out = tmp_path / "results"
    monkeypatch.setattr(export, "record_outputs", crash)
    with pytest.raises(RuntimeError):
        export.export_mteb(run_dir, out)
    monkeypatch.undo()
    assert any(out.rglob("model_meta.json")) and not (out / "derived.json").exists()
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "mteb", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "derived.json").is_file() and not (out / ".embedeval-claim").exists()
    mine = tmp_path / "mine"
    shutil.copytree(out, mine, ignore=shutil.ignore_patterns("derived.json"))
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "mteb", "--out", str(mine)])
    assert result.exit_code == 1 and "is not a run folder embedeval wrote" in result.output


@pytest.mark.parametrize("table, column, value, says", [
    ("metrics.csv", "value", "abc", "metrics.csv, line 4, column value: 'abc' is not a number"),
    ("metrics.csv", "length", "12.5", "metrics.csv, line 4, column length: 12.5 is not a whole number"),
    ("breaks.csv", "break_point", "soon", "breaks.csv, line 4, column break_point: 'soon' is not a whole number"),
    ("haystacks.parquet", "n_tokens", "many", "haystacks.parquet, row 3, column n_tokens: 'many' is not a whole number"),
    ("retrieval.parquet", "rank", "first", "retrieval.parquet, row 3, column rank: 'first' is not a whole number"),
    # the audit: a flag that is a word, a flag written as text in Parquet, a haystack without its text
    ("breaks.csv", "own_question", "maybe", "breaks.csv, line 4, column own_question: 'maybe' is not true or false"),
    ("retrieval.parquet", "own_question", "False", "retrieval.parquet, row 1, column own_question: 'True' is not true or false"),
    ("haystacks.parquet", "text", None, "haystacks.parquet, row 3, column text: an empty cell is not a text"),
    # ranges (embedeval.run.TABLE_SCHEMAS)
    ("retrieval.parquet", "rank", "0", "retrieval.parquet, row 3, column rank: '0' is not a whole number >= 1"),
    ("haystacks.parquet", "needle_end", "-1", "haystacks.parquet, row 3, column needle_end: '-1' is not a whole number >= 0"),
    ("metrics.csv", "metric", "recall@7", "metrics.csv, line 4, column metric: 'recall@7' is not a metric a run writes"),
])
@pytest.mark.slow
def test_a_run_table_edited_by_hand_is_one_line_naming_file_line_and_column(run_dir, tmp_path, table, column, value, says):
    """Each table a command reads is checked against the kinds the run wrote
    when it is opened: report and both exports say what is wrong in one line, write nothing."""
    edited = tmp_path / "run"
    shutil.copytree(run_dir, edited)
    path = edited / table
    frame = pd.read_csv(path) if table.endswith(".csv") else pd.read_parquet(path)
    frame[column] = frame[column].astype(object if table.endswith(".csv") or value is None else str)  # Parquet: one type a column
    frame.loc[2, column] = value
    frame.to_csv(path, index=False) if table.endswith(".csv") else frame.to_parquet(path, index=False)
    def tables() -> dict:
        return {p: p.stat().st_mtime_ns for p in edited.iterdir() if p.suffix in (".csv", ".parquet", ".json")}

    before = tables()
    refused = []
    for args in (["report", str(edited)], ["export", str(edited), "--format", "mteb", "--out", str(tmp_path / "mteb")],
                 ["export", str(edited), "--format", "prompts", "--out", str(tmp_path / "prompts.csv")]):
        result = CliRunner().invoke(app, args)
        if result.exit_code == 0:  # a command that does not read this table
            continue
        assert result.exit_code == 1 and result.output.startswith("error: ") and says in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1
        refused.append(args[0] + ("" if args[0] == "report" else " " + args[3]))
    expected = {"metrics.csv": ["report", "export mteb"], "breaks.csv": ["report"], "haystacks.parquet": ["export prompts"],
                "retrieval.parquet": ["report"]}[table]  # the commands that read the table: each refuses it
    assert set(expected) <= set(refused), refused
    assert tables() == before  # no table of the run rewritten or added (`report` rewrites only the report)
