"""Execute every notebook on a reduced grid (the parameters cell is overridden) so none can rot."""

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from conftest import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
GROUPS = ["loc-dresden", "diet-vegan", "lang-dutch"]


def run_notebook(name: str, overrides: dict) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    index = next(i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", []))
    lines = [f"{key} = {value!r}" for key, value in overrides.items()]
    notebook.cells.insert(index + 1, nbformat.v4.new_code_cell("\n".join(lines)))
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return notebook


def test_committed_notebooks_have_no_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
    assert len(list(NOTEBOOKS.glob("*.ipynb"))) == 4


@pytest.mark.slow
def test_01_nolima_sweep(tmp_path, books_dir):
    out = tmp_path / "nb1"
    notebook = run_notebook("01_nolima_sweep.ipynb", {"CORPUS": f"dir:{books_dir}", "LENGTHS": [128, 512], "DEPTHS": 3,
                                                       "GROUPS": GROUPS, "CHUNK_TOKENS": [128], "NEGATIVES": 10,
                                                       "EXTEND_LENGTHS": [128, 512], "OUT": str(out)})
    sims = pd.read_parquet(out / "similarities.parquet")
    scorers = set(zip(sims["embedder"], sims["strategy"], strict=True))
    assert scorers == {("st:all-MiniLM-L6-v2", "truncate"), ("st:all-MiniLM-L6-v2", "windows-mean"),
                       ("st:all-MiniLM-L6-v2", "chunks-max@128"), ("st:all-MiniLM-L6-v2", "late-chunking@128"), ("bm25", "full-text")}
    assert set(sims["variant"]) == {"onehop", "literal", "control"}
    bm25 = sims[sims["embedder"] == "bm25"]
    assert bm25["normalized"].isna().all() and (bm25["normalized_by"] == "").all()
    assert sims.query("strategy == 'windows-mean' and variant != 'control'")["needle_visible"].all()
    assert not sims.query("strategy == 'truncate' and length == 512 and variant != 'control'")["needle_visible"].all()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "\n## Chunk size\n" in report and "chunks-max@128" in report and "| late-chunking@128 |" in report
    assert "\n## Several needles\n" in report and set(sims["n_needles"]) == {0, 1, 3}
    assert (out / "figures" / "depth_heatmap.png").is_file() and (out / "figures" / "strategies_vs_length.png").is_file()
    text = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs)
    assert "[[" in text and "haystacks" in text  # haystack anatomy printed with its needle
    shown = "".join(o.get("data", {}).get("text/plain", "") for c in notebook.cells if c.cell_type == "code"
                    for o in c.outputs)
    assert "jina_v3_auc" in shown and "truncate_needle_visible_share" in shown  # the Jina comparison, on windows-mean
    stretched = pd.read_parquet(out / "extend" / "similarities.parquet")  # the context extension section, at L = 514
    assert set(stretched["strategy"]) == {"windows-mean", "chunks-max@128", "extend-gp@514", "extend-gp@514+logscale",
                                          "extend-pi@514", "extend-pi@514+logscale"}
    assert stretched.query("strategy.str.startswith('extend') and variant != 'control'")["needle_visible"].all()
    assert (out / "extend" / "figures" / "extend_vs_length.png").is_file() and "break_point_lo" in shown


