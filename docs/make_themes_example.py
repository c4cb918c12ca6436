"""Rerun the worked example of docs/themes.md (the Paul Graham essays: themes, membership,
needle-haystack similarity, the drafted needles, their check and the sweep) and write its printed
outputs into docs/themes.md, so the outputs the page shows are those of a run, not hand-copied.

    python docs/make_themes_example.py            # a fresh cache (a temporary folder), then docs/themes.md rewritten
    python docs/make_themes_example.py --cache-dir ~/.cache/embedeval --print   # print the blocks, write nothing

Every command runs as a user types it (``embedeval ...`` in a subprocess, the scripted chat server of
``examples/scripted_chat.py`` on a free port), with ``EMBEDEVAL_CACHE`` pointing at ``--cache-dir``
(default: a new temporary folder, so the corpus is downloaded, cut and embedded afresh). Each
output goes between the markers ``<!-- example:NAME -->`` and ``<!-- /example:NAME -->`` of
docs/themes.md (:data:`BLOCKS`); ``example:stamp`` says when, where and with which cache it ran.
Progress bars are kept at their last state; UMAP's epoch bars are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402 - docs/doc_blocks.py, beside this script

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "themes.md"
PAIRS = "examples/pg-essays-pairs.csv"
DRAFTS = "examples/pg-essays-drafts.json"
#: The themes the example drafts for and names in its pair file: terms of their top terms.
THEMES = ("essay", "starting")
#: The blocks this script writes, in the order they appear in docs/themes.md.
BLOCKS = ("stamp", "outcomes", "themes", "clusters", "naming", "membership", "membership-summary", "needle-haystack", "draft",
          "draft-server", "rejected", "accepted", "check", "sweep", "recall")
#: A term a user may try first for the startups theme; the example shows what it answers.
TRIED = "startup"
#: The sweep's grid (small: a demonstration of the loop, not a measurement).
SWEEP = ["--lengths", "128,256,512,1024", "--depths", "2", "--negatives", "10"]
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def cleaned(stderr: str) -> str:
    """Progress output as a terminal leaves it: each line at its last carriage-return state, UMAP's
    epoch bars and cursor movements out, a step line's "..." replaced by its "... done in"."""
    lines = []
    for raw in stderr.split("\n"):
        line = _ANSI.sub("", raw.split("\r")[-1] if raw.strip("\r") else "").rstrip()
        if not line.strip() or "epochs" in line:
            continue
        if lines and line.startswith(lines[-1]) and lines[-1].endswith("..."):
            lines[-1] = line
        else:
            lines.append(line)
    return "\n".join(lines)


