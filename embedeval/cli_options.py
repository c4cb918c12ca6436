"""Command-line options shared by several ``embedeval`` commands, each declared once.

An option group is a dataclass whose fields are typer options. A command decorated with
:func:`with_option_groups` takes a group as one parameter (``needles: NeedleOptions``); typer
sees the group's fields as the command's own options, and the command receives the group built
from them. So ``--needles``/``--groups``, the haystack grid, the embedder list and the corpus
chunking are declared once, used by every command that needs them, and parsed in one place.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Optional

import typer
from rich.markup import escape

from embedeval.defaults import (
    DEFAULT_CHUNKER, DEFAULT_CORPUS, DEFAULT_DEPTHS, DEFAULT_EMBEDDER, DEFAULT_EXECUTOR, DEFAULT_FILLER, DEFAULT_LENGTHS, DEFAULT_MIN_BOOKS,
    DEFAULT_N_DISTRACTORS, DEFAULT_NEEDLES, DEFAULT_NEEDLES_PER_HAYSTACK, DEFAULT_SEED, DEFAULT_NEGATIVES, DEFAULT_VARIANTS, DEFAULT_WORKERS,
)
from embedeval.defaults import (
    DEFAULT_MIN_CLUSTER_SIZE, DEFAULT_MIN_SAMPLES, DEFAULT_MMR_LAMBDA, DEFAULT_REPRESENTATIVES, DEFAULT_THEME_CHUNKER,
    DEFAULT_THEME_SEED, DEFAULT_UMAP_COMPONENTS, DEFAULT_UMAP_MIN_DIST, DEFAULT_UMAP_NEIGHBORS,
)
from embedeval.defaults import RAY_ADDRESS_ENV
from embedeval.embedders import budget
from embedeval.errors import InputError
from embedeval.paths import CACHE_ENV

if TYPE_CHECKING:
    from embedeval.embedders.executors import Executor

# The library behind the options (the embedder registry, plans, the model code) is imported where
# an option group uses it, not here: `embedeval --help` and a mistyped option answer without it
# (tests/test_cli_basics.py keeps torch, transformers, pandas, umap and onnxruntime out).


def literal(text: str) -> str:
    """A help text that shows as written: typer renders help with rich, which reads ``[word]`` as a
    markup tag and drops it (``pip install 'embedeval[ray]'`` showed as ``'embedeval'``), so its
    square brackets are escaped."""
    return escape(text)


CacheDir = Annotated[
    Optional[Path],
    typer.Option("--cache-dir", envvar=CACHE_ENV, help="Embedding cache folder (default: user cache dir)."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or step lines (on stderr).")]
CorpusOpt = Annotated[str, typer.Option("--corpus", help="shakespeare, pg-essays (the Paul Graham essays of the original needle-in-a-haystack test), gutenberg, dir:PATH (its .txt and .md files; dir:PATH/*.txt picks), jsonl:FILE (a text field per line, optional id) or parquet:FILE (column text, optional id).")]
MinBooksOpt = Annotated[int, typer.Option("--min-books", help="Fewest books (files, JSONL lines, Parquet rows) the corpus must hold.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (recorded).")]
DistractorsFileOpt = Annotated[Optional[Path], typer.Option("--distractors-file", help=literal("Distractors by group, replacing the needle file's: .json ({group id: [texts]}) or .csv/.jsonl/.parquet (columns group_id, distractor, optional query_form)."))]
ChatModelOpt = Annotated[str, typer.Option("--llm", help="Chat model: openai:MODEL (OPENAI_API_KEY; OPENAI_BASE_URL or OpenAI), or openai:MODEL?base_url=URL&key_env=VAR for a server of your own (only VAR's key goes there); a bare MODEL is openai:MODEL.")]
ChromaUrlOpt = Annotated[Optional[str], typer.Option("--chroma-url", help="A chroma server (http://HOST:PORT, e.g. from `chroma run`) holding the chunk vectors: one collection per embedder and chunk set, reused by later runs (needs --index chroma).")]


def split_list(value: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in value.split(",") if item.strip()]


def name_list(value: str, option: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; an empty item (``"a,,b"``, ``"a,"``) is a one-line
    :class:`InputError`, as it is for numbers (:func:`int_list`)."""
    items = [item.strip() for item in value.split(",")]
    if "" in items:
        raise InputError(f"{option} takes comma-separated names, not {value!r} (an empty item)")
    return items


