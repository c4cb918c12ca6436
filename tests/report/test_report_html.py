"""report.html: one self-contained file with the sections of report.md, checked in
a real headless browser (Chromium, Chrome or Edge: tests/browser.py finds one, or installs Chromium
for README's test command and .ci/run): every image loads, nothing
comes from outside the file, the page fits a 1280 px and a phone-sized viewport, and no two texts of
its contents overlap there."""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading

import pytest
from matplotlib.transforms import Bbox
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.report.figures import crowded

from browser import NoBrowser, find_browser
from conftest import own_cache
from fake_api import SHUTDOWN_POLL

#: Every test here reads a sweep the module runs first (a sweep): the slow tier.
pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
#: A page of the test's own: the report in two frames (desktop and phone width); once everything has
#: loaded, it writes what it found into #result, which --dump-dom prints.
CHECK_PAGE = """<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>
<pre id="result">pending</pre>
<iframe id="wide" src="report.html" style="width:1280px;height:900px;border:0"></iframe>
<iframe id="phone" src="report.html" style="width:390px;height:844px;border:0"></iframe>
<script>
function look(frame) {
  const doc = frame.contentDocument, root = doc.documentElement;
  const images = Array.from(doc.images);
  return {images: images.length, loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,
          overflow: root.scrollWidth - root.clientWidth,
          sections: Array.from(doc.querySelectorAll("h2")).map(h => h.textContent),
          firstTable: doc.querySelector("table thead").textContent,
          tables: Array.from(doc.querySelectorAll("table thead")).map(t => t.textContent), text: doc.body.innerText};
}
window.addEventListener("load", () => {
  document.getElementById("result").textContent = JSON.stringify({wide: look(wide), phone: look(phone)});
});
</script></body></html>"""


#: The contents as the browser lays them out, in a page of the test's own: every report of the site
#: (``{frames}``) at a desktop and a phone width; once they have loaded, it writes into #result, per
#: frame, each contents entry's text and the boxes of every line of its texts (number and title).
CONTENTS_PAGE = """<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>
<pre id="result">pending</pre>
{frames}
<script>
function boxes(doc, entry) {
  const found = [], walker = doc.createTreeWalker(entry, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const range = doc.createRange();
    range.selectNodeContents(walker.currentNode);
    for (const r of range.getClientRects())
      if (r.width > 0 && walker.currentNode.textContent.trim()) found.push([walker.currentNode.textContent, r.left, r.top, r.right, r.bottom]);
  }
  return found;
}
window.addEventListener("load", () => {
  const seen = {};
  for (const frame of document.querySelectorAll("iframe")) {
    const entries = Array.from(frame.contentDocument.querySelectorAll("nav li"));
    seen[frame.id] = {entries: entries.map(e => e.textContent), boxes: entries.flatMap(e => boxes(frame.contentDocument, e))};
  }
  document.getElementById("result").textContent = JSON.stringify(seen);
});
</script></body></html>"""
#: The widths the contents are read at: a desktop's and a phone's.
WIDTHS = {"desktop": 1280, "phone": 390}


def sweep(tmp_path_factory, books_dir, cache, strategies: str):
    """A small sweep's run directory (3 groups, 2 lengths, 3 depths) read with ``strategies``;
    its embeddings kept in ``cache`` (the sweeps share what they both embed)."""
    out = tmp_path_factory.mktemp("html") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["nolima", "--groups", "loc-dresden,loc-peru,diet-vegan", "--corpus", f"dir:{books_dir}",
                                      "--lengths", "128,512", "--depths", "3", "--negatives", "4", "--n-bootstrap", "50",
                                      "--strategy", strategies, "--chunk-tokens", "128", "--cache-dir", str(cache),
                                      "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sweep_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sweep-cache")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, books_dir, sweep_cache):
    """A sweep with two strategies: a multi-strategy report."""
    return sweep(tmp_path_factory, books_dir, sweep_cache, "truncate,chunks-max")


@pytest.fixture(scope="module")
def default_run_dir(tmp_path_factory, books_dir, sweep_cache, run_dir):
    """The same sweep with the default strategy (truncate) alone: its embeddings already in the cache."""
    return sweep(tmp_path_factory, books_dir, sweep_cache, "truncate")


