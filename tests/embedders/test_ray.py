"""The Ray executor: a sweep whose cache misses go to Ray actors on a local
2-CPU Ray gives the local executor's tables bit for bit, and a killed driver resumes from the
cache with nothing embedded twice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import ray
from typer.testing import CliRunner

from embedeval.cli import app
from embedeval.embedders.requests import TokenIds
from embedeval.experiments.nolima import NolimaConfig, run_nolima
from embedeval.grid import HaystackGrid

from fakes import cache_vectors, kill_cli_run, newly_embedded

GROUPS = ["loc-dresden", "diet-vegan"]


@pytest.fixture(scope="module")
def local_ray():
    """One local 2-CPU Ray for the module, stopped afterwards."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _config(tmp_path, name, books_dir, **executor):
    return NolimaConfig(groups=GROUPS, grid=HaystackGrid(corpus=f"dir:{books_dir}", lengths=[128, 512, 1024], depths=3, negatives=4),
                        strategies=["truncate", "windows-mean"], n_bootstrap=20, out=str(tmp_path / name), **executor)


@pytest.mark.slow
def test_a_sweep_on_ray_equals_the_local_one(local_ray, tmp_path, books_dir):
    local = run_nolima(_config(tmp_path, "local", books_dir), progress=False, cache_dir=tmp_path / "cache-local",
                       commit_every=64)
    on_ray = run_nolima(_config(tmp_path, "ray", books_dir, executor="ray", workers=2), progress=False,
                        cache_dir=tmp_path / "cache-ray", commit_every=64)
    assert on_ray.newly_embedded == local.newly_embedded
    assert min(local.newly_embedded.values()) > 2 * 32  # more than one batch per actor
    # The same tables up to float32 rounding: an actor runs torch on its one core, this process on
    # two, and batches of other shapes; CPU kernels then add in another order (last-bit differences
    # in about a tenth of the cosines, measured here). Ranks and every count must agree exactly.
    for name in ("similarities", "retrieval", "metrics"):
        pd.testing.assert_frame_equal(getattr(on_ray, name), getattr(local, name), check_exact=False, rtol=1e-5, atol=1e-7)
    for column in ("rank", "ties", "n_candidates"):
        np.testing.assert_array_equal(on_ray.retrieval[column], local.retrieval[column])


@pytest.mark.slow
def test_ray_embeds_ids_as_the_local_model_does(local_ray, minilm):
    from embedeval.embedders.executors import Executor, RayEmbedder

    texts = [f"Line {i}: " + "the quick brown fox jumps over the lazy dog " * (i % 7 + 1) for i in range(100)]
    ids = [seq for seq, _ in minilm.token_ids(texts, minilm.id_capacity())]
    remote = RayEmbedder(minilm, "all-MiniLM-L6-v2", Executor("ray", workers=2))
    # float32 rounding apart at most: an actor runs torch on one core, this process on two, and the
    # kernels a thread count picks may add in another order
    np.testing.assert_allclose(remote.embed_request(TokenIds.of(ids)), minilm.embed_request(TokenIds.of(ids)), rtol=0, atol=1e-6)
    assert remote.embedded_per_actor() == [64, 36]  # batches of 32 dealt round-robin: 1st and 3rd, 2nd and 4th
    np.testing.assert_allclose(remote.embed(texts[:5], kind="query"), minilm.embed(texts[:5], kind="query"), rtol=0, atol=1e-6)
    assert remote.embed_request(TokenIds.of([])).shape == (0, minilm.dim)


@pytest.mark.slow
def test_a_killed_ray_driver_resumes_without_repeating_work(local_ray, tmp_path, books_dir):
    cache = tmp_path / "cache"
    args = ["nolima", "--groups", ",".join(GROUPS), "--corpus", f"dir:{books_dir}", "--lengths", "128,512",
            "--depths", "4", "--negatives", "4", "--strategy", "windows-mean", "--out", str(tmp_path / "run"),
            "--commit-every", "8", "--cache-dir", str(cache), "--executor", "ray", "--workers", "2", "-q"]
    saved = kill_cli_run(args, cache / "embeddings.sqlite", vectors=24)
    assert not (tmp_path / "run" / "similarities.parquet").exists()

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    resumed = newly_embedded(result.output)
    fresh = [a if a != str(tmp_path / "run") else str(tmp_path / "fresh") for a in args]
    fresh[fresh.index(str(cache))] = str(tmp_path / "fresh-cache")
    whole = CliRunner().invoke(app, fresh)
    assert whole.exit_code == 0, whole.output
    total = newly_embedded(whole.output)
    assert saved > 0 and resumed > 0
    assert saved + resumed == total == cache_vectors(cache / "embeddings.sqlite")  # nothing twice, nothing lost
    # float32 rounding apart at most: the resumed run embedded its texts in other batches (see test_nolima)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run" / "similarities.parquet"),
                                  pd.read_parquet(tmp_path / "fresh" / "similarities.parquet"), check_exact=False, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("args, says", [
    (["--executor", "spark"], "unknown executor 'spark'; use one of local, ray"),
    (["--executor", "ray", "--workers", "0"], "workers must be a whole number >= 1, not 0"),
])
def test_bad_executor_settings_are_one_line(tmp_path, isolated_cache, args, says):
    result = CliRunner().invoke(app, ["nolima", "--out", str(tmp_path / "run"), "-q", *args])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and says in lines[0], result.output
    assert not (tmp_path / "run").exists()
