"""Context extension against the other long-text strategies, all-MiniLM-L6-v2 on the CPU:
seconds per haystack and peak memory per strategy at 1024, 4096 and 8192 tokens, as ratios to
``windows-mean`` measured in the same run.

Each strategy reads the same haystacks (built from the default corpus) through an uncached model,
in a child process of its own (forked after the model is loaded), so its peak resident memory
(``VmHWM`` after ``clear_refs``, minus the resident memory it started with) is its own. Context
extension reads each text whole (``@L`` = the haystack length + 2 special tokens) in one pass:
attention grows as L^2, the windowed strategies as L.

    PYTHONPATH=. python benchmarks/bench_stretch.py                  # 1024, 4096, 8192 (about 10 minutes on 2 cores)
    PYTHONPATH=. python benchmarks/bench_stretch.py --lengths 1024 --texts 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from embedeval.embedders.local import SentenceTransformerEmbedder
from embedeval.experiments import HaystackGrid, NolimaConfig
from embedeval.experiments.nolima import load_or_build_haystacks
from embedeval.strategies import EmbeddingScorer, parse_strategies

BASELINE = "windows-mean"
STRATEGIES = [BASELINE, "truncate", "chunks-max", "late-chunking", "extend-gp@{L}", "extend-rp@{L}", "extend-pi@{L}",
              "extend-pi-dynamic@{L}", "extend-pi@{L}+logscale"]


def _status(field: str) -> int:
    """A /proc/self/status field in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _measure(model, name: str, texts: list[str], queue) -> None:
    """In a child: reset the peak, read the texts through the strategy, report seconds and peak MiB."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    start_rss = _status("VmRSS")
    strategy = parse_strategies([name], chunk_tokens=[128])[0]
    start = time.perf_counter()
    EmbeddingScorer(model, strategy).index(texts)
    seconds = time.perf_counter() - start
    queue.put((seconds / len(texts), (_status("VmHWM") - start_rss) / 1024))


def measure(model, name: str, texts: list[str]) -> tuple[float, float]:
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_measure, args=(model, name, texts, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,8192")
    parser.add_argument("--texts", type=int, default=3, help="haystacks per length")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    model = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu")
    _ = model.model  # loaded before the children fork
    with tempfile.TemporaryDirectory() as folder:
        config = NolimaConfig(out=folder, groups=["loc-dresden"], grid=HaystackGrid(lengths=lengths, depths=args.texts,
                                                                                    variants=["onehop"], negatives=1))
        haystacks = load_or_build_haystacks(config, config.validate(), progress=False)
    print(f"all-MiniLM-L6-v2 on the CPU ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}); "
          f"{args.texts} needle haystacks per length; ratios to {BASELINE} in this run")
    print(f"{'length':>6}  {'strategy':<26} {'s/haystack':>10} {'x time':>7} {'peak MiB':>9} {'x memory':>9}")
    for length in lengths:
        texts = haystacks[(haystacks["length"] == length) & (haystacks["variant"] == "onehop")]["text"].tolist()
        base = None
        for template in STRATEGIES:
            name = template.format(L=length + 2)
            seconds, mib = measure(model, name, texts)
            base = base or (seconds, mib)
            print(f"{length:>6}  {name:<26} {seconds:>10.2f} {seconds / base[0]:>7.2f} {mib:>9.0f} "
                  f"{mib / base[1] if base[1] > 0 else float('nan'):>9.2f}")


if __name__ == "__main__":
    main()