def int_list(value: str, option: str) -> list[int]:
    """Comma-separated integers in the digits 0-9 (``-`` allowed; ``int`` would also read other
    scripts' digits); anything else is a one-line :class:`InputError`."""
    items = [item.strip() for item in value.split(",")]
    if not all(item.removeprefix("-").isascii() and item.removeprefix("-").isdigit() for item in items):
        empty = " (an empty item)" if "" in items else ""
        raise InputError(f"{option} takes comma-separated whole numbers in the digits 0-9, not {value!r}{empty}")
    return [int(item) for item in items]


@dataclass
class NeedleOptions:
    """``--needles FILE --groups ID,ID``: which needle set, and which of its groups."""

    needles: Annotated[Optional[Path], typer.Option("--needles", help="Needle set JSON (default: the shipped queries/nolima-onehop.json).")] = None
    groups: Annotated[Optional[str], typer.Option("--groups", help="Comma-separated group ids to use (default: every group).")] = None

    @property
    def path(self) -> Path:
        return self.needles or DEFAULT_NEEDLES

    @property
    def group_ids(self) -> list[str] | None:
        return None if self.groups is None else split_list(self.groups)

    def load(self):
        """The needle set, restricted to ``--groups`` if given."""
        from embedeval.needles import load_needle_set

        needle_set = load_needle_set(self.path)
        return needle_set if self.group_ids is None else needle_set.subset(self.group_ids)


@dataclass
class PairOptions:
    """``--pairs FILE``: question-needle pairs instead of a needle set (the similarity commands)."""

    pairs: Annotated[Optional[Path], typer.Option("--pairs", help="Question-needle pair file instead of a needle set: .csv, .jsonl or .parquet with columns question, needle and optional id, topic (not with --needles or --groups).")] = None

    def load(self, needles: NeedleOptions):
        """The pairs of ``--pairs`` if given (then ``--needles``/``--groups`` must not be), else
        the needle set of ``needles``."""
        from embedeval.needles import load_pairs

        if self.pairs is None:
            return needles.load()
        if needles.needles is not None or needles.groups is not None:
            raise InputError("--pairs takes the place of --needles and --groups: give one or the other")
        return load_pairs(self.pairs)


@dataclass
class GridOptions:
    """The haystack grid: corpus (and its fewest books, how filler is drawn), lengths, depths,
    variants, seed, negatives, distractors and needles per haystack."""

    corpus: CorpusOpt = DEFAULT_CORPUS
    min_books: MinBooksOpt = DEFAULT_MIN_BOOKS
    filler: Annotated[str, typer.Option("--filler", help="random (sentence-aligned snippets from random books) or sequential (contiguous passages in book order, as Context Rot and NoLiMa).")] = DEFAULT_FILLER
    lengths: Annotated[str, typer.Option("--lengths", help="Comma-separated haystack lengths in tokens.")] = ",".join(map(str, DEFAULT_LENGTHS))
    depths: Annotated[int, typer.Option("--depths", help="Needle depths per length, spread from start to end.")] = DEFAULT_DEPTHS
    variants: Annotated[str, typer.Option("--variants", help="Comma-separated: onehop, inverted, literal, literal_inverted.")] = ",".join(DEFAULT_VARIANTS)
    seed: SeedOpt = DEFAULT_SEED
    negatives: Annotated[int, typer.Option("--negatives", help="Needle-free haystacks per length in the pool every needle haystack is ranked in (with the controls).")] = DEFAULT_NEGATIVES
    n_distractors: Annotated[str, typer.Option("--n-distractors", help="Comma-separated distractor counts K (e.g. 0,1,4): each builds the grid with the first K distractors of every group, outside a ±0.2 depth zone around the needle.")] = ",".join(map(str, DEFAULT_N_DISTRACTORS))
    distractors_file: DistractorsFileOpt = None
    needles_per_haystack: Annotated[str, typer.Option("--needles-per-haystack", help="Comma-separated needle counts K (e.g. 1,3): each K > 1 builds the needle haystacks again with K - 1 needles of other groups beside the own one; the haystack is ranked by every question whose needle it holds. Goes with --n-distractors 0.")] = ",".join(map(str, DEFAULT_NEEDLES_PER_HAYSTACK))

    def haystack_grid(self, controls: bool = True):
        """The :class:`~embedeval.grid.HaystackGrid` of these options (checked as it is made,
        before any work); ``haystacks build`` and ``nolima`` both make theirs here."""
        from embedeval.grid import HaystackGrid

        return HaystackGrid(corpus=self.corpus, lengths=int_list(self.lengths, "--lengths"), depths=self.depths,
                            variants=split_list(self.variants), negatives=self.negatives,
                            n_distractors=int_list(self.n_distractors, "--n-distractors"),
                            needles_per_haystack=int_list(self.needles_per_haystack, "--needles-per-haystack"),
                            filler=self.filler, min_books=self.min_books, seed=self.seed, controls=controls)

    def needle_set(self, needles: NeedleOptions):
        """The needle set of ``needles`` with ``--distractors-file`` applied, checked to serve the
        grid's variants and distractor counts (before the corpus is read)."""
        from embedeval.needles import grid_needle_set

        grid = self.haystack_grid()
        return grid_needle_set(needles.path, needles.group_ids, grid.variants, grid.n_distractors, self.distractors_file)


