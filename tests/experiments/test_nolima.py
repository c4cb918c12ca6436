import json
import os
import re
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.experiments import NolimaConfig, run_nolima
from embedeval.grid import HaystackGrid

from fakes import kill_cli_run, killed_mid_write, newly_embedded

#: The tests here read sweeps the module runs (a sweep each): the slow tier.
pytestmark = pytest.mark.slow

LENGTHS = [128, 512, 1024]
DEPTHS = 3
NEGATIVES = 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


SMALL_GROUPS = ["loc-dresden", "diet-vegan", "lang-dutch"]  # a quick run: --groups / NolimaConfig.groups


@pytest.fixture(scope="module")
def run(tmp_path_factory, books_dir):
    folder = tmp_path_factory.mktemp("nolima")
    config = NolimaConfig(groups=SMALL_GROUPS, out=str(folder / "run"), n_bootstrap=200, grid=HaystackGrid(corpus=f"dir:{books_dir}",
            lengths=LENGTHS, depths=DEPTHS, negatives=NEGATIVES))
    return run_nolima(config, progress=False, cache_dir=folder / "cache")


def test_run_writes_every_output(run):
    for name in ["config.json", "haystacks.parquet", "similarities.parquet", "retrieval.parquet", "timings.csv", "metrics.csv",
                 "breaks.csv", "decision.csv", "report.md"]:
        assert (run.out / name).is_file(), name
    from embedeval.breaks import break_points
    from embedeval.run import read_breaks

    written = read_breaks(run.out / "breaks.csv")
    again = break_points(run.metrics, run.retrieval, run.config.rule(), run.config.n_bootstrap, run.config.grid.seed,
                         windows={("st:all-MiniLM-L6-v2", "truncate"): 254})  # the content tokens it reads cap its chunk
    assert (written["window"] == 254).all()
    again.to_csv(run.out.parent / "again.csv", index=False)  # read back as breaks.csv is: an empty cell, not None
    pd.testing.assert_frame_equal(written, read_breaks(run.out.parent / "again.csv"), check_dtype=False)
    assert (written["relative_status"] == "too few groups").all()  # 3 groups: no headline, whatever the p-value
    assert len(written) == 2  # one series per variant
    figures = sorted(p.name for p in (run.out / "figures").glob("*.png"))
    assert figures == ["auc_vs_length.png", "category_heatmap.png", "comparative_ratio_vs_length.png",
                       "depth_heatmap.png", "mrr_vs_length.png", "ndcg_vs_length.png", "normalized_vs_length.png",
                       "query_auc_vs_length.png", "recall_vs_length.png"]
    import matplotlib.image

    for png in (run.out / "figures").glob("*.png"):
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert matplotlib.image.imread(png).shape[0] > 100
    config = json.loads((run.out / "config.json").read_text())
    assert config["tokenizer"] == "st:all-MiniLM-L6-v2" and config["grid"]["lengths"] == LENGTHS  # the grid nested
    assert {"embedeval", "torch", "sentence-transformers", "numpy"} <= set(config["versions"])
    report = (run.out / "report.md").read_text()
    assert "recommended chunk size" in report.lower() and "truncates long haystacks" in report


def test_similarity_table_matches_direct_embedding(run, minilm):
    sims = pd.read_parquet(run.out / "similarities.parquet")
    haystacks = pd.read_parquet(run.out / "haystacks.parquet")
    assert len(sims) == len(haystacks) - NEGATIVES * len(LENGTHS) == 3 * len(LENGTHS) * (2 * DEPTHS + 1)
    needles = {g["id"]: g for g in json.loads(DEFAULT_NEEDLES.read_text())["groups"]}
    sample = sims.merge(haystacks[["id", "text"]], left_on="haystack_id", right_on="id").iloc[::5]
    q = minilm.embed([needles[g]["question"] for g in sample["group_id"]], kind="query")
    h = minilm.embed(sample["text"].tolist())
    np.testing.assert_allclose(sample["sim_qh"], np.einsum("ij,ij->i", q, h), atol=2e-5)
    positives = sample[sample["variant"] != "control"]
    # the study's normalisation: every variant divided by the standard (one-hop) needle
    assert set(positives["variant"]) == {"onehop", "inverted"} and (positives["normalized_by"] == "standard").all()
    n = minilm.embed([needles[g]["needles"]["onehop"] for g in positives["group_id"]])
    qp = q[(sample["variant"] != "control").to_numpy()]
    np.testing.assert_allclose(positives["sim_qn"], np.einsum("ij,ij->i", qp, n), atol=2e-5)
    np.testing.assert_allclose(positives["normalized"], positives["sim_qh"] / positives["sim_qn"])
    assert sims.loc[sims["variant"] == "control", "normalized"].isna().all()