class Example:
    """The example's commands, run in ``work`` with the cache ``cache``; each one's output kept."""

    def __init__(self, work: Path, cache: Path):
        self.work, self.cache = work, cache
        self.env = {**os.environ, "EMBEDEVAL_CACHE": str(cache), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
        self.blocks: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.embedeval = shutil.which("embedeval", path=str(Path(sys.executable).parent)) or "embedeval"

    def run(self, name: str, *args: str, stderr: bool = False, failing: bool = False) -> str:
        """``embedeval ARGS`` in the work folder; its stdout (with its cleaned stderr before it
        when ``stderr``). A failure stops the script with the command's output, unless ``failing``
        (a command shown for its error: its stdout and stderr as printed)."""
        start = time.perf_counter()
        done = subprocess.run([self.embedeval, *args], cwd=self.work, env=self.env, capture_output=True)
        self.seconds[name] = time.perf_counter() - start
        out, err = (stream.decode("utf-8", errors="replace") for stream in (done.stdout, done.stderr))  # "\r" kept
        if done.returncode != 0 and not failing:
            raise SystemExit(f"`embedeval {' '.join(args)}` failed ({done.returncode}):\n{out}\n{err[-3000:]}")
        if failing:
            return (out + err).strip()
        return "\n".join(part for part in ((cleaned(err) if stderr else ""), out.rstrip()) if part)

    def all(self) -> dict[str, str]:
        """Run the example's commands as docs/themes.md writes them (relative paths, in the work
        folder, where ``examples`` links to the repository's)."""
        (self.work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
        themes, needles, sweep = "runs/pg-themes", "runs/pg-needles.json", "runs/pg-nolima"
        self.blocks["themes"] = self.run("themes", "themes", "--corpus", "pg-essays", "--out", themes, stderr=True)
        self.blocks["clusters"] = clusters_table(self.work / themes)
        self.blocks["naming"] = self.run("naming", "needles", "draft", "--themes", themes, "--llm", "openai:gpt-4o-mini",
                                         "--themes-ids", TRIED, "--plan", "--out", "runs/tried.json", failing=True)
        self.blocks["membership"] = self.run("membership", "themes", "membership", themes, "--pairs", PAIRS, "--out",
                                             "membership.csv", "-q")
        self.blocks["membership-summary"] = membership_summary(self.work / "membership.csv")
        self.blocks["needle-haystack"] = self.run("needle-haystack", "similarity", "needle-haystack", "--corpus", "pg-essays",
                                                  "--pairs", PAIRS, "--out", "nh.csv", "-q")
        server = subprocess.Popen([sys.executable, "examples/scripted_chat.py", DRAFTS, "--port", "0"], cwd=self.work,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            first = server.stdout.readline()
            url = re.search(r" at (http://127\.0\.0\.1:\d+/v1);", first).group(1)
            spec = f"openai:scripted?base_url={url}"  # the drafting model and the judge: one scripted server
            self.blocks["draft"] = self.run("draft", "needles", "draft", "--themes", str(themes), "--llm", spec, "--judge", spec,
                                            "--themes-ids", ",".join(THEMES), "--per-theme", "2", "--out", needles, "-q")
        finally:
            server.terminate()
            log = server.communicate(timeout=30)[0]
        self.blocks["draft-server"] = log.strip()
        self.blocks["rejected"] = rejected_table(self.work / "runs/pg-needles.rejected.csv")
        self.blocks["accepted"] = accepted_table(self.work / needles)
        self.blocks["check"] = self.run("check", "needles", "check", needles)
        self.blocks["sweep"] = self.run("sweep", "nolima", "--needles", needles, "--corpus", "pg-essays", *SWEEP, "--out", sweep, "-q")
        self.blocks["recall"] = recall_table(self.work / sweep)
        return self.blocks


def clusters_table(themes: Path, n: int = 10) -> str:
    """The ``n`` largest themes with their top terms, and which theme each of :data:`THEMES` names."""
    from embedeval.experiments.themes.names import resolve_theme, theme_top_terms

    clusters = pd.read_csv(themes / "clusters.csv")
    rows = ["| cluster | chunks | top terms |", "|---|---|---|"]
    rows += [f"| {r.cluster} | {r.size} | {r.top_terms.replace(';', ', ')} |" for r in clusters.head(n).itertuples()]
    terms = theme_top_terms(themes)
    named = ", ".join(f"`{t}` names cluster {resolve_theme(t, terms, themes)}" for t in THEMES)
    return "\n".join(rows) + f"\n\nIn this run {named}."


def membership_summary(path: Path) -> str:
    """Per topic of the pair file: the needles predicted into their target, those that blend in,
    the ranges of neighbour similarity, outside and inside percentile and probability, and those
    whose best theme is not their target."""
    table = pd.read_csv(path)
    rows = ["| topic | target | needles | predicted into it | blend in | neighbour similarity | outside pct | inside pct | "
            "probability | best theme elsewhere |", "|---" * 10 + "|"]

    def span(column: str, digits: int) -> str:
        low, high = group[column].min(), group[column].max()
        return f"{low:.{digits}f}–{high:.{digits}f}" if round(low, digits) != round(high, digits) else f"{low:.{digits}f}"

    for topic, group in table.groupby("topic", sort=False):
        elsewhere = group[group["best_cluster"] != group["target_cluster"]]
        rows.append(f"| {topic} | {', '.join(map(str, sorted(group['target_cluster'].unique())))} | {len(group)} | "
                    f"{int((group['predicted_cluster'] == group['target_cluster']).sum())} | {int(group['blends_in'].sum())} | "
                    f"{span('neighbour_similarity', 2)} | {span('outside_percentile', 1)} | {span('inside_percentile', 0)} | "
                    f"{span('target_probability', 2)} | "
                    f"{', '.join(f'{r.id} ({r.best_cluster})' for r in elsewhere.itertuples()) or '-'} |")
    return "\n".join(rows)


def rejected_table(path: Path) -> str:
    table = pd.read_csv(path, keep_default_na=False)
    rows = ["| theme | request | character | question | reason |", "|---|---|---|---|---|"]
    rows += [f"| {r.theme} | {r.attempt} | {r.character or '-'} | {r.question or '-'} | {r.reason.replace('|', '/')} |"
             for r in table.itertuples()]
    return "\n".join(rows)


def accepted_table(path: Path) -> str:
    data = json.loads(path.read_text(encoding="utf-8"))
    embedder = data["provenance"]["nq_embedder"]
    rows = ["| group | request | question | one-hop needle | probability | outside pct | needle–question | the judge's reason |",
            "|---|---|---|---|---|---|---|---|"]
    for g in data["groups"]:
        onehop = g["checks"]["needles"]["onehop"]
        rows.append(f"| {g['id']} | {g['attempt']} | {g['question']} | {g['needles']['onehop']} | {onehop['target_probability']:.2f} | "
                    f"{onehop['outside_percentile']:.1f} | {onehop['nq_similarity'][embedder]:.3f} | {onehop['judge']['reason']} |")
    return "\n".join(rows)


def recall_table(sweep: Path) -> str:
    metrics = pd.read_csv(sweep / "metrics.csv")
    cell = metrics[(metrics["query_form"] == "question") & (metrics["category"] == "all") & (metrics["depth_bucket"] == "all")]
    recall = cell[cell["metric"] == "recall@5"].pivot_table(index="length", columns="variant", values="value")
    visible = cell[cell["metric"] == "needle_visible_share"].groupby("length")["value"].mean()
    variants = list(recall.columns)
    rows = [f"| length | {' | '.join(variants)} | needle visible |", "|---" * (len(variants) + 2) + "|"]
    rows += [f"| {length} | {' | '.join(f'{recall.loc[length, v]:.3f}' for v in variants)} | {visible.get(length, float('nan')):.0%} |"
             for length in recall.index]
    return "\n".join(rows)


def outcomes(work: Path) -> tuple[str, list[str]]:
    """What the example states must come back on any machine (docs/themes.md, "What comes back"),
    checked on this run: each statement with ``yes`` or ``NO``, and the statements that failed."""
    from embedeval.experiments.themes.names import resolve_theme, theme_top_terms

    themes = work / "runs/pg-themes"
    terms = theme_top_terms(themes)
    named = {}
    for term in THEMES:
        try:
            named[term] = resolve_theme(term, terms, themes)
        except Exception:  # noqa: BLE001 - an unresolved name is the outcome that failed
            named[term] = None
    membership = pd.read_csv(work / "membership.csv")
    writing, ir = membership[membership["topic"] == "writing"], membership[membership["topic"] == "ir"]
    drafted = json.loads((work / "runs/pg-needles.json").read_text(encoding="utf-8"))["groups"]
    essay = named[THEMES[0]]
    statements = [(f"`{t}` names one theme of the consensus", named[t] is not None) for t in THEMES]
    statements += [("each of the 5 writing needles is predicted into the `essay` theme by most of the clusterings",
                    len(writing) == 5 and bool((writing["target_stability"] > 0.5).all())),
                   ("at least 1 of the 5 writing needles blends into it", int(writing["blends_in"].sum()) >= 1),
                   ("none of the 5 retrieval needles blends in, and none is predicted into the `essay` theme by most clusterings",
                    len(ir) == 5 and not ir["blends_in"].any() and bool((ir["target_stability"] <= 0.5).all())),
                   ("the draft keeps at least 1 group for the `essay` theme",
                    essay is not None and any(g["category"] == f"theme-{essay}" for g in drafted))]
    lines = [f"- {text}: {'yes' if held else 'NO'}" for text, held in statements]
    return "\n".join(lines), [text for text, held in statements if not held]


def stamp(cache: Path, fresh: bool, seconds: dict[str, float]) -> str:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    times = ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
    return (f"Generated by `python docs/make_themes_example.py` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, "
            f"load average {load} at the end; {'a fresh cache' if fresh else 'the cache ' + str(cache)}). "
            f"Wall time per command: {times}.")


def fence(name: str, text: str) -> str:
    """How block ``name`` is written into the page: tables and the stamp as Markdown, the rest as text."""
    markdown = ("stamp", "outcomes", "clusters", "membership-summary", "rejected", "accepted", "recall")
    return text if name in markdown else f"```text\n{text}\n```"


def write_blocks(page: str, blocks: dict[str, str]) -> str:
    """``page`` with each block's text, fenced (:func:`fence`), between its markers
    (:func:`doc_blocks.write_blocks`); a marker missing from the page is an error."""
    try:
        return doc_blocks.write_blocks(page, {name: fence(name, text) for name, text in blocks.items()}, str(TARGET))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="the cache (default: a fresh temporary one; a new or "
                        "empty folder is a fresh cache too)")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder, removed)")
    parser.add_argument("--print", action="store_true", help="print the blocks instead of writing docs/themes.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="themes-example-") as tmp:
        work = args.work or Path(tmp) / "runs"
        if work.exists() and any(work.iterdir()):
            raise SystemExit(f"--work {work} must be a new or empty folder")
        work.mkdir(parents=True, exist_ok=True)
        cache = args.cache_dir or Path(tmp) / "cache"
        fresh = not cache.exists() or not any(cache.iterdir())  # nothing downloaded, cut or embedded yet
        example = Example(work, cache)
        blocks = example.all()
        blocks["stamp"] = stamp(cache, fresh, example.seconds)
        blocks["outcomes"], failed = outcomes(work)
    ordered = {name: blocks[name] for name in BLOCKS}
    if failed and not args.print:
        print(blocks["outcomes"])
        raise SystemExit(f"the example's stated outcomes did not come back ({'; '.join(failed)}): docs/themes.md left as it is")
    if args.print:
        for name, text in ordered.items():
            print(f"<!-- example:{name} -->\n{fence(name, text)}\n<!-- /example:{name} -->\n")
        return 0
    TARGET.write_text(write_blocks(TARGET.read_text(encoding="utf-8"), ordered), encoding="utf-8")
    print(f"wrote {len(ordered)} blocks into {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
