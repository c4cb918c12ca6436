"""A run directory, handed on to where users already work (docs/export.md).

``export_mteb(run, out)``: MTEB result files. One ``TaskResult``-shaped JSON per embedder,
strategy and query form, written as MTEB's own results repository lays them out:
``out/{org__model}/{revision}/{task}.json`` with a ``model_meta.json`` beside them. The task is
``EmbedevalNoLiMa``, suffixed with the strategy when it is not ``truncate`` and with the query form
when it is not ``question``: ``EmbedevalNoLiMa``, ``EmbedevalNoLiMa.windows-mean``,
``EmbedevalNoLiMa.chunks-max@128.expanded-100``. Each haystack length is a split ``test_<length>``
(as LongEmbed's needle and passkey tasks are split by length); within it, one score dict per
``hf_subset``: the needle variant (``onehop``, ``inverted``, ...), suffixed ``-x<K>`` with K
distractors and ``-n<K>-own``/``-n<K>-other`` with K needles per haystack. Scores are the
``metrics.csv`` means of the retrieval view: ``main_score`` = ``ndcg_at_1`` (LongEmbed's main score),
``ndcg_at_10``, ``recall_at_1/5/10``, ``mrr_at_10``; a score the run has none of is null.

``export_prompts(run, out)``: an LLM prompt set in Context Rot's columns (``token_count,
approximate_input_length, needle_depth, prompt, question, answer``, then ``haystack_id, needle,
variant`` and the distractor count: :data:`PROMPT_COLUMNS`), one row per needle haystack and query
form, with the similarity covariates of Chroma's study beside each prompt: ``needle_question_sim`` and
``needle_haystack_sim`` (mean cosine of the needle with its top-5 corpus chunks, as
``similarity needle-haystack``), each the mean across the run's embedders, and per embedder as
``needle_question_sim:<spec>``, ``needle_haystack_sim:<spec>``.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from embedeval.chunking import corpus_chunks
from embedeval.corpus import load_corpus
from embedeval.defaults import DEFAULT_CHUNKER, DEFAULT_INDEX, DEFAULT_POOL, DEFAULT_TOP_K
from embedeval.derived import RECORD, keep_edited, record_outputs, recorded_files
from embedeval.embedders.registry import LEXICAL_SPECS, load_embedder
from embedeval.errors import InputError
from embedeval.experiments.context_rot import needle_haystack_similarity, needle_question_similarity
from embedeval.io import Force, check_output_file, json_text, write_table, write_text_atomic
from embedeval.labels import ALL, CONTROL, NEGATIVE, QUESTION, is_blind
from embedeval.needles import Pair
from embedeval.plan import EmbedderPlan, plan_work
from embedeval.run import HAYSTACK_SETTINGS, HAYSTACKS, NolimaRun
from embedeval.run_folder import check_run_folder, run_directory
from embedeval.schema import N_DISTRACTORS, N_NEEDLES, OWN_QUESTION, QUERY_FORM, SCORER
from embedeval.strategies import model_reading_rank

MTEB_TASK = "EmbedevalNoLiMa"
#: What MTEB names each retrieval measure of ``metrics.csv``.
MTEB_SCORES = {"ndcg_at_1": "ndcg@1", "ndcg_at_10": "ndcg@10", "recall_at_1": "recall@1", "recall_at_5": "recall@5",
               "recall_at_10": "recall@10", "mrr_at_10": "mrr@10"}
MTEB_MAIN_SCORE = "ndcg_at_1"
#: The TaskResult schema the files follow (mteb's own JSON, as its ``TaskResult.to_disk`` writes it).
MTEB_FORMAT_VERSION = "2.0.0"
NO_REVISION = "no_revision_available"
LANGUAGES = ["eng-Latn"]
#: Where MTEB's results repository files each provider's models.
ORGANISATIONS = {"st": "sentence-transformers", "openai": "openai", "voyage": "voyageai", "jina": "jinaai"}
#: NoLiMa's task template (its ``templates``, in words of our own): the haystack, then the question.
DEFAULT_TEMPLATE = ("You will answer a question based on the following book snippet:\n\n{haystack}\n\n"
                    "Use the information provided in the book snippet to answer the question. Your answer should be "
                    "short and based on either explicitly stated facts or strong, logical inferences.\n\n"
                    "Question: {question}\n\nReturn only the final answer with no additional explanation or reasoning.")
PROMPT_COLUMNS = ["token_count", "approximate_input_length", "needle_depth", "prompt", "question", "answer",
                  "haystack_id", "needle", "variant", N_DISTRACTORS]
FORMATS = ("mteb", "prompts")
#: The file beside each model's result files; its listing in ``derived.json`` marks an MTEB export.
MODEL_META = "model_meta.json"
#: What marks a folder an MTEB export may be written into (besides a new or empty one).
MTEB_FOLDER_RECORD = f"{RECORD} listing its {MODEL_META} files"


def is_mteb_folder(folder: Path) -> bool:
    """Whether embedeval exported MTEB results into ``folder``: its ``derived.json`` lists them."""
    return any(Path(name).name == MODEL_META for name in recorded_files(folder))


def model_folder(spec: str) -> tuple[str, str]:
    """(MTEB's model name, its folder ``org__model``) of an embedder spec:
    ``st:all-MiniLM-L6-v2`` -> ``sentence-transformers/all-MiniLM-L6-v2``; a local path or an unknown
    provider goes under ``embedeval``."""
    provider, _, model = spec.partition(":")
    model = model or provider
    if provider == "st" and "/" in model and not Path(model).exists():
        name = model  # already org/model
    else:
        name = f"{ORGANISATIONS.get(provider, 'embedeval')}/{Path(model).name if provider == 'st' else model}"
    return name, re.sub(r"[^A-Za-z0-9_.@-]", "_", name.replace("/", "__"))


def mteb_task_name(strategy: str, form: str) -> str:
    """``EmbedevalNoLiMa`` with the strategy and query form appended where they are not the defaults:
    a strategy other than the model's own reading (the registry's most direct, rank 0:
    ``truncate``), a query form other than the question."""
    parts = [MTEB_TASK] + ([strategy] if model_reading_rank(strategy) != 0 else []) + ([form] if form != QUESTION else [])
    return ".".join(parts)


def mteb_subset(variant: str, distractors: int, n_needles: int, own: bool) -> str:
    """The ``hf_subset`` of a metrics cell (see the module docstring)."""
    subset = variant + (f"-x{int(distractors)}" if distractors else "")
    return subset + (f"-n{int(n_needles)}-{'own' if own else 'other'}" if n_needles > 1 else "")


def _score(value) -> float | None:
    """A score as MTEB's JSON holds it: a finite number, or null where the run has none (a measure
    a cell lacks reads NaN): never the ``NaN`` or ``Infinity`` no JSON reader takes."""
    value = float(value)
    return value if math.isfinite(value) else None


def mteb_results(metrics: pd.DataFrame, dataset_revision: str) -> dict[tuple[str, str], dict]:
    """{(embedder, task name): TaskResult JSON} from a metrics table (the overall cells)."""
    cells = metrics[(metrics["category"] == ALL) & (metrics["depth_bucket"] == ALL) & metrics["metric"].isin(MTEB_SCORES.values())
                    & ~metrics["variant"].map(is_blind)]  # needle-blind control rows are a level, not a retrieval task
    if cells.empty:
        raise InputError("the run's metrics.csv has no retrieval measures to export (ndcg@1, recall@k, mrr@10)")
    wide = cells.pivot_table(index=[*SCORER, "length", "variant", N_DISTRACTORS, N_NEEDLES, OWN_QUESTION],
                             columns="metric", values="value").reset_index()
    results: dict[tuple[str, str], dict] = {}
    for (embedder, strategy, form), task_rows in wide.groupby(SCORER, sort=True):
        scores: dict[str, list[dict]] = {}
        for row in task_rows.sort_values(["length", "variant", N_DISTRACTORS, N_NEEDLES]).to_dict("records"):
            values = {name: _score(row[measure]) for name, measure in MTEB_SCORES.items()}
            scores.setdefault(f"test_{int(row['length'])}", []).append(
                {**values, "main_score": values[MTEB_MAIN_SCORE], "languages": LANGUAGES,
                 "hf_subset": mteb_subset(row["variant"], row[N_DISTRACTORS], row[N_NEEDLES], row[OWN_QUESTION])})
        results[(embedder, mteb_task_name(strategy, form))] = {
            "dataset_revision": dataset_revision, "task_name": mteb_task_name(strategy, form),
            "mteb_version": MTEB_FORMAT_VERSION, "scores": scores, "evaluation_time": None, "kg_co2_emissions": None}
    return results


def model_meta(spec: str) -> dict:
    """MTEB's ``model_meta.json`` for an embedder spec: what the spec says, the rest unknown (null)."""
    name, _ = model_folder(spec)
    local = spec.startswith("st:")
    return {"name": name, "revision": NO_REVISION, "release_date": None, "languages": LANGUAGES, "n_parameters": None,
            "memory_usage_mb": None, "max_tokens": None, "embed_dim": None, "license": None, "open_weights": local,
            "public_training_code": None, "public_training_data": None,
            "framework": ["Sentence Transformers", "PyTorch"] if local else ["API"], "reference": None,
            "similarity_fn_name": "cosine", "use_instructions": False, "training_datasets": None, "loader": None,
            "modalities": ["text"], "model_type": ["dense"]}


