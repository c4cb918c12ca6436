"""The largest sizes embedeval takes, each declared once with why that number, and the memory a
run is estimated to need against what this machine has (docs/scale.md, "Bounds").

A value past its bound cannot fit one machine's memory or a run's time, and was a traceback (or
the process killed) minutes into a run; each is refused when the option or input is read, before
any work, with one error naming the bound. A run's peak memory (:class:`MemoryEstimate`) is
estimated from its settings before it starts, printed by ``--plan``, and a run whose estimate
exceeds :func:`machine_memory` is refused, naming its largest part and what to lower.

Light on purpose (the command line reads it before answering ``--help``): only the errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

from embedeval.errors import ConfigError

MIB = 2**20
GIB = 2**30

#: The longest haystack length, in tokens, a run's table may name (a grid's lengths are checked
#: against the run's besides, where a command has the run's config): no run of this machine's
#: memory holds a haystack near it (:class:`MemoryEstimate`), so past it a length is an edit.
MAX_TABLE_LENGTH = 10**9
#: The largest number a strategy family's parameter takes where it declares no ``maximum`` of its
#: own (:class:`~embedeval.strategies.parameters.Parameter`; a plugin's ``every-other@N``): a count
#: of tokens or pieces past a run's longest haystack (:data:`MAX_TABLE_LENGTH`) reads nothing more,
#: and 10**20 overflowed numpy's int64 in the family's own arrays, a traceback mid-run.
MAX_PARAMETER_VALUE = MAX_TABLE_LENGTH
#: ``extend-*@L``, ``rope-*@L``: the most tokens one pass may read. Four times the longest context
#: LongEmbed stretches a model to (32,768), 16 times the longest default haystack; one pass attends
#: L² token pairs per head (1.7e10 here), and ``extend-pi``'s stretched table holds L rows of the
#: model's width in float64, three copies while it is interpolated (:data:`PI_TABLE_COPIES`): 3 GiB
#: for a 1,024-wide model at this bound (:func:`position_table_bytes`).
MAX_READ_TOKENS = 131_072
#: ``--negatives``: needle-free haystacks per length. A hundred times the default: a pool of 10,000
#: ranks a needle haystack to 0.01%, and at the default lengths (16,576 tokens of haystack per
#: negative) it is 166 million tokens to embed, days for a local model on a CPU.
MAX_NEGATIVES = 10_000
#: ``--n-bootstrap``: resamples behind a confidence interval. A hundred times the default: the end
#: of a 95% percentile interval is the 2.5% quantile of the resamples, whose Monte Carlo error at
#: this many is sqrt(0.025 x 0.975 / B) = 0.0005 in quantile level, far below the question
#: groups' own sampling error; the resamples are (resamples x groups) arrays
#: (:func:`bootstrap_bytes`), so memory and time grow with B.
MAX_N_BOOTSTRAP = 100_000
#: ``themes --runs``: the clusterings a consensus is made of. Eleven times the default (9, where
#: ``benchmarks/bench_theme_stability.py`` found the themes settled); each is a UMAP fit and an
#: HDBSCAN clustering of every chunk, most of a themes run's time, so 100 take about eleven times
#: the default's (10**11 was taken).
MAX_THEME_RUNS = 100
#: Bytes of one line of a JSON Lines file (a corpus's book, a needle record, an ``embed -i`` text)
#: or of a plain-text ``embed -i`` line: one and a half times the longest book of the ten
#: Gutenberg books and Shakespeare (the complete works, 5.4 MB). A tokenizer reads a text whole
#: before it is cut to the model's window: a line of 8 MiB of one-letter words (4 million tokens)
#: took ``embed -i`` 61 s and 3 GB, one of 32 MiB aborted the tokenizer at 6 GB, and a 2 GB line
#: was a MemoryError or a Rust abort.
MAX_LINE_BYTES = 8 * MIB
#: Bytes of one JSON document (a needle set, a run's config.json, an expansion file, a model
#: folder's configuration): the shipped needle set is 25 kB and a multilingual tokenizer.json
#: 17 MB; Python's parsed objects take up to ten times the text.
MAX_JSON_BYTES = 64 * MIB
#: ``needles draft --per-theme``: needle groups asked of one answer. Its ``max_tokens`` is 300 a
#: group (``drafting.prompts.ANSWER_TOKENS_PER_GROUP``): 50 groups ask for 15,200, about the most a chat
#: model writes in one answer (16,384 for most); 99,999,999,999 sent a request asking for 3e13.
MAX_PER_THEME = 50
#: ``needles draft --attempts``: requests sent per theme, retries and redrafts included. Thirty
#: times the default; each is paid, and a drafter that keeps answering a duplicate sent 1,791 in
#: two minutes under 99,999,999,999.
MAX_DRAFT_ATTEMPTS = 100
#: Tokens a server may report (its ``usage``) for one chat request: a thousand times the longest
#: context any chat model takes (about 10**6 tokens). A count past it is taken as this bound: it
#: still stops a run at its ``--max-cost``, where 10**400 was an ``OverflowError`` in the meter and
#: an integer no float holds in the needle set's provenance (which embedeval then could not read).
MAX_REPORTED_TOKENS = 10**9
#: Bytes of one verdict the judge of ``needles draft --judge`` keeps in the cache folder
#: (:func:`embedeval.experiments.judging.read_kept_verdict`): a verdict is asked with ``max_tokens``
#: 200 (about 1 KB of JSON), so 256 KiB holds one from a server that ignored that 200 times over
#: and costs nothing to read; a file past it is no verdict embedeval kept (a 2 GB file, or a link
#: to /dev/zero, there was read up to a JSON document's 64 MiB: a MemoryError under a memory limit).
MAX_VERDICT_BYTES = MIB // 4

#: Where a run may be told how much memory it may use (GiB), in place of the machine's physical
#: memory (:func:`machine_memory`): to allow for swap, or to keep a shared machine's share.
MEMORY_ENV = "EMBEDEVAL_MEMORY_GB"
#: The range ``EMBEDEVAL_MEMORY_GB`` takes, in GiB: below 0.1 no sweep runs (its process alone is
#: :data:`PROCESS_BYTES`), and 1,048,576 GiB (1 PiB) is past any one machine's memory.
MEMORY_GB_RANGE = (0.1, 1_048_576)
#: Bytes a sweep's process holds whatever its grid: the interpreter and the libraries every sweep
#: imports (pandas, pyarrow, matplotlib, bm25s, and transformers for the reference tokenizer): a
#: bm25 sweep of one length of 64 tokens and 2 depths on a 20-book corpus peaked at 342,952 kB
#: resident (``/usr/bin/time -v``, 2026-11-29), its tables a few MiB of it.
PROCESS_BYTES = 335 * MIB
#: Bytes a sweep with a local (``st:``) model holds besides, once however many models: torch and
#: sentence-transformers imported (the same bm25 sweep with the two imported first peaked at
#: 696,132 kB, 345 MiB more).
LOCAL_RUNTIME_BYTES = 345 * MIB
#: Resident bytes per byte of a local model's weight files on disk
#: (:func:`~embedeval.embedders.models.weight_file_bytes`): loading all-MiniLM-L6-v2 (its
#: model.safetensors: 90,868,376 bytes) and embedding two texts added 89 MiB resident (1.03x);
#: within a sweep, 47 MiB (0.54x, torch maps the file). Rounded up: 1.1.
WEIGHT_MEMORY_FACTOR = 1.1
#: Bytes a haystack's token costs while a run holds it: about 4 bytes of text held twice (the
#: table and its Arrow copy as it is written), and its token ids (4 bytes each as the model reads
#: them, 8 while they are counted); the default grid's haystacks are estimated at 0.75 GiB, and
#: its BM25 plan peaked at 0.79 GB resident, the process (:data:`PROCESS_BYTES`) included (the
#: shipped text is 3.7 characters per token).
HAYSTACK_BYTES_PER_TOKEN = 24
#: Float64 copies of ``extend-pi``'s stretched position table alive at once while it is
#: interpolated (:func:`embedeval.embedders.stretch.table_at`: the rows below, the rows above,
#: their weighted sum): 131,072 rows of all-MiniLM-L6-v2's 384 peaked at 1.13 GiB, estimated 1.125.
PI_TABLE_COPIES = 3
#: (resamples x groups) arrays of 8 bytes a cluster bootstrap holds at once while it draws
#: (:func:`embedeval.metrics.bootstrap.cluster_resamples`: the draws, their bincount, the weights), and
#: per row of a group the (resamples x rows) arrays of 8 bytes a statistic of two samples reads
#: at once (their rows' weights or indices and values): 100,000 resamples of 48 groups of 10 rows
#: peaked at 1.95 GB for Cohen's d, estimated 2.03 GB.
BOOTSTRAP_DRAW_ARRAYS, BOOTSTRAP_ROW_ARRAYS = 3, 5


def machine_memory() -> int:
    """Bytes of memory a run may use: ``EMBEDEVAL_MEMORY_GB`` GiB where set (a number in
    :data:`MEMORY_GB_RANGE`; anything else is one :class:`~embedeval.errors.ConfigError`), else
    this machine's physical memory (``SC_PHYS_PAGES x SC_PAGE_SIZE``)."""
    given = os.environ.get(MEMORY_ENV)
    if given is not None:
        try:
            value = float(given) if given.strip().isascii() else float("nan")
        except ValueError:
            value = float("nan")
        low, high = MEMORY_GB_RANGE
        if not low <= value <= high:  # NaN too
            raise ConfigError(f"{MEMORY_ENV} must be a number of GiB from {low:g} to {high:,}, not {given!r}")
        return int(value * GIB)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def gib(n_bytes: float) -> str:
    """``n_bytes`` in GiB as a plan prints it: two decimals below 10 GiB (``1.50 GiB``; ``0.01 GiB``
    below 10 MiB), one above (``23.5 GiB``), so an estimate just past the memory here never
    reads as the same number."""
    value = n_bytes / GIB
    return f"{value:,.2f} GiB" if value < 10 else f"{value:,.1f} GiB"