def spec_options() -> tuple[str, ...]:
    """Options written in an embedder's spec (embedeval.embedders.options), not flags."""
    from embedeval.embedders.options import APISpecOptions, LocalOptions

    return tuple(f.name for group in (LocalOptions, APISpecOptions) for f in dataclasses.fields(group))


#: The flag of each library parameter whose flag is not ``--`` + its name with ``.`` and ``_`` as ``-``.
FLAG_OF = {"embedders": "--embedder", "strategies": "--strategy", "hdbscan.min_cluster_size": "--min-cluster-size",
           "hdbscan.min_samples": "--min-samples", "prices": "--price", "theme_ids": "--themes-ids"}


def flag_of(parameter: str) -> str | None:
    """The command-line flag of a library parameter: ``umap.min_dist`` -> ``--umap-min-dist``;
    None for an option written in an embedder's spec (``dtype`` in ``st:NAME?dtype=float16``),
    which the command line names as the library does."""
    if parameter in spec_options():
        return None
    return FLAG_OF.get(parameter, "--" + parameter.replace(".", "-").replace("_", "-"))


def in_flag_words(error: Exception) -> str:
    """An error's message with the library parameters it names (its ``parameters``, written
    `` `name` `` in the message) said as the command line's flags: the one place the CLI
    translates them."""
    text = str(error)
    for parameter in getattr(error, "parameters", ()):
        flag = flag_of(parameter)
        text = text.replace(f"`{parameter}`", flag if flag else f"spec option {parameter}")
    return text


def budget_map(value: str | None, option: str) -> dict[str, int]:
    """``--tpm`` / ``--rpm`` values: ``"100000"`` -> ``{"*": 100000}`` (every provider);
    ``"openai=1000000,jina=100000"`` -> one budget per named provider."""
    from embedeval.embedders.registry import API_EMBEDDERS

    out: dict[str, int] = {}
    for item in split_list(value or ""):
        provider, sep, number = item.rpartition("=")
        provider = provider.strip() if sep else budget.ALL
        if provider != budget.ALL and provider not in API_EMBEDDERS:
            raise InputError(f"{option}: unknown provider {provider!r}; use one of {', '.join(API_EMBEDDERS)}")
        amount = budget.positive_int(number)
        if amount is None:
            raise InputError(f"{option} takes N or provider=N with N a whole number >= 1, not {item!r}")
        out[provider] = amount
    return out