def test_truncation_and_needle_visibility(run, minilm):
    sims = pd.read_parquet(run.out / "similarities.parquet")
    haystacks = pd.read_parquet(run.out / "haystacks.parquet").set_index("id")
    for row in sims.itertuples():
        text = haystacks.loc[row.haystack_id, "text"]
        assert row.truncated == (len(minilm.model.tokenizer(text)["input_ids"]) > 256)
        if row.variant == "control":
            assert pd.isna(row.needle_visible)
        else:
            end = haystacks.loc[row.haystack_id, "needle_end"]
            assert row.needle_visible == (len(minilm.model.tokenizer(text[:end])["input_ids"]) <= 256)
    assert not sims.loc[sims["length"] == 128, "truncated"].any()
    long = sims[(sims["length"] == 1024) & (sims["variant"] != "control")]
    assert long["needle_visible"].any() and not long["needle_visible"].all()


def test_metrics_recomputed_independently_from_similarities(run):
    sims = pd.read_parquet(run.out / "similarities.parquet")
    metrics = pd.read_csv(run.out / "metrics.csv")
    overall = metrics[(metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    assert overall[["ci_lo", "ci_hi"]].notna().all().all()  # every overall value carries a bootstrap CI
    assert {"spearman_rho", "intercept", "needle_visible_share", "truncated_share"} <= set(overall["metric"])

    def value(metric, variant, length):
        row = overall[(overall["metric"] == metric) & (overall["variant"] == variant) & (overall["length"] == length)]
        assert len(row) == 1
        return row.iloc[0]

    for variant in ["onehop", "inverted"]:
        for length in LENGTHS:
            pos = sims[(sims["variant"] == variant) & (sims["length"] == length)]
            neg = sims[(sims["variant"] == "control") & (sims["length"] == length)]
            assert value("normalized_mean", variant, length)["value"] == pytest.approx((pos["sim_qh"] / pos["sim_qn"]).mean())
            wins = [1.0 if p > c else 0.5 if p == c else 0.0
                    for p, c in zip(pos["sim_qh"], pos["group_id"].map(neg.set_index("group_id")["sim_qh"]), strict=True)]
            ratio = value("comparative_ratio", variant, length)
            assert ratio["value"] == pytest.approx(np.mean(wins)) and ratio["n"] == len(pos)
            assert ratio["ci_lo"] <= ratio["value"] <= ratio["ci_hi"]
            labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
            auc = value("auc", variant, length)
            assert auc["value"] == pytest.approx(roc_auc_score(labels, np.r_[pos["sim_qh"], neg["sim_qh"]]))
            p, c = pos["sim_qh"].to_numpy(), neg["sim_qh"].to_numpy()
            pooled = np.sqrt(((len(p) - 1) * p.var(ddof=1) + (len(c) - 1) * c.var(ddof=1)) / (len(p) + len(c) - 2))
            assert value("cohens_d", variant, length)["value"] == pytest.approx((p.mean() - c.mean()) / pooled)
            assert value("pearson_r", variant, length)["value"] == pytest.approx(stats.pearsonr(pos["depth"], pos["normalized"])[0])
            assert value("needle_visible_share", variant, length)["value"] == pytest.approx(pos["needle_visible"].mean())
    by_category = metrics[(metrics["category"] == "location") & (metrics["metric"] == "normalized_mean")
                          & (metrics["variant"] == "onehop") & (metrics["length"] == 128)]
    loc = sims[(sims["category"] == "location") & (sims["variant"] == "onehop") & (sims["length"] == 128)]
    assert by_category["value"].item() == pytest.approx(loc["normalized"].mean())


def test_rerun_embeds_nothing_and_gives_identical_tables(run):
    again = run_nolima(run.config, progress=False, cache_dir=run.out.parent / "cache")
    assert again.newly_embedded == {"st:all-MiniLM-L6-v2": 0}
    pd.testing.assert_frame_equal(again.similarities, run.similarities)
    pd.testing.assert_frame_equal(pd.read_csv(run.out / "metrics.csv"), run.metrics, check_dtype=False)


def _outputs(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("config.json", ".embedeval.lock")}


def test_a_warm_rerun_loads_no_weights_and_keeps_metrics_and_report(run, monkeypatch):
    from sentence_transformers import SentenceTransformer

    import embedeval.experiments.nolima as nolima

    before = _outputs(run.out)
    assert "derived.json" in before and "figures/auc_vs_length.png" in before

    def refuse(*args, **kwargs):
        raise AssertionError("a warm rerun must not need this")

    monkeypatch.setattr(SentenceTransformer, "__init__", refuse)  # the weights
    monkeypatch.setattr(nolima, "nolima_metrics", refuse)  # the bootstrap
    monkeypatch.setattr(nolima, "write_report", refuse)  # the figures
    again = run_nolima(run.config, progress=False, cache_dir=run.out.parent / "cache")
    assert again.newly_embedded == {"st:all-MiniLM-L6-v2": 0}
    assert _outputs(run.out) == before  # tables, metrics.csv, report.md, figures: byte for byte
    pd.testing.assert_frame_equal(again.metrics, run.metrics)
    pd.testing.assert_frame_equal(again.similarities, run.similarities)


def test_metrics_and_report_are_recomputed_when_what_they_come_from_changes(run, tmp_path, monkeypatch):
    import embedeval.experiments.nolima as nolima

    calls = []
    compute = nolima.nolima_metrics
    monkeypatch.setattr(nolima, "nolima_metrics", lambda *a, **k: calls.append(k["n_resamples"]) or compute(*a, **k))
    shutil.copytree(run.out, tmp_path / "copy")
    config = replace(run.config, out=str(tmp_path / "copy"))
    cache = run.out.parent / "cache"

    moved = run_nolima(config, progress=False, cache_dir=cache)  # another folder, the same tables: kept
    assert calls == [] and moved.metrics.equals(run.metrics)

    config = replace(config, n_bootstrap=100)  # a report setting (with 3 groups the CIs may come out the same; they are recomputed)
    fewer = run_nolima(config, progress=False, cache_dir=cache)
    assert calls == [100]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "copy" / "metrics.csv"), fewer.metrics, check_dtype=False)
    figure = tmp_path / "copy" / "figures" / "auc_vs_length.png"
    drawn = figure.read_bytes()

    figure.write_bytes(drawn[:100])  # an altered output: everything derived is made again (the altered one kept aside)
    run_nolima(config, progress=False, cache_dir=cache)
    assert calls == [100, 100] and figure.read_bytes() == drawn
    (kept,) = figure.parent.glob(f"{figure.name}.edited-*")
    assert kept.read_bytes() == drawn[:100]
    kept.unlink()

    def broken(*args, **kwargs):
        raise OSError("disk gone while drawing")

    config = replace(config, n_bootstrap=200)
    monkeypatch.setattr(nolima, "write_report", broken)  # interrupted after metrics.csv, before the report
    with pytest.raises(OSError):
        run_nolima(config, progress=False, cache_dir=cache)
    assert not (tmp_path / "copy" / "derived.json").exists() and not (tmp_path / "copy" / "config.json").exists()
    monkeypatch.undo()
    monkeypatch.setattr(nolima, "nolima_metrics", lambda *a, **k: calls.append(k["n_resamples"]) or compute(*a, **k))
    run_nolima(config, progress=False, cache_dir=cache)  # the half-written outputs are not taken as fresh
    assert calls == [100, 100, 200, 200]
    assert _outputs(tmp_path / "copy") == _outputs(run.out)  # back to the fixture's settings: the same bytes


