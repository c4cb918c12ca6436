"""Experiments: each turns a config into cached embeddings and result tables."""

from embedeval.experiments.nolima import NolimaConfig, NolimaResult, run_nolima
from embedeval.haystacks import HaystackGrid

__all__ = ["HaystackGrid", "NolimaConfig", "NolimaResult", "run_nolima"]
