"""A themes run folder whose files do not belong together: a
clusterings.npz of other shapes, of another run or edited, a chunks.parquet or clusters.csv of
another run, a themes.json whose run_seeds is no list, models of other clusterings. `themes
membership` and `needles draft --plan` each refuse it with one `error:` line, membership before the
embedder is loaded; before, most of these were tracebacks after the corpus was embedded, or wrong
answers (a theme left out, a clustering's HDBSCAN predicting on another clustering's layout)."""

from __future__ import annotations

import json
import shutil

import joblib
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from embedeval.cli import app

from test_themes import small_themes_run

#: A themes run (chunks embedded, UMAP and HDBSCAN three times): the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def themes_run(tmp_path_factory):
    """Three written topics, 100 sentences each (about 150 chunks), the consensus of 3 clusterings."""
    return small_themes_run(tmp_path_factory, "files", 100)


def _arrays(folder):
    with np.load(folder / "clusterings.npz") as data:
        return {name: data[name] for name in data.files}


def _savez(folder, **changed):
    arrays = {**_arrays(folder), **changed}
    with open(folder / "clusterings.npz", "wb") as handle:
        np.savez(handle, **{k: v for k, v in arrays.items() if v is not None})


def _manifest(folder, **changed):
    manifest = json.loads((folder / "themes.json").read_text())
    (folder / "themes.json").write_text(json.dumps({**manifest, **changed}))


DAMAGES = {
    "labels of fewer chunks": (lambda f: _savez(f, labels=_arrays(f)["labels"][:, :10]), "its labels are not an (R, n)"),
    "reduced of fewer chunks": (lambda f: _savez(f, reduced=_arrays(f)["reduced"][:, :10]), "clusterings.npz: its labels"),
    "reduced as text": (lambda f: _savez(f, reduced=np.full(_arrays(f)["reduced"].shape[:2], "x")), "its reduced points are not"),
    "reduced with a NaN": (lambda f: _savez(f, reduced=np.where(np.arange(5) == 0, np.nan, _arrays(f)["reduced"])),
                           "its reduced points are not"),
    "matches of NaN": (lambda f: _savez(f, matches=np.full(_arrays(f)["matches"].shape, np.nan)), "its matches are not"),
    "matches of one dimension": (lambda f: _savez(f, matches=_arrays(f)["matches"][:, 0]), "its matches are not"),
    "a match that is no cluster": (lambda f: _savez(f, matches=_arrays(f)["matches"] + 1000), "is no cluster of that clustering"),
    "matches of more themes": (lambda f: _savez(f, matches=np.tile(_arrays(f)["matches"], 2)), "clusters.csv lists the themes 0..2"),
    "matches of fewer themes": (lambda f: _savez(f, matches=_arrays(f)["matches"][:, :1]), "is not of the clusterings of its"),
    "chunks of another run": (lambda f: pd.read_parquet(f / "chunks.parquet").head(50).to_parquet(f / "chunks.parquet"),
                              "chunks.parquet (50 chunks) is not of the clusterings"),
    "a theme missing from clusters.csv": (lambda f: pd.read_csv(f / "clusters.csv").head(2).to_csv(f / "clusters.csv", index=False),
                                          "clusters.csv lists the themes 0..1"),
    "a theme renumbered in clusters.csv": (
        lambda f: pd.read_csv(f / "clusters.csv").assign(cluster=[0, 1, 7]).to_csv(f / "clusters.csv", index=False),
        "clusters.csv lists the themes 0, 1, 7"),
    "run_seeds a number": (lambda f: _manifest(f, run_seeds=3), "its 'run_seeds' is not a list of whole numbers"),
    "run_seeds a text": (lambda f: _manifest(f, run_seeds="abc"), "its 'run_seeds' is not a list of whole numbers"),
    "no clusterings": (lambda f: (_manifest(f, run_seeds=[]), joblib.dump([], f / "hdbscan.joblib")),
                       "its 'run_seeds' is not a list of whole numbers"),
}
#: Damages only a loaded model shows: membership refuses them; a draft's plan unpickles no model.
MODEL_DAMAGES = {
    "HDBSCANs in another order": (lambda f: joblib.dump(joblib.load(f / "hdbscan.joblib")[::-1], f / "hdbscan.joblib"),
                                  "hdbscan.joblib: its model 1 is not the HDBSCAN of clustering 1"),
    "HDBSCANs that are texts": (lambda f: joblib.dump(["a", "b", "c"], f / "hdbscan.joblib"), "its model 1 is not the HDBSCAN"),
    "a UMAP that is not one": (lambda f: shutil.copy(f / "hdbscan.joblib", f / "umap.joblib"),
                               "umap.joblib is not the UMAP of the first clustering"),
}


