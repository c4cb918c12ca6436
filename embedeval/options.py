"""Every option of embedeval declared once, as scikit-learn's ``_parameter_constraints`` declare
each parameter once: its library parameter (the settings' field and ``config.json`` key), its
command-line flag, its help, its default (from :mod:`embedeval.defaults`) and what its value must
hold (a :class:`Constraint`).

The library checks a setting with its option (:func:`check_options`, run by
:meth:`~embedeval.experiments.nolima_config.NolimaConfig.check`), the command line builds its flags
from the same options (``embedeval.cli.options``) and says a library error in its flags' words
(:func:`flag_of`): so a command and a library call refuse the same values with the same words.

Light on purpose (the command line imports it before answering ``--help``): only the defaults, the
labels and the errors.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from embedeval.bounds import MAX_DRAFT_ATTEMPTS, MAX_N_BOOTSTRAP, MAX_PER_THEME, MAX_THEME_RUNS
from embedeval.defaults import (
    DEFAULT_ABSENCE_TOP_K,
    DEFAULT_BLEND_THRESHOLD,
    DEFAULT_BREAK_K,
    DEFAULT_BREAK_METRIC,
    DEFAULT_BREAK_RULE,
    DEFAULT_BREAK_THRESHOLD,
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_CHUNKER,
    DEFAULT_COMMIT_EVERY,
    DEFAULT_CORPUS,
    DEFAULT_DEPTHS,
    DEFAULT_DRAFT_ATTEMPTS,
    DEFAULT_DRAFT_PER_THEME,
    DEFAULT_EMBEDDER,
    DEFAULT_EXECUTOR,
    DEFAULT_EXPANSION_SIZES,
    DEFAULT_FILLER,
    DEFAULT_INDEX,
    DEFAULT_LATE_CHUNKING_OVERLAP,
    DEFAULT_LENGTHS,
    DEFAULT_MIN_BOOKS,
    DEFAULT_MIN_CLUSTER_SIZE,
    DEFAULT_MIN_OUTSIDE_PERCENTILE,
    DEFAULT_MIN_SAMPLES,
    DEFAULT_MMR_LAMBDA,
    DEFAULT_N_BOOTSTRAP,
    DEFAULT_N_DISTRACTORS,
    DEFAULT_NEEDLES,
    DEFAULT_NEEDLES_PER_HAYSTACK,
    DEFAULT_NEGATIVES,
    DEFAULT_NOLIMA_OUT,
    DEFAULT_NORMALIZE_BY,
    DEFAULT_POOL,
    DEFAULT_REPRESENTATIVES,
    DEFAULT_SEED,
    DEFAULT_STRATEGIES,
    DEFAULT_TEMPERATURE,
    DEFAULT_THEME_CHUNKER,
    DEFAULT_THEME_NEIGHBOURHOOD,
    DEFAULT_THEME_RUNS,
    DEFAULT_THEME_SEED,
    DEFAULT_TOP_K,
    DEFAULT_UMAP_COMPONENTS,
    DEFAULT_UMAP_MIN_DIST,
    DEFAULT_UMAP_NEIGHBORS,
    DEFAULT_VARIANTS,
    DEFAULT_WINDOW_OVERLAP,
    DEFAULT_WORKERS,
    RAY_ADDRESS_ENV,
)
from embedeval.embedders.budget import WORKERS_ENV
from embedeval.errors import ConfigError, InputError
from embedeval.labels import POOLS
from embedeval.paths import CACHE_ENV
from embedeval.strategies import setting_help, strategy_choices

# --- how the command line writes a list ----------------------------------------------------------

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


def names_of_repeats(values: list[str], option: str) -> list[str]:
    """A repeatable option whose values may also be comma-separated (``-s a,b -s c``) -> ``[a, b, c]``."""
    return [name for value in values for name in name_list(value, option)]


def lenient_names(value: str | None, option: str) -> list[str]:
    """Comma-separated names, empty items skipped (:func:`split_list`); nothing for an unset option."""
    return split_list(value or "")


# --- what a value must hold ----------------------------------------------------------------------

def is_whole(value) -> bool:
    """A whole number (an ``int`` or a numpy integer), not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number, not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_price(value) -> bool:
    """A price: USD per million tokens, a finite number >= 0."""
    return is_number(value) and 0 <= value < math.inf


def is_text(value) -> bool:
    """A string that is not empty."""
    return isinstance(value, str) and bool(value)


def are_texts(value) -> bool:
    """A list of strings, none empty."""
    return isinstance(value, list) and all(is_text(item) for item in value)