@dataclass
class APIOptions:
    """``--api-workers``, ``--rpm``, ``--tpm``: how API embedders send their requests.

    Building the group sets them for the process (:func:`embedeval.embedders.budget.configure`),
    so every API embedder the command builds afterwards, however deep in the library, uses them.
    """

    api_workers: Annotated[Optional[int], typer.Option("--api-workers", envvar=budget.WORKERS_ENV, help="Concurrent requests per API embedder (default: 4).")] = None
    rpm: Annotated[Optional[str], typer.Option("--rpm", help="Requests-per-minute budget of the API providers: N for each, or provider=N,... (default: EMBEDEVAL_<PROVIDER>_RPM, else the provider's tier-1 limit).")] = None
    tpm: Annotated[Optional[str], typer.Option("--tpm", help="Tokens-per-minute budget of the API providers: N for each, or provider=N,... (default: EMBEDEVAL_<PROVIDER>_TPM, else the provider's tier-1 limit).")] = None

    def __post_init__(self):
        budget.configure(rpm=budget_map(self.rpm, "--rpm"), tpm=budget_map(self.tpm, "--tpm"), workers=self.api_workers)


@dataclass
class _EmbedderChoice:
    embedder: Annotated[Optional[list[str]], typer.Option("--embedder", "-e", help=f"Embedder spec or preset (e.g. context-rot-5); repeat for several (default: {DEFAULT_EMBEDDER}).")] = None
    skip_unavailable: Annotated[bool, typer.Option("--skip-unavailable", help="Run the embedders that can run here; list the others.")] = False
    cache_dir: CacheDir = None
    executor: Annotated[str, typer.Option("--executor", help=literal("Where cache misses of local (st:) models are embedded: local, or ray (a pool of Ray actors; pip install 'embedeval[ray]'). Same vectors either way."))] = DEFAULT_EXECUTOR
    workers: Annotated[int, typer.Option("--workers", help="Ray actors, each holding the model once (one GPU each where the cluster has GPUs).")] = DEFAULT_WORKERS
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", envvar=RAY_ADDRESS_ENV, help="Ray cluster to join: auto (a running cluster), ray://HOST:PORT; unset: start a local Ray.")] = None


@dataclass
class EmbedderOptions(APIOptions, _EmbedderChoice):
    """``--embedder`` (repeatable, presets allowed), ``--skip-unavailable``, ``--cache-dir`` and
    where local models embed (``--executor``, ``--workers``, ``--ray-address``), then the
    :class:`APIOptions` of API embedders (a dataclass lists its last base's fields first)."""

    @property
    def specs(self) -> list[str]:
        return self.embedder or [DEFAULT_EMBEDDER]

    @property
    def executor_settings(self) -> Executor:
        from embedeval.embedders.executors import Executor

        return Executor(self.executor, self.workers, self.ray_address)

    def load(self, quiet: bool, plan: bool = False, keys: bool = True) -> list:
        """Expand presets, check availability (echoing what is skipped), then load each embedder
        (``plan``: recording ones, see :func:`~embedeval.embedders.registry.load_embedder`;
        ``keys=False``: an API model whose key is not set is loaded too, for a plan alone)."""
        from embedeval.embedders.registry import load_embedder, select_embedders

        self.executor_settings.check()
        usable, skipped = select_embedders(self.specs, self.skip_unavailable, keys=keys)
        for spec, why in skipped:  # a plan's stdout is the plan (or its JSON)
            typer.echo(f"skipped {spec} ({why})", err=plan)
        return [load_embedder(spec, cache_dir=self.cache_dir, progress=not quiet, executor=self.executor_settings, plan=plan)
                for spec in usable]


