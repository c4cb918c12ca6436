"""User mistakes get one ``error:`` line, a non-zero exit and no new files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app


def _files(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def _setup(tmp_path):
    (tmp_path / "a-folder").mkdir()
    for folder in ("x.npy", "dir.json", "dir.csv", "dir.parquet"):
        (tmp_path / folder).mkdir()
    (tmp_path / "texts.txt").write_text("one text\n")
    (tmp_path / "not.parquet").write_text("not a table")
    (tmp_path / "garbage-run").mkdir()
    (tmp_path / "garbage-run" / "metrics.csv").write_text("\x00\x01 nonsense\n")
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "garbage-run" / "similarities.parquet")
    (tmp_path / "empty-run").mkdir()
    for run in ("garbage-run", "empty-run"):
        (tmp_path / run / "config.json").write_text('{"embedders": ["bm25"], "needles": "n.json", "corpus": "c", "lengths": [128], "depths": 2, '
                                                    '"seed": 0, "tokenizer": "st:all-MiniLM-L6-v2"}')
    (tmp_path / "bad-config-run").mkdir()
    (tmp_path / "bad-config-run" / "config.json").write_text("[1, 2]")
    pd.DataFrame(columns=["metric"]).to_csv(tmp_path / "empty-run" / "metrics.csv", index=False)
    pd.DataFrame({"a": pd.Series([], dtype=float)}).to_parquet(tmp_path / "empty-run" / "similarities.parquet")


@pytest.mark.parametrize("args, says", [
    (["nolima", "--needles", "a-folder", "--out", "run"], "a-folder is invalid: group -: is a folder, not a JSON file"),
    (["needles", "check", "a-folder"], "is a folder, not a JSON file"),
    (["embed", "-i", "texts.txt", "-o", "x.npy"], "output x.npy is a folder, not a file"),
    (["expand", "--llm", "m", "--out", "dir.json"], "output dir.json is a folder, not a file"),
    (["similarity", "needle-question", "--out", "dir.csv"], "output dir.csv is a folder, not a file"),
    (["haystacks", "build", "--out", "dir.parquet"], "output dir.parquet is a folder, not a file"),
    (["haystacks", "build", "--out", "texts.txt/h.parquet"], "cannot be created: texts.txt is a file"),
    (["embed", "-i", "a-folder", "-o", "o.npy"], "input file a-folder cannot be read"),
    (["nolima", "--expansions", "a-folder", "--out", "run"], "expansion file a-folder cannot be read"),
    (["haystacks", "show", "not.parquet", "--id", "x"], "not.parquet is not a readable Parquet table"),
    (["report", "garbage-run"], "garbage-run/metrics.csv lacks the column(s)"),
    (["report", "empty-run"], "empty-run/metrics.csv lacks the column(s) embedder"),
    (["report", "bad-config-run"], "bad-config-run is not a finished run directory (missing metrics.csv"),
    (["embed", "-i", "texts.txt", "-o", "o.npy", "--cache-dir", "texts.txt"],
     "the embedding cache folder texts.txt cannot be made: texts.txt is a file, not a folder; point --cache-dir or EMBEDEVAL_CACHE"),
    (["cache", "info", "--cache-dir", "texts.txt/cache"], "the embedding cache folder texts.txt/cache cannot be made: texts.txt is a file"),
    # a model that is neither a folder nor bundled is named as such, not as a missing package
    (["nolima", "-e", "st:nonexistent", "--out", "run"], "no folder 'nonexistent' here and not a bundled model"),
    # an empty strategy item, a price given twice, a price with a separator
    (["nolima", "-s", "truncate,,windows-mean", "--out", "run"], "--strategy takes comma-separated names, not 'truncate,,windows-mean'"),
    (["nolima", "--price", "st:all-MiniLM-L6-v2=1", "--price", "st:all-MiniLM-L6-v2=2", "--out", "run"],
     "--price names st:all-MiniLM-L6-v2 twice"),
    (["nolima", "--price", "st:all-MiniLM-L6-v2=1_0", "--out", "run"], "--price takes SPEC=USD per million tokens"),
    # one model under two device settings planned twice and failed after embedding everything
    (["nolima", "-e", "st:all-MiniLM-L6-v2", "-e", "st:all-MiniLM-L6-v2?device=cpu", "--out", "run"],
     "st:all-MiniLM-L6-v2 and st:all-MiniLM-L6-v2?device=cpu are one embedder, st:all-MiniLM-L6-v2"),
    (["similarity", "needle-question", "-e", "st:all-MiniLM-L6-v2?max_batch_tokens=4096", "-e", "st:all-MiniLM-L6-v2",
      "--out", "sims.csv"], "are one embedder, st:all-MiniLM-L6-v2 (device and max_batch_tokens do not change its vectors)"),
])
def test_mistakes_are_one_line_and_write_nothing(tmp_path, monkeypatch, isolated_cache, args, says):
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert lines[-1].startswith("error: ") and says in lines[-1], result.output
    assert all(not line.startswith("Traceback") for line in lines)
    assert _files(tmp_path) == before


def test_a_question_orthogonal_to_its_needle_leaves_normalized_empty():
    from embedeval.aggregate import nolima_metrics
    from embedeval.messages import EmbedevalWarning
    from embedeval.needles import NeedleGroup, NeedleSet

    from fakes import CountingEmbedder, similarity_table

    class Orthogonal(CountingEmbedder):
        """Queries along e0, needles along e1, haystacks between: sim(q, needle) = 0."""

        def embed(self, texts, kind="document"):
            rows = []
            for text in texts:
                v = np.zeros(self.dim)
                if kind == "query":
                    v[0] = 1
                elif text.startswith("Needle"):
                    v[1] = 1
                else:
                    v[:2] = 1 / np.sqrt(2) if "Needle" in text else (0.2, 0.98)
                rows.append(v / np.linalg.norm(v))
            return np.array(rows, dtype=np.float32)

    group = NeedleGroup("g1", "cat", "Who?", "Ann", "who", {"onehop": "Needle: Ann was there."})
    needle_set = NeedleSet("set", "", (group,))
    rows = []
    for i, depth in enumerate([0.0, 0.5, 1.0]):
        text = "filler text. Needle: Ann was there. more filler."
        rows.append({"id": f"g1:onehop:128:d{i}", "group_id": "g1", "category": "cat", "variant": "onehop", "length": 128,
                     "depth": depth, "target_depth": depth, "text": text, "needle_start": 13, "needle_end": len(text), "n_tokens": 20})
    rows.append({"id": "g1:control:128", "group_id": "g1", "category": "cat", "variant": "control", "length": 128,
                 "depth": None, "target_depth": None, "text": "filler only.", "needle_start": None, "needle_end": None, "n_tokens": 20})
    haystacks = pd.DataFrame(rows).astype({"depth": "Float64", "target_depth": "Float64", "needle_start": "Int64", "needle_end": "Int64"})
    with pytest.warns(EmbedevalWarning, match=r"sim\(query, needle\) is 0 for g1"):
        table = similarity_table(Orthogonal(), haystacks, needle_set, {"question": ["Who?"]})
    assert table["normalized"].isna().all() and (table.loc[table["variant"] == "onehop", "sim_qn"] == 0).all()
    metrics = nolima_metrics(table, n_resamples=50)
    assert "normalized_mean" not in set(metrics["metric"]) and "comparative_ratio" in set(metrics["metric"])


def test_a_full_disk_while_writing_is_one_line_and_leaves_the_old_file(tmp_path, monkeypatch):
    import errno

    from embedeval.errors import OutputError
    from embedeval.io import write_text_atomic

    target = tmp_path / "config.json"
    target.write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.replace", full)
    with pytest.raises(OutputError, match=r"cannot write .*config.json \(No space left on device\)"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old" and _files(tmp_path) == [target.relative_to(tmp_path)]


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_a_bad_retry_setting_is_one_clear_error(monkeypatch, value):
    from embedeval.errors import ConfigError
    from embedeval.net.retry import retry_policy_from_env

    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", value)
    with pytest.raises(ConfigError, match=f"EMBEDEVAL_RETRY_MAX_SECONDS must be a positive number, not '{value}'"):
        retry_policy_from_env()


@pytest.mark.parametrize("value", ["inf", "2.5", "1e3", "0", "-1", "abc"])
def test_a_retry_count_that_is_no_whole_number_is_one_clear_error(monkeypatch, value):
    """EMBEDEVAL_MAX_ATTEMPTS=inf was int()'s OverflowError, 2.5 ran as 2 attempts."""
    from embedeval.errors import ConfigError
    from embedeval.net.retry import retry_policy_from_env

    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", value)
    with pytest.raises(ConfigError, match=f"^EMBEDEVAL_MAX_ATTEMPTS must be a whole number >= 1, not '{value}'$"):
        retry_policy_from_env()
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", " 7 ")
    assert retry_policy_from_env().max_attempts == 7


