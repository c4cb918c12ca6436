"""The documentation site builds with ``mkdocs build --strict`` (a broken link or a page missing
from the nav fails), and README.md stays a two-minute read whose links resolve."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow
def test_the_docs_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "nolima/index.html", "metrics/index.html", "cli/index.html"} <= pages


def test_readme_is_short_starts_with_the_two_commands_and_links_to_files_that_exist():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "embedeval nolima --out runs/nolima" in first_block and "python -m pytest" in first_block
    targets = re.findall(r"\]\(([^)#]+)\)", readme)
    assert targets and all((REPO_ROOT / t).exists() for t in targets if not t.startswith("http")), targets


def test_ci_runs_the_readmes_test_command_step_by_step_and_it_installs_a_browser():
    """README's command 2 works as written on a fresh machine (tests/browser.py
    installs Chromium when no browser is found), and .ci/run runs exactly its steps, in order."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    steps = [step.strip() for step in commands[1].split("&&")]
    assert steps == ['. .venv/bin/activate', 'pip install -c constraints.txt -e ".[test]"', "python tests/browser.py", "python -m pytest"]
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert all(step in ci for step in steps), [step for step in steps if step not in ci]
    assert [ci.index(step) for step in steps] == sorted(ci.index(step) for step in steps)
    assert "apt-get" not in "\n".join(ci)  # one installer: tests/browser.py


def _user_docs():
    """What a user of a fresh clone reads: README, the docs site, the notebooks and the examples."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "notebooks").glob("*.ipynb")),
            *sorted(p for p in (REPO_ROOT / "examples").iterdir() if p.is_file())]


def test_no_doc_points_at_the_project_workspace_and_every_test_command_is_the_readmes():
    """A user's clone has no ../shared beside it, and a doc that gives its own
    test command drifts from README's (getting-started.md had no tests/browser.py)."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    test_command = [line for line in first_block.splitlines() if line and not line.startswith("#")][1]
    docs = _user_docs()
    assert len(docs) > 20
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/haystacks" not in text, doc.name
        blocks = [block.split("```", 1)[0] for block in text.split("```bash\n")[1:]]
        commands = [line for block in blocks for line in block.splitlines() if "pytest" in line and not line.startswith("#")]
        assert all(line == test_command for line in commands), (doc.name, commands)
    assert any(test_command in doc.read_text(encoding="utf-8") for doc in docs if doc.name == "getting-started.md")