@dataclass
class PlanOptions:
    """``--plan`` (``--json``), ``--max-cost``, ``--price``: what a run would embed, send, cost and
    take, before it starts (:mod:`embedeval.plan`)."""

    plan: Annotated[bool, typer.Option("--plan", help="Print what the run would embed, send, cost and take (texts, cached, tokens, requests, time, USD) and the API keys the run will need, and stop: nothing is sent or stored, so no key is needed (a local model embeds a sample of 32 inputs to time itself).")] = False
    as_json: Annotated[bool, typer.Option("--json", help="With --plan: the plan as JSON.")] = False
    max_cost: Annotated[Optional[str], typer.Option("--max-cost", metavar="<float>", help="Refuse to start when the plan's high cost estimate exceeds this many USD (an API model without a price then needs --price).")] = None
    price: Annotated[Optional[list[str]], typer.Option("--price", help="SPEC=USD per million tokens, for a model without a listed price or to override it; repeat for several.")] = None

    #: Whether ``--price`` means something without ``--plan`` or ``--max-cost`` (:class:`RunPlanOptions`).
    price_alone: ClassVar[bool] = False

    def __post_init__(self):  # the plan's options checked before any work
        if self.as_json and not self.plan:
            raise InputError("--json goes with --plan")
        self.ceiling, self.prices = None, {}  # USD, or None; {embedder: USD per million tokens}
        if self.max_cost is not None or self.price:  # a command's default PlanOptions() is made as the CLI is imported
            from embedeval.plan import parse_ceiling, parse_prices

            self.ceiling = parse_ceiling(self.max_cost)
            self.prices = parse_prices(self.price)
        if self.prices and not self.wanted and not self.price_alone:
            raise InputError("--price goes with --plan or --max-cost")

    @property
    def wanted(self) -> bool:
        """Whether the command works out a plan first (to print it, or to keep --max-cost)."""
        return self.plan or self.ceiling is not None

    @property
    def run_follows(self) -> bool:
        """Whether the run follows the plan (no --plan): then its API keys must be set before the
        plan is made; a plan alone sends nothing and needs none."""
        return not self.plan

    def models_after(self, embedders: EmbedderOptions, quiet: bool, work) -> list | None:
        """The models a command embeds with, after its plan: with ``--plan`` or ``--max-cost``,
        ``work(models)`` (the command's embedding steps) first runs on recording models and the plan
        is settled (:meth:`settle`); None when the command stops there (``--plan``)."""
        from embedeval.plan import check_prices_used, plan_of

        if self.wanted:
            recorded = embedders.load(quiet, plan=True, keys=self.run_follows)
            check_prices_used([model.name for model in recorded], self.prices)  # before any work
            work(recorded)
            if self.settle([plan_of(model, self.prices, calibrate=self.plan, progress=not quiet) for model in recorded]):
                return None
        return embedders.load(quiet)

    def settle(self, plans: list) -> bool:
        """Print the plans with ``--plan`` (True: the command stops here), and refuse a run over
        ``--max-cost`` with one error line (the prices were checked before the plan was made:
        :func:`~embedeval.plan.check_prices_used`)."""
        from embedeval.plan import check_max_cost, format_plans, plans_json

        if self.plan:
            typer.echo(plans_json(plans) if self.as_json else format_plans(plans))
        check_max_cost(plans, self.ceiling)
        return self.plan


@dataclass
class RunPlanOptions(PlanOptions):
    """:class:`PlanOptions` of ``embedeval nolima``, whose ``--price`` also goes into the run: the
    decision table's USD per million tokens (recorded in config.json), with or without a plan."""

    price: Annotated[Optional[list[str]], typer.Option("--price", help="SPEC=USD per million tokens: the price of a model for --plan and --max-cost (for a model without a listed price, or to override it) and for decision.csv's usd_per_million_tokens (only prices given here: none is assumed); repeat for several.")] = None
    price_alone: ClassVar[bool] = True


@dataclass
class ChunkOptions:
    """How the similarity commands cut a corpus into chunks: ``--corpus --min-books --chunker --seed``."""

    corpus: CorpusOpt = DEFAULT_CORPUS
    min_books: MinBooksOpt = DEFAULT_MIN_BOOKS
    chunker: Annotated[str, typer.Option("--chunker", help="sentences:N, sentences:A-B or tokens:N.")] = DEFAULT_CHUNKER
    seed: SeedOpt = DEFAULT_SEED

    def check(self) -> None:
        from embedeval.chunking import parse_chunker
        from embedeval.corpus import check_min_books

        parse_chunker(self.chunker)
        check_min_books(self.min_books)

    @property
    def origin(self) -> dict[str, object]:
        """Where the chunks come from, as a chroma collection records it."""
        return {"corpus": self.corpus, "chunker": self.chunker, "seed": self.seed}

    def chunks(self, progress: bool = False) -> list:
        """The corpus (at least ``--min-books`` books) cut into chunks (through the chunk cache:
        :func:`~embedeval.chunking.corpus_chunks`, shared with ``embedeval themes``); ``progress``:
        a step line while the corpus is first downloaded."""
        from embedeval.chunking import corpus_chunks
        from embedeval.corpus import load_corpus, require_books

        corpus = load_corpus(self.corpus, progress=progress)
        require_books(corpus, self.min_books, purpose="chunks are drawn from")
        return corpus_chunks(corpus, self.chunker, seed=self.seed)