def _pair_files(folder):
    (folder / "no-needle.csv").write_text("id,question\na,Who?\n")
    (folder / "empty-question.csv").write_text("question,needle\nWho?,Ann was there.\n,Bo was there.\n")
    (folder / "empty-needle.jsonl").write_text('{"question": "Who?", "needle": "Ann was there."}\n{"question": "Who?", "needle": " "}\n')
    (folder / "dup.jsonl").write_text('{"id": 7, "question": "Who?", "needle": "Ann."}\n{"id": 7, "question": "Why?", "needle": "Bo."}\n')
    (folder / "broken.jsonl").write_text('{"question": "Who?", "needle": \n')
    (folder / "pairs.txt").write_text("question,needle\nWho?,Ann.\n")
    (folder / "not.parquet").write_text("not a table")
    (folder / "latin1.csv").write_bytes("question,needle\nWho?,Ren\xe9e.\n".encode("latin-1"))
    (folder / "header-only.csv").write_text("question,needle\n")
    (folder / "pairs-dir.csv").mkdir()
    pd.DataFrame({"question": ["Who?"], "needle": [None]}).to_parquet(folder / "null-needle.parquet")
    (folder / "ok.csv").write_text("question,needle\nWho?,Ann was there.\n")
    (folder / "word-theme.csv").write_text("question,needle,theme\nWho?,Ann was there.,writing\nWhy?,Bo wrote.,the writing\n")
    (folder / "two-targets.jsonl").write_text('{"question": "Who?", "needle": "Ann.", "cluster": 1, "theme": 2}\n')
    (folder / "negative-cluster.csv").write_text("question,needle,cluster\nWho?,Ann was there.,-1\n")
    (folder / "arabic-digit.csv").write_text("question,needle,cluster\nWho?,Ann was there.,٢\n", encoding="utf-8")