def chromium(*args: str, cwd) -> str:
    try:
        browser = find_browser()
    except NoBrowser as missing:
        pytest.fail(str(missing), pytrace=False)  # one line: what to install (never a skip)
    done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={cwd / 'profile'}", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@contextlib.contextmanager
def served(site):
    """``site`` (a folder) served over HTTP on a free local port while the block runs; yields its
    URL and the list of the paths asked for, filled as they are."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):  # record what the browser asked for instead of printing it
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()


def dumped_result(dom: str) -> dict:
    """What a check page wrote into its #result, from the DOM Chromium dumped."""
    return json.loads(html.unescape(re.search(r'<pre id="result">(.*?)</pre>', dom, re.S).group(1)))


def test_the_html_report_is_self_contained_and_holds_the_markdown_sections(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"<script|@import|url\(", page, re.I)
    assert re.findall(r"<link[^>]*>", page) == ['<link rel="icon" href="data:,">']  # not even a favicon request
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources and all(s.startswith(("data:image/png;base64,", "data:,", "#")) for s in sources)
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", markdown, re.M)
    assert titles[:2] == ["Which to use", "The answer per embedder and strategy"] and titles[2].startswith("Break point")
    assert len(titles) > 7
    assert [html.unescape(t) for t in re.findall(r"<h2 id=\"[^\"]+\">(.+?)</h2>", page)] == titles
    assert page.count("<img ") == markdown.count("![")


def test_the_report_leads_with_which_to_use_then_one_answer_per_embedder_and_strategy(run_dir):
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    blocks = markdown.split("\n\n")
    assert blocks[:2] == ["# NoLiMa sweep", "## Which to use"]  # one sentence per length first
    assert blocks[2].startswith("Your corpus `dir:") and "at the 90th percentile" in blocks[2]
    assert blocks[3].startswith("- Documents of every length measured: read them with ")  # the summary: 3 groups, no break point
    assert blocks[4] == "Length by length:"
    bands = blocks[5].splitlines()
    # the plays are far longer than 512 tokens: the longest length brackets them and comes first
    assert [line.split(" tokens:")[0] for line in bands] == ["- For documents of about 512", "- For documents of about 128"]
    assert all(" read them with st:all-MiniLM-L6-v2 as `" in line for line in bands)
    first = blocks.index("## The answer per embedder and strategy")
    answers = blocks[first + 1:first + 3]
    assert {block.split(")")[0] for block in answers} == {"> **With st:all-MiniLM-L6-v2 (truncate",
                                                          "> **With st:all-MiniLM-L6-v2 (chunks-max@128"}
    for answer in answers:
        assert "\n> - Break point **" in answer or "\n> - No break point: " in answer
        assert "\n> - 3 question groups.\n> - Needle visible to the model in its needle haystacks, by length: " in answer
        assert "\n> - Which to use: " in answer  # where the decision table puts it
    for answer in answers:  # 3 groups: no headline, whatever the p-value (the answer's own tests read 24)
        assert "\n> - No break point: too few question groups (3) (" in answer and "Recommended chunk" not in answer
    table = next(b for b in blocks[first:] if b.startswith("| "))
    assert table.splitlines()[0].count("|") - 1 <= 6  # narrow enough to read without scrolling (22 columns before)
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert re.search(r"<h2 id=\"which-to-use\">Which to use</h2>\n<p>Your corpus", page)
    assert page.index('<h2 id="which-to-use">') < page.index('<aside class="answer"><p><strong>With st:all-MiniLM-L6-v2 (')


