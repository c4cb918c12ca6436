"""A run's haystacks as an MTEB retrieval task, so MTEB's own evaluator scores them (docs/export.md):
``mteb.evaluate(model, nolima_task("runs/nolima"), cache=None)``.

The task is the run's ``--pool all`` ranking (:func:`~embedeval.similarity.retrieval_rows`) said in
MTEB's terms. Each haystack length is a split ``test_<length>``, as LongEmbed splits its needle and
passkey tasks. Within a split, one ``hf_subset`` per needle condition and target depth,
``<variant>[-x<K>]-d<depth>`` (the variant and distractor count named as
:func:`embedeval.export.mteb_subset` names them, the depth with up to four significant digits:
``onehop-d0``, ``inverted-x1-d0.5``), holding

- the corpus: every needle-free haystack of the length and distractor count (every group's control
  and every negative) and every group's needle haystack of that variant, distractor count and depth;
- the queries: one per needle haystack, its group's question in the chosen query form (id
  ``q:<haystack id>``), relevant to that haystack alone.

So each query's candidates are the corpus less its own haystack, which is exactly its ``all`` pool:
the measures MTEB computes (``ndcg_at_1``, ``recall_at_5``, ``mrr_at_10``, ...) per subset are the
means of the run's rank-table rows of that length, variant, distractor count and depth when the run
was made with ``pool="all"``, and their mean over a split's depth subsets is the ``metrics.csv``
cell. Ties agree too: past the model's window a needle haystack reads exactly as its own control
(the needle is cut off with the rest), so the two score alike. embedeval counts a tie against the
needle; MTEB orders tied documents by id, descending (trec_eval's order). So every needle
haystack's corpus id begins ``answer:`` and every needle-free haystack's ``free:`` (which sorts
above it): a tied control ranks above the needle in MTEB as in embedeval. (A tie between two needle
haystacks of different questions, whose fillers differ, would still go by id; none has been seen.)
One difference remains by design: MTEB embeds texts as the model reads them (its own truncation),
so it matches the ``truncate`` strategy only.
Haystacks with several needles (``needles_per_haystack`` K > 1) are left out: a question whose needle
sits in other groups' haystacks too has several relevant documents there, where embedeval ranks each
alone.

The data is built from the run directory in :meth:`NolimaTask.load_data` (no download); the
``dataset_revision`` is the one the run's exported results carry (:func:`embedeval.export.dataset_revision`).
Requires the optional ``mteb`` package (``pip install -e ".[mteb]"``); nothing else in embedeval
imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.task_metadata import TaskMetadata

from embedeval.errors import InputError
from embedeval.expansion import query_texts
from embedeval.export import LANGUAGES, MTEB_MAIN_SCORE, MTEB_TASK, dataset_revision, mteb_subset, mteb_task_name
from embedeval.haystacks import distractor_columns
from embedeval.labels import ALL_POOL, CONTROL, NEGATIVE, QUESTION
from embedeval.run import HAYSTACK_SETTINGS, HAYSTACKS, NolimaRun
from embedeval.schema import N_NEEDLES
from embedeval.strategies.truncate import TRUNCATE

#: Where the task's documents come from, for MTEB's metadata.
REFERENCE = "https://github.com/adobe-research/NoLiMa"


#: Corpus id prefixes: MTEB breaks score ties by id, descending, so a needle-free document sorts
#: above a tied needle haystack, as embedeval's ranks count ties against the needle.
ANSWER_PREFIX, FREE_PREFIX = "answer:", "free:"


def corpus_id(haystack_id: str, needle_free: bool) -> str:
    """A haystack's id in the task's corpus (see :data:`ANSWER_PREFIX`)."""
    return f"{FREE_PREFIX if needle_free else ANSWER_PREFIX}{haystack_id}"


def depth_subset(variant: str, distractors: int, depth: float) -> str:
    """The ``hf_subset`` of a needle condition and target depth (see the module docstring)."""
    return f"{mteb_subset(variant, distractors, 1, True)}-d{depth:.4g}"


def task_data(haystacks: pd.DataFrame, questions: list[str | None], group_ids: list[str]) -> dict[str, dict[str, RetrievalSplitData]]:
    """``{hf_subset: {split: RetrievalSplitData}}`` of a haystack table (see the module docstring);
    ``questions[i]`` is the query of group ``group_ids[i]`` (None: the group has no such query, its
    haystacks are no query's answer but stay in the corpus)."""
    query_of = dict(zip(group_ids, questions, strict=True))
    variants = haystacks["variant"].to_numpy()
    distractors, _, _ = distractor_columns(haystacks)
    n_needles = (haystacks[N_NEEDLES].to_numpy(dtype=np.int64) if N_NEEDLES in haystacks.columns
                 else (~np.isin(variants, [CONTROL, NEGATIVE])).astype(np.int64))
    needled = ~np.isin(variants, [CONTROL, NEGATIVE])
    free = ~needled & (n_needles == 0)
    depth = haystacks["target_depth"].to_numpy(dtype=float, na_value=np.nan)
    lengths = haystacks["length"].to_numpy()
    data: dict[str, dict[str, RetrievalSplitData]] = {}
    conditions = sorted({(int(length), variant, int(count), float(d))
                         for length, variant, count, d, one in zip(lengths, variants, distractors, depth, needled & (n_needles == 1), strict=True) if one})
    for length, variant, count, d in conditions:
        answers = needled & (n_needles == 1) & (lengths == length) & (variants == variant) & (distractors == count) & (depth == d)
        in_corpus = (free & (lengths == length) & (distractors == count)) | answers
        corpus = haystacks[in_corpus]
        ids = [corpus_id(h, f) for h, f in zip(corpus["id"], free[in_corpus], strict=True)]
        asked = haystacks[answers & np.array([query_of.get(g) is not None for g in haystacks["group_id"]], dtype=bool)]
        if asked.empty:
            continue
        data.setdefault(depth_subset(variant, count, d), {})[f"test_{length}"] = RetrievalSplitData(
            corpus=Dataset.from_dict({"id": ids, "text": corpus["text"].tolist(), "title": [""] * len(corpus)}),
            queries=Dataset.from_dict({"id": [f"q:{h}" for h in asked["id"]], "text": [query_of[g] for g in asked["group_id"]]}),
            relevant_docs={f"q:{h}": {corpus_id(h, False): 1} for h in asked["id"]},
            top_ranked=None)
    return data


class NolimaTask(AbsTaskRetrieval):
    """A run's haystacks as an MTEB retrieval task (see the module docstring); make one with
    :func:`nolima_task`, which gives each run a subclass carrying its own ``metadata`` (MTEB reads a
    task's metadata from its class: its splits and subsets are the run's)."""

    def __init__(self, data: dict[str, dict[str, RetrievalSplitData]], **kwargs: Any):
        self._data = data
        super().__init__(**kwargs)

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """The run's corpus, queries and relevance, built in memory (no download)."""
        if self.data_loaded:
            return
        self.dataset = {subset: dict(splits) for subset, splits in self._data.items()}
        self.data_loaded = True


def nolima_task(run_dir: str | Path, form: str = QUESTION) -> NolimaTask:
    """The run at ``run_dir`` as an MTEB retrieval task for the query form ``form`` (``question``, or a form
    the run has: ``twohop``, ``expanded-N``); one :class:`~embedeval.errors.InputError` line when the
    run lacks the form or holds no one-needle haystack."""
    run = NolimaRun.open(run_dir, (HAYSTACKS, HAYSTACK_SETTINGS))
    needle_set = run.needle_set()
    forms = query_texts(needle_set, list(run.config.get("expansions", ())))
    if form not in forms:
        raise InputError(f"the run at {run.path} has no query form {form!r} (it has {', '.join(forms)})", "form")
    data = task_data(run.haystacks(), forms[form], [g.id for g in needle_set.groups])
    if not data:
        raise InputError(f"the run at {run.path} has no one-needle haystack to make an MTEB task of")
    splits = sorted({split for splits in data.values() for split in splits}, key=lambda s: int(s.removeprefix("test_")))
    name = mteb_task_name(TRUNCATE, form)
    metadata = TaskMetadata(
        name=name, type="Retrieval", category="t2t", modalities=["text"], main_score=MTEB_MAIN_SCORE,
        description=(f"{MTEB_TASK}: the NoLiMa-style haystacks of the embedeval run {run.path.name}, each needle haystack "
                     "retrieved by its question among every haystack of its length and depth that does not answer it."),
        reference=REFERENCE, dataset={"path": f"embedeval/{run.path.name}", "revision": dataset_revision(run, ALL_POOL)},
        eval_splits=splits, eval_langs={subset: list(LANGUAGES) for subset in data}, date=None, domains=None,
        license="not specified", annotations_creators="derived", dialect=[], sample_creation="created", bibtex_citation="")
    return type(NolimaTask.__name__, (NolimaTask,), {"metadata": metadata})(data)