@dataclass
class ThemeOptions:
    """``embedeval themes``: the corpus and how it is chunked and embedded, UMAP, HDBSCAN, MMR (the
    study's settings by default)."""

    corpus: CorpusOpt = DEFAULT_CORPUS
    min_books: MinBooksOpt = DEFAULT_MIN_BOOKS
    chunker: Annotated[str, typer.Option("--chunker", help="sentences:N, sentences:A-B or tokens:N.")] = DEFAULT_THEME_CHUNKER
    embedder: Annotated[str, typer.Option("--embedder", "-e", help="Embedder spec.")] = DEFAULT_EMBEDDER
    # UMAP: the space HDBSCAN clusters in
    umap_neighbors: Annotated[int, typer.Option("--umap-neighbors", help="UMAP n_neighbors.")] = DEFAULT_UMAP_NEIGHBORS
    umap_min_dist: Annotated[float, typer.Option("--umap-min-dist", help="UMAP min_dist.")] = DEFAULT_UMAP_MIN_DIST
    umap_components: Annotated[int, typer.Option("--umap-components", help="UMAP n_components.")] = DEFAULT_UMAP_COMPONENTS
    # HDBSCAN
    min_cluster_size: Annotated[int, typer.Option("--min-cluster-size", help="HDBSCAN min_cluster_size.")] = DEFAULT_MIN_CLUSTER_SIZE
    min_samples: Annotated[int, typer.Option("--min-samples", help="HDBSCAN min_samples.")] = DEFAULT_MIN_SAMPLES
    # each cluster's representatives, and the random choices
    representatives: Annotated[int, typer.Option("--representatives", help="Representative chunks per cluster, by maximal marginal relevance.")] = DEFAULT_REPRESENTATIVES
    mmr_lambda: Annotated[float, typer.Option("--mmr-lambda", help="MMR's trade-off: 1 = relevance to the cluster only, 0 = diversity only.")] = DEFAULT_MMR_LAMBDA
    seed: Annotated[int, typer.Option("--seed", help="UMAP's random_state (the study's 42).")] = DEFAULT_THEME_SEED
    chunk_seed: Annotated[int, typer.Option("--chunk-seed", help="Seed the chunk sizes are drawn with: the similarity commands' --seed, whose default it shares, so both cut a corpus into the same chunks (cached) and embed them once.")] = DEFAULT_SEED

    def config(self, out):
        """The :class:`~embedeval.experiments.themes.ThemesConfig` of these options, writing to ``out``."""
        from embedeval.experiments.themes import HdbscanSettings, ThemesConfig, UmapSettings

        return ThemesConfig(self.corpus, self.min_books, self.chunker, self.embedder,
                            UmapSettings(self.umap_neighbors, self.umap_min_dist, self.umap_components),
                            HdbscanSettings(self.min_cluster_size, self.min_samples), self.representatives, self.mmr_lambda,
                            seed=self.seed, chunk_seed=self.chunk_seed, out=str(out))


def with_option_groups(command):
    """Let ``command`` take option groups: each parameter annotated with a dataclass is replaced,
    in the signature typer reads, by that dataclass's fields, and rebuilt from them on each call."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type] = {}
    params: list[inspect.Parameter] = []
    for param in inspect.signature(command).parameters.values():
        kind = hints[param.name]
        if dataclasses.is_dataclass(kind):
            groups[param.name] = kind
            fields = inspect.signature(kind, eval_str=True).parameters.values()
            params += [field.replace(kind=inspect.Parameter.KEYWORD_ONLY) for field in fields]
        else:
            params.append(param.replace(annotation=kind, kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def run(**options):
        for name, kind in groups.items():
            options[name] = kind(**{f.name: options.pop(f.name) for f in dataclasses.fields(kind)})
        return command(**options)

    names = [p.name for p in params]
    if len(set(names)) < len(names):
        raise TypeError(f"{command.__name__}: option groups share an option name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    run.__signature__ = inspect.Signature(params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run
