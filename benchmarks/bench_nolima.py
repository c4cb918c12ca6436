"""The NoLiMa sweep with all-MiniLM-L6-v2 against the floor of encoding directly.

Part 1, ``truncate`` (the default grid unless ``--groups/--lengths/--depths/--negatives``): the
haystacks are built once (timed apart, outside the ratios) and reused by both runs; then, in one
process, side by side:
  floor  ``SentenceTransformer.encode_document`` (batch 32, normalised) of every unique haystack
         text and the normalising needles, plus ``encode_query`` of the questions: today's cost,
  cold   ``run_nolima(strategies=["truncate"])`` into an empty embedding cache, with dedupe
         (everything: model load, token ids, embedding, scoring, bootstrap metrics, report),
  warm   the same run again into the same run directory with the same cache: every vector, token
         prefix and model fact from the cache (no model load, no tokenising), and metrics.csv,
         report.md and figures/ kept because the tables and settings are unchanged.
Targets: cold <= 0.6 x floor, warm <= 0.03 x cold.

Part 2, ``windows-mean`` (a smaller grid by default, ``--window-*`` to change it):
  direct ``embed_ids`` (the model's forward on token ids, no cache) of the distinct windows that
         the strategy cuts (``EmbeddingScorer.cut``: the model's token ids + ``piece_bounds``)
         of every unique haystack text and needle, plus ``encode_query`` of the questions,
  cold   ``run_nolima(strategies=["windows-mean"])`` into an empty embedding cache.
Target: cold <= 1.15 x direct.

Part 4, ``late-chunking@C`` (Part 2's grid, ``--late-chunk-tokens``, default 128): one forward pass
per distinct window with its chunks pooled (``embed_late_chunks``, uncached) against a cold
``run_nolima``. Target: cold <= 1.15 x direct.

Part 3, a user's grid: lengths 128, 1024, 4096, 8192, 100 negatives, the
ten shared Gutenberg books: the first build (books split into an empty sentence cache), a second
build of the same corpus (split read back), the floor ``encode`` of its unique texts, and a cold
``run_nolima`` that builds its haystacks itself. Targets: cold <= 0.6 x floor, building <= 0.15 x
cold.

Part 5, break points: on the default grid (Part 1's options), a run into the user's
embedding cache (warm after the README's first command; cold otherwise, not timed), a warm rerun
(timed) and ``break_points`` with its bootstrap intervals on the run's tables (the median of three).
Target: break points <= 0.05 x the warm rerun.

Part 6, the default grid's lengths: the default grid (every length of
``DEFAULT_LENGTHS``, one-hop and the default variants as Part 1) against the grid before the
lengths inside the model's window were added (:data:`EARLIER_LENGTHS`), each a cold
``run_nolima`` into its own empty embedding cache, side by side in one process, alternated (earlier,
new, earlier, new) and the median of two taken: haystacks, distinct texts embedded, tokens, seconds,
and the ratio new/earlier.

Each cold run also prints the seconds spent inside the model's ``embed``/``embed_ids`` and around
them (model load, token ids, cache, scoring, metrics, report): other work on the cores inflates
the raw ratios, the seconds around the model much less. Every run_nolima prints where its time
went (:data:`CLOCKED`: run_nolima's steps, and inside them model load, tokenising, model embed). Prints peak RSS, the machine and its load
average. ``--quick``: a tiny grid for a smoke run (about a minute on an idle 2-core machine; fixed
costs dominate it, so its ratios do not test the targets).

    PYTHONPATH=. python benchmarks/bench_nolima.py            # both parts (Part 1 ~10 min on 2 cores)
    PYTHONPATH=. python benchmarks/bench_nolima.py --part 2   # windows-mean only
    PYTHONPATH=. python benchmarks/bench_nolima.py --part 3   # a user's grid, 128..8192 tokens
    PYTHONPATH=. python benchmarks/bench_nolima.py --part 4   # late-chunking
    PYTHONPATH=. python benchmarks/bench_nolima.py --part 5   # break points vs a warm rerun
    PYTHONPATH=. python benchmarks/bench_nolima.py --part 6   # the default lengths' cost against the earlier grid
    PYTHONPATH=. python benchmarks/bench_nolima.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import resource
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer

from embedeval import sentences
from embedeval.breaks import break_points
from embedeval.defaults import DEFAULT_CORPUS, DEFAULT_DEPTHS, DEFAULT_LENGTHS, DEFAULT_NEGATIVES, DEFAULT_VARIANTS
from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.embedders.requests import TokenIds
from embedeval.expansion import query_texts
from embedeval.experiments import nolima
from embedeval.experiments.nolima import NolimaConfig, load_or_build_haystacks, run_nolima
from embedeval.grid import HaystackGrid
from embedeval.needles import STANDARD_NEEDLE
from embedeval.report.break_words import break_sentence
from embedeval.run import RunWriter
from embedeval.strategies import EmbeddingScorer, parse_strategies

MODEL = "all-MiniLM-L6-v2"
TRUNCATE_CEILING, WARM_CEILING, WINDOWS_CEILING, BREAKS_CEILING = 0.6, 0.03, 1.15, 0.05
# Part 2's default grid: small enough for a few minutes on 2 cores.
WINDOW_GROUPS, WINDOW_LENGTHS, WINDOW_DEPTHS, WINDOW_NEGATIVES = 4, (128, 256, 512, 1024, 2048), 5, 10
QUICK = {"groups": "2", "lengths": [128, 512], "depths": 2, "negatives": 4,
         "window_groups": "2", "window_lengths": [256, 1024], "window_depths": 2, "window_negatives": 4,
         "grid_groups": "2", "grid_lengths": [128, 1024], "grid_negatives": 4}
# Part 3: a user's grid on the ten shared Gutenberg books.
GRID_LENGTHS, GRID_NEGATIVES, BUILD_CEILING = (128, 1024, 4096, 8192), 100, 0.15
#: Part 6: the default grid before lengths were added inside all-MiniLM-L6-v2's window.
EARLIER_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
GUTENBERG = Path(__file__).resolve().parent.parent.parent / "shared" / "haystacks" / "gutenberg"


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def verdict(ratio: float, ceiling: float) -> str:
    return f"{'PASS' if ratio <= ceiling else 'FAIL'} (target <= {ceiling:g})"


def pick_groups(value: str | None, needle_set) -> list[str] | None:
    """``None``: every group; ``N``: the first N groups; else comma-separated group ids."""
    if value is None:
        return None
    if value.isdigit():
        return [g.id for g in needle_set.groups[: int(value)]]
    return [g.strip() for g in value.split(",") if g.strip()]


def make_config(folder: Path, name: str, strategy: str, groups, lengths, depths, negatives,
                corpus: str = DEFAULT_CORPUS) -> NolimaConfig:
    config = NolimaConfig(embedders=[f"st:{MODEL}"], strategies=[strategy], out=str(folder / name),
                          grid=HaystackGrid(corpus=corpus, lengths=list(lengths), depths=depths, negatives=negatives))
    return replace(config, groups=pick_groups(groups, config.validate()))


def prepare(config: NolimaConfig):
    """Build the haystacks into ``config.out`` (run_nolima reuses them); the texts each strategy
    embeds: unique haystack texts, the normalising needles, the questions."""
    needle_set = config.validate()
    start = time.perf_counter()
    haystacks = load_or_build_haystacks(config, needle_set, progress=False)
    build = time.perf_counter() - start
    texts = list(dict.fromkeys(haystacks["text"]))
    needles = sorted({g.needles[STANDARD_NEEDLE[v]] for g in needle_set.groups for v in config.grid.variants})
    queries = [q for form in query_texts(needle_set, list(config.expansions)).values() for q in form]
    return haystacks, build, texts, needles, list(dict.fromkeys(queries))


#: What ``timed_run`` clocks, label -> (module or class, attribute): run_nolima's steps (looked up
#: as names of embedeval.experiments.nolima, so patching them there clocks the run's own calls),
#: and, inside them, the model's load, tokenisation and forward passes.
CLOCKED = {
    "validate": [(NolimaConfig, "validate")],
    "reference tokenizer": [(nolima, "load_token_counter")],
    "scorers": [(nolima, "load_scorers")],
    "haystacks": [(nolima, "load_or_build_haystacks")],
    "scoring": [(nolima, "score_haystacks")],
    "tables": [(nolima, "similarity_rows"), (nolima, "retrieval_rows"), (RunWriter, "write_scored")],
    "derived check": [(nolima, "inputs_digest"), (nolima, "fresh_outputs")],
    "metrics": [(nolima, "nolima_metrics")],
    "break points": [(nolima, "break_points")],
    "report": [(nolima, "write_report")],
    "  model load": [(SentenceTransformer, "__init__")],
    "  tokenising": [(SentenceTransformerEmbedder, "token_ids")],
    "  model embed": [(SentenceTransformerEmbedder, "_embed_texts"), (SentenceTransformerEmbedder, "_embed_ids"),
                      (SentenceTransformerEmbedder, "_embed_late_chunks")],
}


@contextlib.contextmanager
def clocks(targets: dict = CLOCKED) -> Iterator[dict[str, float]]:
    """Seconds spent inside each label's functions while the block runs (outermost calls only,
    so a recursive call is not counted twice). The model's time matters most: what a run spends
    around the model is its time minus this, a share that other work on the cores distorts far
    less than the raw ratio."""
    spent = {label: 0.0 for label in targets}
    depth = {label: 0 for label in targets}
    originals = [(owner, name, getattr(owner, name)) for places in targets.values() for owner, name in places]

    def clocked(label, original):
        @functools.wraps(original)
        def call(*args, **kwargs):
            depth[label] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                depth[label] -= 1
                if not depth[label]:
                    spent[label] += time.perf_counter() - start
        return call

    for label, places in targets.items():
        for owner, name in places:
            setattr(owner, name, clocked(label, getattr(owner, name)))
    try:
        yield spent
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def timed_run(config: NolimaConfig, cache: Path):
    """(seconds, result, {label: seconds} of :data:`CLOCKED`) of one ``run_nolima``."""
    with clocks() as spent:
        start = time.perf_counter()
        result = run_nolima(config, progress=False, cache_dir=cache)
        return time.perf_counter() - start, result, dict(spent)


def breakdown(spent: dict[str, float]) -> str:
    return ", ".join(f"{label.strip()} {seconds:.2f}" for label, seconds in spent.items() if seconds >= 0.005)


def grid_line(config: NolimaConfig, haystacks) -> str:
    groups = "all" if config.groups is None else len(config.groups)
    return (f"groups {groups}, lengths {','.join(map(str, config.grid.lengths))}, depths {config.grid.depths}, "
            f"negatives {config.grid.negatives}: {len(haystacks)} haystacks ({haystacks['n_tokens'].sum() / 1e6:.2f} M tokens)")


def part_truncate(model: SentenceTransformerEmbedder, folder: Path, args) -> None:
    config = make_config(folder, "truncate", "truncate", args.groups, args.lengths, args.depths, args.negatives)
    haystacks, build, texts, needles, queries = prepare(config)
    documents = list(dict.fromkeys(texts + needles))
    st = model.model
    st.encode_document(documents[:32], batch_size=32, normalize_embeddings=True)  # warm up kernels
    start = time.perf_counter()
    st.encode_document(documents, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    st.encode_query(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    floor = time.perf_counter() - start

    scorer = EmbeddingScorer(model, parse_strategies(["truncate"])[0])
    windows = len(set(scorer.cut(texts).inputs))  # distinct first-W token-id windows (not timed)
    cold, cold_result, cold_spent = timed_run(config, folder / "cache-truncate")
    warm, warm_result, warm_spent = timed_run(config, folder / "cache-truncate")  # the same out dir and cache
    cold_model = cold_spent["  model embed"]
    embedded = sum(cold_result.newly_embedded.values())

    print("== Part 1: truncate (dedupe on) ==")
    print(f"grid             {grid_line(config, haystacks)}; built in {build:.1f} s (not in the ratios)")
    print(f"unique texts     {len(texts)} haystacks + {len(documents) - len(texts)} needles + {len(queries)} questions; "
          f"distinct truncated windows of the haystacks {windows} ({windows / len(texts):.1%})")
    print(f"floor encode     {floor:8.2f} s   (encode_document of every unique text + encode_query, batch 32)")
    print(f"cold run_nolima  {cold:8.2f} s   cold/floor = {cold / floor:.3f}  {verdict(cold / floor, TRUNCATE_CEILING)}")
    print(f"  of which       {cold_model:8.2f} s in the model's embed/embed_ids, {cold - cold_model:.2f} s around it "
          f"(model load, token ids, cache, scoring, metrics, report)")
    print(f"  cold, in s     {breakdown(cold_spent)}")
    print(f"warm run_nolima  {warm:8.2f} s   warm/cold  = {warm / cold:.4f} {verdict(warm / cold, WARM_CEILING)}")
    print(f"  warm, in s     {breakdown(warm_spent)}; unclocked {warm - sum(v for k, v in warm_spent.items() if not k.startswith(' ')):.2f}")
    print(f"cold embedded    {embedded} inputs (expected {windows} distinct haystack windows + {len(documents) - len(texts)} "
          f"needles + {len(queries)} questions) vs {len(texts)} unique haystack texts; "
          f"warm embedded {sum(warm_result.newly_embedded.values())}")


def part_windows(model: SentenceTransformerEmbedder, folder: Path, args) -> None:
    config = make_config(folder, "windows", "windows-mean", args.window_groups, args.window_lengths,
                         args.window_depths, args.window_negatives)
    haystacks, build, texts, needles, queries = prepare(config)
    scorer = EmbeddingScorer(model, parse_strategies(["windows-mean"], window_overlap=config.window_overlap)[0])
    start = time.perf_counter()
    pieces = scorer.cut(texts).inputs + scorer.cut(needles).inputs
    distinct = [np.frombuffer(ids, dtype=np.int32) for ids in dict.fromkeys(pieces)]  # pieces are int32 id bytes
    cut = time.perf_counter() - start
    model.embed_request(TokenIds.of(distinct[:32]))  # warm up kernels
    start = time.perf_counter()
    model.embed_request(TokenIds.of(distinct, "document"))
    model.model.encode_query(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    direct = time.perf_counter() - start

    cold, cold_result, cold_spent = timed_run(config, folder / "cache-windows")
    cold_model = cold_spent["  model embed"]
    embedded = sum(cold_result.newly_embedded.values())

    print("== Part 2: windows-mean (dedupe on) ==")
    print(f"grid             {grid_line(config, haystacks)}; built in {build:.1f} s (not in the ratios)")
    print(f"windows          {len(pieces)} windows of {scorer.capacity} tokens (overlap {config.window_overlap}) "
          f"over {len(texts)} unique haystacks + {len(needles)} needles; {len(distinct)} distinct; "
          f"cut in {cut:.2f} s (token ids + piece_bounds, not in direct)")
    print(f"direct embed_ids {direct:8.2f} s   (model forward on the distinct id windows, uncached, batch 32; "
          f"+ encode_query of {len(queries)} questions)")
    print(f"cold run_nolima  {cold:8.2f} s   cold/direct = {cold / direct:.3f}  {verdict(cold / direct, WINDOWS_CEILING)}")
    around = cold - cold_model
    print(f"  of which       {cold_model:8.2f} s in the model's embed/embed_ids, {around:.2f} s around it "
          f"(model load, token ids, cache, scoring, metrics, report): (direct + around)/direct = "
          f"{(direct + around) / direct:.3f}, the ratio with the model's own time taken as equal")
    print(f"cold embedded    {embedded} inputs (distinct windows, needles, questions)")


def part_late(model: SentenceTransformerEmbedder, folder: Path, args) -> None:
    """Part 4: ``late-chunking@C`` on Part 2's grid against one direct forward pass per
    distinct window (the model's ``embed_late_chunks``, uncached, through ``EmbeddingScorer.embed_inputs``)
    plus ``encode_query``."""
    config = make_config(folder, "late", "late-chunking", args.window_groups, args.window_lengths,
                         args.window_depths, args.window_negatives)
    config.chunk_tokens = [args.late_chunk_tokens]
    haystacks, build, texts, needles, queries = prepare(config)
    scorer = EmbeddingScorer(model, parse_strategies(["late-chunking"], [args.late_chunk_tokens])[0])
    pieces = list(dict.fromkeys(scorer.cut(texts + needles).inputs))  # distinct chunks, each its (window, span) parts
    n_windows = len({window for piece in pieces for window, _ in piece})
    scorer.embed_inputs(pieces[:64])  # warm up kernels (the model is not cached: every window runs)
    start = time.perf_counter()
    scorer.embed_inputs(pieces)
    model.model.encode_query(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    direct = time.perf_counter() - start
    cold, _, cold_spent = timed_run(config, folder / "cache-late")
    print(f"== Part 4: late-chunking@{args.late_chunk_tokens} (dedupe on) ==")
    print(f"grid             {grid_line(config, haystacks)}; built in {build:.1f} s (not in the ratios)")
    print(f"windows          {n_windows} distinct windows, {len(pieces)} distinct chunks")
    print(f"direct           {direct:8.2f} s   (one forward pass per distinct window, chunks pooled, uncached, batch 32; "
          f"+ encode_query of {len(queries)} questions)")
    print(f"cold run_nolima  {cold:8.2f} s   cold/direct = {cold / direct:.3f}  {verdict(cold / direct, WINDOWS_CEILING)}")
    print(f"  cold, in s     {breakdown(cold_spent)}")


def part_grid(model: SentenceTransformerEmbedder, folder: Path, args) -> None:
    """Part 3: a user's grid, lengths 128..8192 and 100 negatives, on the ten shared
    Gutenberg books (the Shakespeare corpus where ../shared is absent). Books are split into a
    fresh sentence cache by the first build and read back by the second (split calls counted);
    the cold run builds its haystacks itself (from the cached split) inside the ratio."""
    corpus = f"dir:{GUTENBERG}/*.txt" if GUTENBERG.is_dir() else "shakespeare"
    cache = folder / "cache-grid"

    def config(name: str) -> NolimaConfig:
        return make_config(folder, name, "truncate", args.grid_groups, args.grid_lengths, args.depths, args.grid_negatives, corpus)

    needle_set = config("grid-a").validate()
    with clocks({"split": [(sentences, "split_sentences")]}) as split:
        start = time.perf_counter()
        load_or_build_haystacks(config("grid-a"), needle_set, progress=False, cache_dir=cache)
        first = time.perf_counter() - start
        first_split = split["split"]
        start = time.perf_counter()
        haystacks = load_or_build_haystacks(config("grid-b"), needle_set, progress=False, cache_dir=cache)
        second = time.perf_counter() - start
        second_split = split["split"] - first_split
    texts = list(dict.fromkeys(haystacks["text"]))
    needles = sorted({g.needles[STANDARD_NEEDLE[v]] for g in needle_set.groups for v in DEFAULT_VARIANTS})
    queries = list(dict.fromkeys(q for form in query_texts(needle_set, []).values() for q in form))
    documents = list(dict.fromkeys(texts + needles))
    st = model.model
    start = time.perf_counter()
    st.encode_document(documents, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    st.encode_query(queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    floor = time.perf_counter() - start
    cold, _, spent = timed_run(config("grid-cold"), cache)
    build = spent["haystacks"]
    print("== Part 3: a user's grid, truncate (dedupe on) ==")
    print(f"grid             corpus {corpus}; {grid_line(config('grid-b'), haystacks)}")
    print(f"first build      {first:8.2f} s   (books split into an empty sentence cache: {first_split:.2f} s of it)")
    print(f"second build     {second:8.2f} s   (the same corpus: split {second_split:.2f} s, read from the cache)")
    print(f"floor encode     {floor:8.2f} s   (encode_document of {len(documents)} unique texts + encode_query of {len(queries)})")
    print(f"cold run_nolima  {cold:8.2f} s   cold/floor = {cold / floor:.3f}  {verdict(cold / floor, TRUNCATE_CEILING)}")
    print(f"  building       {build:8.2f} s   build/cold = {build / cold:.3f}  {verdict(build / cold, BUILD_CEILING)}; "
          f"with the split of a new corpus: {(build + first_split) / (cold + first_split):.3f}")
    print(f"  cold, in s     {breakdown(spent)}")


def part_breaks(folder: Path, args) -> None:
    config = make_config(folder, "breaks", "truncate", args.groups, args.lengths, args.depths, args.negatives)
    first, _, _ = timed_run(config, None)  # the user's cache: warm after the README's run
    warm, result, spent = timed_run(config, None)
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        table = break_points(result.metrics, result.retrieval, config.rule(), config.n_bootstrap, config.grid.seed)
        seconds.append(time.perf_counter() - start)
    took = float(np.median(seconds))
    print("== Part 5: break points with intervals ==")
    print(f"grid             {grid_line(config, result.haystacks)}; first run {first:.1f} s (not in the ratio)")
    print(f"warm run_nolima  {warm:8.2f} s   ({breakdown(spent)})")
    print(f"break points     {took:8.3f} s   {len(table)} series x {config.n_bootstrap} resamples; "
          f"breaks/warm = {took / warm:.4f} {verdict(took / warm, BREAKS_CEILING)}")
    for row in table.itertuples():
        print(f"  {row.variant:9s} {break_sentence(row, config.rule())}")


def part_lengths(folder: Path, args) -> None:
    """Part 6: what the default grid's added lengths cost, cold, against the earlier grid."""
    runs: dict[str, list[float]] = {"earlier": [], "new": []}
    found = {}
    for trial in range(2):
        for name, lengths in (("earlier", EARLIER_LENGTHS), ("new", DEFAULT_LENGTHS)):
            config = make_config(folder, f"lengths-{name}-{trial}", "truncate", args.groups, lengths, args.depths, args.negatives)
            cache = folder / f"cache-lengths-{name}-{trial}"
            seconds, result, spent = timed_run(config, cache)
            runs[name].append(seconds)
            found[name] = (config, result, spent)
    print("== Part 6: the default lengths against the earlier grid (cold, each into an empty cache; median of 2) ==")
    for name in runs:
        config, result, spent = found[name]
        texts = sum(result.texts.values())
        print(f"{name:8s} {grid_line(config, result.haystacks)}; {texts:,} distinct texts; "
              f"{float(np.median(runs[name])):7.2f} s ({', '.join(f'{s:.1f}' for s in runs[name])}; {breakdown(spent)})")
    ratio = float(np.median(runs["new"])) / float(np.median(runs["earlier"]))
    print(f"new/earlier time = {ratio:.2f}; haystacks {len(found['new'][1].haystacks) / len(found['earlier'][1].haystacks):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["1", "2", "3", "4", "5", "6", "all"], default="all",
                        help="1: truncate, 2: windows-mean, 3: a user's grid (lengths 128..8192, 100 negatives), 4: late-chunking, "
                             "5: break points vs a warm rerun, 6: the default lengths' cost")
    parser.add_argument("--late-chunk-tokens", type=int, default=128, help="Part 4: the chunk size of late-chunking")
    parser.add_argument("--quick", action="store_true", help="a tiny grid for a smoke run (~1 min idle)")
    parser.add_argument("--groups", help="Part 1: N (the first N groups) or comma-separated group ids; default all")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    parser.add_argument("--depths", type=int, default=DEFAULT_DEPTHS)
    parser.add_argument("--negatives", type=int, default=DEFAULT_NEGATIVES)
    parser.add_argument("--window-groups", default=str(WINDOW_GROUPS), help="Part 2: N or group ids ('all': every group)")
    parser.add_argument("--window-lengths", type=int, nargs="+", default=list(WINDOW_LENGTHS))
    parser.add_argument("--window-depths", type=int, default=WINDOW_DEPTHS)
    parser.add_argument("--window-negatives", type=int, default=WINDOW_NEGATIVES)
    parser.add_argument("--grid-groups", help="Part 3: N or group ids; default all")
    parser.add_argument("--grid-lengths", type=int, nargs="+", default=list(GRID_LENGTHS))
    parser.add_argument("--grid-negatives", type=int, default=GRID_NEGATIVES)
    args = parser.parse_args()
    if args.quick:
        vars(args).update(QUICK)
    if args.window_groups == "all":
        args.window_groups = None

    started = time.perf_counter()
    load = time.perf_counter()
    model = SentenceTransformerEmbedder(MODEL)
    _ = model.model  # loaded when first needed: here, timed
    load = time.perf_counter() - load
    print(f"machine          {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), {platform.machine()}, "
          f"torch threads {__import__('torch').get_num_threads()}; model {MODEL} loaded in {load:.1f} s "
          f"(a cold run_nolima loads it again; a warm one, whose vectors are all cached, does not); "
          f"load average {load_average()}")
    if args.quick:
        print("quick grid: fixed costs (model load, bootstrap, report) dominate; its ratios do not test the targets")
    with tempfile.TemporaryDirectory(prefix="bench-nolima-") as tmp:
        folder = Path(tmp)
        if args.part in ("1", "all"):
            part_truncate(model, folder, args)
        if args.part in ("2", "all"):
            part_windows(model, folder, args)
        if args.part in ("3", "all"):
            part_grid(model, folder, args)
        if args.part in ("4", "all"):
            part_late(model, folder, args)
        if args.part in ("6", "all"):
            part_lengths(folder, args)
        if args.part in ("5", "all"):
            part_breaks(folder, args)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS         {peak_mb:.0f} MB; total {time.perf_counter() - started:.0f} s; "
          f"load average now {load_average()} (other work on the cores skews the ratios)")


if __name__ == "__main__":
    main()