def check_at_most(value: int, bound: int, parameter: str, what: str) -> None:
    """One :class:`~embedeval.errors.ConfigError` when ``value`` is past ``bound``: `` `parameter`
    VALUE is past the BOUND <what>; use at most BOUND`` (the command line names the flag)."""
    if value > bound:
        raise ConfigError(f"`{parameter}` {value:,} is past the {bound:,} {what}; use at most {bound:,}", parameter)


def process_bytes(local_models: int) -> int:
    """A sweep's process: :data:`PROCESS_BYTES`, plus :data:`LOCAL_RUNTIME_BYTES` when it loads
    any local model (``local_models`` > 0)."""
    return PROCESS_BYTES + (LOCAL_RUNTIME_BYTES if local_models else 0)


def weights_bytes(weight_file_bytes: int) -> int:
    """A local model's weights while loaded: its weight files' size on disk x
    :data:`WEIGHT_MEMORY_FACTOR`."""
    return int(weight_file_bytes * WEIGHT_MEMORY_FACTOR)


def position_table_bytes(read_tokens: int, width: int) -> int:
    """``extend-pi@L``'s stretched position table while it is built: ``L x width x 8 x``
    :data:`PI_TABLE_COPIES` bytes."""
    return read_tokens * width * 8 * PI_TABLE_COPIES