def _one_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (result.output, result.exception)
    return lines[0]


@pytest.mark.parametrize("damage", list(DAMAGES) + list(MODEL_DAMAGES))
def test_a_folder_whose_files_do_not_belong_together_is_one_line(themes_run, tmp_path, monkeypatch, damage):
    from embedeval.experiments.themes import membership

    edit, says = {**DAMAGES, **MODEL_DAMAGES}[damage]
    folder = tmp_path / "themes"
    shutil.copytree(themes_run, folder)
    edit(folder)
    pairs = tmp_path / "p.csv"
    pd.DataFrame({"question": ["Q?"], "needle": ["The cook stirred the soup."]}).to_csv(pairs, index=False)

    def no_embedder(*args, **kwargs):
        raise AssertionError("the embedder was loaded before the folder was refused")

    monkeypatch.setattr(membership, "load_embedder", no_embedder)
    result = CliRunner().invoke(app, ["themes", "membership", str(folder), "--pairs", str(pairs), "--out", str(tmp_path / "m.csv"), "-q"])
    assert says in _one_error(result)
    assert not (tmp_path / "m.csv").exists()
    plan = CliRunner().invoke(app, ["needles", "draft", "--themes", str(folder), "--llm", "fake-model", "--out",
                                    str(tmp_path / "d.json"), "-q", "--plan", "--per-theme", "1"])
    if damage in DAMAGES:
        assert says in _one_error(plan) or "is no chunk of its chunks.parquet" in _one_error(plan)
    else:
        assert plan.exit_code == 0, plan.output
    assert not (tmp_path / "d.json").exists()


def test_an_old_folder_is_refused_by_a_drafts_plan_too(themes_run, tmp_path):
    """A folder written before themes were a consensus (no run_seeds, one HDBSCAN, no
    clusterings.npz): the draft refused it, and its plan planned it."""
    folder = tmp_path / "old"
    shutil.copytree(themes_run, folder)
    manifest = json.loads((folder / "themes.json").read_text())
    (folder / "themes.json").write_text(json.dumps({k: v for k, v in manifest.items() if k not in ("run_seeds", "float_noise")}))
    joblib.dump(joblib.load(folder / "hdbscan.joblib")[0], folder / "hdbscan.joblib")
    (folder / "clusterings.npz").unlink()
    plan = CliRunner().invoke(app, ["needles", "draft", "--themes", str(folder), "--llm", "fake-model", "--out",
                                    str(tmp_path / "d.json"), "-q", "--plan", "--per-theme", "1"])
    assert "was written before themes were a consensus of several clusterings: run embedeval themes again" in _one_error(plan)


def test_the_folder_as_written_passes(themes_run, tmp_path):
    from embedeval.experiments.themes.loading import check_themes_files, load_themes

    manifest, arrays = check_themes_files(themes_run)
    assert len(manifest["run_seeds"]) == len(arrays["labels"]) == 3
    _, reducer, clusterers, _ = load_themes(themes_run)
    assert len(clusterers) == 3 and np.array_equal(reducer.embedding_, arrays["reduced"][0])