def _themes_example_script():
    spec = importlib.util.spec_from_file_location("make_themes_example", REPO_ROOT / "docs" / "make_themes_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_themes_examples_printed_outputs_are_written_by_the_script_that_reruns_it():
    """The worked example's outputs in docs/themes.md had gone stale (recall, the
    progress label); now every output block of the example lies between the markers that
    docs/make_themes_example.py fills from a rerun, in its order, each filled, and the page says when."""
    script = _themes_example_script()
    page = (REPO_ROOT / "docs" / "themes.md").read_text(encoding="utf-8")
    example = page[page.index("## Example: the Paul Graham essays"):page.index("## Determinism")]
    opened = re.findall(r"<!-- example:(\S+) -->", page)
    assert opened == list(script.BLOCKS) == re.findall(r"<!-- /example:(\S+) -->", page)
    blocks = dict(re.findall(r"<!-- example:(\S+) -->\n(.*?)\n<!-- /example:\1 -->", page, flags=re.S))
    assert list(blocks) == list(script.BLOCKS)  # every block filled
    assert all(text.strip() and text.strip() != "(generated)" for text in blocks.values()), blocks
    outside = re.sub(r"<!-- example:(\S+) -->.*?<!-- /example:\1 -->", "", example, flags=re.S)
    assert "```text" not in outside  # no hand-copied output
    assert re.match(r"Generated by `python docs/make_themes_example\.py` on \d{4}-\d\d-\d\d ", blocks["stamp"])
    assert "--themes-ids essay,starting" in page and "--themes-ids 6,4" not in page


def test_the_example_script_cleans_progress_output_and_replaces_only_its_blocks():
    script = _themes_example_script()
    stderr = ("corpus c cut into chunks ...\rcorpus c cut into chunks ... done in 2.2 s\n"
              "embedding documents (st:m):   8%|8    | 1/12\rembedding documents (st:m): 100%|#####| 12/12\n"
              "UMAP: 9 points to 5 dimensions ...\n\x1b[AUMAP epochs:  50%|##  | 100/200\n\n"
              "UMAP: 9 points to 5 dimensions ... done in 1.0 s\n")
    assert script.cleaned(stderr).splitlines() == ["corpus c cut into chunks ... done in 2.2 s",
                                                   "embedding documents (st:m): 100%|#####| 12/12",
                                                   "UMAP: 9 points to 5 dimensions ... done in 1.0 s"]
    page = "a\n<!-- example:themes -->\nold\n<!-- /example:themes -->\nb\n<!-- example:stamp -->\nx\n<!-- /example:stamp -->\n"
    assert script.write_blocks(page, {"themes": "new\nlines", "stamp": "now"}) == (
        "a\n<!-- example:themes -->\n```text\nnew\nlines\n```\n<!-- /example:themes -->\nb\n"
        "<!-- example:stamp -->\nnow\n<!-- /example:stamp -->\n")


#: What names the source of a measured number: a script of the repository (a benchmark, a docs
#: script, a test) or an embedeval command line the reader can run.
SOURCE = re.compile(r"(?P<path>(?:benchmarks|docs|tests)/[\w./-]+\.py)|`embedeval \w[^`]*`|^embedeval \w", re.M)


#: What makes a paragraph a claim of a measurement: "measured" on, with, by, in or at something, or
#: "measured" and a date (2026-11-27) in one sentence.
CLAIM = re.compile(r"\bmeasured (?:on|with|by|in|at)\b|\bmeasured\b[^.]{0,80}\b20\d\d-\d\d-\d\d\b"
                   r"|\b20\d\d-\d\d-\d\d\b[^.]{0,80}\bmeasured\b", re.I)


def _sections(text: str) -> list[str]:
    """A Markdown page cut at its headings (each section with its heading)."""
    return re.split(r"\n(?=#{1,6} )", text)


def test_every_measured_number_in_readme_and_docs_names_the_script_that_printed_it():
    """A paragraph that says it measured something names its source (a script in
    benchmarks/, docs/ or tests/, or an embedeval command) in the paragraph or its section, and
    every script the docs name exists. A claim without a source fails here."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    unsourced, missing = [], []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        missing += [f"{page.name}: {m['path']}" for m in SOURCE.finditer(text) if m["path"] and not (REPO_ROOT / m["path"]).exists()]
        for section in _sections(text):
            for paragraph in re.split(r"\n\s*\n", section):
                if CLAIM.search(paragraph) and not (SOURCE.search(paragraph) or SOURCE.search(section)):
                    unsourced.append(f"{page.name}: {' '.join(paragraph.split())[:120]}")
    assert not missing, f"docs name scripts that do not exist: {missing}"
    assert not unsourced, "measured without a source (name the script or command that printed it):\n" + "\n".join(unsourced)


def _docs_module(name: str):
    """A script or module of docs/, loaded by path (docs/ is no package) and registered under its
    name, as its dataclasses need."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_block_markers_are_read_and_written_in_one_place_and_a_broken_pair_is_an_error():
    blocks = _docs_module("doc_blocks")
    page = "a\n<!-- example:one -->\nold\n<!-- /example:one -->\nb\n<!-- example:two -->\n<!-- /example:two -->\n"
    assert blocks.read_blocks(page) == {"one": "old", "two": ""}
    written = blocks.write_blocks(page, {"one": "new\nlines", "two": "x"})
    assert written == ("a\n<!-- example:one -->\nnew\nlines\n<!-- /example:one -->\nb\n"
                       "<!-- example:two -->\nx\n<!-- /example:two -->\n")
    assert blocks.read_blocks(written) == {"one": "new\nlines", "two": "x"}
    assert blocks.write_blocks(written, {"one": ""}).count("<!-- example:one -->\n<!-- /example:one -->") == 1
    assert blocks.without_blocks(written) == "a\n\nb\n\n"
    with pytest.raises(ValueError, match="no <!-- example:three -->"):
        blocks.write_blocks(page, {"three": "x"}, "README.md")
    with pytest.raises(ValueError, match="without their pair: one"):
        blocks.read_blocks("<!-- example:one -->\ntext\n")
    with pytest.raises(ValueError, match="block one twice"):
        blocks.read_blocks(page + page)


def test_every_block_quoting_the_default_run_is_what_its_script_writes_from_the_committed_snapshot():
    """What README and the docs say of the default run (its counts, time, break
    point, box, answer, worked example and the estimator simulation's table) is rendered from
    docs/assets/ by docs/make_default_run_docs.py; a page whose block differs from what the
    script renders now (a number edited by hand, or the code or the snapshot changed since) fails."""
    script, blocks = _docs_module("make_default_run_docs"), _docs_module("doc_blocks")
    rendered = script.render()
    assert set(rendered) == {name for names in script.PAGES.values() for name in names}  # each block stands on a page
    for name, wanted in script.PAGES.items():
        found = blocks.read_blocks((REPO_ROOT / name).read_text(encoding="utf-8"), name)
        assert list(found) == list(wanted), (name, list(found))
        for block in wanted:
            assert found[block] == rendered[block], f"{name}: block {block} is stale: run python docs/make_default_run_docs.py"
    assert script.stale_pages(rendered) == []
    assert script.stale_pages({**rendered, "box": rendered["box"].replace("76", "77")}) == ["README.md"]


def test_no_page_quotes_the_default_runs_numbers_outside_the_blocks_its_script_writes():
    """The default sweep's time, its texts and the base with its interval are said once, in the
    script's blocks: a page that quotes them elsewhere (README and getting-started.md once each gave
    their own time) copied them by hand. Every page holding one of the script's blocks is one of its
    pages."""
    script, blocks = _docs_module("make_default_run_docs"), _docs_module("doc_blocks")
    quoted = script.signatures()
    assert "4 min 8 s" in quoted and "0.528 [0.440, 0.616]" in quoted
    names = {name for names in script.PAGES.values() for name in names}
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO_ROOT).as_posix()
        if set(blocks.read_blocks(text, name)) & names:
            assert name in script.PAGES, name
        by_hand = blocks.without_blocks(text)
        by_hand = re.sub(r"```text\n\$ PYTHONPATH=\. python benchmarks/.*?```", "", by_hand, flags=re.S)  # a benchmark's committed output
        assert not [number for number in quoted if number in by_hand], name


