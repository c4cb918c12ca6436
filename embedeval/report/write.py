"""``write_report``: a run's report in both formats, ``report.md`` and ``report.html``, over the same
sections (:func:`~embedeval.report.sections.report_document`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.breaks import BreakRule
from embedeval.derived import keep_edited, recorded_files
from embedeval.io import write_text_atomic
from embedeval.report.html import render_html
from embedeval.report.markdown import render_markdown
from embedeval.report.sections import report_document
from embedeval.run_folder import check_subfolder

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
#: The files write_report writes into a run directory (beside figures/).
REPORT_FILES = (REPORT_MD, REPORT_HTML)
#: The folder of a report's figures, beside it.
FIGURES = "figures"


def write_report(out: Path, metrics: pd.DataFrame, similarities: pd.DataFrame, breaks: pd.DataFrame,
                 rule: BreakRule | None = None, title: str = "NoLiMa sweep", config: dict | None = None,
                 candidates: int | None = None, chance: pd.DataFrame | None = None,
                 decision: pd.DataFrame | None = None) -> list[str]:
    """Write ``report.md``, ``report.html`` and ``figures/`` into ``out`` (each file atomically);
    returns the files written, relative to ``out``: :data:`REPORT_FILES`, then the figures (any
    other file in ``figures/`` is not this report's). Those of them changed since embedeval wrote
    them are copied aside first (:func:`~embedeval.derived.keep_edited`). The arguments are
    :func:`~embedeval.report.sections.report_document`'s."""
    out = Path(out)
    check_subfolder(out / FIGURES)
    keep_edited(out, [name for name in recorded_files(out) if name in REPORT_FILES or name.startswith(f"{FIGURES}/")])
    document = report_document(out, metrics, similarities, breaks, rule, title, config, candidates, chance, decision)
    write_text_atomic(out / REPORT_HTML, render_html(document, out))
    write_text_atomic(out / REPORT_MD, render_markdown(document))
    return [*REPORT_FILES, *document.figures()]