def test_the_html_report_renders_in_a_headless_browser(run_dir, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(run_dir / "report.html", site / "report.html")  # alone: whatever it shows comes from the file itself
    (site / "check.html").write_text(CHECK_PAGE, encoding="utf-8")
    with served(site) as (url, requested):
        dom = chromium("--virtual-time-budget=15000", "--dump-dom", f"{url}/check.html", cwd=tmp_path)
        chromium("--window-size=1280,2000", f"--screenshot={tmp_path / 'report-1280.png'}", f"{url}/report.html", cwd=tmp_path)
        chromium("--window-size=390,844", f"--screenshot={tmp_path / 'report-phone.png'}", f"{url}/report.html", cwd=tmp_path)
    assert set(requested) == {"/check.html", "/report.html"}  # the report asked for nothing else
    found = dumped_result(dom)
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    for view in ("wide", "phone"):
        seen = found[view]
        assert seen["images"] == markdown.count("![") > 5 and seen["loaded"] == seen["images"], seen
        assert seen["overflow"] <= 1, f"the page is wider than the {view} viewport by {seen['overflow']} px"
        assert seen["sections"] == re.findall(r"^## (.+)$", markdown, re.M)
        assert seen["firstTable"].startswith("reading")  # Which to use's: every reading's recall per length
        assert any("break point (relative rule)" in t and "absolute rule" in t for t in seen["tables"])
        assert re.match(r"NoLiMa sweep\s+1\.\s+Which to use\s", seen["text"]) and "For documents of about 512 tokens" in seen["text"]
        assert "too few question groups (3)" in seen["text"]  # the boxes: no headline with 3 groups
    assert (tmp_path / "report-1280.png").stat().st_size > 10_000 and (tmp_path / "report-phone.png").stat().st_size > 10_000


def test_no_two_texts_of_the_contents_overlap_on_a_desktop_or_a_phone(run_dir, default_run_dir, tmp_path):
    """Before, a wrapped title in the first column ran into the number of the entry beside it
    ("... the shortest lengths)11."): the numbers were list markers, hung in the gap between the columns."""
    site = tmp_path / "site"
    site.mkdir()
    reports = {"default": default_run_dir, "strategies": run_dir}
    for name, run in reports.items():
        shutil.copy(run / "report.html", site / f"{name}.html")
    frames = "".join(f'<iframe id="{name} {view}" src="{name}.html" style="width:{width}px;height:900px;border:0"></iframe>'
                     for name in reports for view, width in WIDTHS.items())
    (site / "check.html").write_text(CONTENTS_PAGE.replace("{frames}", frames), encoding="utf-8")
    with served(site) as (url, _):
        found = dumped_result(chromium("--virtual-time-budget=15000", "--dump-dom", f"{url}/check.html", cwd=tmp_path))
    for name, run in reports.items():
        titles = re.findall(r"^## (.+)$", (run / "report.md").read_text(encoding="utf-8"), re.M)
        for view in WIDTHS:
            seen = found[f"{name} {view}"]
            boxes = [(text, Bbox.from_extents(*box)) for text, *box in seen["boxes"]]
            assert crowded(boxes, gap=0) == [], f"overlapping texts in the contents of the {name} report on a {view}"
            assert seen["entries"] == [f"{number}. {title}" for number, title in enumerate(titles, start=1)]
            assert {text for text, _ in boxes} >= {f"{number}." for number in range(1, len(titles) + 1)}  # every number a text
    assert len(found["strategies desktop"]["entries"]) == len(found["default desktop"]["entries"]) + 1  # "Chunk size"


def test_embedeval_report_writes_both_formats(run_dir, tmp_path):
    (run_dir / "report.html").unlink()
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / "report.html").is_file() and (tmp_path / "again" / "report.md").is_file()
    assert (tmp_path / "again" / "report.md").read_text() == (run_dir / "report.md").read_text()


def test_a_figures_folder_that_is_a_link_is_refused_and_nothing_written_through_it(run_dir, tmp_path):
    """`report --out X` where X/figures links to a folder of the user's writes nothing there."""
    victims = tmp_path / "mine"
    victims.mkdir()
    (victims / "recall_vs_length.png").write_text("MINE")
    out = tmp_path / "linked"
    assert CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)]).exit_code == 0  # a report folder of embedeval's
    shutil.rmtree(out / "figures")
    (out / "figures").symlink_to(victims)
    before = sorted(p.name for p in out.iterdir())
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and "is a link or not a folder" in lines[0]
    assert [p.name for p in victims.iterdir()] == ["recall_vs_length.png"] and (victims / "recall_vs_length.png").read_text() == "MINE"
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize("mine", ["report.md", "figures/recall_vs_length.png", "notes.txt"])
def test_report_out_into_a_folder_embedeval_did_not_write_is_one_line_and_touches_nothing(run_dir, tmp_path, mine):
    """`report --out DIR` writes only into a new or empty folder, a run folder, or a
    report folder of its own (derived.json lists its report.md)."""
    out = tmp_path / "mine"
    (out / mine).parent.mkdir(parents=True, exist_ok=True)
    (out / mine).write_text("MINE")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --out {out} holds files and is not a run folder embedeval wrote"), lines[0]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before and (out / mine).read_text() == "MINE"


