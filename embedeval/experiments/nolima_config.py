"""The settings of a NoLiMa sweep (:class:`NolimaConfig`) and their checks, apart from the sweep
itself (:mod:`embedeval.experiments.nolima`): a command makes and checks them before it imports
the tables' libraries or loads a model, so a setting that cannot work is refused at once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from numbers import Integral
from pathlib import Path

from embedeval import options
from embedeval.bounds import HAYSTACK_BYTES_PER_TOKEN, MemoryEstimate, MemoryPart, bootstrap_bytes, position_table_bytes, process_bytes, weights_bytes
from embedeval.break_rule import BreakRule
from embedeval.corpus import absolute_source
from embedeval.defaults import DEFAULT_NEEDLES
from embedeval.embedders.executors import Executor
from embedeval.embedders.registry import LEXICAL_SPECS, embedder_name, select_embedders
from embedeval.embedders.stretch_methods import READS_L
from embedeval.embedders.tokens import DEFAULT_REFERENCE
from embedeval.errors import ConfigError
from embedeval.grid import HAYSTACK_FORMAT, HaystackGrid
from embedeval.io import absolute_path
from embedeval.needles import NeedleSet, check_normalize_by, grid_needle_set
from embedeval.options import check_options, is_price
from embedeval.ownership import file_sha256
from embedeval.plan import check_prices_used
from embedeval.strategies import parse_strategies
from embedeval.strategies.support import ModelFolders, check_strategy_support
from embedeval.text import SENTENCE_SPLITTER

#: Settings beside the grid that determine the haystacks; a run directory's haystacks are reused
#: when they and the grid match (with the needle file's hash and the sentence splitter, see
#: ``haystack_settings``).
HAYSTACK_KEYS = ("needles", "groups", "distractors_file", "tokenizer")


@dataclass(frozen=True)
class NolimaConfig:
    """Everything a sweep depends on (written to ``config.json``, the grid nested under
    ``grid``). Frozen: a copy with changes is ``dataclasses.replace(config, ...)``."""

    embedders: tuple[str, ...] = options.EMBEDDERS.field()
    needles: str = options.NEEDLES.field(default=str(DEFAULT_NEEDLES))
    groups: tuple[str, ...] | None = options.GROUPS.field()  # group ids to run (None: every group of the needle set)
    grid: HaystackGrid = field(default_factory=HaystackGrid)  # the haystack grid, validated when made
    distractors_file: str | None = options.DISTRACTORS_FILE.field()  # distractors by group, replacing the needle file's (load_distractors)
    out: str = options.NOLIMA_OUT.field()
    tokenizer: str = DEFAULT_REFERENCE
    # the headline break point: "relative" (recall@k vs the shortest lengths) or "absolute" (a metric and the value it must keep)
    break_rule: str = options.BREAK_RULE.field()
    break_k: int = options.BREAK_K.field()  # relative rule: recall@k
    break_metric: str = options.BREAK_METRIC.field()  # absolute rule: the metric ...
    break_threshold: float = options.BREAK_THRESHOLD.field()  # ... and the value it must keep
    normalize_by: str = options.NORMALIZE_BY.field()  # "standard" (the study's divisor) or "own"
    pool: str = options.POOL.field()  # what a needle haystack is ranked among: "needle-free" or "all" (similarity.retrieval_rows)
    strategies: tuple[str, ...] = options.STRATEGIES.field()  # how long haystacks are read
    chunk_tokens: tuple[int, ...] = options.CHUNK_TOKENS.field()
    window_overlap: int = options.WINDOW_OVERLAP.field()  # windows-mean: tokens shared by neighbouring windows
    late_overlap: int = options.LATE_OVERLAP.field()
    dedupe: bool = True  # embed each distinct token-id sequence once (False: every text whole; same tables)
    executor: str = options.EXECUTOR.field()  # where cache misses are embedded: "local" or "ray" (same tables)
    workers: int = options.WORKERS.field()  # Ray actors
    ray_address: str | None = options.RAY_ADDRESS.field()  # "auto", "ray://HOST:PORT"; None: EMBEDEVAL_RAY_ADDRESS, else a local Ray
    n_bootstrap: int = options.N_BOOTSTRAP.field()
    skip_unavailable: bool = options.SKIP_UNAVAILABLE.field()
    expansions: tuple[str, ...] = options.EXPANSIONS.field()  # expansion files -> query forms expanded-N
    #: USD per million tokens sent, per embedder name (``--price``): the decision table's
    #: ``usd_per_million_tokens``; none by default (prices change: only what the user gives)
    prices: dict[str, float] = options.RUN_PRICES.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("embedders", "groups", "strategies", "chunk_tokens", "expansions"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                one = isinstance(value, str) or not isinstance(value, Iterable)  # 128 or "onehop" for (128,): checked later, as a list
                object.__setattr__(self, name, (value,) if one else tuple(value))

    def validate(self, keys: bool = True) -> NeedleSet:
        """Check everything that can be checked without work (:meth:`check`) and read the needle
        set; returns it."""
        return self.validated(keys)[0]

    def validated(self, keys: bool = True) -> tuple[NeedleSet, list[str], list[tuple[str, str]]]:
        """:meth:`validate`'s needle set, with the embedders :meth:`check` found usable and those it
        skipped (a run or plan goes on with them, not asking again)."""
        usable, skipped = self.check(keys)
        needle_set = self.needle_set()
        self.memory(needle_set, usable).check()  # a run past this machine's memory: one line, before the haystacks are built
        return needle_set, usable, skipped

    def needle_set(self) -> NeedleSet:
        """The needle set the grid is built from (:func:`~embedeval.needles.grid_needle_set`)."""
        return grid_needle_set(self.needles, self.groups, self.grid.variants, self.grid.distractor_counts, self.distractors_file)

    def memory(self, needle_set: NeedleSet, embedders: list[str] | None = None) -> MemoryEstimate:
        """The run's peak memory, estimated from its settings before it starts (``--plan`` prints
        it; :meth:`validated` refuses a run past :func:`~embedeval.bounds.machine_memory`):

        - haystacks: ``sum(lengths) x (2 N + negatives) x`` :data:`~embedeval.bounds.HAYSTACK_BYTES_PER_TOKEN`,
          ``N = groups x variants x depths x distractor counts x needle counts`` the needle
          haystacks of a length (each with at most one control);
        - bootstrap: :func:`~embedeval.bounds.bootstrap_bytes` of ``n_bootstrap`` resamples of the
          groups, ``depths`` rows each (a cell of the metrics);
        - position table: the largest ``extend-pi@L``'s :func:`~embedeval.bounds.position_table_bytes`
          over the ``st:`` ``embedders`` (default: the run's) whose folder names its width;
        - process: :data:`~embedeval.bounds.PROCESS_BYTES` (the interpreter and the libraries every
          sweep imports), plus :data:`~embedeval.bounds.LOCAL_RUNTIME_BYTES` (torch) when any of
          ``embedders`` is a local ``st:`` model (:func:`~embedeval.bounds.process_bytes`);
        - weights of each local ``st:`` embedder: its weight files' size on disk x
          :data:`~embedeval.bounds.WEIGHT_MEMORY_FACTOR` (:func:`~embedeval.bounds.weights_bytes`;
          every model is loaded before the sweep and held to its end). API models and ``bm25``
          hold none here.

        Not counted: the vectors of one batch (a model's own, bounded by its batch settings)."""
        groups = max(1, len(needle_set.groups))
        grid = self.grid
        specs = self.embedders if embedders is None else embedders
        local = [spec for spec in dict.fromkeys(specs) if spec.partition(":")[0] == "st"]
        needle_haystacks = groups * len(grid.variants) * grid.depths * len(grid.distractor_counts) * len(grid.needles_per_haystack)
        parts = {
            "haystacks": MemoryPart(sum(grid.lengths) * (2 * needle_haystacks + grid.negatives) * HAYSTACK_BYTES_PER_TOKEN,
                                    "lower `negatives`, `depths` or the longest of `lengths`", ("negatives", "depths", "lengths")),
            "bootstrap": MemoryPart(bootstrap_bytes(self.n_bootstrap, groups, grid.depths), "lower `n_bootstrap`", ("n_bootstrap",)),
        }
        stretched = [s for s in self.strategy_list() if s.stretch is not None and s.stretch.method in READS_L]
        widths = [w for w in (ModelFolders.width(spec) for spec in local) if w] if stretched else []
        if widths:
            longest = max(s.read_tokens for s in stretched)
            parts["position table"] = MemoryPart(position_table_bytes(longest, max(widths)), f"lower L of extend-pi@{longest}")
        parts["process"] = MemoryPart(process_bytes(len(local)), "use a machine with more memory (the process is the interpreter "
                                      "and its libraries, torch with a local model: no setting lowers it)")
        for spec in local:
            parts[f"weights of {spec}"] = MemoryPart(weights_bytes(ModelFolders.weight_bytes(spec)),
                                                     f"use a smaller model than {spec} or fewer local models", ("embedders",))
        return MemoryEstimate(parts)

    def check(self, keys: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
        """Check the settings (the grid checked itself when it was made), with no model loaded and
        none of the tables' libraries imported: a command refuses a bad setting at once.
        ``keys``: whether API keys must be set. Returns what :meth:`usable_embedders` found, as
        checked (the usable embedders, the skipped ones with why)."""
        check_normalize_by(self.normalize_by)
        # the lists' items (a number among the embedders or strategies was an AttributeError, True a group id)
        for name, what, kinds in (("embedders", "embedder specs", str), ("strategies", "strategy names", str),
                                  ("chunk_tokens", "chunk sizes", Integral), ("groups", "group ids", str),
                                  ("expansions", "expansion file paths", (str, Path))):
            value = getattr(self, name)
            if value is None and name != "groups":  # groups None: every group
                raise ConfigError(f"`{name}` must be a list of {what}, not None", name)
            odd = next((v for v in value or () if not isinstance(v, kinds) or isinstance(v, bool)), None)
            if odd is not None:
                raise ConfigError(f"`{name}` must be a list of {what}, not one holding {odd!r}", name)
        if not isinstance(self.dedupe, bool):  # "no" would read as true
            raise ConfigError(f"`dedupe` must be true or false, not {self.dedupe!r}", "dedupe")
        if not isinstance(self.tokenizer, str):
            raise ConfigError(f"`tokenizer` must be a tokenizer's name, not {self.tokenizer!r}", "tokenizer")
        check_options(self)  # each setting's own constraint (embedeval.options): the pool, the resamples
        self.rule().check()
        strategies = self.strategy_list()
        self.executor_settings().check()
        embedders, skipped = self.usable_embedders(keys)
        self.check_prices(embedders)
        check_strategy_support(embedders, strategies, self.executor)
        return embedders, skipped

    def usable_embedders(self, keys: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
        """(the embedders that can run here, [(skipped spec, why)]): presets expanded, and an
        unusable one refused unless ``skip_unavailable`` (:func:`~embedeval.embedders.registry.select_embedders`;
        ``keys=False``, for a plan alone: an API model whose key is not set counts as usable)."""
        if not self.embedders:
            raise ConfigError("no `embedders` given", "embedders")
        return select_embedders(list(self.embedders), self.skip_unavailable, lexical=True, keys=keys)

    def check_prices(self, embedders: list[str]) -> None:
        """One :class:`~embedeval.errors.ConfigError` for a price that is not a number of USD >= 0, or
        one for an embedder the run does not have (:func:`~embedeval.plan.check_prices_used`)."""
        for name, price in self.prices.items():
            if not is_price(price):
                raise ConfigError(f"`prices` takes USD per million tokens >= 0, not {price!r} for {name}", "prices")
        check_prices_used([embedder_name(spec) for spec in embedders if spec not in LEXICAL_SPECS], self.prices)

    def strategy_list(self) -> list:
        """The strategies the run reads haystacks with (:func:`~embedeval.strategies.parse_strategies`)."""
        return parse_strategies(list(self.strategies), list(self.chunk_tokens), self.window_overlap, self.late_overlap)

    def rule(self) -> BreakRule:
        """How the report reads the break point."""
        return BreakRule(self.break_rule, self.break_k, self.break_metric, self.break_threshold)

    def executor_settings(self) -> Executor:
        """Where the run's cache misses are embedded."""
        return Executor(self.executor, self.workers, self.ray_address)

    def recorded(self) -> dict:
        """The settings as config.json records them (:func:`~dataclasses.asdict`, the grid nested),
        with the corpus folder or file and the needle, distractors and expansion files as absolute
        paths: ``export`` and ``report`` may read the run from another folder."""
        settings = asdict(self)
        settings["grid"]["corpus"] = absolute_source(self.grid.corpus)
        settings["needles"] = absolute_path(self.needles)
        if self.distractors_file is not None:
            settings["distractors_file"] = absolute_path(self.distractors_file)
        settings["expansions"] = tuple(absolute_path(path) for path in self.expansions)
        return settings

    def haystack_settings(self) -> dict:
        """The settings the haystacks depend on (the grid's and :data:`HAYSTACK_KEYS`), with a
        hash of the needle file's content, the sentence splitter and the build format (haystacks
        cut by another splitter or built by another format are rebuilt, not reused)."""
        # as JSON gives them back from haystacks.json (lists, not tuples)
        settings = json.loads(json.dumps({**self.grid.haystack_settings(), **{k: getattr(self, k) for k in HAYSTACK_KEYS}}))
        settings["needles_sha256"] = file_sha256(Path(self.needles))
        if self.distractors_file:
            settings["distractors_sha256"] = file_sha256(Path(self.distractors_file))
        settings["splitter"] = SENTENCE_SPLITTER
        settings["format"] = HAYSTACK_FORMAT
        return settings
