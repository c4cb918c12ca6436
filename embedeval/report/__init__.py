"""Run reports: the sections a report holds (:mod:`~embedeval.report.sections`, from the tables of
:mod:`~embedeval.report.tables` and the figures of :mod:`~embedeval.report.figures`), rendered as
Markdown and as one self-contained HTML page (:mod:`~embedeval.report.markdown`,
:mod:`~embedeval.report.html`) by :func:`write_report`; run directories read back and compared
(:mod:`~embedeval.report.compare`). The break point itself is a statistic, :mod:`embedeval.breaks`;
its words, the same everywhere, are :mod:`~embedeval.report.break_words`.

``write_report(out, metrics, similarities)`` writes ``report.md``, ``report.html`` and
``figures/*.png``; ``compare_runs(run_dirs, out)`` does the same over several run directories,
labelling each series with its run when embedders repeat.
"""

from embedeval.report.compare import compare_runs, pool_size  # noqa: F401
from embedeval.report.figures import LINE_FIGURES, expansion_figure, heatmap_figure, line_figure, recall_figure  # noqa: F401
from embedeval.report.html import render_html  # noqa: F401
from embedeval.report.markdown import markdown_table, render_markdown  # noqa: F401
from embedeval.report.sections import HEADER_KEYS, Document, report_document  # noqa: F401
from embedeval.report.tables import (  # noqa: F401
    best_form_table,
    category_tables,
    chunk_size_lines,
    chunk_size_table,
    depth_tables,
    distractor_note,
    distractor_table,
    fewest_distractors,
    main_variant,
    one_needle,
    position_table,
    recall_chance_table,
    scorer_view,
    series_note,
    several_needles_table,
    summary_table,
    truncation_lines,
)
from embedeval.report.write import REPORT_FILES, write_report  # noqa: F401
