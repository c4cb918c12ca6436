"""Write what the docs show of the default NoLiMa run (README's first command, ``embedeval nolima
--out runs/nolima``) from a committed snapshot of its outputs and of the benchmarks that measured
it: README's recall figure, and every block of README.md and docs/*.md that quotes the run's
numbers (:data:`PAGES`), between the markers ``<!-- example:NAME -->`` and ``<!-- /example:NAME -->``
(:mod:`doc_blocks`). Nothing runs a model: the blocks are rendered from the snapshot by the code
that writes the run's report and its last lines, so a change to that code or to the snapshot shows
up here, and ``tests/test_docs.py`` fails until this script has been run again.

    python docs/make_default_run_docs.py                      # redraw the figure, rewrite the blocks
    python docs/make_default_run_docs.py --check              # exit 1 where a page's blocks are not the snapshot's
    python docs/make_default_run_docs.py --snapshot runs/nolima --earlier runs/nolima24   # a new snapshot first

The snapshot, ``docs/assets/default-run/`` (``--snapshot RUN`` takes it from a finished default run;
``--earlier RUN`` from the same run on the earlier 24 question groups):

  config.json, breaks.csv, decision.csv   the run's own files, as it wrote them
  metrics.csv     the run's metrics.csv, the rows the figure and the answer read (:data:`SNAPSHOT_METRICS`)
  chance.csv      recall@k's chance level per series and length (``recall_chance_table`` of retrieval.parquet)
  haystacks.csv   the haystacks per length and variant (of haystacks.parquet)
  earlier-24/breaks.csv   the earlier 24 groups' breaks.csv

and the benchmarks' outputs, ``docs/assets/benchmarks/``: ``bench_default_sweep.json`` (the default
sweep's wall time, cold: ``benchmarks/bench_default_sweep.py --write``) and
``bench_break_estimator.txt`` (``benchmarks/bench_break_estimator.py --out``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # doc_blocks, beside this script, however it is loaded
from embedeval.breaks import parse_shares  # noqa: E402
from embedeval.defaults import DEFAULT_EMBEDDER, DEFAULT_LENGTHS, DEFAULT_NEEDLES  # noqa: E402
from embedeval.labels import ALL, QUESTION  # noqa: E402
from embedeval.metrics.break_estimators import monotone_fit  # noqa: E402
from embedeval.report.break_words import support_words  # noqa: E402
from embedeval.report.markdown import markdown_block  # noqa: E402
from embedeval.report.sections import answer_callouts, run_recall_figure  # noqa: E402
from embedeval.report.tables import recall_chance_table  # noqa: E402
from embedeval.report.which import closing_lines  # noqa: E402
from embedeval.run import BREAKS, CONFIG, DECISION, METRICS, NolimaRun, break_rule_of, read_breaks, read_decision, read_run_table, upgraded  # noqa: E402  # noqa: E402

from doc_blocks import read_blocks, write_blocks  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "docs" / "assets" / "default-run"
EARLIER = SNAPSHOT / "earlier-24"
BENCHMARKS = REPO / "docs" / "assets" / "benchmarks"
SWEEP_TIME = BENCHMARKS / "bench_default_sweep.json"
ESTIMATOR_TABLE = BENCHMARKS / "bench_break_estimator.txt"
FIGURE = REPO / "docs" / "assets" / "recall_vs_length.png"
CHANCE, HAYSTACK_COUNTS = "chance.csv", "haystacks.csv"
#: The rows of metrics.csv the snapshot keeps: what the recall figure draws and the answer box reads.
SNAPSHOT_METRICS = ("recall@1", "recall@5", "recall@10", "needle_visible_share")
#: The blocks each page holds, in the order they stand there.
PAGES = {
    "README.md": ("default-sweep", "box", "which-to-use", "default-run"),
    "docs/getting-started.md": ("default-sweep",),
    "docs/nolima.md": ("default-sweep", "default-run"),
    "docs/metrics.md": ("worked-example", "estimator-table"),
}
#: The longest length whose recall the default-run block spells out (the figure has the rest).
SPELLED_UP_TO = 512
#: The estimator whose rows the docs quote: what embedeval reports.
LIBRARY = "library"


@dataclass(frozen=True)
class Snapshot:
    """The committed snapshot of the default run (:data:`SNAPSHOT`), each table read as a run's is."""

    config: dict
    breaks: pd.DataFrame
    decision: pd.DataFrame
    metrics: pd.DataFrame
    chance: pd.DataFrame
    haystacks: pd.DataFrame
    earlier: pd.DataFrame

    @classmethod
    def read(cls, folder: Path = SNAPSHOT) -> Snapshot:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        lengths = config["grid"]["lengths"]
        rule = break_rule_of(config)
        return cls(config, read_breaks(folder / BREAKS, lengths, rule), read_decision(folder / DECISION, lengths),
                   upgraded(read_run_table(folder / METRICS)), pd.read_csv(folder / CHANCE), pd.read_csv(folder / HAYSTACK_COUNTS),
                   read_breaks(folder / EARLIER.name / BREAKS, lengths, rule))

    def rule(self):
        """The break rule the run was made with (its config.json)."""
        return break_rule_of(self.config)

    def series(self, variant: str = "onehop", breaks: pd.DataFrame | None = None):
        """The break-point row of the ``variant`` needles asked their question (of the run's one
        reading), in ``breaks`` (default: the run's)."""
        rows = self.breaks if breaks is None else breaks
        return next(rows[(rows["variant"] == variant) & (rows["query_form"] == QUESTION)].itertuples())


