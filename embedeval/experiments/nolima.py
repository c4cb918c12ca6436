"""The NoLiMa sweep for embedding models: haystacks -> embeddings -> similarities -> metrics.

``run_nolima(config)`` writes ``config.json``, ``haystacks.parquet``, ``similarities.parquet``,
``metrics.csv``, ``report.md`` and ``figures/`` into ``config.out`` (each file atomically).
Every embedding goes through the persistent cache, so an interrupted run resumes where it
stopped and a rerun of the same config embeds nothing and yields the same tables.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pandas as pd

from embedeval.embedders.registry import DEFAULT_EMBEDDER, load_embedder, select_embedders
from embedeval.errors import ConfigError
from embedeval.haystacks import CONTROL, DEFAULT_DEPTHS, DEFAULT_LENGTHS, DEFAULT_VARIANTS, check_build_args
from embedeval.io import write_table, write_text_atomic
from embedeval.needles import DEFAULT_NEEDLES, NeedleSet, load_needle_set
from embedeval.tokens import DEFAULT_REFERENCE, count_up_to

SIMILARITY_COLUMNS = [
    "embedder", "haystack_id", "group_id", "category", "variant", "length", "depth", "target_depth",
    "query_form", "sim_qh", "sim_qn", "normalized", "n_tokens", "truncated", "needle_visible",
]
QUESTION = "question"
#: Settings that determine the haystacks; a run directory's haystacks are reused when they match.
HAYSTACK_KEYS = ("needles", "corpus", "lengths", "depths", "variants", "seed", "tokenizer")
VERSIONED_PACKAGES = ("embedeval", "numpy", "pandas", "scipy", "scikit-learn", "torch",
                      "sentence-transformers", "transformers", "tokenizers")


@dataclass
class NolimaConfig:
    """Everything a sweep depends on (written to ``config.json``)."""

    embedders: list[str] = field(default_factory=lambda: [DEFAULT_EMBEDDER])
    needles: str = str(DEFAULT_NEEDLES)
    corpus: str = "shakespeare"
    lengths: list[int] = field(default_factory=lambda: list(DEFAULT_LENGTHS))
    depths: int = DEFAULT_DEPTHS
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    seed: int = 0
    out: str = "runs/nolima"
    tokenizer: str = DEFAULT_REFERENCE
    auc_threshold: float = 0.8
    n_bootstrap: int = 1000
    skip_unavailable: bool = False
    expansions: list[str] = field(default_factory=list)  # expansion files -> query forms expanded-N
    skipped: list = field(default_factory=list)  # filled by validate(): [(spec, why)]

    def validate(self) -> NeedleSet:
        """Check everything that can be checked without work; returns the loaded needle set."""
        check_build_args(self.lengths, self.depths, self.variants)
        if not self.variants:
            raise ConfigError("no variants given")
        if not 0 < self.auc_threshold <= 1:
            raise ConfigError(f"AUC threshold must be in (0, 1], not {self.auc_threshold}")
        if not self.embedders:
            raise ConfigError("no embedders given")
        self.embedders, self.skipped = select_embedders(self.embedders, self.skip_unavailable)
        return load_needle_set(self.needles)

    def haystack_settings(self) -> dict:
        """The settings the haystacks depend on, with a hash of the needle file's content."""
        data = asdict(self)
        settings = {k: data[k] for k in HAYSTACK_KEYS}
        settings["needles_sha256"] = hashlib.sha256(Path(self.needles).read_bytes()).hexdigest()
        return settings


@dataclass
class NolimaResult:
    """The tables of a sweep, as written to ``out``."""

    config: NolimaConfig
    haystacks: pd.DataFrame
    similarities: pd.DataFrame
    metrics: pd.DataFrame
    out: Path
    newly_embedded: dict[str, int]


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    return versions


def load_or_build_haystacks(config: NolimaConfig, needle_set: NeedleSet, progress: bool) -> pd.DataFrame:
    """Reuse ``out/haystacks.parquet`` when it was built with the same settings, else build it."""
    from embedeval.corpus import load_corpus
    from embedeval.haystacks import build_haystacks
    from embedeval.tokens import load_token_counter

    out = Path(config.out)
    path, settings_path = out / "haystacks.parquet", out / "haystacks.json"
    settings = config.haystack_settings()
    if path.is_file() and settings_path.is_file() and json.loads(settings_path.read_text()) == settings:
        return pd.read_parquet(path)
    frame = build_haystacks(
        needle_set, load_corpus(config.corpus), config.lengths, config.depths, config.variants,
        tokenizer=load_token_counter(config.tokenizer), seed=config.seed, progress=progress,
    )
    write_table(frame, path)
    write_text_atomic(settings_path, json.dumps(settings, indent=2))
    return frame