def test_a_report_folder_embedeval_wrote_is_written_again(run_dir, tmp_path):
    out = tmp_path / "again"
    for _ in range(2):
        result = CliRunner().invoke(app, ["report", str(run_dir), str(run_dir), "--out", str(out)])
        assert result.exit_code == 0, result.output
    assert {"report.md", "report.html"} <= set(json.loads((out / "derived.json").read_text())["files"])
    assert not (out / ".embedeval.lock").exists()


# --- the report leads with the answer ------------------------------------------------------------------
def _answers(hits: dict[int, float], visible: dict[int, float], windows=None, seed: int = 4):
    """The report's answers and break-point table for one synthetic series (``m``, truncate, 24
    question groups) whose top-1 hit rate per length is ``hits``."""
    from embedeval.breaks import BreakRule, break_points
    from embedeval.report.tables import answers, break_table

    from test_breaks import _rank_rows, _with_hits, _with_visibility

    retrieval = _rank_rows(_with_hits(hits, seed=seed))
    metrics = _with_visibility(retrieval, visible)
    breaks = break_points(metrics, retrieval, n_resamples=100, windows=windows)
    return answers(breaks, metrics, BreakRule(), "onehop"), break_table(breaks, BreakRule()), breaks.iloc[0]


def test_the_answer_says_the_break_point_the_chunk_the_groups_and_what_the_model_saw():
    from embedeval.breaks import parse_shares
    from embedeval.report.break_words import interval_text

    visible = {128: 1.0, 512: 1.0, 2048: 0.5}
    ((headline, items),), table, row = _answers({128: 0.9, 512: 0.88, 2048: 0.2}, visible)
    assert row["break_point"] == 512 and not row["break_censored"]
    assert headline == ("With m (truncate), keep chunks ≤ 409 tokens: up to 512-token haystacks, a top-5 retriever finds the "
                        "onehop needle's haystack (above chance) at least 85% as often as in the shortest haystacks; at 2048 "
                        "tokens it does not.")
    assert items[0].startswith(f"Break point **{interval_text(next(iter([row.to_frame().T.itertuples().__next__()])))}** by the "
                               f"relative rule, given by {row['break_point_share']:.0%} of resamples of the question groups")
    spread = ", ".join(f"{'none' if length is None else f'{length} tokens'} in {share:.0%}"
                       for length, share in sorted(parse_shares(row["break_shares"]).items(), key=lambda item: item[0] or 0))
    spread = [f"Over resamples of the question groups the break point is {spread}."] if len(parse_shares(row["break_shares"])) > 1 else []
    assert items[1:] == ("Recommended chunk **409 tokens**: 0.8 x the break point.", *spread, "24 question groups.",
                         "Needle visible to the model in its needle haystacks, by length: 128: 100%, 512: 100%, 2048: 50%.")
    assert list(table.columns) == ["series", "break point (relative rule)", "recommended chunk", "question groups", "absolute rule",
                                   "pooled-AUC rule"]  # 6 columns, not breaks.csv's 28
    assert table.iloc[0]["series"] == "m [truncate, onehop, question]" and table.iloc[0]["recommended chunk"] == "409"


def test_one_question_group_is_said_in_the_singular():
    import pandas as pd

    from embedeval.breaks import BreakRule
    from embedeval.report.tables import answer

    visible = {128: 1.0, 512: 1.0, 2048: 0.5}
    _, _, row = _answers({128: 0.9, 512: 0.88, 2048: 0.2}, visible)
    said = {}
    for groups in (1, 2):
        row = row.copy()
        row["n_groups"] = groups
        said[groups] = answer(row, BreakRule(), pd.Series(visible))[1]
    assert "1 question group." in said[1] and "2 question groups." in said[2]