def test_derived_json_lists_only_what_the_run_wrote(run, tmp_path):
    """A file of the user's in the run's figures/ is neither recorded as derived nor touched."""
    shutil.copytree(run.out, tmp_path / "copy")
    mine = tmp_path / "copy" / "figures" / "mine.png"
    mine.write_bytes(PNG_MAGIC + b"the user's")
    run_nolima(replace(run.config, out=str(tmp_path / "copy"), n_bootstrap=120), progress=False, cache_dir=run.out.parent / "cache")
    recorded = json.loads((tmp_path / "copy" / "derived.json").read_text())["files"]
    drawn = sorted(f"figures/{p.name}" for p in (run.out / "figures").glob("*.png"))
    assert sorted(recorded) == sorted(["metrics.csv", "breaks.csv", "decision.csv", "report.md", "report.html", *drawn])
    assert mine.read_bytes() == PNG_MAGIC + b"the user's"


def test_the_bootstrap_and_the_figures_say_what_they_do_on_stderr_unless_quiet(run, tmp_path, capsys):
    """The two long steps after the embedding bars show a step line with the time."""
    shutil.copytree(run.out, tmp_path / "copy")
    config = replace(run.config, out=str(tmp_path / "copy"), n_bootstrap=120)  # the intervals and the report made again
    run_nolima(config, progress=True, cache_dir=run.out.parent / "cache")
    printed = capsys.readouterr()
    lines = [line.rsplit("\r", 1)[-1] for line in printed.err.splitlines()]
    for step in [r"metrics and break points with bootstrap intervals \(120 resamples\) \.\.\. done in \d+\.\d s",
                 r"figures, report\.md and report\.html \.\.\. done in \d+\.\d s"]:
        assert any(re.fullmatch(step, line) for line in lines), (step, lines)
    assert printed.out == ""
    run_nolima(replace(config, n_bootstrap=130), progress=False, cache_dir=run.out.parent / "cache")
    assert capsys.readouterr() == ("", "")