@dataclass(frozen=True)
class Constraint:
    """What an option's value must hold (``holds``) and how a refusal says so (``words``): a
    :class:`~embedeval.errors.ConfigError` `` `parameter` must be <words>, not <value>``, which the
    command line says with the flag (``--commit-every must be a whole number >= 1, not 0``)."""

    holds: Callable[[Any], bool]
    words: str

    def check(self, value, parameter: str) -> None:
        if not self.holds(value):
            shown = repr(value) if isinstance(value, str) else value  # a number as it prints (numpy's too), text quoted
            raise ConfigError(f"`{parameter}` must be {self.words}, not {shown}", parameter)


def whole_at_least(least: int, words: str = "") -> Constraint:
    """A whole number >= ``least`` (``words`` in place of "a whole number >= least")."""
    return Constraint(lambda value: is_whole(value) and value >= least, words or f"a whole number >= {least}")


def whole_between(least: int, most: int, unit: str) -> Constraint:
    """A whole number from ``least`` to ``most`` (a bound of :mod:`embedeval.bounds`), counted in ``unit``."""
    return Constraint(lambda value: is_whole(value) and least <= value <= most, f"a whole number of {unit} from {least:,} to {most:,}")


def whole_numbers_at_least(least: int, words: str = "") -> Constraint:
    """One or more whole numbers, each >= ``least`` (a comma-separated list on the command line)."""
    return Constraint(lambda values: len(values) > 0 and all(is_whole(value) and value >= least for value in values),
                      words or f"whole numbers >= {least}")