@pytest.mark.parametrize("args, says", [
    (["--pairs", "no-needle.csv"], "pair file no-needle.csv lacks the column(s) needle"),
    (["--pairs", "empty-question.csv"], "pair file empty-question.csv: row 2: empty question"),
    (["--pairs", "empty-needle.jsonl"], "pair file empty-needle.jsonl: line 2: empty needle"),
    (["--pairs", "null-needle.parquet"], "pair file null-needle.parquet: row 1: empty needle"),
    (["--pairs", "dup.jsonl"], "pair file dup.jsonl: line 2: duplicate id '7'"),
    (["--pairs", "broken.jsonl"], "pair file broken.jsonl: line 1: not valid JSON"),
    (["--pairs", "pairs.txt"], "pair file pairs.txt must end in .csv, .jsonl or .parquet"),
    (["--pairs", "not.parquet"], "pair file not.parquet is not a readable Parquet table"),
    (["--pairs", "latin1.csv"], "pair file latin1.csv is not UTF-8 text"),
    (["--pairs", "header-only.csv"], "pair file header-only.csv has no pairs"),
    (["--pairs", "missing.csv"], "pair file missing.csv does not exist"),
    (["--pairs", "pairs-dir.csv"], "pair file pairs-dir.csv is a folder, not a file"),
    (["--pairs", "ok.csv", "--groups", "loc-dresden"], "--pairs takes the place of --needles and --groups"),
    (["--pairs", "word-theme.csv"], "pair file word-theme.csv: row 2: theme must be a cluster number (0, 1, ... as in the "
                                    "themes run's clusters.csv) or a term of the theme's top terms (one word, such as writing), "
                                    "not 'the writing'"),
    (["--pairs", "two-targets.jsonl"], "pair file two-targets.jsonl: line 1: both cluster and theme given"),
    (["--pairs", "negative-cluster.csv"], "pair file negative-cluster.csv: row 1: cluster must be a cluster number"),
    (["--pairs", "arabic-digit.csv"], "pair file arabic-digit.csv: row 1: cluster must be a cluster number"),  # was theme 2
    (["--pairs", "ok.csv", "--needles", "n.json"], "--pairs takes the place of --needles and --groups"),
])
def test_bad_pair_files_are_one_line_before_any_model(tmp_path, monkeypatch, args, says):
    _pair_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a model checked first would fail on the key instead
    before = _files(tmp_path)
    result = CliRunner().invoke(app, ["similarity", "needle-question", *args, "-e", "openai:text-embedding-3-small",
                                      "--out", "nq.csv"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and says in lines[0], result.output
    assert _files(tmp_path) == before


OLD_RUN_CONFIG = ('{"embedders": ["bm25"], "needles": "n.json", "corpus": "c", "lengths": [128], "depths": 2, "seed": 0, '
                  '"tokenizer": "st:all-MiniLM-L6-v2"}')  # a config.json as the first versions wrote it (flat)


def _users_folder(folder):
    """A folder of the user's: files an embedeval run would overwrite, sweep or record."""
    (folder / "figures").mkdir(parents=True)
    (folder / "report.md").write_text("my report")
    (folder / ".draft.tmp").write_text("my draft")
    (folder / "figures" / ".cache.tmp").write_text("my cache")
    (folder / "figures" / "mine.png").write_bytes(b"my figure")


def _contents(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", [["nolima"], ["themes"]])
def test_out_into_a_folder_embedeval_did_not_write_is_refused(tmp_path, monkeypatch, command):
    """`--out` a folder holding other files (no config.json or themes.json of an embedeval
    run) is one line; nothing in it is overwritten, swept or recorded."""
    _users_folder(tmp_path / "u")
    monkeypatch.chdir(tmp_path)
    before = _contents(tmp_path)
    result = CliRunner().invoke(app, [*command, "--corpus", "dir:no-such-corpus", "--out", "u"])
    record = "themes.json" if command == ["themes"] else "config.json"
    assert result.exit_code == 1 and result.output == (
        f"error: --out u holds files and is not a run folder embedeval wrote (no {record} of an embedeval run in it); "
        "choose a new or empty folder, so that no file of yours is overwritten or deleted\n")
    assert _contents(tmp_path) == before and not (tmp_path / "u" / "derived.json").exists()


@pytest.mark.parametrize("prepare", ["empty", "old-run"])
def test_an_empty_folder_or_an_older_run_is_still_taken(tmp_path, monkeypatch, prepare):
    """An empty folder, or a run folder of an older version (a flat config.json that embedeval.run
    upgrades), passes the check: the run goes on to the next error, here the missing corpus."""
    (tmp_path / "out").mkdir()
    if prepare == "old-run":
        (tmp_path / "out" / "config.json").write_text(OLD_RUN_CONFIG)
        (tmp_path / "out" / "report.md").write_text("the old run's report")
    monkeypatch.chdir(tmp_path)
    before = _contents(tmp_path)
    result = CliRunner().invoke(app, ["nolima", "--corpus", "dir:no-such-corpus", "--out", "out", "-q"])
    assert result.exit_code == 1 and result.output == "error: corpus folder no-such-corpus does not exist\n"
    assert _contents(tmp_path) == before and (tmp_path / "out").is_dir()


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, monkeypatch, link):
    """`.embedeval.lock` planted as a link to another file: the run refuses it with one
    line, and the file it points at keeps its bytes (the lock is opened without following links
    and only ever written when this run created it)."""
    import os

    (tmp_path / "victim.txt").write_text("not embedeval's")
    (tmp_path / "old-run").mkdir()
    (tmp_path / "old-run" / "config.json").write_text(OLD_RUN_CONFIG)
    (os.symlink if link == "symlink" else os.link)(tmp_path / "victim.txt", tmp_path / "old-run" / ".embedeval.lock")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["nolima", "--corpus", "dir:no-such-corpus", "--out", "old-run", "-q"])
    assert result.exit_code == 1 and result.output == (
        "error: run directory old-run: .embedeval.lock is not a lock file embedeval made (a link or not a plain file); "
        "remove it if no run is using the folder\n")
    assert (tmp_path / "victim.txt").read_text() == "not embedeval's"


@pytest.mark.parametrize("content", ["my notes on this run\n", "", "pid 12 on host since yesterday\n"], ids=["text", "empty", "near-miss"])
@pytest.mark.parametrize("folder", ["old-run", "new"])
def test_a_users_file_named_as_the_lock_is_refused_and_kept(tmp_path, monkeypatch, content, folder):
    """A file of the user's named `.embedeval.lock` in `--out` was deleted as a killed
    run's lock. Only a file holding embedeval's holder line (`pid N on HOST since TIME`) is a lock
    embedeval may remove once nobody holds it; any other is one line naming it, and kept."""
    (tmp_path / folder).mkdir()
    if folder == "old-run":
        (tmp_path / folder / "config.json").write_text(OLD_RUN_CONFIG)
    (tmp_path / folder / ".embedeval.lock").write_text(content)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["nolima", "--corpus", "dir:no-such-corpus", "--out", folder, "-q"])
    assert result.exit_code == 1 and result.output == (
        f"error: run directory {folder}: {folder}/.embedeval.lock is not a lock file embedeval made (it holds no "
        "`pid N on HOST since TIME` line), so it is not deleted: move it out of the way and run again\n"), result.output
    assert (tmp_path / folder / ".embedeval.lock").read_text() == content
    assert {p.name for p in (tmp_path / folder).iterdir()} == {".embedeval.lock", *(["config.json"] if folder == "old-run" else [])}


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("args, says", [
    (["--lengths", "1000000"], "haystacks of 1000000 tokens need at least"),  # 10,000,000: past the memory here, refused earlier
    (["--corpus", "dir:/nonexistent"], "corpus folder /nonexistent does not exist"),
    (["--strategy", "chunks-max", "--chunk-tokens", "100000"], "chunks of 100000 tokens do not fit"),
    (["--strategy", "late-chunking", "--late-overlap", "100000"], "a window overlap of 100000 tokens leaves nothing new"),
    (["-e", "openai:text-embedding-3-small?base_url=http://127.0.0.1:{port}/v1"], "asking the server its models: gave up"),
])
@pytest.mark.slow
def test_a_late_error_leaves_no_empty_run_folder_or_parent(tmp_path, monkeypatch, books_dir, args, says):
    """Errors found once the run holds its folder (the corpus, a model's limits, a server
    that is down) leave neither runs/nolima nor runs/ behind with the default --out."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("EMBEDEVAL_RETRY_MAX_SECONDS", "1")
    args = [arg.format(port=_closed_port()) for arg in args]
    small = {"--corpus": f"dir:{books_dir}", "--lengths": "128", "--depths": "2", "--groups": "loc-dresden"}  # a quick run
    small = [word for flag, value in small.items() if flag not in args for word in (flag, value)]
    result = CliRunner().invoke(app, ["nolima", *small, *args, "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
    assert list(tmp_path.iterdir()) == []
MINILM = "st:all-MiniLM-L6-v2"


def copied_model_folder(folder, config=None, weights_bytes=None):
    """A copy of the bundled MiniLM's folder (its weights linked, not copied) with ``config``
    (an edit of its config.json, or a JSON value to write instead) and the first
    ``weights_bytes`` bytes of its weights (a download cut short)."""
    import json
    import shutil

    from embedeval.embedders.models import resolve_model_path

    source = resolve_model_path("all-MiniLM-L6-v2")
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    weights = f"{source}/model.safetensors"
    if weights_bytes is None:
        (folder / "model.safetensors").symlink_to(weights)
    else:
        with open(weights, "rb") as whole:
            (folder / "model.safetensors").write_bytes(whole.read(weights_bytes))
    if callable(config):
        (folder / "config.json").write_text(json.dumps(config(json.loads((folder / "config.json").read_text()))))
    elif config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _without_positions(settings: dict) -> dict:
    return {key: value for key, value in settings.items() if key != "max_position_embeddings"}


def _spec_setup(tmp_path):
    (tmp_path / "texts.txt").write_text("one text\n" + "word " * 3000 + "\n")
    copied_model_folder(tmp_path / "list-config", config=[1, 2])
    copied_model_folder(tmp_path / "cut-weights", weights_bytes=1_000_000)
    copied_model_folder(tmp_path / "no-positions", config=_without_positions)
    copied_model_folder(tmp_path / "claims-positions", config=lambda settings: {**settings, "max_position_embeddings": 4096})


@pytest.mark.parametrize("spec, says", [
    ("st:claims-positions", "says max_position_embeddings 4096, but its weights' position table "
                            "embeddings.position_embeddings.weight has 512 rows; set max_position_embeddings to 512"),
    (f"{MINILM}?max_seq_length=²", "spec option max_seq_length must be a whole number >= 1 in the digits 0-9, not '²'"),
    (f"{MINILM}?max_batch_tokens=²", "spec option max_batch_tokens must be a whole number >= 1 in the digits 0-9, not '²'"),
    (f"{MINILM}?max_seq_length=١٢٨", "spec option max_seq_length must be a whole number >= 1 in the digits 0-9, not '١٢٨'"),
    ("openai:text-embedding-3-small?max_tokens=²", "spec option max_tokens must be a whole number >= 1 in the digits 0-9"),
    (f"{MINILM}?max_seq_length=2", "spec option max_seq_length must be at least 8, not 2: a window must leave at least 8 content tokens"),
    (f"{MINILM}?max_seq_length=9", "spec option max_seq_length 9 leaves 7 content tokens to a query of st:all-MiniLM-L6-v2?max_seq_length=9 "
                                   "after its special tokens and prompt; a window must leave at least 8"),
    ("openai:text-embedding-3-small?max_tokens=17", "spec option max_tokens must be at least 24, not 17: a window must leave at least 8"),
    ("openai:text-embedding-3-small?max_tokens=1", "spec option max_tokens must be at least 24, not 1"),
    ("st:list-config", "list-config/config.json holds a JSON list, not an object"),
    ("st:cut-weights", "cut-weights': model.safetensors is truncated or not a safetensors file"),
    ("st:no-positions?max_seq_length=4096", "spec option max_seq_length 4096 is over the model's position limit of 512 tokens "
                                            "(the rows of its position table embeddings.position_embeddings.weight)"),
])
def test_a_bad_spec_is_one_line_before_any_work(tmp_path, monkeypatch, spec, says):
    """Spec numbers in ASCII digits only, windows that leave too few content tokens, and model
    folders whose config or weights are broken or say no position limit."""
    from embedeval.embedders import budget

    from fake_api import FakeEmbeddingServer

    _spec_setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-SECRET")
    monkeypatch.setenv("EMBEDEVAL_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("EMBEDEVAL_RETRY_BASE_DELAY", "0.01")
    before = _files(tmp_path)
    budget.reset()
    with FakeEmbeddingServer() as server:  # where an API spec would send, were it not refused first
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        result = CliRunner().invoke(app, ["embed", "-i", "texts.txt", "-o", "vectors.npy", "-e", spec, "-q"])
    budget.reset()
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and says in lines[0], result.output
    assert _files(tmp_path) == before and server.requests == []


def test_a_served_models_tokenizer_that_does_not_load_is_one_line_before_any_request(tmp_path, monkeypatch):
    from embedeval.embedders import budget

    from fake_api import FakeEmbeddingServer

    (tmp_path / "texts.txt").write_text("one text\n")
    (tmp_path / "broken-tokenizer").mkdir()
    (tmp_path / "broken-tokenizer" / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "Nope"}}')
    monkeypatch.chdir(tmp_path)
    budget.reset()
    with FakeEmbeddingServer() as server:
        server.script.served = [{"id": "m", "root": "/models/m"}]
        spec = f"openai:m?base_url={server.url}/v1&max_tokens=512&tokenizer=st:broken-tokenizer"
        result = CliRunner().invoke(app, ["embed", "-i", "texts.txt", "-o", "vectors.npy", "-e", spec, "-q"])
    budget.reset()
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: the tokenizer of st:{tmp_path / 'broken-tokenizer'} does not load (KeyError"), result.output
    assert server.requests == [] and not (tmp_path / "vectors.npy").exists()


def _write_run(tmp_path, edit: dict):
    """A run folder ``tmp_path/run`` (empty tables) whose config.json is a small valid one with
    ``edit`` applied."""
    import json

    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    settings = {"embedders": ["bm25"], "needles": "n.json", "tokenizer": MINILM,
                "grid": {"corpus": "c", "lengths": [128], "depths": 2, "seed": 0}}
    (run / "config.json").write_text(json.dumps({**settings, **edit}))
    for name in ("metrics.csv", "similarities.parquet", "haystacks.parquet", "haystacks.json"):
        (run / name).write_text("")
    return run


@pytest.mark.parametrize("field", ["embedders", "needles"])
@pytest.mark.parametrize("command", [["report"], ["export", "--format", "mteb", "--out", "mteb"],
                                     ["export", "--format", "prompts", "--out", "prompts.csv"]])
def test_a_run_whose_config_holds_null_says_which_field(tmp_path, monkeypatch, field, command):
    _write_run(tmp_path, {field: None})
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, [command[0], "run", *command[1:]])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0] == f"error: run/config.json is broken: {field} must be " + \
        {"embedders": "a list of embedder specs", "needles": "the needle file's path"}[field] + ", not null", result.output
    assert _files(tmp_path) == before


FOREIGN_OUTPUTS = [  # (command before --out, the output's suffix): every command that writes one file
    (["embed", "-i", "texts.txt"], ".npy"),
    (["embed", "-i", "texts.txt"], ".parquet"),
    (["needles", "convert", "nolima.json"], ".json"),
    (["needles", "draft", "--themes", "themes", "--llm", "openai:m"], ".json"),
    (["haystacks", "build"], ".parquet"),
    (["expand", "--llm", "openai:m"], ".json"),
    (["similarity", "needle-question"], ".csv"),
    (["similarity", "distractor-question"], ".parquet"),
    (["similarity", "needle-haystack"], ".csv"),
    (["similarity", "absence"], ".csv"),
    (["themes", "membership", "themes"], ".csv"),
]


def _foreign_file(path):
    """A file of the user's with ``path``'s suffix, in that format, that embedeval did not write."""
    if path.suffix == ".npy":
        np.save(path, np.arange(6).reshape(2, 3))  # integers: not vectors embedeval wrote
    elif path.suffix == ".parquet":
        pd.DataFrame({"mine": [1, 2]}).to_parquet(path)
    elif path.suffix == ".json":
        path.write_text('{"name": "my notes", "groups": []}')
    else:
        path.write_text("question,answer\nwhy,because\n")


@pytest.mark.parametrize("how", ["file", "link"])
@pytest.mark.parametrize("command, suffix", FOREIGN_OUTPUTS)
def test_an_output_file_embedeval_did_not_write_is_one_line_and_untouched(tmp_path, monkeypatch, command, suffix, how):
    """One rule for every command that writes a file: an existing file is replaced only
    when embedeval wrote it (its marker beside it, never the columns or keys it holds);
    a link never."""
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / f"mine{suffix}"
    _foreign_file(mine)
    out = mine if how == "file" else tmp_path / f"link{suffix}"
    if how == "link":
        out.symlink_to(mine)
    content = mine.read_bytes()
    before = _files(tmp_path)
    result = CliRunner().invoke(app, [*command, "--out", out.name])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: output {out.name} " + ("exists and is not a file embedeval wrote" if how == "file" else "is a link")), lines[0]
    assert mine.read_bytes() == content and _files(tmp_path) == before


@pytest.mark.slow
def test_an_output_file_embedeval_wrote_is_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "texts.txt").write_text("one text\nanother text\n")
    for out in ("vectors.npy", "vectors.parquet"):
        for _ in range(2):
            result = CliRunner().invoke(app, ["embed", "-i", "texts.txt", "--out", out, "-q"])
            assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("edit", "says"), [
    ({"break_threshold": None}, "break_threshold must be a number, not null"),
    ({"break_rule": "relative", "break_k": "5"}, 'break_k must be a whole number, not "5"'),
    ({"n_bootstrap": 0}, "n_bootstrap must be a whole number from 1 to 100,000, not 0"),
    ({"n_bootstrap": 99999999999}, "n_bootstrap must be a whole number from 1 to 100,000, not 99999999999"),  # 1.46 TiB in report
    ({"pool": 3}, "pool must be one of needle-free, all, not 3"),
    ({"groups": "loc-dresden"}, 'groups must be null or a list of group ids, not "loc-dresden"'),
    ({"expansions": None}, "expansions must be a list of expansion file paths, not null"),
    ({"grid": {"corpus": 7, "lengths": [128], "depths": 2, "seed": 0}}, "grid.corpus must be a corpus spec, not 7"),
    ({"grid": {"corpus": "c", "lengths": [128], "depths": 2, "seed": "0"}}, 'grid.seed must be a whole number, not "0"'),
    ({"grid": {"corpus": "c", "lengths": ["128"], "depths": 2, "seed": 0}}, "grid.lengths: haystack length '128' is invalid"),
    ({"grid": {"corpus": "c", "lengths": [128], "depths": None, "seed": 0}}, "grid.depths: `depths` must be >= 1, not None"),
    ({"break_rule": "absolute", "break_metric": "auc", "break_threshold": 7}, "break threshold must be in (0, 1], not 7"),
])
@pytest.mark.parametrize("command", [["report"], ["export", "--format", "mteb", "--out", "mteb"],
                                     ["export", "--format", "prompts", "--out", "prompts.csv"]])
def test_a_hand_edited_run_config_says_which_field_before_anything_is_written(tmp_path, monkeypatch, edit, says, command):
    """Audit 2: every config.json field a command reads is checked when the run is opened: a wrong type
    is one line naming the field and the file (not a TypeError or AttributeError half-way), and nothing is written."""
    run = _write_run(tmp_path, edit)
    (run / "figures").mkdir()
    (run / "figures" / "recall_vs_length.png").write_text("drawn before")
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, [command[0], "run", *command[1:]])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: run/config.json is broken: {says}"), result.output
    assert _files(tmp_path) == before and (run / "figures" / "recall_vs_length.png").read_text() == "drawn before"


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than any JSON reader follows by recursion


def _json_inputs(folder):
    """Files of every JSON input a command reads, each once nested too deep and once holding a
    number beyond float range (the integer 10**400, a vector component as a hostile writer might give it)."""
    huge = "1" + "0" * 400
    for name, shape in (("deep", DEEP), ("huge", f'{{"groups": [{huge}]}}')):
        (folder / f"{name}.json").write_text(shape)
        line = DEEP if name == "deep" else f'{{"text": "a text", "id": {huge}}}'
        (folder / f"{name}.jsonl").write_text(line + "\n")
    pd.DataFrame({"question": ["Who?"], "needle": ["Ann."]}).to_csv(folder / "pairs.csv", index=False)
    (folder / "run").mkdir()
    (folder / "run" / "config.json").write_text(DEEP)
    pd.DataFrame(columns=["metric"]).to_csv(folder / "run" / "metrics.csv", index=False)
    pd.DataFrame({"a": pd.Series([], dtype=float)}).to_parquet(folder / "run" / "similarities.parquet")


@pytest.mark.parametrize("kind, says", [("deep", "nested deeper than"), ("huge", "beyond float range")])
@pytest.mark.parametrize("args", [
    ["needles", "check", "{kind}.json"],
    ["nolima", "--needles", "{kind}.json", "--out", "out", "--plan"],
    ["needles", "convert", "{kind}.json", "--out", "converted.json"],
    ["nolima", "--expansions", "{kind}.json", "--out", "out", "--plan"],
    ["nolima", "--distractors-file", "{kind}.json", "--out", "out", "--plan"],
    ["embed", "-i", "{kind}.jsonl", "-o", "vectors.npy"],
    ["similarity", "needle-question", "--pairs", "{kind}.jsonl", "--out", "sims.csv"],
    ["haystacks", "build", "--corpus", "jsonl:{kind}.jsonl", "--out", "h.parquet"],
], ids=["needles-check", "nolima-needles", "needles-convert", "expansions", "distractors", "embed", "pairs", "corpus"])
def test_json_nested_too_deep_or_past_float_range_is_one_line(tmp_path, monkeypatch, isolated_cache, args, kind, says):
    """Every JSON and JSON Lines input goes through one parser
    (:func:`embedeval.jsonread.loads`) that turns nesting past the recursion limit and numbers past
    float range into one error line naming the file, where each was a traceback (RecursionError,
    OverflowError) or another format's name; nothing is written."""
    import types

    from embedeval.embedders import timing

    monkeypatch.setattr(timing, "SampleTimer", lambda spec: types.SimpleNamespace(close=lambda: None))  # --plan: no model loads
    _json_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, [arg.format(kind=kind) for arg in args])
    assert timing._EARLY == {}  # a plan that stopped at a bad file ended what it started
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output[-2000:]
    assert lines[-1].startswith("error: ") and says in lines[-1] and kind in lines[-1], lines[-1]
    assert not any(line.startswith("Traceback") for line in lines)
    assert _files(tmp_path) == before