@pytest.mark.slow
def test_02_context_rot_similarity(tmp_path, books_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for book in sorted(books_dir.glob("*.txt"))[:2]:
        (corpus / book.name).write_text(book.read_text(encoding="utf-8")[30_000:38_000], encoding="utf-8")
    out = tmp_path / "nb2"
    run_notebook("02_context_rot_similarity.ipynb", {"EMBEDDERS": ["st:all-MiniLM-L6-v2"], "CORPUS": f"dir:{corpus}",
                                                      "GROUPS": GROUPS, "OUT": str(out)})
    exported = pd.read_csv(out / "similarities_for_llm.csv")
    assert len(exported) == len(GROUPS) * 4
    assert exported["mean_needle_question"].between(-1, 1).all()
    assert (out / "needle_similarity.png").is_file()


@pytest.mark.slow
def test_03_query_expansion(tmp_path, books_dir):
    out = tmp_path / "nb3"
    run_notebook("03_query_expansion.ipynb", {"CORPUS": f"dir:{books_dir}", "LENGTHS": [128, 512], "DEPTHS": 3,
                                               "GROUPS": GROUPS, "OUT": str(out)})
    sims = pd.read_parquet(out / "similarities.parquet")
    assert sorted(sims["query_form"].unique()) == ["expanded-100", "expanded-150", "expanded-250", "question"]
    assert (out / "figures" / "query_expansion.png").is_file()


@pytest.mark.slow
def test_04_themes(tmp_path):
    """The themes, then the whole loop on a reduced grid: the scripted chat server of examples/ on
    127.0.0.1 answers the requests with one group each, the three topics in turn, so each theme
    keeps the group written for it within its three requests (and refuses the others as off-topic
    or their characters as taken), and as the judge says that each of those needles answers its
    question; the drafted set is swept by nolima."""
    import json

    import numpy as np

    from test_draft import GOOD, SAILING, group
    from test_themes import TOPICS, sentences

    corpus = tmp_path / "topics"
    corpus.mkdir()
    rng = np.random.default_rng(5)
    for topic in TOPICS:
        (corpus / f"{topic}.txt").write_text(" ".join(sentences(topic, 200, rng)) + "\n", encoding="utf-8")
    stars = group("Which character has been to Chile?", "Mira", "Chile",
                  "Mira photographed a faint nebula from a mountain observatory in the Atacama desert.",
                  "From a mountain observatory in the Atacama desert, a faint nebula was photographed by Mira.")
    drafts = tmp_path / "drafts.json"
    topics = [GOOD, SAILING[0], stars]
    verdicts = [{"question": g["question"], "needle": text, "answers": True, "reason": f"it says so of {g['character']}"}
                for g in topics for text in g["needles"].values()]
    drafts.write_text(json.dumps({"replies": [{"groups": [g]} for g in topics] * 3, "verdicts": verdicts}), encoding="utf-8")
    out = tmp_path / "nb4"
    notebook = run_notebook("04_themes.ipynb", {"CORPUS": f"dir:{corpus}", "MIN_BOOKS": 3, "UMAP_COMPONENTS": 5, "RUNS": 3,
                                                "REPRESENTATIVES": 5, "OUT": str(out), "DRAFTS": str(drafts),
                                                "DRAFT_THEMES": None, "PER_THEME": 1, "LENGTHS": [128, 256], "DEPTHS": 2,
                                                "NEGATIVES": 4})
    clusters = pd.read_csv(out / "clusters.csv")
    assert len(clusters) == 3 and (out / "figures" / "map.png").is_file()
    shown = "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                    for o in c.outputs)
    assert "blends_in" in shown and "outside_percentile" in shown and "clusters" in shown
    drafted = json.loads((tmp_path / "nb4-loop" / "drafted-needles.json").read_text())
    assert sorted(g["character"] for g in drafted["groups"]) == ["Kenji", "Mira", "Yuki"]
    assert all(f"theme {theme}: 1 of 1 groups accepted, " in shown for theme in range(3))
    assert drafted["provenance"]["judge"]["chat_model"].startswith("openai:scripted?base_url=http://127.0.0.1:")
    assert all(g["checks"]["needles"][v]["judge"]["answers"] for g in drafted["groups"] for v in ("onehop", "inverted"))
    assert " 6 judge request(s)" in shown and "it says so of Yuki" in shown and "No check tested" not in shown
    assert "needles check: 3 groups, 0 problem(s)" in shown
    breaks = pd.read_csv(tmp_path / "nb4-loop" / "nolima" / "breaks.csv")
    assert sorted(breaks["variant"]) == ["inverted", "onehop"]
    assert "break point" in "".join(o.get("data", {}).get("text/markdown", "") for c in notebook.cells if c.cell_type == "code"
                                    for o in c.outputs)


@pytest.mark.slow
def test_cli_docs_match_the_real_help():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(REPO_ROOT / "docs" / "make_cli_docs.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
