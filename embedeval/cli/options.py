"""The command line's side of :mod:`embedeval.options`: typer parameters built from the declared
options (:func:`as_typer`: flag, help, environment variable and default from the one declaration),
the option groups several ``embedeval`` commands share, and the translation of a library error's
parameters into flags (:func:`in_flag_words`).

An option group is a dataclass whose fields are typer options. A command decorated with
:func:`with_option_groups` takes a group as one parameter (``needles: NeedleOptions``); typer
sees the group's fields as the command's own options, and the command receives the group built
from them. So ``--needles``/``--groups``, the haystack grid, the embedder list and the corpus
chunking are used by every command that needs them and parsed in one place; a group may also be
made from a list of options alone (:func:`option_group`: ``embedeval nolima``'s sweep settings).

A command decorated so also receives the command's :class:`~embedeval.io.Force` (``embedeval
--force``) in a parameter annotated with it, and has its ``--out`` checked before it runs
(:func:`out_option`: the file the command's :class:`~embedeval.options.Output` takes).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer
from rich.markup import escape

from embedeval import options as declared
from embedeval.embedders import budget
from embedeval.errors import InputError
from embedeval.io import Force, check_output_file
from embedeval.options import (
    CACHE_DIR,
    CHROMA_URL,
    CHUNKER,
    CORPUS,
    DISTRACTORS_FILE,
    EMBEDDER,
    EMBEDDERS,
    EXECUTOR,
    GROUPS,
    LLM,
    MIN_BOOKS,
    NEEDLES,
    OUTPUTS,
    PAIRS,
    PRICES,
    QUIET,
    RAY_ADDRESS,
    SEED,
    SKIP_UNAVAILABLE,
    WORKERS,
    Option,
    Output,
)

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


def as_typer(option: Option, *extra, callback=None, is_eager: bool = False):
    """The typer parameter of a declared option (:mod:`embedeval.options`): its command-line type
    annotated with ``typer.Option``, whose flag (and its ``off`` flag), help (shown as written:
    :func:`literal`), environment variable and metavar all come from the one declaration; ``extra``:
    more metadata (an :class:`~embedeval.options.Output`, read by :func:`with_option_groups`);
    ``callback``, ``is_eager``: typer's, for an option acted on as it is parsed (``--version``). Its
    default is ``option.cli_default``, given where the parameter is."""
    flag = f"{option.flag}/{option.off}" if option.off else option.flag
    names = [flag, option.short] if option.short else [flag]
    typer_option = typer.Option(*names, help=literal(option.help_text), envvar=option.envvar, metavar=option.metavar,
                                callback=callback, is_eager=is_eager)
    return Annotated[(option.cli_type, typer_option, *extra)]


def out_option(command: str):
    """``--out`` of ``command`` (its words in :data:`embedeval.options.OUTPUTS`) as a typer
    parameter; :func:`with_option_groups` checks a file output before the command runs."""
    output = OUTPUTS[command]
    return as_typer(output.option, output)


def check_out(output: Output, options: dict, force: Force) -> None:
    """Refuse, before the command's work, an ``--out`` that cannot become the file ``output`` takes
    (:func:`~embedeval.io.check_output_file`; ``force``: the command's ``embedeval --force``), or
    one that is the input it names in ``not_input``. A folder output is its writer's to check."""
    out = options["out"]
    if output.not_input is not None:
        name, words = output.not_input
        if out.resolve() == options[name].resolve():
            raise InputError(f"--out {out} is {words}")
    if output.suffixes:
        check_output_file(out, output.suffixes, force)


CacheDir = as_typer(CACHE_DIR)
Quiet = as_typer(QUIET)
CorpusOpt = as_typer(CORPUS)
MinBooksOpt = as_typer(MIN_BOOKS)
SeedOpt = as_typer(SEED)
DistractorsFileOpt = as_typer(DISTRACTORS_FILE)
ChatModelOpt = as_typer(LLM)
ChromaUrlOpt = as_typer(CHROMA_URL)
EmbedderOpt = as_typer(EMBEDDER)


@dataclass
class NeedleOptions:
    """``--needles FILE --groups ID,ID``: which needle set, and which of its groups."""

    needles: as_typer(NEEDLES) = NEEDLES.cli_default
    groups: as_typer(GROUPS) = GROUPS.cli_default

    @property
    def path(self) -> Path:
        return NEEDLES.value(self.needles)

    @property
    def group_ids(self) -> list[str] | None:
        return GROUPS.value(self.groups)

    def load(self):
        """The needle set, restricted to ``--groups`` if given."""
        from embedeval.needles import load_needle_set

        needle_set = load_needle_set(self.path)
        return needle_set if self.group_ids is None else needle_set.subset(self.group_ids)


@dataclass
class PairOptions:
    """``--pairs FILE``: question-needle pairs instead of a needle set (the similarity commands)."""

    pairs: as_typer(PAIRS) = PAIRS.cli_default

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

    corpus: CorpusOpt = CORPUS.cli_default
    min_books: MinBooksOpt = MIN_BOOKS.cli_default
    filler: as_typer(declared.FILLER) = declared.FILLER.cli_default
    lengths: as_typer(declared.LENGTHS) = declared.LENGTHS.cli_default
    depths: as_typer(declared.DEPTHS) = declared.DEPTHS.cli_default
    variants: as_typer(declared.VARIANTS) = declared.VARIANTS.cli_default
    seed: SeedOpt = SEED.cli_default
    negatives: as_typer(declared.NEGATIVES) = declared.NEGATIVES.cli_default
    n_distractors: as_typer(declared.N_DISTRACTORS) = declared.N_DISTRACTORS.cli_default
    distractors_file: DistractorsFileOpt = DISTRACTORS_FILE.cli_default
    needles_per_haystack: as_typer(declared.NEEDLES_PER_HAYSTACK) = declared.NEEDLES_PER_HAYSTACK.cli_default

    def haystack_grid(self, controls: bool = True):
        """The :class:`~embedeval.grid.HaystackGrid` of these options (checked as it is made,
        before any work); ``haystacks build`` and ``nolima`` both make theirs here."""
        from embedeval.grid import HaystackGrid

        return HaystackGrid(corpus=self.corpus, lengths=declared.LENGTHS.value(self.lengths), depths=self.depths,
                            variants=declared.VARIANTS.value(self.variants), negatives=self.negatives,
                            n_distractors=declared.N_DISTRACTORS.value(self.n_distractors),
                            needles_per_haystack=declared.NEEDLES_PER_HAYSTACK.value(self.needles_per_haystack),
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


def flag_of(parameter: str) -> str | None:
    """The command-line flag of a library parameter (:func:`embedeval.options.flag_of`: its declared
    option's, ``umap.min_dist`` -> ``--umap-min-dist``); None for an option written in an embedder's
    spec (``dtype`` in ``st:NAME?dtype=float16``), which the command line names as the library does."""
    if parameter in spec_options():
        return None
    return declared.flag_of(parameter)


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
    for item in declared.split_list(value or ""):
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

    api_workers: as_typer(declared.API_WORKERS) = declared.API_WORKERS.cli_default
    rpm: as_typer(declared.RPM) = declared.RPM.cli_default
    tpm: as_typer(declared.TPM) = declared.TPM.cli_default

    def __post_init__(self):
        budget.configure(rpm=budget_map(self.rpm, declared.RPM.flag), tpm=budget_map(self.tpm, declared.TPM.flag), workers=self.api_workers)


@dataclass
class _EmbedderChoice:
    embedder: as_typer(EMBEDDERS) = EMBEDDERS.cli_default
    skip_unavailable: as_typer(SKIP_UNAVAILABLE) = SKIP_UNAVAILABLE.cli_default
    cache_dir: CacheDir = CACHE_DIR.cli_default
    executor: as_typer(EXECUTOR) = EXECUTOR.cli_default
    workers: as_typer(WORKERS) = WORKERS.cli_default
    ray_address: as_typer(RAY_ADDRESS) = RAY_ADDRESS.cli_default


@dataclass
class EmbedderOptions(APIOptions, _EmbedderChoice):
    """``--embedder`` (repeatable, presets allowed), ``--skip-unavailable``, ``--cache-dir`` and
    where local models embed (``--executor``, ``--workers``, ``--ray-address``), then the
    :class:`APIOptions` of API embedders (a dataclass lists its last base's fields first)."""

    @property
    def specs(self) -> list[str]:
        return EMBEDDERS.value(self.embedder)

    @property
    def executor_settings(self) -> Executor:
        from embedeval.embedders.executors import Executor

        return Executor(self.executor, self.workers, self.ray_address)

    def load(self, quiet: bool, plan: bool = False, keys: bool = True, say_skipped: bool = True) -> list:
        """Expand presets, check availability (echoing what is skipped, unless ``say_skipped`` is
        false: the run that follows a plan says it), then load each embedder (``plan``: recording
        ones, see :func:`~embedeval.embedders.registry.load_embedder`; ``keys=False``: an API model
        whose key is not set is loaded too, for a plan alone)."""
        from embedeval.embedders.registry import load_embedder, select_embedders

        self.executor_settings.check()
        usable, skipped = select_embedders(self.specs, self.skip_unavailable, keys=keys)
        for spec, why in skipped if say_skipped else ():  # a plan's stdout is the plan (or its JSON)
            typer.echo(f"skipped {spec} ({why})", err=plan)
        return [load_embedder(spec, cache_dir=self.cache_dir, progress=not quiet, executor=self.executor_settings, plan=plan)
                for spec in usable]


@dataclass
class PlanOptions:
    """``--plan`` (``--json``), ``--max-cost``, ``--price``: what a run would embed, send, cost and
    take, before it starts (:mod:`embedeval.plan`). A command that embeds plans so before it
    embeds, with these options or without them (:meth:`settle`: then the plan is said in a line
    per embedder on stderr)."""

    plan: as_typer(declared.PLAN) = declared.PLAN.cli_default
    as_json: as_typer(declared.AS_JSON) = declared.AS_JSON.cli_default
    max_cost: as_typer(declared.MAX_COST) = declared.MAX_COST.cli_default
    price: as_typer(PRICES) = PRICES.cli_default

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
        """Whether the command is asked for a plan (to print it, or to keep --max-cost)."""
        return self.plan or self.ceiling is not None

    @property
    def given(self) -> list[str]:
        """The flags of these options that were given (for a command that makes no plan to refuse them)."""
        given = {"--plan": self.plan, "--max-cost": self.max_cost is not None, "--price": bool(self.price)}
        return [flag for flag, on in given.items() if on]

    @property
    def run_follows(self) -> bool:
        """Whether the run follows the plan (no --plan): then its API keys must be set before the
        plan is made; a plan alone sends nothing and needs none."""
        return not self.plan

    def models_after(self, embedders: EmbedderOptions, quiet: bool, work) -> list | None:
        """The models a command embeds with, after its plan: ``work(models)`` (the command's
        embedding steps) first runs on recording models and the plan is settled (:meth:`settle`);
        None when the command stops there (``--plan``)."""
        from embedeval.plan import record_plans

        recorded = embedders.load(quiet, plan=True, keys=self.run_follows, say_skipped=self.plan)
        if self.settle(record_plans(recorded, work, self.prices, calibrate=self.plan, progress=not quiet)):
            return None
        return embedders.load(quiet)

    def settle(self, plans: list, memory=None) -> bool:
        """Print the plans with ``--plan`` (True: the command stops here), with the run's estimated
        peak memory where the command gives it (``memory``, :class:`~embedeval.bounds.MemoryEstimate`); refuse a run over
        ``--max-cost`` with one error line (the prices were checked before the plan was made:
        :func:`~embedeval.plan.check_prices_used`); else say what the run will embed, a line per
        embedder on stderr (:func:`~embedeval.plan.forecast_line`), before it embeds."""
        from embedeval.plan import check_max_cost, forecast_line, format_plans, plans_json

        if self.plan:
            typer.echo(plans_json(plans, memory) if self.as_json else format_plans(plans, memory))
        check_max_cost(plans, self.ceiling)
        if not self.plan:
            for plan in plans:
                typer.echo(forecast_line(plan), err=True)
        return self.plan


@dataclass
class RunPlanOptions(PlanOptions):
    """:class:`PlanOptions` of ``embedeval nolima``, whose ``--price`` also goes into the run: the
    decision table's USD per million tokens (recorded in config.json), with or without a plan."""

    price: as_typer(declared.RUN_PRICES) = declared.RUN_PRICES.cli_default
    price_alone: ClassVar[bool] = True


@dataclass
class ChunkOptions:
    """How the similarity commands cut a corpus into chunks: ``--corpus --min-books --chunker --seed``."""

    corpus: CorpusOpt = CORPUS.cli_default
    min_books: MinBooksOpt = MIN_BOOKS.cli_default
    chunker: as_typer(CHUNKER) = CHUNKER.cli_default
    seed: SeedOpt = SEED.cli_default

    def check(self) -> None:
        from embedeval.chunking import parse_chunker
        from embedeval.corpus import check_min_books

        parse_chunker(self.chunker)
        check_min_books(self.min_books)
        SEED.check(self.seed)  # -1 was numpy's 'expected non-negative integer' traceback while cutting the corpus

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

    corpus: CorpusOpt = CORPUS.cli_default
    min_books: MinBooksOpt = MIN_BOOKS.cli_default
    chunker: as_typer(declared.THEME_CHUNKER) = declared.THEME_CHUNKER.cli_default
    embedder: EmbedderOpt = EMBEDDER.cli_default
    # UMAP: the space HDBSCAN clusters in
    umap_neighbors: as_typer(declared.UMAP_NEIGHBORS) = declared.UMAP_NEIGHBORS.cli_default
    umap_min_dist: as_typer(declared.UMAP_MIN_DIST) = declared.UMAP_MIN_DIST.cli_default
    umap_components: as_typer(declared.UMAP_COMPONENTS) = declared.UMAP_COMPONENTS.cli_default
    # HDBSCAN
    min_cluster_size: as_typer(declared.MIN_CLUSTER_SIZE) = declared.MIN_CLUSTER_SIZE.cli_default
    min_samples: as_typer(declared.MIN_SAMPLES) = declared.MIN_SAMPLES.cli_default
    # each cluster's representatives, and the random choices
    representatives: as_typer(declared.REPRESENTATIVES) = declared.REPRESENTATIVES.cli_default
    mmr_lambda: as_typer(declared.MMR_LAMBDA) = declared.MMR_LAMBDA.cli_default
    seed: as_typer(declared.THEME_SEED) = declared.THEME_SEED.cli_default
    runs: as_typer(declared.THEME_RUNS) = declared.THEME_RUNS.cli_default
    neighbourhood: as_typer(declared.THEME_NEIGHBOURHOOD) = declared.THEME_NEIGHBOURHOOD.cli_default
    chunk_seed: as_typer(declared.CHUNK_SEED) = declared.CHUNK_SEED.cli_default

    def config(self, out):
        """The :class:`~embedeval.experiments.themes.config.ThemesConfig` of these options, writing to ``out``."""
        from embedeval.experiments.themes.config import HdbscanSettings, ThemesConfig, UmapSettings

        return ThemesConfig(self.corpus, self.min_books, self.chunker, self.embedder,
                            UmapSettings(self.umap_neighbors, self.umap_min_dist, self.umap_components),
                            HdbscanSettings(self.min_cluster_size, self.min_samples), self.representatives, self.mmr_lambda,
                            seed=self.seed, runs=self.runs, neighbourhood=self.neighbourhood, chunk_seed=self.chunk_seed, out=str(out))


def option_group(name: str, options: tuple[Option, ...], doc: str) -> type:
    """A dataclass for :func:`with_option_groups` whose fields are ``options`` as typer options (named
    by their parameters, in the order ``--help`` lists them); its ``settings()`` gives the library's
    value of each (:meth:`~embedeval.options.Option.value`), by parameter."""
    def settings(self) -> dict:
        return {option.parameter: option.value(getattr(self, option.parameter)) for option in options}

    fields = [(option.parameter, as_typer(option), dataclasses.field(default=option.cli_default)) for option in options]
    return dataclasses.make_dataclass(name, fields, namespace={"settings": settings, "__doc__": doc})


#: ``embedeval nolima``'s settings beside its embedders, needles and grid: the break rule, the cache
#: commits, the resamples, the normalisation, the pool, the expansions and the strategies.
SweepOptions = option_group("SweepOptions", (
    declared.BREAK_RULE, declared.BREAK_K, declared.BREAK_METRIC, declared.BREAK_THRESHOLD, declared.COMMIT_EVERY, declared.N_BOOTSTRAP,
    declared.NORMALIZE_BY, declared.POOL, declared.EXPANSIONS, declared.STRATEGIES, declared.CHUNK_TOKENS, declared.WINDOW_OVERLAP,
    declared.LATE_OVERLAP), "The settings of a NoLiMa sweep besides its embedders, needles and grid (NolimaConfig's), and its cache commits.")


#: The name under which :func:`with_option_groups` asks typer for the command's context.
_CONTEXT = "_embedeval_context"


def with_option_groups(command):
    """Let ``command`` take option groups: each parameter annotated with a dataclass is replaced,
    in the signature typer reads, by that dataclass's fields, and rebuilt from them on each call.
    A parameter annotated :class:`~embedeval.io.Force` is no option: it receives the command's
    ``embedeval --force`` (made by the ``embedeval`` callback, the root context's ``obj``); an
    ``--out`` of :func:`out_option` is checked (:func:`check_out`) before the command runs."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type] = {}
    params: list[inspect.Parameter] = []
    forced = [name for name, kind in hints.items() if kind is Force]
    output = next((meta for meta in getattr(hints.get("out"), "__metadata__", ()) if isinstance(meta, Output)), None)
    for param in inspect.signature(command).parameters.values():
        kind = hints[param.name]
        if param.name in forced:
            continue
        if dataclasses.is_dataclass(kind):
            groups[param.name] = kind
            fields = inspect.signature(kind, eval_str=True).parameters.values()
            params += [field.replace(kind=inspect.Parameter.KEYWORD_ONLY) for field in fields]
        else:
            params.append(param.replace(annotation=kind, kind=inspect.Parameter.KEYWORD_ONLY))
    own_context = next((name for name, kind in hints.items() if kind is typer.Context), None)  # the command's own, if it takes it
    if own_context is None:
        params.append(inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))

    @functools.wraps(command)
    def run(**options):
        root = (options[own_context] if own_context else options.pop(_CONTEXT)).find_root()
        force = root.obj if isinstance(root.obj, Force) else Force()
        for name, kind in groups.items():
            options[name] = kind(**{f.name: options.pop(f.name) for f in dataclasses.fields(kind)})
        if output is not None:
            check_out(output, options, force)
        return command(**options, **{name: force for name in forced})

    names = [p.name for p in params]
    if len(set(names)) < len(names):
        raise TypeError(f"{command.__name__}: option groups share an option name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    run.__signature__ = inspect.Signature(params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run
