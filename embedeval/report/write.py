"""``write_report``: a run's report in both formats, ``report.md`` and ``report.html``, over the same
sections (:func:`~embedeval.report.sections.report_document`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from embedeval.breaks import BreakRule
from embedeval.io import write_text_atomic
from embedeval.report.html import render_html
from embedeval.report.markdown import render_markdown
from embedeval.report.sections import report_document

#: The files write_report writes into a run directory (beside figures/).
REPORT_FILES = ("report.md", "report.html")


def write_report(out: Path, metrics: pd.DataFrame, similarities: pd.DataFrame, breaks: pd.DataFrame,
                 rule: BreakRule | None = None, title: str = "NoLiMa sweep", config: dict | None = None,
                 candidates: int | None = None, chance: pd.DataFrame | None = None) -> Path:
    """Write ``report.md``, ``report.html`` and ``figures/`` into ``out`` (each file atomically);
    returns the path of ``report.md``. The arguments are :func:`~embedeval.report.sections.report_document`'s."""
    out = Path(out)
    document = report_document(out, metrics, similarities, breaks, rule, title, config, candidates, chance)
    write_text_atomic(out / "report.html", render_html(document, out))
    path = out / "report.md"
    write_text_atomic(path, render_markdown(document))
    return path