def bootstrap_bytes(resamples: int, groups: int, rows_per_group: int) -> int:
    """A cluster bootstrap's arrays: ``B x G x 8 x (`` :data:`BOOTSTRAP_DRAW_ARRAYS` ``+``
    :data:`BOOTSTRAP_ROW_ARRAYS` ``x R)`` bytes for ``B`` resamples of ``G`` groups of ``R`` rows
    each (a paired statistic reads every resample's rows at once)."""
    return resamples * groups * 8 * (BOOTSTRAP_DRAW_ARRAYS + BOOTSTRAP_ROW_ARRAYS * rows_per_group)


class MemoryPart(NamedTuple):
    """One part of a run's peak memory: its ``bytes``, and what lowers it (``lower``, naming the
    library ``parameters`` in backquotes, as errors do)."""

    bytes: int
    lower: str
    parameters: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryEstimate:
    """A run's peak memory, estimated before it starts: ``parts`` {what: :class:`MemoryPart`},
    whose sum is the estimate (the parts are held together at the run's peak, after its tables are
    built), and the memory a run may use here (:func:`machine_memory`)."""

    parts: dict[str, MemoryPart] = field(default_factory=dict)
    machine: int = field(default_factory=machine_memory)

    @property
    def total(self) -> int:
        return sum(part.bytes for part in self.parts.values())

    def line(self) -> str:
        """``peak memory: about 0.77 GiB (haystacks 0.75 GiB, bootstrap 0.02 GiB) of the 24 GiB a run may use here ...``."""
        parts = ", ".join(f"{what} {gib(part.bytes)}" for what, part in self.parts.items())
        return f"peak memory: about {gib(self.total)} ({parts}) of the {gib(self.machine)} a run may use here ({MEMORY_ENV} to change)"

    def as_dict(self) -> dict:
        return {"bytes": self.total, "parts": {what: part.bytes for what, part in self.parts.items()}, "machine_bytes": self.machine}

    def check(self) -> None:
        """One :class:`~embedeval.errors.ConfigError` when the estimate exceeds the memory a run
        may use, naming the largest part and what lowers it."""
        if self.total <= self.machine:
            return
        what, part = max(self.parts.items(), key=lambda item: item[1].bytes)
        raise ConfigError(f"the run would need about {gib(self.total)} of memory, more than the {gib(self.machine)} here "
                          f"(the largest part: {what}, {gib(part.bytes)}); {part.lower}, or set {MEMORY_ENV} to allow more",
                          *part.parameters)
