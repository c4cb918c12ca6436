"""Where a sweep's time goes: the model's forward passes against everything the tool does around
them, the cold sweep and the warm rerun side by side in one run.

Runs ``embedeval nolima`` twice in processes of their own, as a user would: *cold* (a new
``EMBEDEVAL_CACHE``, so every text is embedded; the corpus is copied from ``--corpus-cache`` when
given, else downloaded once) and *warm* (the same cache, a new ``--out``: every vector is cached,
so what is left is the tool). For each it prints the wall seconds, each step's seconds as the
progress lines say them (model load, haystacks, embedding, metrics, figures and report; the rest
of the wall is imports, reading the corpus and writing the tables), the model's own seconds
(``timings.csv`` ``model_seconds``: the forward passes) and the ratio wall / model seconds; then
warm / cold. The package's import time is measured once on its own. With ``--device cuda`` the
embedder runs in float16 on the GPU, its utilisation is sampled every 250 ms with ``nvidia-smi``,
and ``bench_gpu.py --part 1``'s raw-forward comparison follows.

    PYTHONPATH=. python benchmarks/bench_overhead.py                        # the default grid, on the CPU
    PYTHONPATH=. python benchmarks/bench_overhead.py --extra "--lengths 128,256 --depths 2 --negatives 4"
    PYTHONPATH=. python benchmarks/bench_overhead.py --device cuda          # on a GPU machine, under 5 minutes
    PYTHONPATH=. python benchmarks/bench_overhead.py --part driver          # the driver's rates alone, a minute

``--part driver`` measures, on this CPU and without a model's forward, the rates a large sweep's
driver works at (docs/scale.md's estimate): tokenising the corpus's texts cut to about 8,000
tokens on one thread and on tokenizers' threads; ``embed_ids`` with a forward that costs nothing
(framing, padding, copies: the tool's work per window); and the same windows through the cache
into an empty file, commits on their own thread (keys, checks, SQLite writes).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

#: A finished step's progress line (embedeval.progress.done_line).
STEP = re.compile(r"^(?P<what>.+?) \.\.\. done in (?P<seconds>[\d.]+) s$")
#: The stages the steps are counted in, by the first words of their line.
STAGES = {"corpus download": ("downloading",), "model load": ("loading",), "haystacks": ("building",),
          "embedding": ("embedding",), "metrics": ("metrics",), "figures and report": ("figures",)}
CUDA_SPEC = "st:all-MiniLM-L6-v2?device=cuda&dtype=float16"


def import_seconds() -> float:
    """Seconds a fresh process takes to import what the sweep imports before its first step."""
    code = ("import time; t = time.perf_counter(); import embedeval.cli, embedeval.experiments.nolima, embedeval.report; "
            "print(time.perf_counter() - t)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


class GpuSampler:
    """``nvidia-smi``'s utilisation every 250 ms while the block runs (none without nvidia-smi)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and shutil.which("nvidia-smi") is not None
        self.samples: list[int] = []

    def __enter__(self):
        if self.enabled:
            self.process = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                             "-lms", "250"], stdout=subprocess.PIPE, text=True)
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line.strip().split()[0]))

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.process.terminate()
            self.process.wait(timeout=10)

    def said(self) -> str:
        if not self.samples:
            return ""
        busy = sum(s > 10 for s in self.samples)
        return f"; GPU utilisation mean {sum(self.samples) / len(self.samples):.1f}%, above 10% in {busy} of {len(self.samples)} samples"


def sweep(folder: Path, name: str, cache: Path, args: list[str], gpu: bool) -> dict:
    """``embedeval nolima --out folder/name ARGS`` with ``cache`` as its cache: wall seconds, the
    seconds per stage, the model's seconds."""
    out = folder / name
    env = {**os.environ, "EMBEDEVAL_CACHE": str(cache)}
    command = [sys.executable, "-c", "from embedeval.cli import main; main()", "nolima", "--out", str(out), *args]
    with GpuSampler(gpu) as sampler:
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command[3:])} failed:\n{done.stderr[-3000:]}")
    stages = dict.fromkeys([*STAGES, "other steps"], 0.0)
    for line in done.stderr.replace("\r", "\n").splitlines():
        found = STEP.match(line.strip())
        if found:
            stage = next((s for s, starts in STAGES.items() if found["what"].startswith(starts)), "other steps")
            stages[stage] += float(found["seconds"])
    timings = pd.read_csv(out / "timings.csv")
    model = float(timings.groupby("embedder")["model_seconds"].max().sum())
    newly = sum(int(n.replace(",", "")) for n in re.findall(r": ([\d,]+) texts newly embedded", done.stdout))
    return {"name": name, "wall": wall, "stages": stages, "model": model, "embedded": newly, "gpu": sampler.said()}


def report(run: dict) -> None:
    stages = run["stages"]
    outside = run["wall"] - sum(stages.values())
    ratio = f"{run['wall'] / run['model']:.1f}x" if run["model"] > 0 else "-"
    print(f"{run['name']:<5} wall {run['wall']:7.1f} s  model's forward {run['model']:6.1f} s  wall/model {ratio:>7}  "
          f"texts embedded {run['embedded']:,}{run['gpu']}")
    parts = [f"{stage} {seconds:.1f}" for stage, seconds in stages.items() if seconds]
    print(f"      steps (s): {'; '.join(parts)}; outside the steps (imports, corpus, tables) {outside:.1f}")
    if stages["embedding"]:
        print(f"      embedding steps less the model's forward (tokenising, framing, cache): {stages['embedding'] - run['model']:.1f} s")