def take_snapshot(run_dir: Path, earlier_dir: Path | None) -> None:
    """Write :data:`SNAPSHOT` from a finished run of README's first command (and ``earlier-24/``
    from the run on the earlier question groups); a run of other settings is refused."""
    run = NolimaRun.open(run_dir, needs=(BREAKS, DECISION))
    config, grid = run.config, run.config["grid"]
    default = (config["embedders"] == [DEFAULT_EMBEDDER] and tuple(grid["lengths"]) == DEFAULT_LENGTHS
               and Path(config["needles"]).name == DEFAULT_NEEDLES.name and config.get("strategies") == ["truncate"])
    if not default:
        raise SystemExit(f"{run_dir} is not a run of README's first command (embedeval nolima --out runs/nolima)")
    SNAPSHOT.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG, BREAKS, DECISION):
        shutil.copyfile(run.file(name), SNAPSHOT / name)
    metrics = run.metrics()
    kept = metrics[metrics["metric"].isin(SNAPSHOT_METRICS) & (metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL)]
    kept.to_csv(SNAPSHOT / METRICS, index=False)
    recall_chance_table(run.retrieval()).to_csv(SNAPSHOT / CHANCE, index=False)
    haystacks = run.haystacks()
    haystacks.groupby(["length", "variant"]).size().rename("haystacks").reset_index().to_csv(SNAPSHOT / HAYSTACK_COUNTS, index=False)
    if earlier_dir is not None:
        EARLIER.mkdir(exist_ok=True)
        shutil.copyfile(NolimaRun.open(earlier_dir, needs=(BREAKS,)).file(BREAKS), EARLIER / BREAKS)


def duration(seconds: float) -> str:
    """Wall seconds as a person says them: "5 min 29 s", "48 s"."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def words_list(items: list[str]) -> str:
    """"a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@dataclass(frozen=True)
class EstimatorTable:
    """The committed output of ``benchmarks/bench_break_estimator.py --out`` (:data:`ESTIMATOR_TABLE`):
    its command line, when and where it ran, what it printed, and the table's rows."""

    command: str
    stamp: str
    printed: list[str]

    @classmethod
    def read(cls, path: Path = ESTIMATOR_TABLE) -> EstimatorTable:
        lines = path.read_text(encoding="utf-8").splitlines()
        if not (lines[0].startswith("$ ") and lines[1].startswith("# ")):
            raise SystemExit(f"{path} does not begin with the benchmark's '$ command' and '# when' lines")
        return cls(lines[0][2:], lines[1][2:], lines[2:])

    def table(self) -> list[str]:
        return [line for line in self.printed if line.startswith("|")]

    def seconds(self) -> int:
        return int(re.search(r"\((\d+) s\)$", next(line for line in self.printed if "simulated runs" in line))[1])

    def within_one_step(self, estimator: str, groups: int) -> str:
        """The ``±1 step`` share of ``estimator`` at ``groups`` question groups, as printed ("90%")."""
        header = [cell.strip() for cell in self.table()[0].strip("|").split("|")]
        row = next([cell.strip() for cell in line.strip("|").split("|")] for line in self.table() if line.startswith(f"| {estimator} |"))
        column = header.index(f"{groups} groups: exact / ±1 step / none / covered")
        return row[column].split(" / ")[1]


