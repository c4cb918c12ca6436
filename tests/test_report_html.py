"""report.html (issue 25, item 3): one self-contained file with the sections of report.md, checked in
a real headless browser (Chromium, Chrome or Edge: tests/browser.py finds one, or installs Chromium
for README's test command and .ci/run): every image loads, nothing
comes from outside the file, and the page fits a 1280 px and a phone-sized viewport."""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import threading

import pytest
from typer.testing import CliRunner

from browser import NoBrowser, find_browser
from conftest import own_cache
from embedeval.cli import app

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
          firstTable: doc.querySelector("table thead").textContent, text: doc.body.innerText};
}
window.addEventListener("load", () => {
  document.getElementById("result").textContent = JSON.stringify({wide: look(wide), phone: look(phone)});
});
</script></body></html>"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, books_dir):
    out = tmp_path_factory.mktemp("html") / "run"
    with own_cache(tmp_path_factory):
        result = CliRunner().invoke(app, ["nolima", "--groups", "loc-dresden,loc-peru,diet-vegan", "--corpus", f"dir:{books_dir}",
                                      "--lengths", "128,512", "--depths", "3", "--negatives", "4", "--n-bootstrap", "50",
                                      "--strategy", "truncate,chunks-max", "--chunk-tokens", "128", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def chromium(*args: str, cwd) -> str:
    try:
        browser = find_browser()
    except NoBrowser as missing:
        pytest.fail(str(missing), pytrace=False)  # one line: what to install (never a skip)
    done = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={cwd / 'profile'}", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_html_report_is_self_contained_and_holds_the_markdown_sections(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"<script|@import|url\(", page, re.I)
    assert re.findall(r"<link[^>]*>", page) == ['<link rel="icon" href="data:,">']  # not even a favicon request
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sources and all(s.startswith(("data:image/png;base64,", "data:,", "#")) for s in sources)
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", markdown, re.M)
    assert titles[0].startswith("Break point") and len(titles) > 5
    assert [html.unescape(t) for t in re.findall(r"<h2 id=\"[^\"]+\">(.+?)</h2>", page)] == titles
    assert page.count("<img ") == markdown.count("![")


def test_the_html_report_renders_in_a_headless_browser(run_dir, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(run_dir / "report.html", site / "report.html")  # alone: whatever it shows comes from the file itself
    (site / "check.html").write_text(CHECK_PAGE, encoding="utf-8")
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):  # record what the browser asked for instead of printing it
            requested.append(self.path)

    handler = functools.partial(Handler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        dom = chromium("--virtual-time-budget=15000", "--dump-dom", f"{url}/check.html", cwd=tmp_path)
        chromium("--window-size=1280,2000", f"--screenshot={tmp_path / 'report-1280.png'}", f"{url}/report.html", cwd=tmp_path)
        chromium("--window-size=390,844", f"--screenshot={tmp_path / 'report-phone.png'}", f"{url}/report.html", cwd=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    assert set(requested) == {"/check.html", "/report.html"}  # the report asked for nothing else
    found = json.loads(html.unescape(re.search(r'<pre id="result">(.*?)</pre>', dom, re.S).group(1)))
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    for view in ("wide", "phone"):
        seen = found[view]
        assert seen["images"] == markdown.count("![") > 5 and seen["loaded"] == seen["images"], seen
        assert seen["overflow"] <= 1, f"the page is wider than the {view} viewport by {seen['overflow']} px"
        assert seen["sections"] == re.findall(r"^## (.+)$", markdown, re.M)
        assert "relative_break_point" in seen["firstTable"] and "absolute_break_point" in seen["firstTable"]
        assert "recommended chunk" in seen["text"]
    assert (tmp_path / "report-1280.png").stat().st_size > 10_000 and (tmp_path / "report-phone.png").stat().st_size > 10_000


def test_embedeval_report_writes_both_formats(run_dir, tmp_path):
    (run_dir / "report.html").unlink()
    result = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / "report.html").is_file() and (tmp_path / "again" / "report.md").is_file()
    assert (tmp_path / "again" / "report.md").read_text() == (run_dir / "report.md").read_text()