def query_forms(needle_set: NeedleSet, expansion_files: list[str] = ()) -> dict[str, list[str]]:
    """Query texts per form, one per group in needle-set order: the question, then
    ``expanded-N`` (question + N terms) for every size of every expansion file."""
    from embedeval.expansion import expanded_query_forms

    return {QUESTION: [g.question for g in needle_set.groups], **expanded_query_forms(expansion_files, needle_set)}


def similarity_rows(embedder, haystacks: pd.DataFrame, needle_set: NeedleSet, forms: dict[str, list[str]], progress: bool) -> pd.DataFrame:
    """The similarity table of one embedder (DESIGN §3).

    Haystacks and bare needles are embedded as documents, queries as queries; sim = dot product
    of unit vectors. ``normalized = sim_qh / sim_qn`` (NaN for controls). ``n_tokens`` is the
    haystack's length in reference tokens; ``truncated``: the haystack has more of the embedder's
    own tokens than it reads (``max_tokens``); ``needle_visible``: the text up to the needle's end
    fits in that window (NA for controls).
    """
    group_index = {g.id: i for i, g in enumerate(needle_set.groups)}
    rows_group = haystacks["group_id"].map(group_index).to_numpy()
    texts = haystacks["text"].tolist()
    doc_vectors = embedder.embed(texts, kind="document", progress=progress)
    positive = (haystacks["variant"] != CONTROL).to_numpy()
    positive_idx = np.flatnonzero(positive)
    needle_texts = [needle_set.groups[rows_group[i]].needles[haystacks["variant"].iloc[i]] for i in positive_idx]
    unique_needles = sorted(set(needle_texts))
    needle_vectors = dict(zip(unique_needles, embedder.embed(unique_needles, kind="document")))
    needle_matrix = np.stack([needle_vectors[t] for t in needle_texts])

    window = embedder.max_tokens
    truncated = count_up_to(embedder.count_tokens, texts, window) > window
    through_needle = [texts[i][: int(haystacks["needle_end"].iloc[i])] for i in positive_idx]
    visible = pd.array([pd.NA] * len(texts), dtype="boolean")
    visible[positive_idx] = count_up_to(embedder.count_tokens, through_needle, window) <= window

    frames = []
    for form, queries in forms.items():
        query_vectors = embedder.embed(queries, kind="query")[rows_group]
        sim_qh = np.einsum("ij,ij->i", query_vectors, doc_vectors)
        sim_qn = np.full(len(texts), np.nan)
        sim_qn[positive_idx] = np.einsum("ij,ij->i", query_vectors[positive_idx], needle_matrix)
        frames.append(pd.DataFrame({
            "embedder": embedder.name, "haystack_id": haystacks["id"].to_numpy(),
            "group_id": haystacks["group_id"].to_numpy(), "category": haystacks["category"].to_numpy(),
            "variant": haystacks["variant"].to_numpy(), "length": haystacks["length"].to_numpy(),
            "depth": haystacks["depth"].to_numpy(dtype=float, na_value=np.nan),
            "target_depth": haystacks["target_depth"].to_numpy(dtype=float, na_value=np.nan),
            "query_form": form, "sim_qh": sim_qh.astype(float), "sim_qn": sim_qn.astype(float),
            "normalized": sim_qh / sim_qn, "n_tokens": haystacks["n_tokens"].to_numpy(), "truncated": truncated,
            "needle_visible": visible,
        }))
    return pd.concat(frames, ignore_index=True)[SIMILARITY_COLUMNS]


def run_nolima(config: NolimaConfig | None = None, progress: bool = True, cache_dir=None, commit_every: int = 256) -> NolimaResult:
    """Run the sweep end to end and write the run directory; see the module docstring."""
    from embedeval.aggregate import nolima_metrics
    from embedeval.report import write_report

    config = config or NolimaConfig()
    needle_set = config.validate()
    forms = query_forms(needle_set, config.expansions)
    embedders = [load_embedder(spec, cache_dir=cache_dir, progress=progress, commit_every=commit_every)
                 for spec in config.embedders]
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.json", json.dumps({**asdict(config), "versions": package_versions()}, indent=2))

    haystacks = load_or_build_haystacks(config, needle_set, progress)
    similarities = pd.concat(
        [similarity_rows(e, haystacks, needle_set, forms, progress) for e in embedders], ignore_index=True
    )
    metrics = nolima_metrics(similarities, n_resamples=config.n_bootstrap, seed=config.seed)
    write_table(similarities, out / "similarities.parquet")
    write_table(metrics, out / "metrics.csv")
    write_report(out, metrics, similarities, auc_threshold=config.auc_threshold)
    return NolimaResult(config, haystacks, similarities, metrics, out, {e.name: e.texts_embedded for e in embedders})