def default_sweep(snapshot: Snapshot, sweep: dict, estimator: EstimatorTable) -> str:
    """What the first command builds and embeds, why 48 question groups, and what it took (the
    benchmark's seconds, cold): one paragraph, the same on every page."""
    grid, counts = snapshot.config["grid"], snapshot.haystacks
    variants = grid["variants"]
    per_variant = counts.groupby("variant")["haystacks"].sum()
    row = snapshot.series()
    groups, window = int(row.n_groups), int(row.window)
    needles = int(per_variant[variants].sum())
    identical = groups * len(grid["lengths"]) * grid["depths"] * len(variants) - needles
    (run, earlier) = sweep["runs"]
    if run["groups"] != groups:
        raise SystemExit(f"{SWEEP_TIME} timed {run['groups']} question groups; the snapshot's run has {groups}")
    return (f"It builds {int(counts['haystacks'].sum()):,} haystacks: {groups} questions, each with a one-hop and an inverted "
            f"needle, at {len(grid['lengths'])} lengths ({words_list([str(length) for length in grid['lengths']])} tokens) and "
            f"{grid['depths']} depths, less the {identical:,} short ones where two depths meet at one sentence boundary "
            f"({needles:,} needle haystacks), plus a needle-free control per condition ({int(per_variant['control']):,}) and "
            f"{grid['negatives']} needle-free candidates per length ({int(per_variant['negative']):,}). "
            f"{snapshot.config['embedders'][0].split(':', 1)[1]} embeds {run['texts']:,} distinct texts of them, each once: "
            f"{run['windows']:,} haystack windows (haystacks whose first {window} tokens are the same share a vector), "
            f"{groups} questions and {run['texts'] - run['windows'] - groups} needles. {groups} questions, not the earlier "
            f"{earlier['groups']}, because a simulation of the break point (`benchmarks/bench_break_estimator.py`) finds the true "
            f"break length within one grid step in {estimator.within_one_step(LIBRARY, groups)} of runs with {groups} question "
            f"groups and {estimator.within_one_step(LIBRARY, earlier['groups'])} with {earlier['groups']}. They cost "
            f"{run['seconds'] / earlier['seconds']:.1f}x the time: the default sweep took {duration(run['seconds'])} cold "
            f"({sweep['cache']}) on {sweep['machine']}, the earlier {earlier['groups']}-question set ({earlier['texts']:,} texts) "
            f"{duration(earlier['seconds'])}, back to back ({sweep['date']}, {sweep['measured_by']}).")


def box(snapshot: Snapshot) -> str:
    """The answer box of the run's report, as report.md writes it."""
    callouts = answer_callouts(snapshot.breaks, snapshot.metrics, snapshot.rule(), snapshot.decision)
    return "\n\n".join(markdown_block(callout) for callout in callouts)


def which_to_use(snapshot: Snapshot) -> str:
    """The command line's answer: the first summary line it prints last, the report's words."""
    said = next(line for line in closing_lines(snapshot.breaks, snapshot.decision, snapshot.rule()) if line.startswith("which to use: "))
    return f'The command line ends with the summary that opens "Which to use": "{said}"'


def _resamples(row, n_resamples: int) -> tuple[str, str]:
    """The resamples that give ``row``'s headline, "775 of 1,000", and the other lengths' counts,
    most first ("128 tokens in 210, 64 in 15")."""
    shares = parse_shares(row.break_shares)
    point = int(row.break_point)
    others = sorted(((length, share) for length, share in shares.items() if length != point), key=lambda item: -item[1])
    said = [f"{'none' if length is None else length}{' tokens' if i == 0 and length else ''} in {round(share * n_resamples):,}"
            for i, (length, share) in enumerate(others)]
    return f"{round(shares[point] * n_resamples):,} of {n_resamples:,}", ", ".join(said)


def _gives(row) -> str:
    """A row's headline break point with how the resamples back it (the command line's words)."""
    return f"{int(row.break_point)} tokens, {support_words(row)}"


