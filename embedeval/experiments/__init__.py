"""Experiments: each turns a config into cached embeddings and result tables."""

from embedeval.experiments.nolima import NolimaConfig, NolimaResult, run_nolima

__all__ = ["NolimaConfig", "NolimaResult", "run_nolima"]