def test_a_run_folders_config_nested_too_deep_is_one_line(tmp_path, monkeypatch):
    """``report`` of a run whose config.json is nested too deep: one error line, no traceback."""
    _json_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "run"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and lines[-1].startswith("error: ") and "nested deeper than" in lines[-1], result.output[-2000:]


def test_the_json_reader_is_json_loads_within_its_limits():
    """loads() equals json.loads on ordinary JSON (floats, integers, nesting of some hundred levels,
    NaN as json writes it) and refuses only what is past its limits, with the reason."""
    import json
    import math

    from embedeval.jsonread import JsonLimitError, loads

    for text in ('{"a": [1, 2.5, -3e10, "x", null, true]}', "[" * 500 + "]" * 500, "1" + "0" * 300, "1.7e308"):
        assert loads(text) == json.loads(text)
    assert math.isnan(loads('{"v": NaN}')["v"])
    for text, says in ((DEEP, "nested deeper than"), ("1e400", "beyond float range"), ("-1" + "0" * 400, "beyond float range")):
        with pytest.raises(JsonLimitError, match=says):
            loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads("{not json")


def _fuzz_found_files(folder):
    """The files on which the fuzz tier's first run found tracebacks."""
    import json

    from test_nolima_schema import FIXTURE

    shipped = json.loads((Path(__file__).parent.parent / "queries" / "nolima-onehop.json").read_text())
    two = {**shipped, "groups": shipped["groups"][:2]}
    (folder / "groups-null.json").write_text(json.dumps({**two, "groups": None}))
    (folder / "id-list.json").write_text(json.dumps({**two, "groups": [{**two["groups"][0], "id": ["a"]}, two["groups"][1]]}))
    (folder / "id-null.json").write_text(json.dumps({**two, "groups": [{**two["groups"][0], "id": None}, two["groups"][1]]}))
    (folder / "nolima-needle-number.json").write_text(json.dumps([{**FIXTURE[0], "needle": 5}]))
    (folder / "nolima-names.json").write_text(json.dumps([{**FIXTURE[0], "character_set": [["Yuki"], "Ann"]}]))
    (folder / "needles.json").write_text(json.dumps(two))
    expansions = json.loads((Path(__file__).parent.parent / "queries" / "expansions" / "nolima-onehop.json").read_text())
    size = next(iter(expansions["sizes"]))
    terms = {group["id"]: expansions["sizes"][size][group["id"]] for group in two["groups"]}
    terms["loc-peru"] = [5, *terms["loc-peru"][1:]]
    (folder / "expansions.json").write_text(json.dumps({**expansions, "sizes": {size: terms}}))