@dataclass(frozen=True)
class Curve:
    """The one-hop series of the run's reading as the relative rule reads it: ``rows``, its lines of
    decision.csv by length (chance-corrected recall, share read); ``fitted``, the non-increasing
    fit of that recall; the ``bar`` (the rule's fraction of the base); the headline break point
    and the length after it."""

    rows: pd.DataFrame
    fitted: pd.Series
    bar: float
    point: int
    after: int

    @classmethod
    def of(cls, snapshot: Snapshot) -> Curve:
        """The curve of the snapshot's one-hop series; one whose mean curve does not break where its
        resamples do is refused (the blocks tell the story of one that does)."""
        row = snapshot.series()
        decision = snapshot.decision
        rows = decision[(decision["embedder"] == row.embedder) & (decision["strategy"] == row.strategy)].set_index("length").sort_index()
        fitted = pd.Series(monotone_fit(rows["recall"].to_numpy()), index=rows.index)
        point, bar = int(row.break_point), snapshot.rule().fraction * row.base_value
        after = min(length for length in rows.index if length > point)
        if not fitted[point] >= bar > fitted[after]:
            raise SystemExit(f"the mean curve no longer breaks at the headline {point} tokens: the blocks tell another story")
        return cls(rows, fitted, bar, point, after)

    def spelled(self) -> list[int]:
        """The lengths the blocks spell out (up to :data:`SPELLED_UP_TO`)."""
        return [length for length in self.rows.index if length <= SPELLED_UP_TO]


def default_run(snapshot: Snapshot) -> str:
    """The default run's answer, number by number: recall@k per length, raw and corrected for
    chance, the base and its interval, the bar, the break point and its resamples; the inverted
    needles' break point, and the earlier 24 groups'."""
    rule, row, curve = snapshot.rule(), snapshot.series(), Curve.of(snapshot)
    k, point, after, corrected = rule.k, curve.point, curve.after, curve.rows["recall"]
    metrics = snapshot.metrics
    raw = metrics[(metrics["metric"] == f"recall@{k}") & (metrics["variant"] == row.variant) & (metrics["query_form"] == QUESTION)]
    raw = raw.set_index("length")["value"]
    whole = [length for length in curve.rows.index if curve.rows.loc[length, "share_read"] == 1]
    chance = snapshot.chance[(snapshot.chance["variant"] == row.variant) & (snapshot.chance["k"] == k)]["chance"]
    frame = snapshot.config["frame_tokens"][row.embedder]
    given, others = _resamples(row, snapshot.config["n_bootstrap"])
    none = "" if None in parse_shares(row.break_shares) else '; no resample gives "none"'
    inverted, earlier = snapshot.series("inverted"), snapshot.series(breaks=snapshot.earlier)
    earlier_inverted = snapshot.series("inverted", snapshot.earlier)
    percents = [f"{raw[length]:.0%} of the questions at {length} tokens" if i == 0 else f"{raw[length]:.0%} at {length}"
                for i, length in enumerate(curve.spelled())]
    return (f"On the default run {row.embedder.split(':', 1)[1]}, reading its own {int(row.window) + frame}-token window, finds "
            f"the one-hop needle's haystack in its top {k} for {words_list(percents)}; corrected for chance ({k} of "
            f"{round(k / chance.iloc[0])} candidates) {words_list([f'{corrected[length]:.3f}' for length in curve.spelled()])}. It "
            f"reads the haystacks of {whole[0]} to {whole[-1]} tokens whole ({int(row.window)} content tokens fit its window), so "
            f"the base averages {words_list(row.base_lengths.split(','))} tokens: {row.base_value:.3f} [{row.base_ci_lo:.3f}, "
            f"{row.base_ci_hi:.3f}]. {point} tokens keeps {curve.fitted[point]:.3f}, {after} falls to {curve.fitted[after]:.3f}, "
            f"under {rule.fraction:g} x {row.base_value:.3f} = {curve.bar:.3f}: the break point is **{point} tokens**, a recommended "
            f"chunk of {int(row.recommended_chunk_tokens)} tokens, in {given} resamples of the question groups ({others}: "
            f"`break_shares` in `breaks.csv`){none}. The inverted needles give {_gives(inverted)}. With the earlier "
            f"{int(earlier.n_groups)} questions the same estimator gives the one-hop needles {_gives(earlier)}; and the inverted "
            f"ones {_gives(earlier_inverted)}.")