def test_top_level_api_and_edited_needles_rebuild_haystacks(run, tmp_path):
    import embedeval

    assert embedeval.run_nolima is run_nolima and embedeval.NolimaConfig is NolimaConfig
    needles = tmp_path / "needles.json"
    data = json.loads(open(run.config.needles).read())
    data["groups"][0]["needles"]["onehop"] = data["groups"][0]["needles"]["onehop"].replace("Actually, ", "Qwzx, ")
    needles.write_text(json.dumps(data))
    from embedeval.experiments.nolima import load_or_build_haystacks

    shutil.copytree(run.out, tmp_path / "copy")  # the edited needles must not reuse the copied haystacks
    config = replace(run.config, needles=str(needles), out=str(tmp_path / "copy"))
    rebuilt = load_or_build_haystacks(config, config.validate(), progress=False)
    assert rebuilt["text"].str.contains("Qwzx, ").any()
    assert not run.haystacks["text"].str.contains("Qwzx, ").any()


def test_report_command_rebuilds_and_compares(run, tmp_path):
    (run.out / "report.md").unlink()
    result = CliRunner().invoke(app, ["report", str(run.out)])
    assert result.exit_code == 0, result.output
    assert (run.out / "report.md").is_file()
    result = CliRunner().invoke(app, ["report", str(run.out), str(run.out), "--out", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "cmp" / "report.md").read_text()
    assert "run/st:all-MiniLM-L6-v2" in text


def test_report_reads_runs_made_before_strategies_and_distractors(run, tmp_path):
    import shutil

    from embedeval.report import compare_runs
    from embedeval.schema import LATER_COLUMNS

    old = tmp_path / "old"
    shutil.copytree(run.out, old)
    metrics = pd.read_csv(old / "metrics.csv").drop(columns=["strategy", "n_distractors"])
    metrics.to_csv(old / "metrics.csv", index=False)
    sims = pd.read_parquet(old / "similarities.parquet")
    sims.drop(columns=[c for c in LATER_COLUMNS if c in sims.columns]).to_parquet(old / "similarities.parquet")
    (old / "report.md").unlink()
    (old / "breaks.csv").unlink()  # recomputed from metrics.csv and retrieval.parquet
    compare_runs([old])
    text = (old / "report.md").read_text()
    assert "st:all-MiniLM-L6-v2 [truncate, onehop, question]" in text


@pytest.mark.parametrize("args, message", [
    (["--strategy", "mean"], "unknown strategy 'mean'"),
    (["--variants", "onehop,sideways"], "unknown variant 'sideways'"),
    (["--lengths", "0,128"], "haystack length 0 is invalid"),
    (["--embedder", "nope:x"], "unknown embedder 'nope:x'"),
    (["--groups", "loc-dresden,nope"], "no group 'nope' in needle set"),
    (["--lengths", "128,128"], "haystack length 128 is given more than once"),
    (["--negatives", "0"], "negatives must be a whole number >= 1, not 0"),
    (["--negatives", "-2"], "negatives must be a whole number >= 1, not -2"),
    (["--break-metric", "precision@3"], "unknown break metric 'precision@3'; use one of recall@1"),
    (["--normalize-by", "mine"], "normalize_by must be one of standard, own"),
    (["--n-bootstrap", "3"], "error: --n-bootstrap must be a whole number of resamples from 10 to 100,000, not 3"),
    (["--variants", "onehop,onehop"], "a variant is given more than once"),
])
def test_bad_config_fails_before_any_embedding(tmp_path, isolated_cache, args, message):
    result = CliRunner().invoke(app, ["nolima", "--out", str(tmp_path / "run"), "-q", *args])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not (isolated_cache / "embeddings.sqlite").exists()
    assert not (tmp_path / "run").exists()


def test_invalid_needle_file_fails_before_any_embedding(tmp_path, isolated_cache):
    data = json.loads(DEFAULT_NEEDLES.read_text())
    data["groups"][1]["needles"]["onehop"] = "Wenonah has been to Peru."
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["nolima", "--needles", str(bad), "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1
    assert "group loc-peru: onehop needle shares content words with the question: peru" in result.output
    assert not (isolated_cache / "embeddings.sqlite").exists()


def test_literal_variants_run_side_by_side(tmp_path, books_dir):
    result = CliRunner().invoke(app, [
        "nolima", "--groups", ",".join(SMALL_GROUPS), "--corpus", f"dir:{books_dir}",
        "--lengths", "128,256", "--depths", "3", "--variants", "onehop,literal,literal_inverted",
        "--out", str(tmp_path / "lit"), "-q"])
    assert result.exit_code == 0, result.output
    sims = pd.read_parquet(tmp_path / "lit" / "similarities.parquet")
    assert set(sims["variant"]) == {"onehop", "literal", "literal_inverted", "control"}
    report = (tmp_path / "lit" / "report.md").read_text()
    assert "question literal |" in report and "question onehop |" in report


def _distinct_windows(texts) -> int:
    """Distinct first-254-token id sequences of ``texts`` by the bundled model's own tokenizer
    (what all-MiniLM-L6-v2 reads of each), computed with transformers directly."""
    from transformers import AutoTokenizer

    from embedeval.embedders.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    return len({tuple(tokenizer(t, add_special_tokens=False)["input_ids"][:254]) for t in texts})


def test_killed_run_resumes_without_losing_or_repeating_work(tmp_path, books_dir):
    cache = tmp_path / "cache"
    args = ["nolima", "--groups", ",".join(SMALL_GROUPS), "--corpus", f"dir:{books_dir}", "--lengths", "128,256,512",
            "--depths", "5", "--negatives", "8", "--out", str(tmp_path / "run"), "--commit-every", "4", "--cache-dir", str(cache), "-q"]
    saved = kill_cli_run(args, cache / "embeddings.sqlite", vectors=12, timeout=240)
    assert not (tmp_path / "run" / "similarities.parquet").exists()

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    resumed = newly_embedded(result.output)
    haystacks = pd.read_parquet(tmp_path / "run" / "haystacks.parquet")
    groups = [g for g in json.loads(DEFAULT_NEEDLES.read_text())["groups"] if g["id"] in SMALL_GROUPS]
    unique_docs = set(haystacks["text"]) | {g["needles"]["onehop"] for g in groups}  # the standard needles (divisors)
    distinct = _distinct_windows(unique_docs)
    assert distinct < len(unique_docs)  # haystacks whose needle lies past the window read like their control
    assert saved + resumed == distinct + len(groups)  # nothing embedded twice, nothing lost

    fresh_args = [a if a != str(tmp_path / "run") else str(tmp_path / "fresh") for a in args]
    fresh_args[fresh_args.index(str(cache))] = str(tmp_path / "fresh-cache")
    assert CliRunner().invoke(app, fresh_args).exit_code == 0
    assert (tmp_path / "run" / "haystacks.parquet").read_bytes() == (tmp_path / "fresh" / "haystacks.parquet").read_bytes()
    for name in ("similarities.parquet", "retrieval.parquet", "metrics.csv", "breaks.csv"):
        # Every count and rank the same, and every float to float32 rounding: the resumed run
        # embedded its texts in other batches, and BLAS may pick another kernel for another batch
        # shape (the same bytes on most machines, not on every one).
        read = pd.read_parquet if name.endswith(".parquet") else pd.read_csv
        pd.testing.assert_frame_equal(read(tmp_path / "run" / name), read(tmp_path / "fresh" / name),
                                      check_exact=False, rtol=1e-5, atol=1e-7, obj=name)


def test_a_second_run_into_a_held_run_directory_fails_at_once(tmp_path, isolated_cache):
    from embedeval.run import CONFIG, is_run_directory
    from embedeval.run_folder import run_directory

    with run_directory(tmp_path / "run", is_run_directory, CONFIG):
        result = CliRunner().invoke(app, ["nolima", "--out", str(tmp_path / "run"), "-q"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"run directory {tmp_path / 'run'} is in use by pid {os.getpid()}" in lines[0]
    assert not (isolated_cache / "embeddings.sqlite").exists()


def test_out_onto_an_existing_file_is_one_line(tmp_path, isolated_cache):
    (tmp_path / "taken").write_text("mine")
    result = CliRunner().invoke(app, ["nolima", "--out", str(tmp_path / "taken"), "-q"])
    assert result.exit_code == 1 and result.output.strip() == f"error: --out {tmp_path / 'taken'} exists and is not a folder"
    assert (tmp_path / "taken").read_text() == "mine"


def test_only_temp_files_of_killed_runs_are_removed(tmp_path):
    """The sweep takes the temporary files atomic_path names (prefix, pid, random part)
    of processes that no longer run, never a user's ``.*.tmp`` or one of a running process."""
    from embedeval.run_folder import run_directory

    folder = tmp_path / "run"
    (folder / "figures").mkdir(parents=True)
    killed_mid_write(folder / "metrics.csv")
    killed_mid_write(folder / "figures" / "auc.png")
    stale = sorted(folder.glob(".metrics.csv.*.tmp")) + sorted((folder / "figures").glob(".auc.png.*.tmp"))
    assert len(stale) == 2 and all(p.read_text() == "half" for p in stale)
    running = folder / f".breaks.csv.embedeval-{os.getpid()}-abcd1234.tmp"  # a process that still runs (this one)
    users = [folder / ".draft.tmp", folder / "figures" / ".cache.tmp", folder / ".x.embedeval-1-short.tmp", running]
    for path in users:
        path.write_text("mine")
    keep = folder / "metrics.csv"
    keep.write_text("kept")
    with run_directory(folder, lambda _: True, "config.json"):
        assert not any(p.exists() for p in stale) and keep.read_text() == "kept"
        assert all(p.read_text() == "mine" for p in users)


def test_a_lock_left_by_a_killed_run_is_replaced_never_rewritten(tmp_path):
    """The lock a run writes its pid into is always a file it created; a killed run's is
    removed (once held) and a new one made, its bytes untouched."""
    from embedeval.locks import LOCK_NAME
    from embedeval.run_folder import run_directory

    lock = tmp_path / "run" / LOCK_NAME
    lock.parent.mkdir()
    lock.write_text("pid 1 on elsewhere since 2020-01-01T00:00:00\n")
    old = os.open(lock, os.O_RDONLY)  # keeps the old file readable after it is unlinked
    try:
        with run_directory(tmp_path / "run", lambda _: False, "config.json"):
            assert lock.read_text().startswith(f"pid {os.getpid()} ")
            assert os.fstat(old).st_nlink == 0 and os.pread(old, 100, 0) == b"pid 1 on elsewhere since 2020-01-01T00:00:00\n"
    finally:
        os.close(old)
    assert not lock.exists() and (tmp_path / "run").is_dir()  # the folder was there before: kept


def test_a_failed_run_removes_the_folders_it_created_and_only_those(tmp_path):
    """A run that fails before writing anything leaves no empty parent behind; folders that
    were there before, or that hold anything, stay."""
    from embedeval.run_folder import run_directory

    (tmp_path / "there").mkdir()
    for out in (tmp_path / "there" / "runs" / "deep" / "x", tmp_path / "there"):
        with pytest.raises(RuntimeError), run_directory(out, lambda _: False, "config.json"):
            raise RuntimeError("a late error")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"] and not any((tmp_path / "there").iterdir())
    with pytest.raises(RuntimeError), run_directory(tmp_path / "a" / "b" / "run", lambda _: False, "config.json"):
        (tmp_path / "a" / "theirs.txt").write_text("written while the run worked")
        raise RuntimeError("a late error")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "a").rglob("*")) == ["a/theirs.txt"]


def test_a_failed_rerun_leaves_the_finished_run_untouched(run, tmp_path, books_dir):
    finished = tmp_path / "finished"
    shutil.copytree(run.out, finished)
    before = {p.name: p.read_bytes() for p in finished.iterdir() if p.is_file()}
    small = tmp_path / "small-corpus"
    small.mkdir()
    for book in sorted(books_dir.glob("*.txt"))[:3]:
        shutil.copy(book, small)
    result = CliRunner().invoke(app, ["nolima", "--groups", ",".join(SMALL_GROUPS), "--corpus", f"dir:{small}",
                                      "--lengths", "128", "--depths", "2", "--out", str(finished), "-q"])
    assert result.exit_code == 1 and "has 3 books" in result.output
    after = {p.name: p.read_bytes() for p in finished.iterdir() if p.is_file()}
    assert after == before  # config.json still describes the tables beside it


def test_normalize_by_standard_or_own_needle(run):
    from embedeval.needles import load_needle_set

    from fakes import CountingEmbedder, similarity_table

    needle_set = load_needle_set(DEFAULT_NEEDLES).subset(SMALL_GROUPS)
    haystacks = run.haystacks[run.haystacks["length"] == LENGTHS[0]]
    forms = {"question": [g.question for g in needle_set.groups]}
    tables = {how: similarity_table(CountingEmbedder(), haystacks, needle_set, forms, how) for how in ("standard", "own")}
    for how, table in tables.items():
        rows = table[table["variant"] == "inverted"]
        assert len(rows) and (rows["normalized_by"] == how).all()
        q = np.stack([CountingEmbedder.vector_for(needle_set.group(g).question, "query") for g in rows["group_id"]])
        n = np.stack([CountingEmbedder.vector_for(needle_set.group(g).needles["onehop" if how == "standard" else "inverted"])
                      for g in rows["group_id"]])
        np.testing.assert_allclose(rows["sim_qn"], np.einsum("ij,ij->i", q, n), atol=1e-6)
        np.testing.assert_allclose(rows["normalized"], rows["sim_qh"] / rows["sim_qn"])
    onehop = [t[t["variant"] == "onehop"]["normalized"].to_numpy() for t in tables.values()]
    np.testing.assert_array_equal(*onehop)  # one-hop rows are their own standard


def test_ranks_recomputed_from_direct_embeddings(run, minilm):
    retrieval = pd.read_parquet(run.out / "retrieval.parquet")
    haystacks = pd.read_parquet(run.out / "haystacks.parquet")
    needles = {g["id"]: g for g in json.loads(DEFAULT_NEEDLES.read_text())["groups"]}
    positives = haystacks[haystacks["variant"].isin(["onehop", "inverted"])]
    assert len(retrieval) == len(positives) and set(retrieval["haystack_id"]) == set(positives["id"])
    texts = haystacks.set_index("id")["text"]
    for length in LENGTHS:
        pool = haystacks[(haystacks["length"] == length) & haystacks["variant"].isin(["control", "negative"])]
        assert len(pool) == NEGATIVES + len(SMALL_GROUPS)
        pool_vectors = minilm.embed(pool["text"].tolist())
        sample = retrieval[retrieval["length"] == length].iloc[::4]
        q = minilm.embed([needles[g]["question"] for g in sample["group_id"]], kind="query")
        p = minilm.embed([texts[h] for h in sample["haystack_id"]])
        scores = np.einsum("ij,ij->i", q, p)
        np.testing.assert_allclose(sample["score"], scores, atol=2e-5)
        pool_scores = q @ pool_vectors.T
        # pessimistic: every candidate scoring at least as high ranks above (1e-5: batch-size noise)
        highest = 1 + (pool_scores > scores[:, None] + 1e-5).sum(axis=1)
        lowest = 1 + (pool_scores >= scores[:, None] - 1e-5).sum(axis=1)
        assert ((highest <= sample["rank"].to_numpy()) & (sample["rank"].to_numpy() <= lowest)).all()
        assert (sample["n_candidates"] == len(pool) + 1).all()


def test_retrieval_metrics_are_the_means_of_the_rank_table(run):
    retrieval = pd.read_parquet(run.out / "retrieval.parquet")
    metrics = pd.read_csv(run.out / "metrics.csv")
    overall = metrics[(metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    for measure in ["recall@1", "recall@5", "recall@10", "mrr", "ndcg@10", "query_auc"]:
        rows = overall[overall["metric"] == measure].set_index(["variant", "length"])
        expected = retrieval[retrieval["query_form"] == "question"].groupby(["variant", "length"])[measure].mean()
        np.testing.assert_allclose(rows.loc[expected.index, "value"], expected.to_numpy())
        assert (rows["ci_lo"] <= rows["value"] + 1e-12).all() and (rows["value"] <= rows["ci_hi"] + 1e-12).all()
    recall = overall[overall["metric"] == "recall@1"]["value"]
    assert recall.between(0, 1).all()


def test_break_points_name_the_best_length_when_none_reaches_the_threshold():
    from embedeval.breaks import BreakRule, break_points
    from embedeval.report.break_words import break_sentence

    rows = [{"embedder": "m", "strategy": "truncate", "query_form": "question", "variant": "onehop", "n_distractors": 0, "n_needles": 1,
             "own_question": True, "length": length, "category": "all",
             "depth_bucket": "all", "metric": metric, "value": value, "n": 10, "ci_lo": 0, "ci_hi": 1}
            for metric, values in (("query_auc", (0.75, 0.79, 0.6)), ("auc", (0.9, 0.85, 0.7)), ("recall@5", (0.0, 0.0, 0.0)))
            for length, value in zip((128, 256, 512), values, strict=True)]
    rule = BreakRule("absolute", metric="query_auc", threshold=0.8)
    table = break_points(pd.DataFrame(rows), None, rule)
    row = next(table.itertuples())
    assert pd.isna(row.break_point) and row.best_length == 256 and row.auc_break_point == 256
    assert break_sentence(row, rule).startswith("no length keeps query_auc >= 0.8 (best: 256 tokens at 0.790)")
    row = next(break_points(pd.DataFrame(rows), None, BreakRule("absolute", metric="auc", threshold=0.8)).itertuples())
    assert row.break_point == 256 and row.recommended_chunk_tokens == 204
    row = next(break_points(pd.DataFrame(rows), None).itertuples())  # relative: no rank table, no relative rule
    assert pd.isna(row.break_point) and pd.isna(row.relative_break_point) and pd.isna(row.absolute_break_point)
    assert break_sentence(row).startswith("no rank table: the relative rule reads each question's ranks")

def test_a_run_folder_whose_figures_is_a_link_is_refused_before_any_work(tmp_path, isolated_cache):
    """The run refuses a figures/ that links to a folder of the user's before it builds or
    embeds anything (not only when the report is written at the end, after the tables)."""
    victims = tmp_path / "mine"
    victims.mkdir()
    out = tmp_path / "run"
    out.mkdir()
    (out / "haystacks.json").write_text(json.dumps({"corpus": "shakespeare", "lengths": [128], "depths": 1, "seed": 0}))
    (out / "figures").symlink_to(victims)
    result = CliRunner().invoke(app, ["nolima", "--groups", "loc-dresden,diet-vegan", "--lengths", "128,256", "--out", str(out), "-q"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "figures is a link or not a folder" in lines[0], result.output
    assert sorted(p.name for p in out.iterdir()) == ["figures", "haystacks.json"] and not any(victims.iterdir())


def test_the_fast_metrics_give_the_tables_of_the_plain_resampling_loop(tmp_path, books_dir, monkeypatch):
    """The sweep's metrics computed with every resample at once (frequency weights for the
    statistics of unequal groups) against the plain reference, one resample at a time (the weighted
    path switched off): the same rows, the same values to the last digit, the same intervals to
    float rounding (sums in another order), and the same break points."""
    from embedeval.aggregate import nolima_metrics
    from embedeval.breaks import break_points
    from embedeval.metrics import bootstrap, moments

    # short haystacks at many depths: some depths meet at one sentence boundary and are kept once,
    # so the question groups hold unequal numbers of rows
    config = NolimaConfig(groups=SMALL_GROUPS, out=str(tmp_path / "run"), n_bootstrap=50,
                          grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[64, 128], depths=8, negatives=4))
    run = run_nolima(config, progress=False, cache_dir=tmp_path / "cache")
    weighted = []
    along = moments._weights_along
    monkeypatch.setattr(moments, "_weights_along", lambda *args: weighted.append(1) or along(*args))
    fast = nolima_metrics(run.similarities, n_resamples=200, seed=0, retrieval=run.retrieval)
    assert weighted  # the grid has groups of unequal rows (merged depths): the weighted path ran
    monkeypatch.setattr(bootstrap, "WEIGHTED_STATISTICS", frozenset())
    plain = nolima_metrics(run.similarities, n_resamples=200, seed=0, retrieval=run.retrieval)
    pd.testing.assert_frame_equal(fast.drop(columns=["ci_lo", "ci_hi"]), plain.drop(columns=["ci_lo", "ci_hi"]), check_exact=True)
    np.testing.assert_allclose(fast[["ci_lo", "ci_hi"]].to_numpy(float), plain[["ci_lo", "ci_hi"]].to_numpy(float), rtol=1e-12, atol=1e-15)
    assert fast["metric"].isin(["pearson_r", "spearman_rho", "slope", "cohens_d"]).any()
    rule = run.config.rule()
    pd.testing.assert_frame_equal(break_points(fast, run.retrieval, rule, 200, 0), break_points(plain, run.retrieval, rule, 200, 0))