def test_the_answer_says_at_least_where_censored_and_names_the_window_cap():
    ((headline, items),), table, row = _answers({128: 0.95, 512: 0.95, 2048: 0.95}, {128: 1.0, 512: 1.0, 2048: 1.0},
                                                windows={("m", "truncate"): 254})
    assert row["break_censored"] and row["chunk_capped"]
    assert headline.startswith("With m (truncate), chunks of 254 tokens, the whole window the model reads, are safe: up to "
                               "2048-token haystacks, the longest measured,")  # not "longer ones may be": it reads no more
    assert items[0].startswith("Break point **≥ 2048 tokens (") and "at least this" in items[0]
    assert items[1] == ("Recommended chunk **254 tokens**: 0.8 x the break point, capped at the 254-token window the model reads "
                        "(it reads nothing past it).")
    assert "given by 100% of resamples of the question groups" in items[0]  # one length: no spread line repeating it
    assert items[3] == "Needle visible to the model in its needle haystacks, by length: 100% at every length (nothing cut off before the needle)."
    assert table.iloc[0]["break point (relative rule)"].startswith("≥ 2048 tokens (")
    assert table.iloc[0]["recommended chunk"] == "254 (capped at the 254-token window)"


def _row(**fields):
    """One breaks.csv row as the report reads it (a named tuple), every column given or empty."""
    import pandas as pd

    from embedeval.schema import BREAK_COLUMNS

    base = {"embedder": "m", "strategy": "truncate", "query_form": "question", "variant": "onehop", "n_distractors": 0,
            "n_needles": 1, "own_question": True, "relative_status": "ok", "n_groups": 24}
    return next(pd.DataFrame([{c: fields.get(c, base.get(c)) for c in BREAK_COLUMNS}]).itertuples())


def test_the_answer_names_every_length_the_resamples_give_and_says_one_chunk():
    """The default run's 128 once rested on 524 of 1,000 resamples, 256 on 471; the answer must not
    say "at 256 tokens it does not", and where no length has a clear majority (60%) nothing may say
    "act on this one" about either alone: one chunk, of the longest length 60% of the resamples reach."""
    import pandas as pd

    from embedeval.breaks import BreakRule
    from embedeval.report.break_words import break_sentence
    from embedeval.report.tables import answer

    shares = pd.Series({128: 1.0, 256: 0.9, 512: 0.5})
    coin = _row(break_point=128, break_point_lo=128, break_point_hi=256, recommended_chunk_tokens=102, window=254,
                chunk_capped=False, break_shares="128:0.524;256:0.471;512:0.005", break_point_share=0.524)
    headline, items = answer(coin, BreakRule(), shares)
    assert headline == ("With m (truncate), the break point is 128 or 256 tokens (52% / 47% of resamples of the question "
                        "groups): keep chunks ≤ 102 tokens, the safer answer (100% of the resamples reach 128 tokens).")
    assert "it does not" not in headline
    assert "Over resamples of the question groups the break point is 128 tokens in 52%, 256 tokens in 47%, 512 tokens in <1%." in items
    split = _row(break_point=128, break_point_lo=None, break_point_hi=512, recommended_chunk_tokens=102, window=254,
                 break_shares="none:0.22;128:0.40;512:0.38", break_point_share=0.40)  # the 40 / 38
    headline, items = answer(split, BreakRule(), shares)
    assert headline == ("With m (truncate), the break point is none, 128 or 512 tokens (22% / 40% / 38% of resamples of the "
                        "question groups): keep chunks ≤ 102 tokens, the safer answer (78% of the resamples reach 128 tokens).")
    said = " ".join([headline, *items, break_sentence(split)])
    assert "act on this one" not in said and "409" not in said  # 512's chunk is said nowhere
    assert items[0] == ("Break point **128 tokens (none-512)** by the relative rule, split between none, 128 or 512 tokens (22% / 40% / "
                        "38% of resamples of the question groups); 128 tokens is the longest that 78% of them reach (in brackets its "
                        "5-95% interval over resampled question groups).")
    chunked = _row(strategy="chunks-max@128", break_point=128, break_shares="128:0.4;512:0.6")._replace(break_shares="128:0.45;512:0.55")
    assert answer(chunked, BreakRule(), shares)[0] == (
        "With m (chunks-max@128), reading each document as 128-token chunks, the break point is 128 or 512 tokens (45% / 55% of "
        "resamples of the question groups): count on documents up to 128 tokens, the safer answer (100% of the resamples reach "
        "128 tokens).")
    nothing = _row(break_point=None, break_shares="none:0.45;128:0.40;256:0.15")
    assert answer(nothing, BreakRule(), shares)[0] == (
        "With m (truncate), this run recommends no chunk size: the break point is none or 128 tokens (45% / 40% of resamples of "
        "the question groups), and no length is reached by 60% of them.")
    maybe_none = _row(break_point=128, recommended_chunk_tokens=102, break_shares="none:0.3;128:0.7")  # 70%: a clear majority
    assert answer(maybe_none, BreakRule(), shares)[0].startswith("With m (truncate), keep chunks ≤ 102 tokens: up to 128-token")
    agreed = _row(break_point=128, recommended_chunk_tokens=102, break_shares="128:0.9;256:0.1")  # 10%: one answer
    assert answer(agreed, BreakRule(), shares)[0].startswith("With m (truncate), keep chunks ≤ 102 tokens: up to 128-token")
    older = _row(break_point=128, recommended_chunk_tokens=102)  # a breaks.csv from before the shares: as before
    assert answer(older, BreakRule(), shares)[0].startswith("With m (truncate), keep chunks ≤ 102 tokens: up to 128-token")


