"""``windows-mean``: consecutive windows of ``W`` tokens (``overlap`` tokens shared by neighbours)
over the whole text; v = normalise(mean of the window vectors). Score = cos(q, v). LongEmbed's PCW
(parallel context windows)."""

from __future__ import annotations

from embedeval.defaults import DEFAULT_WINDOW_OVERLAP
from embedeval.strategies.base import Family, Strategy, register
from embedeval.strategies.parameters import Parameter
from embedeval.strategies.reader import Pieces, Reader

WINDOWS_MEAN = "windows-mean"


@register
class WindowsMean(Family):
    names = (WINDOWS_MEAN,)
    choices = {WINDOWS_MEAN: "mean of window vectors over the whole text, LongEmbed's PCW"}
    model_readings = (WINDOWS_MEAN,)
    parameters = (Parameter("overlap", "tokens shared by neighbouring windows", default=DEFAULT_WINDOW_OVERLAP, minimum=0,
                            setting="window", what="a window overlap", unit="tokens"),)
    words = "averaging its windows"
    glossary = "`windows-mean` the mean of window vectors over the whole text"
    settings_help = {"window_overlap": "Tokens shared by neighbouring windows of windows-mean."}

    def combine(self, strategy: Strategy, reader: Reader, vectors, pieces: Pieces, n_texts: int):
        """One vector per text: the normalised mean of its windows' vectors, spanning what was read."""
        return reader.mean_per_text(vectors, pieces, n_texts)
