"""Needle sets (docs/needles.md): the model, its validation and loading, the NoLiMa importer, and pair
and distractor files, one module each. Everything is importable from here as before
(``from embedeval.needles import load_needle_set``).

A needle set is ``{"name", "description", "groups": [...]}``; each group is
``{"id", "category", "question", "character", "keyword", "needles": {variant: text}}`` with the
variants ``onehop``, ``inverted``, ``literal``, ``literal_inverted``. Validation reports *every*
problem as (group id, reason). A pair file (``.csv``, ``.jsonl`` or ``.parquet``) is the lighter
input of the similarity commands: one question-needle :class:`Pair` per row.
"""

from embedeval.needles.files import DISTRACTOR_COLUMNS, PAIR_COLUMNS, PAIR_SUFFIXES, Pair, load_distractors, load_pairs, read_needle_json  # noqa: F401
from embedeval.needles.model import (  # noqa: F401
    CHAR,
    LEXICAL_QUESTION_FORMS,
    NEEDLE_VARIANTS,
    NO_OVERLAP_VARIANTS,
    NORMALIZE_BY,
    REQUIRED_FIELDS,
    REQUIRED_VARIANT,
    STANDARD_NEEDLE,
    NeedleGroup,
    NeedleSet,
    check_normalize_by,
    distractor_problems,
    raw_distractors,
    raw_questions,
)
from embedeval.needles.nolima import NOLIMA_FIELDS, NOLIMA_PRIMARY_QUESTION, convert_nolima, is_nolima_schema  # noqa: F401
from embedeval.needles.validate import grid_needle_set, group_problems, load_needle_set, needle_report, parse_needle_set, validate_needle_set  # noqa: F401