def test_the_answer_says_why_there_is_no_break_point():
    ((headline, items),), table, _ = _answers({128: 0.0, 512: 0.0, 2048: 0.0}, {128: 1.0, 512: 1.0, 2048: 1.0})
    assert headline == "With m (truncate), this run recommends no chunk size: it has no break point."
    assert items[0].startswith("No break point: at chance from the shortest length: this scorer does not find these needles")
    assert table.iloc[0]["break point (relative rule)"] == "none (at chance)" and table.iloc[0]["recommended chunk"] == "–"


def test_the_recall_figure_marks_the_break_point_and_gives_each_k_its_colour(tmp_path, monkeypatch):
    import pandas as pd

    from embedeval.report import figures

    metrics = pd.DataFrame([{"embedder": "m", "query_form": "question", "variant": "onehop", "category": "all", "depth_bucket": "all",
                             "metric": f"recall@{k}", "length": length, "value": 0.5} for k in (1, 5, 10) for length in (128, 256, 512)])
    breaks = pd.DataFrame([{"embedder": "m", "variant": "onehop", "break_point": 256, "break_point_lo": 128, "break_point_hi": 512,
                            "break_censored": False}])
    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, laid_out=False: drawn.update(
        {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}))
    figures.recall_figure(metrics, tmp_path / "recall.png", breaks=breaks)
    assert len({drawn[f"recall@{k} m"].get_color() for k in (1, 5, 10)}) == 3  # before: one colour, @1 and @5 alike
    assert list(drawn["break point m"].get_xdata()) == [256, 256]


def test_the_recall_figure_legend_stays_off_the_panels_with_many_series(tmp_path, monkeypatch):
    """Ten strategies x two embedders (60 recall lines, 20 break points): the legend used to sit in the
    last panel and cover its lines; it now lies below the panels, inside a figure grown to hold it."""
    import pandas as pd

    from embedeval.report import figures

    strategies = ["truncate", "windows-mean", *(f"chunks-max@{c}" for c in (64, 128, 256)),
                  *(f"late-chunking@{c}" for c in (64, 128, 256)), "extend-gp@4098", "extend-pi@4098"]
    series = [f"{embedder} · {strategy}" for embedder in ("st:all-MiniLM-L6-v2", "st:all-MiniLM-L6-v2?backend=onnx-int8")
              for strategy in strategies]
    metrics = pd.DataFrame([{"embedder": name, "query_form": "question", "variant": variant, "category": "all", "depth_bucket": "all",
                             "metric": f"recall@{k}", "length": length, "value": 0.9 - 0.1 * i / len(series) - 0.05 * j}
                            for i, name in enumerate(series) for variant in ("inverted", "onehop") for k in (1, 5, 10)
                            for j, length in enumerate((128, 256, 512, 1024))])
    breaks = pd.DataFrame([{"embedder": name, "variant": variant, "break_point": 256, "break_point_lo": 128, "break_point_hi": 512,
                            "break_censored": False} for name in series for variant in ("inverted", "onehop")])
    seen = {}

    def look(fig, path, laid_out=False):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
        seen.update(legends=[legend.get_window_extent(renderer) for legend in legends],
                    entries=[len(legend.get_texts()) for legend in legends],
                    panels=[ax.get_window_extent(renderer) for ax in fig.axes], figure=fig.bbox,
                    styles={(line.get_linestyle(), line.get_marker()) for ax in fig.axes[:1] for line in ax.get_lines()
                            if (line.get_gid() or "").startswith("recall@5 ")})

    monkeypatch.setattr(figures, "save_figure", look)
    figures.recall_figure(metrics, tmp_path / "recall.png", breaks=breaks)
    assert len(seen["panels"]) == 2 and seen["entries"] == [3 * len(series) + len(series)]  # each label once
    (legend,) = seen["legends"]
    assert not any(legend.overlaps(panel) for panel in seen["panels"])  # before: inside the onehop panel
    assert seen["figure"].x0 <= legend.x0 and legend.x1 <= seen["figure"].x1 and seen["figure"].y0 <= legend.y0
    assert len(seen["styles"]) == len(series)  # every series its own line style and marker pair