def worked_example(snapshot: Snapshot) -> str:
    """The relative rule read by hand on the default run's one-hop means: base, bar, the
    non-increasing fit (which lengths it pools) and the break point, an indented block."""
    rule, row, curve = snapshot.rule(), snapshot.series(), Curve.of(snapshot)
    means, fitted, shown = curve.rows["recall"], curve.fitted, curve.spelled()
    base_lengths = [int(length) for length in row.base_lengths.split(",")]
    pooled = []
    for _, run in fitted[shown].groupby(fitted[shown].round(12), sort=False):
        if len(run) > 1:
            parts = " + ".join(f"{means[length]:.3f}" for length in run.index)
            pooled.append(f"{words_list([str(length) for length in run.index])} pooled: ({parts}) / {len(run)}")
    return "\n".join([
        "    r_cc by length   " + "   ".join(f"{length}: {means[length]:.3f}" for length in shown) + " ...",
        f"    base             ({' + '.join(f'{means[length]:.3f}' for length in base_lengths)}) / {len(base_lengths)} = "
        f"{row.base_value:.3f};  bar {rule.fraction:g} x {row.base_value:.3f} = {curve.bar:.3f}",
        "    monotone fit     " + ", ".join(f"{fitted[length]:.3f}" for length in shown) + " ..."
        + (f"   ({'; '.join(pooled)})" if pooled else ""),
        f"    L*               {curve.point} ({curve.after}'s fitted {fitted[curve.after]:.3f} < {curve.bar:.3f})"])


def estimator_table(estimator: EstimatorTable) -> str:
    """The simulation's command line, when it ran, and its table, as the benchmark printed them."""
    return (f"`{estimator.command}` ({estimator.stamp}, {estimator.seconds()} s; `{LIBRARY}` is what embedeval reports, read "
            "through `breaks.break_resamples` and `breaks.headline_break`):\n\n" + "\n".join(estimator.table()))


def render() -> dict[str, str]:
    """Every block of :data:`PAGES`, name -> text, from the committed snapshot and benchmark outputs."""
    snapshot = Snapshot.read()
    sweep = json.loads(SWEEP_TIME.read_text(encoding="utf-8"))
    estimator = EstimatorTable.read()
    return {"default-sweep": default_sweep(snapshot, sweep, estimator), "box": box(snapshot), "which-to-use": which_to_use(snapshot),
            "default-run": default_run(snapshot), "worked-example": worked_example(snapshot),
            "estimator-table": estimator_table(estimator)}


def signatures() -> list[str]:
    """What only a block may quote (a page that says it elsewhere copied it by hand): the default
    sweep's time and the earlier set's, the texts it embeds, and the base with its interval."""
    row = Snapshot.read().series()
    sweep = json.loads(SWEEP_TIME.read_text(encoding="utf-8"))
    return [*(duration(run["seconds"]) for run in sweep["runs"]), f"{sweep['runs'][0]['texts']:,}",
            f"{row.base_value:.3f} [{row.base_ci_lo:.3f}, {row.base_ci_hi:.3f}]"]


def stale_pages(blocks: dict[str, str]) -> list[str]:
    """The pages of :data:`PAGES` whose blocks are not ``blocks`` (or stand in another order)."""
    stale = []
    for name, wanted in PAGES.items():
        found = read_blocks((REPO / name).read_text(encoding="utf-8"), name)
        if list(found) != list(wanted) or any(found[block] != blocks[block] for block in wanted):
            stale.append(name)
    return stale


def draw_figure(path: Path = FIGURE) -> None:
    """README's recall figure, drawn from the snapshot by the report's own code."""
    snapshot = Snapshot.read()
    run_recall_figure(snapshot.metrics, snapshot.breaks, snapshot.chance, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where a page's blocks are not what the snapshot gives")
    parser.add_argument("--snapshot", type=Path, help="take the snapshot from this finished default run first")
    parser.add_argument("--earlier", type=Path, help="with --snapshot: the same run on the earlier 24 question groups")
    args = parser.parse_args()
    if args.snapshot:
        take_snapshot(args.snapshot, args.earlier)
    blocks = render()
    if args.check:
        stale = stale_pages(blocks)
        if stale:
            print(f"out of date: {', '.join(stale)}: run python docs/make_default_run_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for name, wanted in PAGES.items():
        page = REPO / name
        page.write_text(write_blocks(page.read_text(encoding="utf-8"), {b: blocks[b] for b in wanted}, name), encoding="utf-8")
    draw_figure()
    print(f"wrote {sum(map(len, PAGES.values()))} blocks into {len(PAGES)} pages, and {FIGURE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