def test_readmes_figure_is_the_one_the_script_draws_from_the_snapshot(tmp_path):
    """docs/assets/recall_vs_length.png is drawn by the report's own figure code from the committed
    snapshot: redrawn here, it has the committed figure's size and the same pixels to rounding (a
    figure of another run, or one whose snapshot changed, differs)."""
    from matplotlib.image import imread

    script = _docs_module("make_default_run_docs")
    script.draw_figure(tmp_path / "recall.png")
    drawn, committed = imread(tmp_path / "recall.png"), imread(script.FIGURE)
    assert drawn.shape == committed.shape
    assert float(abs(drawn - committed).mean()) < 0.005


def test_the_estimator_benchmarks_output_file_is_what_the_docs_script_reads(tmp_path):
    """benchmarks/bench_break_estimator.py --out writes the command, the date and what it printed;
    docs/make_default_run_docs.py reads the committed one (docs/assets/benchmarks/) the same way."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import bench_break_estimator

    script = _docs_module("make_default_run_docs")
    out = tmp_path / "estimator.txt"
    bench_break_estimator.main(["--groups", "24,48", "--repeats", "1", "--resamples", "20", "--shapes", "sharp", "--out", str(out)])
    small = script.EstimatorTable.read(out)
    assert small.command == "PYTHONPATH=. python benchmarks/bench_break_estimator.py --groups 24,48 --repeats 1 --resamples 20 --shapes sharp"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d, \d+ cores, load average .* at the end", small.stamp)
    assert re.fullmatch(r"\d+%", small.within_one_step("library", 48)) and small.seconds() >= 0
    committed = script.EstimatorTable.read()
    assert committed.within_one_step("library", 48) == "90%" and committed.within_one_step("library", 24) == "82%"
    assert committed.seconds() == 223 and len(committed.table()) == 11


def test_the_themes_stability_numbers_are_the_benchmarks_committed_output():
    """Docs/themes.md's "Determinism" shows what benchmarks/bench_theme_stability.py
    printed, as committed in docs/assets/benchmarks/ (the command line, then its output), and every
    ARI-like number its prose quotes (0.xxx) is one those outputs print."""
    page = (REPO_ROOT / "docs" / "themes.md").read_text(encoding="utf-8")
    section = page[page.index("## Determinism"):page.index("## Time")]
    outputs = sorted((REPO_ROOT / "docs" / "assets" / "benchmarks").glob("bench_theme_stability*.txt"))
    assert outputs
    printed = ""
    for path in outputs:
        text = path.read_text(encoding="utf-8").rstrip("\n")
        assert text.startswith("$ PYTHONPATH=. python benchmarks/bench_theme_stability.py")
        assert f"```text\n{text}\n```" in section, path.name
        printed += text
    prose = re.sub(r"```text\n.*?```", "", section, flags=re.S)
    quoted = set(re.findall(r"(?<![\d.])0\.\d{3}(?!\d)", prose))
    assert quoted and quoted <= set(re.findall(r"0\.\d{3}", printed)), sorted(quoted - set(re.findall(r"0\.\d{3}", printed)))


def test_the_overhead_numbers_are_the_benchmarks_committed_output():
    """Docs/scale.md's "Where a sweep's time goes" shows what benchmarks/bench_overhead.py
    printed, as committed in docs/assets/benchmarks/bench_overhead.txt (the command line, then its
    output), and every rate, seconds figure and ratio its prose and the estimate after it quote
    (13,643 vectors/s, 238.2 s, 0.047) is one that output prints."""
    page = (REPO_ROOT / "docs" / "scale.md").read_text(encoding="utf-8")
    section = page[page.index("## Where a sweep's time goes"):page.index("What replaces them past that size")]
    printed_all = ""
    for name in ("bench_overhead", "bench_before_after"):
        text = (REPO_ROOT / "docs" / "assets" / "benchmarks" / f"{name}.txt").read_text(encoding="utf-8").rstrip("\n")
        assert text.startswith(f"$ PYTHONPATH=. python benchmarks/{name}.py")
        assert f"```text\n{text}\n```" in section, name
        printed_all += text + "\n"
    text = printed_all
    prose = re.sub(r"```text\n.*?```", "", section, flags=re.S)
    pattern = r"\d[\d,]*(?= (?:tokens|windows|vectors)/s)|\d+\.\d(?= s\b)|0\.0\d\d(?!\d)"
    elsewhere = {"16,918", "20,266", "5,772", "6,678", "16,260"}  # the H200 runs of 2026-11-27/28, and the arithmetic the page shows on them
    quoted = set(re.findall(pattern, prose)) - elsewhere
    printed = set(re.findall(r"\d[\d,]*\.?\d*", text))
    assert quoted and quoted <= printed, sorted(quoted - printed)