#: A report killed mid-write (as by kill -9: no cleanup runs) once its figures are drawn, before report.html.
KILLED_REPORT = """
import os, sys
import embedeval.report.write as write
from embedeval.report.compare import compare_runs
write.render_html = lambda *args: os._exit(9)
compare_runs([sys.argv[1]], sys.argv[2])
"""


@pytest.mark.parametrize("how", ["crash", "kill"])
def test_a_report_rerun_into_the_folder_a_killed_or_crashed_report_left_works(run_dir, tmp_path, monkeypatch, how):
    """Audit 2: a report that dies after drawing figures into a new folder leaves a folder the rerun
    writes into (it was embedeval's from the start), while a folder of the user's stays refused."""
    out = tmp_path / "new"
    if how == "kill":
        done = subprocess.run([sys.executable, "-c", KILLED_REPORT, str(run_dir), str(out)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 9, done.stderr[-2000:]
    else:
        import embedeval.report.write as write

        def crash(*args):
            raise RuntimeError("crashed mid-report")
        monkeypatch.setattr(write, "render_html", crash)
        result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)])
        assert isinstance(result.exception, RuntimeError)
        monkeypatch.undo()
    assert any((out / "figures").glob("*.png")) and not (out / "report.html").exists()  # died half-way
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "report.md").read_text() == (run_dir / "report.md").read_text() and (out / "report.html").is_file()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # the claim went with the finished report
    mine = tmp_path / "mine"
    shutil.copytree(out / "figures", mine / "figures")  # the same files, not made by a report into this folder: refused
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(mine)])
    assert result.exit_code == 1 and "is not a run folder embedeval wrote" in result.output


def test_break_points_an_earlier_estimator_wrote_are_read_again_and_the_file_is_left(run_dir, tmp_path):
    """A run folder whose config.json records no break_estimator (written before the estimator was
    chosen by simulation) has its break points read again from its rank table, so a report of it
    says what this version says; one that records this estimator is read as written."""
    import json

    import pandas as pd

    from embedeval.breaks import ESTIMATOR, break_points
    from embedeval.run import NolimaRun, read_breaks

    config = json.loads((run_dir / "config.json").read_text())
    assert config["break_estimator"] == ESTIMATOR and config["model_windows"] == {"st:all-MiniLM-L6-v2": 254}
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    written = read_breaks(old / "breaks.csv")
    edited = written.assign(break_point=512, recommended_chunk_tokens=409, break_shares="512:1.000", break_point_share=1.0,
                            relative_status="ok")
    edited.to_csv(old / "breaks.csv", index=False)  # what an earlier estimator might have said
    assert (NolimaRun.open(old).breaks()["break_point"] == 512).all()  # this estimator recorded: the file is the answer
    del config["break_estimator"], config["model_windows"]
    (old / "config.json").write_text(json.dumps(config))
    again = NolimaRun.open(old).breaks()
    run = NolimaRun.open(old)
    expected = break_points(run.metrics(), run.retrieval(), run.rule(), config["n_bootstrap"], config["grid"]["seed"],
                            {(r.embedder, r.strategy): 254 for r in written.itertuples() if r.strategy == "truncate"},
                            {"st:all-MiniLM-L6-v2": 254})
    pd.testing.assert_frame_equal(again.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False)
    assert not (again["break_point"] == 512).any() and (again["relative_status"] == "too few groups").all()  # 3 groups
    assert (read_breaks(old / "breaks.csv")["break_point"] == 512).all()  # the file is left as it was