def dataset_revision(run: NolimaRun, pool: str | None = None) -> str:
    """The dataset revision for MTEB of the run's haystacks ranked in ``pool`` (default: the run's
    own pool): the sha256 of its ``haystacks.json`` (what the haystacks were built from) and of the
    pool's name (the same haystacks ranked among other candidates are another dataset: the default
    needle-free pool's results and :func:`~embedeval.mteb_task.nolima_task`, which ranks the ``all``
    pool, never share a revision), cut to 16 hex digits, so two exports of the same haystacks and
    pool agree."""
    digest = hashlib.sha256(run.haystack_settings_bytes())
    digest.update(f"\0pool={pool or run.config.get('pool', DEFAULT_POOL)}".encode())
    return digest.hexdigest()[:16]


def export_mteb(run_dir: str | Path, out: str | Path) -> list[Path]:
    """Write the run's MTEB result files under ``out`` (see the module docstring); returns them,
    with the run's :func:`dataset_revision`.

    ``out`` follows the rules of a run directory (:func:`~embedeval.run_folder.run_directory`): a new or
    empty folder, or one embedeval exported into before (:func:`is_mteb_folder`: its
    ``derived.json`` lists what it wrote, this export's files added); any other folder is one
    :class:`~embedeval.errors.InputError` before the run is read, and so is, before any file is
    written, a result file, ``model_meta.json``, ``derived.json`` or a folder on their way taken by
    a link or a folder (:func:`~embedeval.run_folder.check_outputs`)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"`out` {out} is a file; MTEB results go into a folder", "out")
    check_run_folder(out, is_mteb_folder, MTEB_FOLDER_RECORD)
    run = NolimaRun.open(run_dir, (HAYSTACK_SETTINGS,))
    revision = dataset_revision(run)
    results = mteb_results(run.metrics(), revision)
    places = {key: f"{model_folder(key[0])[1]}/{NO_REVISION}" for key in results}
    outputs = [RECORD, *(f"{places[key]}/{name}" for key in results for name in (f"{key[1]}.json", MODEL_META))]
    result_files, meta_files = [], []
    with run_directory(out, is_mteb_folder, MTEB_FOLDER_RECORD, outputs):  # none of them a link or a folder: before any write
        earlier = [name for name in recorded_files(out) if (out / name).is_file()]
        keep_edited(out, earlier)  # a result file edited since: kept aside, said in a note
        for (embedder, task), result in results.items():
            target = out / places[embedder, task]
            write_text_atomic(target / f"{task}.json", json_text(result) + "\n")
            write_text_atomic(target / MODEL_META, json_text(model_meta(embedder)) + "\n")
            result_files.append(target / f"{task}.json")
            meta_files.append(target / MODEL_META)
        record_outputs(out, revision, {*earlier, *(str(path.relative_to(out)) for path in result_files + meta_files)})
    return result_files


def prompt_rows(haystacks: pd.DataFrame, needle_set, template: str) -> pd.DataFrame:
    """One row per needle haystack and query form of ``needle_set``: Context Rot's columns
    (:data:`PROMPT_COLUMNS`), the prompt filled from ``template``."""
    needled = haystacks[~haystacks["variant"].isin([CONTROL, NEGATIVE])]
    rows = []
    for form in needle_set.question_forms:
        for row in needled.itertuples(index=False):
            group = needle_set.group(row.group_id)
            question = group.query(form)
            if question is None:
                continue
            character = row.character if isinstance(row.character, str) else group.character
            rows.append({"token_count": int(row.n_tokens), "approximate_input_length": int(row.length),
                         "needle_depth": float(row.depth), "prompt": template.replace("{haystack}", row.text).replace("{question}", question),
                         "question": question, "answer": character, "haystack_id": row.id,
                         "needle": group.needle(row.variant, character), "variant": row.variant,
                         N_DISTRACTORS: int(getattr(row, N_DISTRACTORS, 0) or 0), QUERY_FORM: form})
    return pd.DataFrame(rows, columns=[*PROMPT_COLUMNS, QUERY_FORM])


def check_template(template: str, where: str) -> str:
    missing = [slot for slot in ("{haystack}", "{question}") if slot not in template]
    if missing:
        raise InputError(f"template {where} lacks {' and '.join(missing)}")
    return template


@dataclass
class PromptSet:
    """A run's prompt set read and checked before anything is embedded (:meth:`read`), then planned
    (:meth:`plan`: what its covariates would embed) or written (:meth:`write`)."""

    out: Path
    table: pd.DataFrame  # the prompts, without covariates
    specs: list[str]  # the run's embedders (lexical scorers have no covariates)
    source: str  # the run's corpus
    seed: int  # its chunks' seed
    chunker: str

    @classmethod
    def read(cls, run_dir: str | Path, out: str | Path, template_file: str | Path | None = None,
             chunker: str = DEFAULT_CHUNKER, force: Force | bool = False) -> PromptSet:
        """The output, the template and the run checked (one error line each), the prompts made;
        ``force`` (``embedeval --force``): the output may replace a file embedeval did not write."""
        out = check_output_file(out, (".csv", ".parquet"), force)
        template = DEFAULT_TEMPLATE
        if template_file is not None:
            path = Path(template_file)
            if not path.is_file():
                raise InputError(f"template {path} does not exist")
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"template {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
            template = check_template(text, str(path))
        run = NolimaRun.open(run_dir, (HAYSTACKS,))
        config = run.config
        source = run.corpus()  # an older run's relative corpus path not found from here: one line before any work
        table = prompt_rows(run.haystacks(), run.needle_set(), template)
        specs = [spec for spec in config["embedders"] if spec not in LEXICAL_SPECS]
        return cls(out, table, specs, source, config["grid"].get("seed", 0), chunker)

    def covariates(self, embedders: list, index: str = DEFAULT_INDEX) -> pd.DataFrame:
        """The prompts with ``needle_question_sim`` and ``needle_haystack_sim`` of ``embedders``
        (the run's, loaded), computed for each distinct (question, needle): the module docstring."""
        pairs_of = self.table[["question", "needle"]].drop_duplicates().reset_index(drop=True)
        pairs = [Pair(id=str(i), topic="", question=q, needle=n) for i, (q, n) in enumerate(pairs_of.itertuples(index=False))]
        chunks = corpus_chunks(load_corpus(self.source), self.chunker, seed=self.seed)
        question_sims = needle_question_similarity(pairs, embedders)
        haystack_sims = needle_haystack_similarity(pairs, chunks, embedders, top=DEFAULT_TOP_K, index=index,
                                                   chunk_origin={"corpus": self.source, "chunker": self.chunker, "seed": self.seed})
        key = pairs_of.assign(id=[p.id for p in pairs])
        for name, sims in (("needle_question_sim", question_sims), ("needle_haystack_sim", haystack_sims)):
            columns = {spec: f"{name}:{spec}" for spec in self.specs} | {"mean": name}
            key = key.merge(sims[["id", *columns]].rename(columns=columns), on="id")
        return self.table.merge(key.drop(columns="id"), on=["question", "needle"], how="left")

    def plan(self, cache_dir=None, prices: dict[str, float] | None = None, calibrate: bool = True,
             progress: bool = False) -> list[EmbedderPlan]:
        """What :meth:`write` would embed, send, cost and take (:mod:`embedeval.plan`): the
        covariates recorded (faiss: a plan's stand-in vectors stay out of chroma); nothing sent or
        stored."""
        return plan_work(self.specs, self.covariates, cache_dir, prices, calibrate, self.seed, progress)

    def write(self, cache_dir=None, index: str = DEFAULT_INDEX, progress: bool = False) -> pd.DataFrame:
        """Write the prompt set, with its covariates through the cache, to ``out``; returns it."""
        table = self.table
        if self.specs:
            table = self.covariates([load_embedder(spec, cache_dir=cache_dir, progress=progress) for spec in self.specs], index)
        write_table(table, self.out)
        return table


def export_prompts(run_dir: str | Path, out: str | Path, template_file: str | Path | None = None, *, cache_dir=None,
                   index: str = DEFAULT_INDEX, chunker: str = DEFAULT_CHUNKER, progress: bool = False,
                   force: Force | bool = False) -> pd.DataFrame:
    """Write the run's prompt set to ``out`` (.csv or .parquet) and return it (see the module
    docstring). The covariates are computed for each distinct (question, needle) with the run's
    embedders (lexical scorers have none) through the cache; ``needle_haystack_sim`` searches the
    run's corpus cut by ``chunker`` (:class:`PromptSet`); ``force``: ``out`` may replace a file embedeval did not write."""
    return PromptSet.read(run_dir, out, template_file, chunker, force).write(cache_dir, index, progress)