def number_in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Constraint:
    """A number in [low, high] (``low_open``: (low, ...; ``high_open``: ..., high))."""
    def holds(value) -> bool:
        return is_number(value) and (low < value if low_open else low <= value) and (value < high if high_open else value <= high)

    return Constraint(holds, f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")


def one_of(names: tuple[str, ...]) -> Constraint:
    """One of ``names``."""
    return Constraint(lambda value: isinstance(value, str) and value in names, f"one of {', '.join(names)}")


# --- one option ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    """One option, declared once.

    ``parameter``: its name in the library and in ``config.json`` (``umap.min_dist`` for a nested
    setting); ``flag`` (and ``short``): the command line's; ``cli_type``: what the command line reads
    (a comma-separated list is read as ``str`` and turned into the library's value by ``read``);
    ``default``: the library's default (the command line writes it as it reads it, see
    :attr:`cli_default`); ``constraint``: what the value must hold, where the option's own
    check is the whole check (a value checked together with others, as a break rule or the
    strategies, is checked where they meet, and its ``constraint`` is None)."""

    parameter: str
    flag: str
    #: Its words, or a function that gives them when the command line is built (``--strategy``'s list the registry).
    help: str | Callable[[], str]
    cli_type: Any = str
    default: Any = None
    constraint: Constraint | None = None
    short: str | None = None
    envvar: str | None = None
    metavar: str | None = None
    #: The command line's text -> the library's value (``int_list``, ...); None: typer's value as it is.
    read: Callable[[Any, str], Any] | None = None
    #: Repeatable on the command line (``-e a -e b``): unset there, it takes :attr:`default`.
    repeat: bool = False
    #: Unset on the command line unless given (its help names the default in words): then it takes :attr:`default`.
    unset: bool = False
    #: The flag that turns a true-or-false option off (``--no-controls``); None: the option alone turns it on.
    off: str | None = None
    #: What its value must hold where a run's config.json records it, read back (:mod:`embedeval.run`):
    #: looser than :attr:`constraint` where an older run may hold less, a type where the value is
    #: checked with others; None: config.json does not record it, or its value is not checked there.
    recorded: Constraint | None = None

    @property
    def cli_default(self):
        """The default as the command line shows and reads it: a list comma-separated, a repeatable
        option or an empty list unset (None: the library's default applies)."""
        if self.repeat or self.unset or self.default == ():
            return None
        if isinstance(self.default, tuple):
            return ",".join(map(str, self.default))
        return self.default

    def value(self, given):
        """The library's value of what the command line gave (unset: the library's default)."""
        if given is None and not self.repeat:
            return list(self.default) if isinstance(self.default, tuple) else self.default
        given = list(self.default) if given is None else given  # a repeatable option's values, read as given ones
        return given if self.read is None else self.read(given, self.flag)

    @property
    def help_text(self) -> str:
        """The option's help as the command line shows it now."""
        return self.help() if callable(self.help) else self.help

    def check(self, value) -> None:
        """One :class:`~embedeval.errors.ConfigError` unless ``value`` holds :attr:`constraint`."""
        if self.constraint is not None:
            self.constraint.check(value, self.parameter)

    def but(self, **changes) -> Option:
        """This option with other words or default for one command (the same flag and parameter)."""
        return dataclasses.replace(self, **changes)

    def field(self, **changes):
        """A settings dataclass's field for this option: its default (``default`` or
        ``default_factory`` in ``changes`` where the settings hold it otherwise, as a ``str`` path or a
        ``dict``), and the option as metadata (:func:`check_options` finds it there)."""
        if "default_factory" not in changes:
            changes.setdefault("default", self.default)
        return dataclasses.field(metadata={"option": self}, **changes)


def check_options(settings) -> None:
    """Check each field of the dataclass ``settings`` declared with an :class:`Option`
    (:meth:`Option.field`) against the option's constraint, in field order."""
    for setting in dataclasses.fields(settings):
        option = setting.metadata.get("option")
        if option is not None:
            option.check(getattr(settings, setting.name))


def strategy_help() -> str:
    """``--strategy``'s help: the strategies the registry holds when the command line is built, and
    what each does (:func:`embedeval.strategies.strategy_choices`)."""
    return ("How long haystacks are read: " + "; ".join(f"{name} ({what})" for name, what in strategy_choices().items())
            + ". Repeat or comma-separate for several (default: truncate).")


# --- the command line's own options (``embedeval --version``, ``embedeval --force``) ----------------

VERSION = Option("version", "--version", "Print the version and exit.", bool, False)
FORCE = Option("force", "--force", "Replace an existing output file that embedeval did not write (or that was changed since), saying "
               "so in one note per file; without it such a file is never replaced. Give it before the command: embedeval --force "
               "COMMAND ... (embedeval knows the files it wrote by a record in its cache folder, outputs/, named by each file's path: "
               "nothing is written beside them; a run folder keeps its own record inside it)", bool, False)

# --- where a command writes: one --out, its words and the files it takes per command ---------------

OUT = Option("out", "--out", "Where to write.", Path)


@dataclass(frozen=True)
class Output:
    """What one command's ``--out`` names: its help, the suffixes the file it writes must end in
    (none: a folder, or a file the library checks as it reads the other options), and how the
    command line takes it (``changes`` to :data:`OUT`: a short flag, a type, a default). With
    ``not_input``, an ``--out`` that is the command's input argument of that name is refused first,
    in the words given (``--out X is <words>``)."""

    help: str
    suffixes: tuple[str, ...] = ()
    changes: tuple[tuple[str, Any], ...] = ()
    not_input: tuple[str, str] | None = None

    @property
    def option(self) -> Option:
        """:data:`OUT` with this command's words and changes."""
        return OUT.but(help=self.help, **dict(self.changes))


#: Each command's ``--out``, by the command's words (``similarity absence``): the one place its
#: help and the file it takes are said.
TABLE_OUT = Output("Output .csv or .parquet.", (".csv", ".parquet"))
OUTPUTS: dict[str, Output] = {
    "embed": Output("Output .npy or .parquet.", (".npy", ".parquet"), (("short", "-o"),)),
    "needles convert": Output("Where to write the needle set in embedeval's format (.json).", (".json",),
                              not_input=("file", "the NoLiMa file itself; write the converted set elsewhere")),
    "needles draft": Output("The needle set to write (.json); an earlier draft there, from the same themes, chat model and judge, is "
                            "resumed; a second draft into it while one runs is refused. Rejected drafts go to NAME.rejected.csv beside it.",
                            (".json",)),
    "haystacks build": Output("Output .parquet (e.g. runs/NAME/haystacks.parquet).", (".parquet",)),
    "nolima": Output("Run directory.", changes=(("default", DEFAULT_NOLIMA_OUT),)),
    "report": Output("Where to write (default: the run dir, or runs/compare): a new or empty folder, a run folder, or one a report "
                     "was written into; any other folder is refused.", changes=(("cli_type", Path | None),)),
    "export": Output("A folder for mteb (new, empty, or one exported into before); a .csv or .parquet file for prompts (new, or a "
                     "prompt set written before). Anything else is refused."),
    "expand": Output("Expansion file to write (queries/expansions/<set>.json).", (".json",)),
    "similarity needle-question": TABLE_OUT,
    "similarity distractor-question": TABLE_OUT,
    "similarity needle-haystack": TABLE_OUT,
    "similarity absence": TABLE_OUT,
    "themes": Output("Run directory for chunks.parquet, clusters.csv, report.md, figures/map.png and the fitted models.",
                     changes=(("cli_type", Path | None),)),
    "themes membership": TABLE_OUT,
}
NOLIMA_OUT = OUTPUTS["nolima"].option

# --- what a command reads, and how ---------------------------------------------------------------

INPUT = Option("input", "--input", "One text per line, or .jsonl with a \"text\" field.", Path, short="-i")
KIND = Option("kind", "--kind", "query or document.", str, "document")
HAYSTACK_ID = Option("id", "--id", "Haystack id, e.g. loc-dresden:onehop:512:d03.", str)
CONTROLS = Option("controls", "--controls", "One needle-free control per condition.", bool, True, off="--no-controls")
PAIRS = Option("pairs", "--pairs", "Question-needle pair file instead of a needle set: .csv, .jsonl or .parquet with columns question, "
               "needle and optional id, topic (not with --needles or --groups).", Path | None)
EXPORT_FORMAT = Option("format", "--format", "mteb (MTEB result files under --out, a folder) or prompts (an LLM prompt set with "
                       "similarity covariates, --out .csv or .parquet).", str)
TEMPLATE = Option("template", "--template", "prompts: a text file with {haystack} and {question} (default: NoLiMa's task template).",
                  Path | None)

# --- options several commands share ---------------------------------------------------------------

CACHE_DIR = Option("cache_dir", "--cache-dir", "Embedding cache folder (default: user cache dir).", Path | None,
                   envvar=CACHE_ENV)
QUIET = Option("quiet", "--quiet", "No progress bars or step lines (on stderr).", bool, False, short="-q")
#: Every seed: numpy takes no negative seed, UMAP's ``random_state`` none past 2**32 - 1, and a run's
#: tables (Parquet, int64) none past 2**63 - 1; one range for all, so a seed means one thing everywhere.
SEED_RANGE = Constraint(lambda value: is_whole(value) and 0 <= value < 2**32, "a whole number in [0, 2**32)")
SEED = Option("seed", "--seed", "Random seed (recorded).", int, DEFAULT_SEED, SEED_RANGE, recorded=Constraint(is_whole, "a whole number"))
CORPUS = Option("corpus", "--corpus", "shakespeare, pg-essays (the Paul Graham essays of the original needle-in-a-haystack test), "
                "gutenberg, dir:PATH (its .txt and .md files; dir:PATH/*.txt picks), jsonl:FILE (a text field per line, optional id) "
                "or parquet:FILE (column text, optional id).", str, DEFAULT_CORPUS, recorded=Constraint(is_text, "a corpus spec"))
MIN_BOOKS = Option("min_books", "--min-books", "Fewest books (files, JSONL lines, Parquet rows) the corpus must hold.", int,
                   DEFAULT_MIN_BOOKS)
CHUNKER = Option("chunker", "--chunker", "sentences:N, sentences:A-B or tokens:N.", str, DEFAULT_CHUNKER)
#: One embedder (``embed``, ``themes``, ``similarity absence``); :data:`EMBEDDERS` is the repeatable one.
EMBEDDER = Option("embedder", "--embedder", "Embedder spec.", str, DEFAULT_EMBEDDER, short="-e")
#: ``embedeval cache clear``'s: the vectors of one embedder only.
CLEARED_EMBEDDER = EMBEDDER.but(cli_type=str | None, default=None,
                                help="Remove only this embedder's vectors (its name as the cache lists it).")
#: ``embedeval themes membership``'s: the themes run's (checked against it).
MEMBERSHIP_EMBEDDER = EMBEDDER.but(cli_type=str | None, default=None,
                                   help="Must be the run's embedder if given (the default is the run's).")
#: ``embedeval needles draft``'s: the needle-question similarity's.
DRAFT_EMBEDDER = EMBEDDER.but(cli_type=str | None, default=None, help="Embedder of the needle-question similarity recorded for "
                              "every needle (default: the themes run's).")
EMBEDDERS = Option("embedders", "--embedder", f"Embedder spec or preset (e.g. context-rot-5); repeat for several (default: {DEFAULT_EMBEDDER}).",
                   list[str] | None, (DEFAULT_EMBEDDER,), short="-e", repeat=True,
                   recorded=Constraint(lambda v: isinstance(v, list) and bool(v) and all(isinstance(s, str) for s in v), "a list of embedder specs"))
SKIP_UNAVAILABLE = Option("skip_unavailable", "--skip-unavailable", "Run the embedders that can run here; list the others.", bool, False,
                          Constraint(lambda value: isinstance(value, bool), "true or false"))
#: ``literal`` in the command line escapes its square brackets for rich (``embedeval[ray]``).
EXECUTOR = Option("executor", "--executor", "Where cache misses of local (st:) models are embedded: local, or ray (a pool of Ray actors; "
                  "pip install 'embedeval[ray]'). Same vectors either way.", str, DEFAULT_EXECUTOR)
WORKERS = Option("workers", "--workers", "Ray actors, each holding the model once (one GPU each where the cluster has GPUs).", int,
                 DEFAULT_WORKERS)
RAY_ADDRESS = Option("ray_address", "--ray-address", "Ray cluster to join: auto (a running cluster), ray://HOST:PORT; unset: start a local Ray.",
                     str | None, envvar=RAY_ADDRESS_ENV)
NEEDLES = Option("needles", "--needles", "Needle set JSON (default: the shipped queries/nolima-onehop.json).", Path | None,
                 DEFAULT_NEEDLES, unset=True, recorded=Constraint(is_text, "the needle file's path"))
GROUPS = Option("groups", "--groups", "Comma-separated group ids to use (default: every group).", str | None, read=lenient_names,
                recorded=Constraint(lambda v: v is None or are_texts(v), "null or a list of group ids"))
DISTRACTORS_FILE = Option("distractors_file", "--distractors-file", "Distractors by group, replacing the needle file's: .json ({group id: "
                          "[texts]}) or .csv/.jsonl/.parquet (columns group_id, distractor, optional query_form).", Path | None,
                          recorded=Constraint(lambda v: v is None or is_text(v), "null or the distractors file's path"))
LLM = Option("llm", "--llm", "Chat model: openai:MODEL (OPENAI_API_KEY; OPENAI_BASE_URL or OpenAI), or openai:MODEL?base_url=URL&key_env=VAR "
             "for a server of your own (only VAR's key goes there); a bare MODEL is openai:MODEL.", str)
INDEX = Option("index", "--index", "faiss or chroma.", str, DEFAULT_INDEX)
TOP_K = Option("top_k", "--top-k", "Chunks averaged per needle.", int, DEFAULT_TOP_K)
ABSENCE_TOP_K = TOP_K.but(help="Chunks listed per question.", default=DEFAULT_ABSENCE_TOP_K)
CHROMA_PATH = Option("chroma_path", "--chroma-path", "Keep the chromadb index here (default: temporary).", Path | None)
ABSENCE_THEMES = Option("themes", "--themes", "Search the chunks of this embedeval themes run directory instead of cutting --corpus "
                        "again.", Path | None)
CHROMA_URL = Option("chroma_url", "--chroma-url", "A chroma server (http://HOST:PORT, e.g. from `chroma run`) holding the chunk vectors: "
                    "one collection per embedder and chunk set, reused by later runs (needs --index chroma).", str | None)
PRICES = Option("prices", "--price", "SPEC=USD per million tokens, for a model without a listed price or to override it; repeat for several.",
                list[str] | None, (), repeat=True,
                recorded=Constraint(lambda v: isinstance(v, dict) and all(isinstance(k, str) and is_price(p) for k, p in v.items()),
                                    "an object of embedder: USD per million tokens >= 0"))
#: ``embedeval nolima``'s ``--price`` also goes into the run (config.json, decision.csv).
RUN_PRICES = PRICES.but(help="SPEC=USD per million tokens: the price of a model for --plan and --max-cost (for a model without a listed "
                        "price, or to override it) and for decision.csv's usd_per_million_tokens (only prices given here: none is "
                        "assumed); repeat for several.")

# --- how API embedders send their requests (embedeval.embedders.budget checks them) ----------------

API_WORKERS = Option("api_workers", "--api-workers", "Concurrent requests per API embedder (default: 4).", int | None, envvar=WORKERS_ENV)
RPM = Option("rpm", "--rpm", "Requests-per-minute budget of the API providers: N for each, or provider=N,... (default: "
             "EMBEDEVAL_<PROVIDER>_RPM, else the provider's tier-1 limit).", str | None)
TPM = Option("tpm", "--tpm", "Tokens-per-minute budget of the API providers: N for each, or provider=N,... (default: "
             "EMBEDEVAL_<PROVIDER>_TPM, else the provider's tier-1 limit).", str | None)

# --- a plan before a run (embedeval.plan) ---------------------------------------------------------

PLAN = Option("plan", "--plan", "Print what the run would embed, send, cost and take (texts, cached, tokens, requests, time, USD) and the "
              "API keys the run will need, and stop: nothing is sent or stored, so no key is needed (a local model embeds a sample of 32 "
              "inputs to time itself).", bool, False)
AS_JSON = Option("as_json", "--json", "With --plan: the plan as JSON.", bool, False)
#: Read as text: embedeval.plan.parse_ceiling takes a number >= 0 in ASCII digits only (typer's float would take "nan").
MAX_COST = Option("max_cost", "--max-cost", "Refuse to start when the plan's high cost estimate exceeds this many USD (an API model "
                  "without a price then needs --price).", str | None, metavar="<float>")

# --- the haystack grid (embedeval.grid.HaystackGrid checks its values) ----------------------------

FILLER = Option("filler", "--filler", "random (sentence-aligned snippets from random books) or sequential (contiguous passages in book "
                "order, as Context Rot and NoLiMa).", str, DEFAULT_FILLER)
LENGTHS = Option("lengths", "--lengths", "Comma-separated haystack lengths in tokens.", str, DEFAULT_LENGTHS, read=int_list)
DEPTHS = Option("depths", "--depths", "Needle depths per length, spread from start to end.", int, DEFAULT_DEPTHS)
VARIANTS = Option("variants", "--variants", "Comma-separated: onehop, inverted, literal, literal_inverted.", str, DEFAULT_VARIANTS,
                  read=lenient_names)
NEGATIVES = Option("negatives", "--negatives", "Needle-free haystacks per length in the pool every needle haystack is ranked in (with "
                   "the controls).", int, DEFAULT_NEGATIVES)
N_DISTRACTORS = Option("n_distractors", "--n-distractors", "Comma-separated distractor counts K (e.g. 0,1,4): each builds the grid with "
                       "the first K distractors of every group, outside a ±0.2 depth zone around the needle.", str, DEFAULT_N_DISTRACTORS,
                       read=int_list)
NEEDLES_PER_HAYSTACK = Option("needles_per_haystack", "--needles-per-haystack", "Comma-separated needle counts K (e.g. 1,3): each K > 1 "
                              "builds the needle haystacks again with K - 1 needles of other groups beside the own one; the haystack is "
                              "ranked by every question whose needle it holds. Goes with --n-distractors 0.", str,
                              DEFAULT_NEEDLES_PER_HAYSTACK, read=int_list)

# --- a NoLiMa sweep (embedeval.experiments.nolima_config.NolimaConfig) -----------------------------

BREAK_RULE = Option("break_rule", "--break-rule", "The headline break point: relative (the largest length whose chance-corrected "
                    "recall@k stays >= 0.85 x the model's own mean over the shortest lengths, one base for every strategy of an "
                    "embedder; none for a scorer at chance) or absolute (--break-metric >= --break-threshold). Both are in the report "
                    "and breaks.csv.", str, DEFAULT_BREAK_RULE, recorded=Constraint(lambda v: isinstance(v, str), "a break rule's name"))
BREAK_K = Option("break_k", "--break-k", "The relative rule's recall@k: 1, 5 or 10.", int, DEFAULT_BREAK_K,
                 recorded=Constraint(is_whole, "a whole number"))
BREAK_METRIC = Option("break_metric", "--break-metric", "The absolute rule's metric: recall@1, recall@5, recall@10, mrr, ndcg@10, "
                      "query_auc, auc or comparative_ratio.", str, DEFAULT_BREAK_METRIC,
                      recorded=Constraint(lambda v: isinstance(v, str), "a metric's name"))
BREAK_THRESHOLD = Option("break_threshold", "--break-threshold", "The value the absolute rule's metric must keep for a length to "
                         "count as working.", float, DEFAULT_BREAK_THRESHOLD, recorded=Constraint(is_number, "a number"))
COMMIT_EVERY = Option("commit_every", "--commit-every", "Texts per cache commit (what an interruption can lose).", int,
                      DEFAULT_COMMIT_EVERY, whole_at_least(1))
#: An older run may have taken fewer resamples than a new run takes.
N_BOOTSTRAP = Option("n_bootstrap", "--n-bootstrap", "Cluster-bootstrap resamples behind every confidence interval.", int,
                     DEFAULT_N_BOOTSTRAP, whole_between(10, MAX_N_BOOTSTRAP, "resamples"),
                     recorded=Constraint(lambda v: is_whole(v) and 1 <= v <= MAX_N_BOOTSTRAP, f"a whole number from 1 to {MAX_N_BOOTSTRAP:,}"))
#: Checked by :func:`embedeval.needles.check_normalize_by` (its words are pinned by the tests).
NORMALIZE_BY = Option("normalize_by", "--normalize-by", "Divide sim(q, haystack) by sim(q, the standard needle of the variant's family), "
                      "as the Jina study does (standard), or by the haystack's own needle (own).", str, DEFAULT_NORMALIZE_BY)
POOL = Option("pool", "--pool", "What each needle haystack is ranked among: needle-free (the needle-free haystacks of its length: "
              "controls and negatives) or all (every haystack of its length and depth that does not answer its question, other "
              "questions' needle haystacks included, as LongEmbed ranks among all documents of a split).", str, DEFAULT_POOL,
              one_of(POOLS), recorded=one_of(POOLS))
EXPANSIONS = Option("expansions", "--expansions", "Comma-separated expansion files: adds query forms expanded-N.", str | None, (),
                    read=lenient_names, recorded=Constraint(are_texts, "a list of expansion file paths"))
# The strategy options' words and checks come from the strategy code (the registry's choices; parse_strategies
# checks them together, with the chunk sizes and overlaps): declared here for their flags and defaults.
STRATEGIES = Option("strategies", "--strategy", strategy_help, list[str] | None, DEFAULT_STRATEGIES, short="-s",
                    read=names_of_repeats, repeat=True)
CHUNK_TOKENS = Option("chunk_tokens", "--chunk-tokens", functools.partial(setting_help, "chunk_tokens"), str, DEFAULT_CHUNK_TOKENS,
                      read=int_list)
WINDOW_OVERLAP = Option("window_overlap", "--window-overlap", functools.partial(setting_help, "window_overlap"), int,
                        DEFAULT_WINDOW_OVERLAP)
LATE_OVERLAP = Option("late_overlap", "--late-overlap", functools.partial(setting_help, "late_overlap"), int, DEFAULT_LATE_CHUNKING_OVERLAP)

# --- corpus themes (embedeval.experiments.themes.config.ThemesConfig; its counts are checked there)

THEME_CHUNKER = CHUNKER.but(default=DEFAULT_THEME_CHUNKER)
UMAP_NEIGHBORS = Option("umap.neighbors", "--umap-neighbors", "UMAP n_neighbors.", int, DEFAULT_UMAP_NEIGHBORS)
UMAP_MIN_DIST = Option("umap.min_dist", "--umap-min-dist", "UMAP min_dist.", float, DEFAULT_UMAP_MIN_DIST, number_in(0, 1))
UMAP_COMPONENTS = Option("umap.components", "--umap-components", "UMAP n_components.", int, DEFAULT_UMAP_COMPONENTS)
MIN_CLUSTER_SIZE = Option("hdbscan.min_cluster_size", "--min-cluster-size", "HDBSCAN min_cluster_size.", int, DEFAULT_MIN_CLUSTER_SIZE)
MIN_SAMPLES = Option("hdbscan.min_samples", "--min-samples", "HDBSCAN min_samples.", int, DEFAULT_MIN_SAMPLES)
REPRESENTATIVES = Option("representatives", "--representatives", "Representative chunks per cluster, by maximal marginal relevance.",
                         int, DEFAULT_REPRESENTATIVES)
MMR_LAMBDA = Option("mmr_lambda", "--mmr-lambda", "MMR's trade-off: 1 = relevance to the cluster only, 0 = diversity only.", float,
                    DEFAULT_MMR_LAMBDA, number_in(0, 1))
THRESHOLD = Option("threshold", "--threshold", "A needle blends in when its probability for the target cluster exceeds this (and it "
                   "passes --min-outside-percentile).", float, DEFAULT_BLEND_THRESHOLD, number_in(0, 1, low_open=True, high_open=True))
MIN_OUTSIDE_PERCENTILE = Option("min_outside_percentile", "--min-outside-percentile", "A needle blends in only when it is also this close "
                                "to the target theme: its mean cosine to the theme's nearest chunks at or above this percentile (0-100) of "
                                "the same statistic over the corpus chunks outside the theme.", float, DEFAULT_MIN_OUTSIDE_PERCENTILE,
                                number_in(0, 100))
CLUSTER = Option("cluster", "--cluster", "The target theme of every needle whose pair file row names none in a cluster (or theme) "
                 "column, by its number or by a term of its top terms, e.g. writing (default 0: the largest cluster).", str | None)
THEME_SEED = SEED.but(help="UMAP's random_state (the study's 42).", default=DEFAULT_THEME_SEED)
THEME_RUNS = Option("runs", "--runs", "Clusterings the themes are the consensus of (UMAP seeds and float-noise perturbations of the "
                    "vectors); a theme is kept when it comes back in at least half of them. 1: the study's single run.", int, DEFAULT_THEME_RUNS,
                    whole_between(1, MAX_THEME_RUNS, "clusterings"))
THEME_NEIGHBOURHOOD = Option("neighbourhood", "--neighbourhood", "With several --runs, each chunk's theme is decided by the votes "
                             "of its this many nearest chunks (itself among them): a chunk at a theme's edge is not a coin's throw. 1: "
                             "its own votes only.", int, DEFAULT_THEME_NEIGHBOURHOOD, whole_at_least(1))
CHUNK_SEED = Option("chunk_seed", "--chunk-seed", "Seed the chunk sizes are drawn with: the similarity commands' --seed, whose default "
                    "it shares, so both cut a corpus into the same chunks (cached) and embed them once.", int, DEFAULT_SEED,
                    SEED_RANGE)

# --- chat models (embedeval expand, embedeval needles draft; embedeval.llm checks the temperature) --

EXPANSION_SIZES = Option("sizes", "--sizes", "Comma-separated numbers of terms.", str, DEFAULT_EXPANSION_SIZES,
                         whole_numbers_at_least(1, "positive whole numbers"), read=int_list)
TEMPERATURE = Option("temperature", "--temperature", "Sampling temperature (recorded).", float, DEFAULT_TEMPERATURE)
BASE_URL = Option("base_url", "--base-url", "Deprecated: use --llm 'openai:MODEL?base_url=URL'. The same: a server of your own, sent "
                  "no OPENAI_API_KEY.", str | None)

# --- needle drafting (embedeval.experiments.drafting.config.DraftConfig) ---------------------------

PER_THEME = Option("per_theme", "--per-theme", "Needle groups to keep per theme.", int, DEFAULT_DRAFT_PER_THEME,
                   whole_between(1, MAX_PER_THEME, "needle groups"))
ATTEMPTS = Option("attempts", "--attempts", "Requests sent per theme, a retry of a failed one included: the first, then redrafts that "
                  "send the rejected drafts back with their reasons.", int, DEFAULT_DRAFT_ATTEMPTS,
                  whole_between(1, MAX_DRAFT_ATTEMPTS, "requests"))

DRAFT_THEMES = Option("themes", "--themes", "A directory written by embedeval themes: the themes to draft needles for.", Path)
NQ_BAND = Option("nq_band", "--nq-band", "LO,HI: keep only groups whose one-hop and inverted needles' needle-question similarity lies in "
                 "[LO, HI] (Context Rot's needles: 0.445-0.775; default: no band).", str | None)
JUDGE = Option("judge", "--judge", "A chat model, named as --llm names one (it may be the same), asked per one-hop and inverted needle "
               "whether the needle alone lets a careful reader answer the question with the character; a needle it says does not "
               "answer is rejected with its reason, and its verdicts are recorded. Default: no judge, and then no check tests whether "
               "a needle answers its question.", str | None)
CHAT_PRICE = Option("chat_price", "--chat-price", "The chat model's price in USD per million tokens (sent and received), for --plan and "
                    "--max-cost.", str | None, metavar="<float>")
JUDGE_PRICE = Option("judge_price", "--judge-price", "The judge's price in USD per million tokens (default: --chat-price).",
                     str | None, metavar="<float>")
DRAFT_PLAN = PLAN.but(help="Print the chat requests and tokens the draft would send and what it would embed first (the themes run's "
                      "chunks), and stop: nothing is sent or written.")
DRAFT_MAX_COST = MAX_COST.but(help="Refuse to start when the draft could cost more than this many USD, and stop before any request "
                              "that could take it past this while it runs (needs --chat-price).")
THEME_IDS = Option("theme_ids", "--themes-ids", "Comma-separated themes to draft for, each by its cluster number (0 = the largest) or by "
                   "a term of its top terms in the run's clusters.csv, e.g. writing (default: every theme).", str | None)

#: Every option declared here: the one place a library parameter's flag is found (:func:`flag_of`).
OPTIONS: tuple[Option, ...] = tuple(value for value in dict(globals()).values() if isinstance(value, Option))
FLAGS: dict[str, str] = {option.parameter: option.flag for option in OPTIONS}


def flag_of(parameter: str) -> str:
    """The command-line flag of a library parameter: its option's (``embedders`` -> ``--embedder``),
    else ``--`` + the parameter with ``.`` and ``_`` as ``-`` (a parameter no command line sets by a
    flag of its own: ``umap.min_dist`` -> ``--umap-min-dist``)."""
    return FLAGS.get(parameter, "--" + parameter.replace(".", "-").replace("_", "-"))