@pytest.mark.parametrize("args, says", [
    (["needles", "check", "groups-null.json"], "'groups' must be a non-empty list"),
    (["needles", "check", "id-list.json"], "field 'id' must be a non-empty string"),
    (["needles", "check", "id-null.json"], "field 'id' must be a non-empty string"),
    (["needles", "check", "nolima-needle-number.json"], "0101_T01: the needle must be a non-empty text"),
    (["needles", "check", "nolima-names.json"], "'character_set' must be a list of names"),
    (["nolima", "--needles", "needles.json", "--expansions", "expansions.json", "--out", "out", "--plan", "-e", "bm25"],
     "group loc-peru at size 100: term 1 is 5, not a non-empty text"),
], ids=["groups-null", "id-list", "id-null", "nolima-needle", "nolima-names", "expansion-term"])
def test_what_the_fuzz_tier_found_is_one_line(tmp_path, monkeypatch, isolated_cache, args, says):
    """Each input on which the fuzz tier's first run found a traceback (a
    ``TypeError`` from ``needles check``, the NoLiMa converter or an expansion file's terms) is one
    error line, naming the problem, and writes nothing."""
    _fuzz_found_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output[-2000:]
    assert says in result.output and result.output.count("error: ") == 1, result.output[-2000:]
    assert "Traceback" not in result.output
    assert _files(tmp_path) == before
