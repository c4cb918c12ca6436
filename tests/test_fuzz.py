"""The fuzz tier: generated option values and input files, each run through the real command line.

Every generated case must either run (exit 0) or end in exactly one ``error:`` line and exit 1:
no traceback, no other exit status, within its time and under a memory limit
(:data:`MEMORY_BYTES` of address space), and nothing left behind (a refused run leaves its
folder and its inputs as they were; ``--plan`` writes nothing). Each case runs in a fork of
:mod:`cli_worker`, so it is a process of its own, started in milliseconds.

The CI run draws a fixed, small set of cases (``derandomize``: the same cases for the same code,
no flaky CI). A longer local run draws more, and new ones each time, and keeps what fails in
``.hypothesis/`` to replay first next time::

    EMBEDEVAL_FUZZ_SCALE=25 python -m pytest -m fuzz

``EMBEDEVAL_FUZZ_SCALE`` multiplies every test's number of cases (1 in CI).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_worker import CLIWorker

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

#: Address space each case may take: a case that needs more is a size nobody bounded.
MEMORY_BYTES = 3 << 30
#: Seconds a case may take (a BM25 ``--plan`` of the small corpus takes about 1.5 s under load).
CASE_SECONDS = 90.0
SCALE = float(os.environ.get("EMBEDEVAL_FUZZ_SCALE", "1"))
LONG_RUN = SCALE > 1


def fuzz_settings(cases: int):
    """Hypothesis settings for a test of ``cases`` cases in CI (times :data:`SCALE` locally)."""
    return settings(max_examples=max(1, round(cases * SCALE)), deadline=None, derandomize=not LONG_RUN,
                    database=None if not LONG_RUN else settings.default.database,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- the data every case starts from (written by these tests; no third-party prose) ---------------

WORDS = ("the river ran past old stone walls where lanterns hung and merchants called their wares across "
         "a square while children chased gulls toward harbour boats under grey morning skies").split()


def write_corpus(path: Path, books: int = 10, sentences: int = 150) -> Path:
    """A JSONL corpus of ``books`` generated books (one ``{"id", "text"}`` per line)."""
    lines = []
    for book in range(books):
        words = [WORDS[(book * 7 + i * 3 + i // 5) % len(WORDS)] for i in range(sentences * 11)]
        text = " ".join(" ".join(words[i:i + 11]).capitalize() + "." for i in range(0, len(words), 11))
        lines.append(json.dumps({"id": f"book-{book}", "text": text}))
    path.write_text("\n".join(lines) + "\n")
    return path


#: What the commands under test import, imported once by the worker rather than in every case.
PRELOAD = ("embedeval.experiments.nolima", "embedeval.embedders.registry", "bm25s")


@pytest.fixture(scope="module")
def worker():
    runner = CLIWorker(PRELOAD)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A folder holding the small corpus, a two-group needle set and a cache folder."""
    folder = tmp_path_factory.mktemp("fuzz-inputs")
    write_corpus(folder / "corpus.jsonl")
    shipped = json.loads((Path(__file__).parent.parent / "queries" / "nolima-onehop.json").read_text())
    small = {**shipped, "groups": shipped["groups"][:2]}
    (folder / "needles.json").write_text(json.dumps(small, indent=1))
    (folder / "cache").mkdir()
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` with a digest of its bytes: what "left as it was" compares."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        seen[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def run_case(worker: CLIWorker, argv: list[str], cwd: Path, cache: Path) -> dict:
    """Run ``embedeval ARGV`` in ``cwd``; assert it ran or refused in one ``error:`` line, within
    :data:`CASE_SECONDS` and :data:`MEMORY_BYTES`, and that a refusal left ``cwd`` as it was."""
    before = snapshot(cwd)
    result = worker.run(argv, cwd, env={"EMBEDEVAL_CACHE": str(cache), "COLUMNS": "120"},
                        memory_bytes=MEMORY_BYTES, timeout=CASE_SECONDS)
    stderr = result["stderr"]
    context = f"\n$ embedeval {shlex.join(argv)}\nexit {result['rc']}\n--- stderr (end) ---\n{stderr[-4000:]}"
    assert not result["timed_out"], f"ran past {CASE_SECONDS:g} s{context}"
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, context
    assert result["rc"] in (0, 1), context
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == (1 if result["rc"] == 1 else 0), context
    if result["rc"] == 1:
        assert snapshot(cwd) == before, f"a refused run changed its folder{context}"
    return result


def case_folder(inputs: Path) -> Path:
    """A fresh folder with copies of the inputs, for one case (removed by the caller)."""
    folder = Path(tempfile.mkdtemp(prefix="embedeval-fuzz-"))
    for name in ("corpus.jsonl", "needles.json"):
        shutil.copy(inputs / name, folder / name)
    return folder


# --- what the generated option values are drawn from ------------------------------------------------

INTEGER_WORDS = ["0", "-0", "-1", "1e3", "", " ", "nan", "inf", "1_000", "0x10", "12.5", "99999999999999999999999"]
FLOAT_WORDS = ["nan", "inf", "-inf", "1e400", "-1e400", "1e-400", "", "0", "-0.0", "0.5", "1", "two"]


def integers_as_typed():
    """What a user may type where an integer is asked: small and huge integers, and words."""
    return st.one_of(st.integers(-3, 40).map(str), st.integers(-2**80, 2**80).map(str),
                     st.integers(1, 60).map(lambda e: str(10**e)), st.sampled_from(INTEGER_WORDS), printable_text())


def floats_as_typed():
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(FLOAT_WORDS),
                     st.floats(-2, 2).map(lambda x: f"{x:.3f}"), printable_text())


def printable_text(max_size: int = 16):
    """Text a shell can pass (no NUL), of any script."""
    return st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=max_size)


def comma_lists(items):
    return st.lists(items, min_size=1, max_size=4).map(",".join)


STRATEGY_NAMES = ["truncate", "windows-mean", "chunks-max", "late-chunking", "extend-gp", "extend-rp", "extend-pi",
                  "extend-pi-dynamic", "rope-ntk", "full-text", "truncate+logscale", "nonsense"]


def strategy_specs():
    """``--strategy`` values: names, names at ``@N`` of any size, and words."""
    named = st.tuples(st.sampled_from(STRATEGY_NAMES), st.one_of(st.just(""), integers_as_typed().map(lambda v: "@" + v)))
    return st.one_of(comma_lists(named.map("".join)), printable_text())


#: The sweep's options and what each is fuzzed with.
SWEEP_OPTIONS = {
    "--negatives": integers_as_typed(),
    "--n-bootstrap": integers_as_typed(),
    "--depths": integers_as_typed(),
    "--seed": integers_as_typed(),
    "--min-books": integers_as_typed(),
    "--break-k": integers_as_typed(),
    "--commit-every": integers_as_typed(),
    "--window-overlap": integers_as_typed(),
    "--late-overlap": integers_as_typed(),
    "--api-workers": integers_as_typed(),
    "--break-threshold": floats_as_typed(),
    "--max-cost": floats_as_typed(),
    "--lengths": comma_lists(integers_as_typed()),
    "--n-distractors": comma_lists(integers_as_typed()),
    "--needles-per-haystack": comma_lists(integers_as_typed()),
    "--chunk-tokens": comma_lists(integers_as_typed()),
    "--variants": comma_lists(st.sampled_from(["onehop", "inverted", "literal", "literal_inverted", "x", ""])),
    "--groups": comma_lists(st.sampled_from(["loc-dresden", "loc-peru", "nope", ""])),
    "--break-rule": st.one_of(st.sampled_from(["relative", "absolute", "x"]), printable_text()),
    "--break-metric": st.one_of(st.sampled_from(["recall@1", "recall@5", "mrr", "ndcg@10", "auc", "recall@0", "x"]),
                                printable_text()),
    "--normalize-by": st.one_of(st.sampled_from(["standard", "own", "none", "x"]), printable_text()),
    "--pool": st.one_of(st.sampled_from(["needle-free", "all", "x"]), printable_text()),
    "--filler": st.one_of(st.sampled_from(["random", "sequential", "x"]), printable_text()),
    "--strategy": strategy_specs(),
}


@fuzz_settings(cases=30)
@given(chosen=st.lists(st.sampled_from(sorted(SWEEP_OPTIONS)), min_size=1, max_size=3, unique=True).flatmap(
    lambda names: st.tuples(*(st.tuples(st.just(name), SWEEP_OPTIONS[name]) for name in names))))
def test_sweep_options_run_or_refuse_in_one_line(worker, inputs, chosen):
    """``nolima --plan`` (BM25 over the small corpus) with one to three options set to generated
    values: it plans, or refuses in one line; either way it writes nothing."""
    folder = case_folder(inputs)
    try:
        argv = ["nolima", "--plan", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles", "needles.json",
                "--lengths", "64,128", "--depths", "2", "--out", "run"]
        for name, value in chosen:
            argv += [f"{name}={value}"]  # `=`: a value that starts with a dash is still this option's value
        run_case(worker, argv, folder, inputs / "cache")
        assert not (folder / "run").exists(), "--plan wrote its run folder"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@fuzz_settings(cases=10)
@given(chosen=st.lists(st.sampled_from(sorted(SWEEP_OPTIONS)), min_size=1, max_size=2, unique=True).flatmap(
    lambda names: st.tuples(*(st.tuples(st.just(name), SWEEP_OPTIONS[name]) for name in names))))
def test_sweeps_with_generated_options_run_or_refuse_in_one_line(worker, inputs, chosen):
    """The sweep itself (BM25 over the small corpus, not a plan) with one or two options set to
    generated values: it writes its report, or refuses in one line and leaves nothing."""
    folder = case_folder(inputs)
    try:
        argv = ["nolima", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles", "needles.json",
                "--lengths", "64,128", "--depths", "2", "--n-bootstrap", "50", "--out", "run"]
        result = run_case(worker, argv + [f"{name}={value}" for name, value in chosen], folder, inputs / "cache")
        assert (folder / "run" / "report.md").is_file() == (result["rc"] == 0), result["stderr"][-2000:]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- generated input files ----------------------------------------------------------------------------

def json_values(max_leaves: int = 12):
    """Any JSON value, numbers of every size included."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(1, 500).map(lambda e: 10**e),
                        st.floats(allow_nan=False, allow_infinity=False), printable_text(40))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(printable_text(8), inner, max_size=4)),
                        max_leaves=max_leaves)


def paths_in(value, prefix=()):
    """Every path (a tuple of keys and indexes) to a value inside ``value``, itself included."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths_in(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths_in(inner, (*prefix, index))


def replaced(value, path, new):
    """``value`` with the value at ``path`` replaced by ``new`` (a deep copy)."""
    copy = json.loads(json.dumps(value))
    if not path:
        return new
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copy


def removed(value, path):
    copy = json.loads(json.dumps(value))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return copy


@st.composite
def damaged_json(draw, valid) -> bytes:
    """``valid`` (a JSON value) damaged one way: a value replaced by any JSON value, a key or item
    removed, nesting thousands deep, cut short, undecodable bytes, or replaced whole."""
    how = draw(st.sampled_from(["replace", "remove", "deep", "cut", "bytes", "whole", "huge-number"]))
    text = json.dumps(valid, indent=1)
    paths = list(paths_in(valid))
    if how == "replace":
        return json.dumps(replaced(valid, draw(st.sampled_from(paths)), draw(json_values()))).encode()
    if how == "remove" and len(paths) > 1:
        return json.dumps(removed(valid, draw(st.sampled_from(paths[1:])))).encode()
    if how == "deep":
        depth = draw(st.integers(900, 200_000))
        return ("[" * depth + "]" * depth).encode()
    if how == "cut":
        return text[:draw(st.integers(0, max(0, len(text) - 1)))].encode()
    if how == "bytes":
        return draw(st.binary(max_size=200))
    if how == "huge-number":
        return text.replace("1", "1" + "0" * draw(st.integers(300, 5000)), 1).encode()
    return json.dumps(draw(json_values())).encode()


@fuzz_settings(cases=25)
@given(data=st.data())
def test_needle_files_run_or_refuse_in_one_line(worker, inputs, data):
    """``needles check`` and a ``nolima --plan`` of a damaged needle set: a report or one line."""
    valid = json.loads((inputs / "needles.json").read_text())
    folder = case_folder(inputs)
    try:
        (folder / "needles.json").write_bytes(data.draw(damaged_json(valid)))
        command = data.draw(st.sampled_from([
            ["needles", "check", "needles.json"],
            ["nolima", "--plan", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles", "needles.json",
             "--lengths", "64", "--depths", "2", "--out", "run"],
        ]))
        run_case(worker, command, folder, inputs / "cache")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@st.composite
def damaged_jsonl(draw, lines: list[dict]) -> bytes:
    """A JSON Lines file whose lines are ``lines`` with some damaged (:func:`damaged_json`), some
    removed, blank lines, a byte-order mark or no final newline."""
    encoded = [json.dumps(line).encode() for line in lines]
    for index in draw(st.lists(st.integers(0, len(lines) - 1), max_size=3, unique=True)):
        encoded[index] = draw(damaged_json(lines[index])).replace(b"\n", b" ")
    keep = draw(st.integers(0, len(encoded)))
    body = b"\n".join(encoded[:keep] + draw(st.lists(st.sampled_from([b"", b"   ", b"\t"]), max_size=2)))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + body + draw(st.sampled_from([b"", b"\n"]))


@fuzz_settings(cases=15)
@given(data=st.data())
def test_corpus_files_run_or_refuse_in_one_line(worker, inputs, data):
    """``nolima --plan`` over a damaged JSON Lines corpus: a plan or one line."""
    lines = [json.loads(line) for line in (inputs / "corpus.jsonl").read_text().splitlines()]
    folder = case_folder(inputs)
    try:
        (folder / "corpus.jsonl").write_bytes(data.draw(damaged_jsonl(lines)))
        run_case(worker, ["nolima", "--plan", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles",
                          "needles.json", "--lengths", "64", "--depths", "2", "--out", "run"], folder, inputs / "cache")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def side_files(inputs: Path) -> dict[str, tuple[object, list[str]]]:
    """The files a sweep reads beside its needle set, each valid (our own words) and the options
    that read it: an expansion file (``--expansions``) and a distractors file (``--distractors-file``)."""
    groups = [group["id"] for group in json.loads((inputs / "needles.json").read_text())["groups"]]
    shipped = json.loads((Path(__file__).parent.parent / "queries" / "expansions" / "nolima-onehop.json").read_text())
    sizes = dict(list(shipped["sizes"].items())[:2])
    expansions = {**shipped, "sizes": {size: {group: terms[group] for group in groups} for size, terms in sizes.items()}}
    distractors = {"loc-dresden": ["Dresden was in the paper again.", "A film about Dresden was on."],
                   "loc-peru": ["Peru came up at dinner."]}
    return {"expansions.json": (expansions, ["--expansions", "expansions.json"]),
            "distractors.json": (distractors, ["--distractors-file", "distractors.json", "--n-distractors", "0,1"])}


@fuzz_settings(cases=15)
@given(data=st.data())
def test_side_files_run_or_refuse_in_one_line(worker, inputs, data):
    """``nolima --plan`` with a damaged expansion or distractors file: a plan or one line."""
    name, (valid, options) = data.draw(st.sampled_from(sorted(side_files(inputs).items())))
    folder = case_folder(inputs)
    try:
        (folder / name).write_bytes(data.draw(damaged_json(valid)))
        run_case(worker, ["nolima", "--plan", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles",
                          "needles.json", "--lengths", "64", "--depths", "2", "--out", "run", *options], folder,
                 inputs / "cache")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def finished_run(worker, inputs) -> Path:
    """A finished BM25 sweep of the small corpus: the run folder whose tables are damaged."""
    folder = inputs / "finished"
    folder.mkdir()
    for name in ("corpus.jsonl", "needles.json"):
        shutil.copy(inputs / name, folder / name)
    result = worker.run(["nolima", "-q", "-e", "bm25", "--corpus", "jsonl:corpus.jsonl", "--needles", "needles.json",
                         "--lengths", "64,128", "--depths", "2", "--n-bootstrap", "50", "--out", "run"], folder,
                        env={"EMBEDEVAL_CACHE": str(inputs / "cache")}, timeout=CASE_SECONDS)
    assert result["rc"] == 0, result["stderr"][-3000:]
    return folder / "run"


CELL_TEXTS = ["", " ", "nan", "inf", "-inf", "1e20", "-1", "0", "1", "0.5", "True", "false", "yes", "bm25", "\"x\"", "1e400"]


@st.composite
def damaged_csv(draw, text: str) -> str:
    """A CSV table damaged one way: a cell replaced by a generated text, a row doubled or removed,
    the rows or a column removed, the header renamed."""
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    how = draw(st.sampled_from(["cell", "cell", "cell", "double", "remove-row", "header-only", "remove-column", "rename"]))
    if how == "cell" and body:
        row, column = draw(st.integers(0, len(body) - 1)), draw(st.integers(0, len(header) - 1))
        body[row][column] = draw(st.one_of(st.sampled_from(CELL_TEXTS), integers_as_typed(), floats_as_typed(),
                                           printable_text(20)))
    elif how == "double" and body:
        body.insert(0, list(body[draw(st.integers(0, len(body) - 1))]))
    elif how == "remove-row" and body:
        del body[draw(st.integers(0, len(body) - 1))]
    elif how == "header-only":
        body = []
    elif how == "remove-column":
        column = draw(st.integers(0, len(header) - 1))
        header, body = header[:column] + header[column + 1:], [row[:column] + row[column + 1:] for row in body]
    else:
        header = [*header]
        header[draw(st.integers(0, len(header) - 1))] = draw(printable_text(12))
    out = io.StringIO()
    csv.writer(out).writerows([header, *body])
    return out.getvalue()


@fuzz_settings(cases=10)
@given(data=st.data())
def test_reports_of_damaged_run_tables_run_or_refuse_in_one_line(worker, inputs, finished_run, data):
    """``report`` of a run whose ``decision.csv``, ``metrics.csv`` or ``breaks.csv`` was damaged by
    hand, or whose ``config.json`` was: the report, or one line naming the file, and the run as it was."""
    folder = Path(tempfile.mkdtemp(prefix="embedeval-fuzz-"))
    try:
        shutil.copytree(finished_run, folder / "run")
        name = data.draw(st.sampled_from(["decision.csv", "metrics.csv", "breaks.csv", "config.json"]))
        path = folder / "run" / name
        if name == "config.json":
            path.write_bytes(data.draw(damaged_json(json.loads(path.read_text()))))
        else:
            path.write_text(data.draw(damaged_csv(path.read_text())))
        result = run_case(worker, ["report", "run"], folder, inputs / "cache")
        if result["rc"] == 1:
            assert name in result["stderr"], result["stderr"][-2000:]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_fuzz_checks_can_fail(worker, inputs):
    """The checks the fuzz tier makes catch what they are for: a traceback, a second error line
    and a refusal that left a file behind each fail :func:`run_case`."""
    folder = case_folder(inputs)
    try:
        (folder / "needles.json").write_text("{")
        bad = worker.run(["needles", "check", "needles.json"], folder)
        assert bad["rc"] == 1 and bad["stderr"].count("error:") == 1  # the real refusal passes
        with pytest.raises(AssertionError, match="ran past"):
            run_case_with(worker, folder, inputs, {"rc": 0, "stderr": "", "timed_out": True})
        with pytest.raises(AssertionError):
            run_case_with(worker, folder, inputs, {"rc": 1, "stderr": "Traceback (most recent call last):\nerror: x\n",
                                                   "timed_out": False})
        with pytest.raises(AssertionError):
            run_case_with(worker, folder, inputs, {"rc": 1, "stderr": "error: one\nerror: two\n", "timed_out": False})
        with pytest.raises(AssertionError, match="changed its folder"):
            run_case_with(worker, folder, inputs, {"rc": 1, "stderr": "error: one\n", "timed_out": False},
                          leave=folder / "half-written.csv")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_case_with(worker, folder, inputs, answer, leave: Path | None = None):
    """:func:`run_case` with the worker's answer replaced by ``answer`` (and ``leave`` written, as a
    refused run that left a file would)."""

    class Answering:
        def run(self, *args, **kwargs):
            if leave is not None:
                leave.write_text("half")
            return {"stdout": "", **answer}

    return run_case(Answering(), ["nolima"], folder, inputs / "cache")