def driver_rates(windows: int = 20_000) -> None:
    """The driver's rates without a model's forward (see the module docstring)."""
    import numpy as np
    import torch

    from embedeval.corpus import load_corpus
    from embedeval.embedders import tokens
    from embedeval.embedders.cache import EmbeddingCache
    from embedeval.embedders.cached import CachedTokenIdEmbedder
    from embedeval.embedders.local import SentenceTransformerEmbedder
    from embedeval.embedders.requests import TokenIds

    counter = tokens.load_token_counter()
    text = " ".join(book.text for book in load_corpus("shakespeare").books)
    texts = [text[i : i + 40_000] for i in range(0, len(text), 40_000)]  # about 8,000 tokens each
    rates = {}
    for label, threshold in (("one thread", 10**15), ("tokenizers' threads", 0)):
        tokens.THREADED_CHARS = threshold
        tokens._MEMOS.clear()
        started = time.perf_counter()
        n = sum(len(ids) for ids, _ in counter.ids(texts))
        rates[label] = n / (time.perf_counter() - started)
    print(f"tokenising {len(texts)} texts of about 8,000 tokens ({n:,} tokens): "
          + "; ".join(f"{label} {rate:,.0f} tokens/s" for label, rate in rates.items()) + f" ({os.cpu_count()} cores)")

    model = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    dim = model.dim
    model.model.forward = lambda features: {"sentence_embedding": torch.ones(features["input_ids"].shape[0], dim)}
    rng = np.random.default_rng(0)
    ids = [rng.integers(1000, 30000, size=int(n)).tolist() for n in rng.integers(60, 255, size=windows)]
    request = TokenIds.of(ids)
    model.embed_request(TokenIds.of(ids[:64]))
    started = time.perf_counter()
    model.embed_request(request)
    framing = time.perf_counter() - started
    print(f"embed_ids with a forward that costs nothing, {windows:,} windows of 60-254 ids: {windows / framing:,.0f} windows/s "
          f"({framing / windows * 1e6:.1f} us each)")
    with tempfile.TemporaryDirectory(prefix="bench-overhead-cache-") as folder:
        cached = CachedTokenIdEmbedder(model, EmbeddingCache(folder))
        started = time.perf_counter()
        cached.embed_request(request)
        through = time.perf_counter() - started
        cached.cache.close()
    print(f"the same through an empty cache (keys, checks, commits of {cached.commit_every} on their own thread): "
          f"{windows / through:,.0f} windows/s")
    vectors = rng.normal(size=(windows, dim)).astype(np.float32)
    keys = [rng.bytes(32) for _ in range(windows)]  # random, as sha256 keys are
    written = {}
    for chunk in (256, 1024, 4096):  # --commit-every: the cache commits a chunk at a time
        with tempfile.TemporaryDirectory(prefix="bench-overhead-writes-") as folder:
            store = EmbeddingCache(folder)
            started = time.perf_counter()
            for first in range(0, windows, chunk):
                store.put_many("st:bench", keys[first : first + chunk], vectors[first : first + chunk])
            written[chunk] = windows / (time.perf_counter() - started)
            store.close()
            size = sum(path.stat().st_size for path in Path(folder).iterdir() if path.is_file())
    print(f"cache writes of {dim}-d vectors, one writer, a commit per --commit-every: "
          + "; ".join(f"{chunk:,}: {rate:,.0f} vectors/s" for chunk, rate in written.items())
          + f"; the file {size / windows:,.0f} bytes per vector")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--part", choices=["sweep", "driver", "all"], default="all")
    parser.add_argument("--extra", default="", help="more nolima options for both runs (a smaller grid), quoted as one")
    parser.add_argument("--corpus-cache", type=Path, default=None,
                        help="a cache folder whose corpora/ is copied into the cold cache (no download timed)")
    args = parser.parse_args()
    extra = shlex.split(args.extra)
    if args.device == "cuda":
        extra = ["--embedder", CUDA_SPEC, *extra]
    print(f"machine   {os.cpu_count()} cores; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"date {time.strftime('%Y-%m-%d')}; embedeval nolima {shlex.join(extra)}")
    if args.part in ("driver", "all"):
        driver_rates()
        if args.part == "driver":
            return 0
    print(f"imports   {import_seconds():.2f} s (embedeval.cli, experiments.nolima, report; a fresh process)")
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        folder = Path(tmp)
        cache = folder / "cache"
        if args.corpus_cache is not None:
            shutil.copytree(args.corpus_cache / "corpora", cache / "corpora")
        cold = sweep(folder, "cold", cache, extra, args.device == "cuda")
        warm = sweep(folder, "warm", cache, extra, args.device == "cuda")
    for run in (cold, warm):
        report(run)
    print(f"warm / cold: {warm['wall'] / cold['wall']:.3f}")
    if args.device == "cuda":
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_gpu

        with tempfile.TemporaryDirectory(prefix="bench-overhead-gpu-") as tmp:
            bench_gpu.part_minilm(Path(tmp), [bench_gpu.NO_CUDNN])
    return 0


if __name__ == "__main__":
    sys.exit(main())
