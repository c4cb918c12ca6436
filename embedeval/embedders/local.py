"""Local models through sentence-transformers (spec ``st:<model name or path>``).

Where the weights come from (bundled packages, folders) is :mod:`embedeval.embedders.models`.
Queries and documents get the model's own ``query``/``document`` prompts when its
``config_sentence_transformers.json`` declares them (e5, bge, nomic, ...); models without
prompts (all-MiniLM-L6-v2) embed both kinds the same way.

The model is loaded when first needed. What the pipeline asks of it besides vectors (its
fingerprint, dimension, token window, special and prompt ids, tokenizer fingerprint, pooling: its *facts*)
is remembered in a ``facts_store`` (the embedding cache, :meth:`EmbeddingCache.get_facts
<embedeval.embedders.cache.EmbeddingCache.get_facts>`) keyed on the folder's fingerprint and
the library versions, so a run whose vectors are all cached never loads the weights; the
tokenizer alone is loaded when a text must be tokenised (checked against the remembered
tokenizer fingerprint), the weights when something must be embedded. Once the model is loaded
every fact is read from it live (so a changed ``max_seq_length`` shows at once). A plan of the
bundled model whose vectors are not cached reads its facts from its folder instead
(:func:`~embedeval.embedders.local_folder.folder_facts`): it counts without the weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from embedeval.defaults import DEFAULT_BATCH_SIZE, DEFAULT_LONG_PASS_BATCH_TOKENS, MIN_CONTENT_TOKENS
from embedeval.embedders import batching, onnx
from embedeval.embedders import stretch as stretching
from embedeval.embedders.base import KINDS, Kind, check_texts, l2_normalize
from embedeval.embedders.local_folder import check_window, folder_facts, folder_stretch_refusal, prompt_ids, special_ids
from embedeval.embedders.models import bundled_name, canonical_model, folder_fingerprint, resolve_model_path
from embedeval.embedders.options import LocalOptions, split_spec
from embedeval.embedders.requests import LateChunks, ModelServer, StretchedIds, Texts, TokenIds
from embedeval.embedders.tokens import TokenCounter, load_token_counter, quiet_transformers
from embedeval.errors import ConfigError, InputError, UnknownEmbedderError
from embedeval.paths import default_cache_dir
from embedeval.progress import step
from embedeval.versions import package_version

#: Bump when the facts change shape or meaning (older remembered facts are then ignored).
FACTS_FORMAT = 5
#: Packages whose versions can change what a loaded model says about itself.
FACTS_PACKAGES = ("sentence-transformers", "transformers", "tokenizers", "torch")


def _pooling_mode(module) -> str | None:
    """A sentence-transformers Pooling module's mode ("mean", "cls", ...; several joined by "+"),
    None for another module."""
    if callable(getattr(module, "get_pooling_mode_str", None)):  # sentence-transformers 5
        return module.get_pooling_mode_str()
    mode = getattr(module, "pooling_mode", None)  # sentence-transformers 6: a name or a tuple of names
    if isinstance(mode, (tuple, list)):
        return "+".join(mode)
    return mode if isinstance(mode, str) else None


def local_name(model: str, options: LocalOptions) -> str:
    """The name a local model goes by (in tables, the cache and a plan): ``st:`` + the bundled
    model's name or the folder's absolute path, + the options that change a vector
    (:meth:`~embedeval.embedders.options.LocalOptions.name_query`)."""
    query = options.name_query()
    return f"st:{canonical_model(model)}" + (f"?{query}" if query else "")


def from_spec_model(model: str, **kwargs) -> SentenceTransformerEmbedder:
    """The embedder of an ``st:`` spec's model part, ``NAME_OR_DIR`` or ``NAME_OR_DIR?options``
    (:class:`~embedeval.embedders.options.LocalOptions`)."""
    name, query = split_spec(model)
    return SentenceTransformerEmbedder(name, options=LocalOptions.parse(query), **kwargs)


#: The fingerprint of a plan's model whose facts are read from its folder (:func:`~embedeval.embedders.local_folder.folder_facts`):
#: the cache's keys need the loaded model's own only to find its vectors, and none is cached.
PLANNED_FINGERPRINT = "planned: no vector of it is cached"


class SentenceTransformerEmbedder(ModelServer):
    """A sentence-transformers model, loaded when first needed, with the options of its spec
    (:class:`~embedeval.embedders.options.LocalOptions`: device, dtype, max_seq_length,
    trust_remote_code, max_batch_tokens; ``device`` given here overrides the options').

    Vectors are pooled per the model's own config and L2-normalised; ``max_tokens`` is the
    model's ``max_seq_length`` (special tokens included). ``name`` is ``st:`` + the bundled
    model's name or the folder's absolute path, + the options that change a vector
    (``?dtype=float16``). ``facts_store``: where the model's facts are remembered (see the module
    docstring); without one, asking for them loads the model. Inputs go longest first, in batches
    of ``batch_size`` or of a padded-token budget, halved when CUDA runs out of memory.

    It serves every request (:mod:`embedeval.embedders.requests`): texts through ``encode``, token
    ids, late chunks of id windows and stretched ids through its modules' forward pass.
    """

    request_methods = {Texts: "_embed_texts", TokenIds: "_embed_ids", LateChunks: "_embed_late_chunks",
                       StretchedIds: "_embed_stretched"}

    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int = DEFAULT_BATCH_SIZE, device: str | None = None,
                 facts_store=None, options: LocalOptions | None = None):
        options = options or LocalOptions()
        if device is not None:
            options = replace(options, device=device)
        self.options = options
        self.path = resolve_model_path(model)
        self._position_limit = check_window(self.path, options.max_seq_length)  # P, read once: checked and stretched against
        self.name = local_name(model, options)
        self.batch_size = batch_size
        options.check_device()  # a device that cannot be is refused here; which one auto means, when needed (torch)
        self._device: str | None = None
        self.backoffs = 0  # batches halved after CUDA ran out of memory
        self.facts_store = facts_store
        self.progress = False  # a step line on stderr while the weights load (load_embedder's progress)
        self._given = model
        self._folder_fingerprint = folder_fingerprint(model)
        self._model = None
        self._token_counter: TokenCounter | None = None
        self._remembered: dict | None = None
        self._prompt_cache: dict[str, list[int]] = {}
        self._special_cache: tuple[list[int], list[int]] | None = None

    @property
    def device(self) -> str:
        """Where the model runs (:meth:`~embedeval.embedders.options.LocalOptions.resolved_device`),
        resolved on first use: ``auto`` asks PyTorch, which takes seconds to import, and a model
        whose facts are remembered (or a plan) may never need it."""
        if self._device is None:
            self._device = self.options.resolved_device()
        return self._device

    @device.setter
    def device(self, device: str) -> None:
        self._device = device

    @property
    def max_batch_tokens(self) -> int | None:
        """Padded tokens per batch (None: ``batch_size`` inputs), as the device has it."""
        return self.options.batch_tokens(self.device)

    # -- loading ---------------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """Whether the weights are loaded."""
        return self._model is not None

    @property
    def model(self):
        """The ``SentenceTransformer`` (loaded on first use, with a step line when ``progress``;
        its facts are then remembered)."""
        if self._model is None:
            with step(f"loading {self.name} on {self.device}", self.progress):
                self._load()
        return self._model

    def _load(self) -> None:
        """Load the weights (and the ONNX graph of another backend), and remember the facts."""
        quiet_transformers()
        from sentence_transformers import SentenceTransformer

        try:
            self._model = SentenceTransformer(self.path, device=self.device, trust_remote_code=self.options.trust_remote_code)
        except (OSError, ValueError) as exc:
            raise UnknownEmbedderError(f"cannot load local model {self._given!r}: {exc}") from None
        except RuntimeError as exc:  # the last resort: weights that do not fit the config (sizes that differ)
            if "size mismatch" not in str(exc) and "mismatched_sizes" not in str(exc):
                raise  # out of memory, a CUDA error: not the folder's fault, and not to be hidden as such
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UnknownEmbedderError(f"cannot load local model {self._given!r}: its weights do not fit its config "
                                       f"({first[:300]})") from None
        if self.options.max_seq_length is not None:
            self._model.max_seq_length = self.options.max_seq_length
        if self.options.dtype != "float32":
            import torch

            self._model.to(getattr(torch, self.options.dtype))
        if self.options.backend != "torch":
            self._use_onnx()
        self._token_counter = TokenCounter(self._model.tokenizer, self.name)
        key = self._facts_key()
        if key is not None and self.facts_store is not None:
            self.facts_store.put_facts(key, self._live_facts())

    def _use_onnx(self) -> None:
        """Replace the loaded model's transformer by its ONNX graph (:mod:`embedeval.embedders.onnx`),
        exported into the embedding cache the first time (keyed by the model's fingerprint as the
        torch backend computes it: the same weights, window and modules)."""
        import torch

        where = getattr(self.facts_store, "directory", None) or default_cache_dir()  # the embedding cache's folder
        folder = onnx.onnx_folder(where, self._torch_fingerprint())
        backend = self.options.backend
        onnx.use_onnx(self._model, onnx.graph(self._model, backend, folder), torch.get_num_threads(),
                      one_text_per_call=backend in onnx.ONE_TEXT_PER_CALL)

    def _facts_key(self) -> bytes | None:
        """What the facts depend on: the folder's fingerprint (every file; weights by size and
        stamp) and the library versions. None for a hub name (its files are not here to fingerprint)."""
        if not Path(self.path).is_dir():
            return None
        parts = {"format": FACTS_FORMAT, "name": self.name, "folder": self._folder_fingerprint,
                 "versions": {name: package_version(name) for name in FACTS_PACKAGES}}
        if self.options.name_query():  # a window, precision or backend of its own: other facts
            parts["options"] = [self.options.name_query(), self.options.vector_settings()]
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).digest()

    def _recalled(self) -> dict | None:
        """The remembered facts while the model is not loaded (None once it is, or if none are)."""
        if self._model is not None:
            return None
        if self._remembered is None and self.facts_store is not None:
            key = self._facts_key()
            self._remembered = (self.facts_store.get_facts(key) if key is not None else None) or self._planned_facts()
        return self._remembered

    def _planned_facts(self) -> dict | None:
        """For a plan (a read-only facts store, which can say whether it holds vectors) of a bundled
        model none of whose vectors is cached: its facts read from its folder (:func:`~embedeval.embedders.local_folder.folder_facts`),
        its fingerprint :data:`PLANNED_FINGERPRINT`, so that a plan never loads its weights but to
        time it. None elsewhere (the model loads when its facts are asked for)."""
        holds_vectors = getattr(self.facts_store, "holds_vectors", None)
        if holds_vectors is None or bundled_name(self._given) is None or holds_vectors(self.name):
            return None
        facts = folder_facts(self.path, self.options, load_token_counter(split_spec(self.name)[0]), self.name)
        return None if facts is None else {**facts, "fingerprint": PLANNED_FINGERPRINT}

    def _live_facts(self) -> dict:
        """The facts, read from the loaded model."""
        by_kind: dict[str, list[int] | str] = {}
        for kind in KINDS:
            try:
                by_kind[kind] = self._prompt_ids(kind)
            except InputError as exc:
                by_kind[kind] = str(exc)
        return {"fingerprint": self._live_fingerprint(), "dim": int(self.model.get_embedding_dimension()),
                "max_tokens": int(self.model.max_seq_length), "special_ids": list(self._special_ids()),
                "prompt_ids": by_kind, "tokenizer": self.token_counter.fingerprint, "pooling": self._live_pooling(),
                "stretch_refusals": {stretch.name: self._live_stretch_refusal(stretch) for stretch in stretching.Stretch.every()}}

    @property
    def token_counter(self) -> TokenCounter:
        """The model's tokenizer: the loaded model's or, while the weights are not needed, the
        folder's tokenizer loaded alone if its fingerprint is the remembered one (else the model
        is loaded)."""
        if self._token_counter is None:
            facts = self._recalled()
            if facts is not None:
                alone = load_token_counter(split_spec(self.name)[0])  # the tokenizer is the same whatever the options
                if alone.fingerprint == facts["tokenizer"]:
                    self._token_counter = alone
                    return alone
            _ = self.model  # loads the model, which sets the token counter
        return self._token_counter

    # -- facts -----------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        facts = self._recalled()
        return facts["dim"] if facts else int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        facts = self._recalled()
        return facts["max_tokens"] if facts else int(self.model.max_seq_length)

    @property
    def fingerprint(self) -> str:
        """sha256 of the folder's fingerprint, the live ``max_seq_length``, prompts and every
        module's config (pooling, normalisation): what changes a vector besides the text and kind."""
        facts = self._recalled()
        return facts["fingerprint"] if facts else self._live_fingerprint()

    def _live_fingerprint(self) -> str:
        live = self._torch_settings()
        if self.options.vector_settings() != LocalOptions().vector_settings():  # the default's fingerprint as before
            live["options"] = self.options.vector_settings()
        return hashlib.sha256(json.dumps(live, sort_keys=True, default=str).encode()).hexdigest()

    def _torch_fingerprint(self) -> str:
        """The fingerprint of the model's weights, window and modules alone (what its exported
        graphs depend on)."""
        return hashlib.sha256(json.dumps(self._torch_settings(), sort_keys=True, default=str).encode()).hexdigest()

    def _torch_settings(self) -> dict:
        model = self._model if self._model is not None else self.model
        modules = [m.get_config_dict() for m in model if hasattr(m, "get_config_dict")]
        return {"folder": self._folder_fingerprint, "max_seq_length": int(model.max_seq_length),
                "prompts": model.prompts, "default_prompt": model.default_prompt_name, "modules": modules}

    @property
    def token_fingerprint(self) -> str:
        """The tokenizer's fingerprint (:attr:`TokenCounter.fingerprint`)."""
        facts = self._recalled()
        return facts["tokenizer"] if facts else self.token_counter.fingerprint

    def _embed_texts(self, request: Texts) -> np.ndarray:
        encode = self.model.encode_query if request.kind == "query" else self.model.encode_document
        with batching.attention_kernels(self.device):
            vectors = encode(
                list(request.texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.token_counter.count(texts, special_tokens=True)

    # -- token ids (the TokenIdEmbedder protocol): windows cut exactly, never re-tokenised --------

    def _special_ids(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a single text ([CLS] / [SEP], <s> / </s>)."""
        facts = self._recalled()
        if facts:
            return tuple(facts["special_ids"])
        if self._special_cache is None:  # the loaded tokenizer's, probed once
            self._special_cache = special_ids(self.token_counter, self.model.tokenizer("a", add_special_tokens=True)["input_ids"])
        return self._special_cache

    def _prompt_ids(self, kind: Kind) -> list[int]:
        """Content ids of the model's prompt for ``kind`` (:func:`prompt_ids`: an
        :class:`InputError` where ids cannot reproduce ``encode``)."""
        facts = self._recalled()
        if facts:
            remembered = facts["prompt_ids"][kind]  # the ids, or why there are none
            if isinstance(remembered, str):
                raise InputError(remembered)
            return remembered
        if kind not in self._prompt_cache:
            self._prompt_cache[kind] = prompt_ids(self.token_counter, (self.model.prompts or {}).get(kind) or "", kind, self.name)
        return self._prompt_cache[kind]

    def id_capacity(self, kind: Kind = "document") -> int:
        """Content tokens one input holds: ``max_seq_length`` - special tokens - the kind's prompt."""
        before, after = self._special_ids()
        return self.max_tokens - len(before) - len(after) - len(self._prompt_ids(kind))

    def token_ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[list[int], list[tuple[int, int]]]]:
        texts = check_texts(texts, "document")
        return self.token_counter.ids(texts, limit)

    def request_batches(self, request: Texts | TokenIds) -> list[np.ndarray]:
        """The rows of ``request`` in the batches this model forms for it: token ids as
        :meth:`id_batches` cuts them, texts all in one ``encode`` call (which batches them itself)."""
        if isinstance(request, TokenIds):
            return self.id_batches(request.sequences())
        return [np.arange(len(request))]

    def id_batches(self, ids: Sequence[Sequence[int]], frame: int = 0) -> list[np.ndarray]:
        """The rows of ``ids`` in the batches :meth:`_embed_ids` forms: longest first (a stable
        sort, like ``encode``'s: batches of similar length pad little), then cut by
        :func:`~embedeval.embedders.batching.cut_batches` (``batch_size`` at a time, or by the ``max_batch_tokens`` budget;
        ``frame``: the tokens each input gets besides its ids, special tokens and prompt)."""
        order, lengths = batching.longest_first(ids, frame)
        return batching.cut_batches(order, lengths, self.batch_size, self.max_batch_tokens)

    def _in_batches(self, ids: Sequence[Sequence[int]], frame: int, run, budget: int | None = None) -> None:
        """``run(rows)`` for every batch of :meth:`id_batches`, a batch halved when CUDA runs out of
        memory (:func:`~embedeval.embedders.batching.run_in_batches`, each halving counted in
        ``backoffs``). ``budget``: padded tokens per batch when the spec sets no ``max_batch_tokens``."""
        batching.run_in_batches(ids, frame, run, self.batch_size, self.max_batch_tokens or budget, self.device, self.name,
                                self._backed_off)

    def _backed_off(self) -> None:
        self.backoffs += 1

    def _embed_ids(self, request: TokenIds) -> np.ndarray:
        """Embed content-id sequences: each gets the special tokens and the kind's prompt, as
        ``encode`` would add them, and goes through the model's modules (pooling, normalisation);
        vectors are L2-normalised. ``prompt_length`` is passed for pooling that leaves the prompt out."""
        kind = request.kind
        ids = request.sequences()
        capacity = self.id_capacity(kind)
        if any(len(seq) == 0 or len(seq) > capacity for seq in ids):
            raise InputError(f"embed_ids takes 1..{capacity} token ids per input for {self.name} ({kind})")
        import torch

        model = self.model  # the weights, from here on
        before, after = self._special_ids()
        prompt = self._prompt_ids(kind)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)

        def run(rows) -> None:
            features = self._framed([ids[i] for i in rows], before + prompt, after)
            if prompt:
                features["prompt_length"] = len(before) + len(prompt)
            vectors = model.forward(features)["sentence_embedding"]
            out[rows] = torch.nn.functional.normalize(vectors.float(), dim=1).cpu().numpy()

        with torch.inference_mode():
            self._in_batches(ids, len(before) + len(prompt) + len(after), run)
        return out

    def _framed(self, batch: Sequence[Sequence[int]], head: list[int], tail: list[int]) -> dict:
        """A batch of content ids framed as ``encode`` frames them (``head``: special tokens and
        prompt before, ``tail`` after), padded as the tokenizer pads (:func:`~embedeval.embedders.batching.frame_batch`), on the
        model's device."""
        import torch

        model = self.model
        tokenizer = model.tokenizer
        ids, mask = batching.frame_batch(batch, head, tail, tokenizer.pad_token_id, tokenizer.padding_side)
        return {"input_ids": torch.from_numpy(ids).to(model.device), "attention_mask": torch.from_numpy(mask).to(model.device)}

    def stretch_refusal(self, stretch: stretching.Stretch) -> str | None:
        """Why this model cannot read past its positions as ``stretch`` says (its position type, or
        a backend other than torch, a folder that names no position limit), None when it can
        (:mod:`embedeval.embedders.stretch`)."""
        why = folder_stretch_refusal(self.path, self.options, stretch, self._position_limit)
        if why:
            return why
        facts = self._recalled()
        if facts:
            return facts["stretch_refusals"][stretch.name]
        return self._live_stretch_refusal(stretch)

    def _live_stretch_refusal(self, stretch: stretching.Stretch) -> str | None:
        if self.options.backend != "torch":
            return f"context extension runs on the torch backend, not {self.options.backend}"
        transformer = self._transformer()
        if transformer is None:
            return f"its first module is a {type(self.model[0]).__name__}, not a transformer with positions"
        return stretching.refusal(transformer, stretch)

    def _transformer(self):
        """The transformers model under the sentence-transformers Transformer module (None for a
        model without one, e.g. static embeddings)."""
        return getattr(self.model[0], "auto_model", None)

    def positions(self) -> int | None:
        """``P``: the positions the model has (:func:`~embedeval.embedders.local_folder.position_limit`: its position table's rows,
        else ``max_position_embeddings``), None when the folder does not say. Read once, from the
        folder before the weights load; the same ``P`` refuses an ``L`` that reads no further and
        sets every stretch factor (:meth:`_embed_stretched`)."""
        return self._position_limit[0] if self._position_limit else None

    def _embed_stretched(self, request: StretchedIds) -> np.ndarray:
        """Embed content-id sequences of any length, each in one pass with its special tokens and
        prompt (as :meth:`_embed_ids`), its positions re-used or stretched as ``stretch`` says when
        the input is longer than the model's positions ``P`` (:meth:`positions`, the limit the strategy
        was checked against; :func:`embedeval.embedders.stretch.stretched`).
        Inputs of equal length run together, unpadded, so each factor is the input's own and no
        vector depends on its batch; batches hold :data:`~embedeval.defaults.DEFAULT_LONG_PASS_BATCH_TOKENS`
        tokens unless the spec sets ``max_batch_tokens``."""
        stretch, kind = request.stretch, request.kind
        why = self.stretch_refusal(stretch)
        if why:
            raise ConfigError(f"{stretch.method} does not fit {self.name}: {why}")
        ids = [list(map(int, seq)) for seq in request.sequences()]
        if any(not seq for seq in ids):
            raise InputError(f"embed_stretched takes at least one token id per input for {self.name} ({kind})")
        import torch

        before, after = self._special_ids()
        prompt = self._prompt_ids(kind)
        stretch.check_reads(len(before) + len(prompt) + max(map(len, ids)) + len(after))  # before any pass
        model = self.model
        transformer = self._transformer()
        limit = self.positions()
        out = np.zeros((len(ids), self.dim), dtype=np.float32)

        def run(rows) -> None:
            same_length: dict[int, list[int]] = {}
            for i in rows:
                same_length.setdefault(len(ids[i]), []).append(int(i))
            for group in same_length.values():
                features = self._framed([ids[i] for i in group], before + prompt, after)
                if prompt:
                    features["prompt_length"] = len(before) + len(prompt)
                with stretching.stretched(transformer, stretch, features["input_ids"].shape[1], len(group), limit) as extra:
                    vectors = model.forward({**features, **extra})["sentence_embedding"]
                out[group] = torch.nn.functional.normalize(vectors.float(), dim=1).cpu().numpy()

        with torch.inference_mode():
            self._in_batches(ids, len(before) + len(prompt) + len(after), run, DEFAULT_LONG_PASS_BATCH_TOKENS)
        return out

    def _embed_late_chunks(self, request: LateChunks) -> np.ndarray:
        """Late chunking: each window of content ids (at most ``id_capacity``) runs through the
        model once, with its special tokens and prompt as :meth:`_embed_ids` adds them; a chunk is
        a sequence of parts ``(w, start, end)`` (content-token positions ``[start, end)`` of window
        ``w``), and its vector the mean of the model's output token embeddings at all its parts'
        positions, special tokens and prompt left out, L2-normalised:

            v(chunk) = normalise( (1 / n) * sum_{(w, start, end)} sum_{i = start}^{end - 1} h_w[offset + i] )

        where ``h_w`` are the last layer's token embeddings of window ``w``
        (``output_value="token_embeddings"``), ``offset`` the tokens before the content and ``n`` the
        chunk's token count. Returns a ``(len(chunks), dim)`` array."""
        kind, chunks = request.kind, request.chunks
        windows = [list(map(int, seq)) for seq in request.window_units()]
        capacity = self.id_capacity(kind)
        if any(not seq or len(seq) > capacity for seq in windows):
            raise InputError(f"late chunking takes windows of 1..{capacity} token ids for {self.name} ({kind})")
        parts_of: dict[int, list[tuple[int, int, int]]] = {}  # window -> (chunk, start, end)
        for c, parts in enumerate(chunks):
            if not parts or any(not (0 <= w < len(windows) and 0 <= start < end <= len(windows[w])) for w, start, end in parts):
                raise InputError(f"late chunking needs chunks inside their windows, not {list(parts)[:3]}")
            for w, start, end in parts:
                parts_of.setdefault(w, []).append((c, start, end))
        sums = np.zeros((len(chunks), self.dim), dtype=np.float64)
        import torch

        model = self.model
        before, after = self._special_ids()
        prompt = self._prompt_ids(kind)
        offset = len(before) + len(prompt)
        used = sorted(parts_of)

        def run(rows) -> None:
            features = self._framed([windows[used[i]] for i in rows], before + prompt, after)
            tokens = model.forward(features)["token_embeddings"].float()
            for row, i in enumerate(rows):  # after the forward pass: a batch that runs out of memory adds nothing
                for c, start, end in parts_of[used[i]]:
                    sums[c] += tokens[row, offset + start : offset + end].sum(dim=0).cpu().numpy()

        with torch.inference_mode():
            self._in_batches([windows[w] for w in used], offset + len(after), run)
        return l2_normalize(sums)  # the mean's direction: the sum's

    def late_chunking_refusal(self) -> str | None:
        """Why this model's own vector is not the (normalised) mean of its token embeddings, so that
        late chunks would not be comparable with its query vectors: pooling other than mean, or a
        module other than Normalize after the pooling. None when it is."""
        facts = self._recalled()
        pooling = facts["pooling"] if facts else self._live_pooling()
        if pooling["mode"] is None:
            return "it has no Pooling module (late chunks are mean-pooled token embeddings)"
        if pooling["mode"] != "mean":
            return f"it pools with {pooling['mode']}, not mean (late chunks are mean-pooled token embeddings)"
        extra = [name for name in pooling["after"] if name != "Normalize"]
        if extra:
            return f"it has a {extra[0]} module after its mean pooling (late chunks are mean-pooled token embeddings)"
        return None

    def _live_pooling(self) -> dict:
        """The loaded model's pooling: ``{"mode": "mean" | "cls" | ... | None, "after": [module class names]}``."""
        modules = list(self.model)
        at = next((i for i, module in enumerate(modules) if _pooling_mode(module) is not None), None)
        if at is None:
            return {"mode": None, "after": []}
        return {"mode": _pooling_mode(modules[at]), "after": [type(module).__name__ for module in modules[at + 1 :]]}

    def check(self) -> None:
        """Nothing to reach; the model's facts are remembered or the model loads (a broken folder
        fails here), and its window is checked to leave enough content tokens (:meth:`check_capacity`)."""
        if self._recalled() is None:
            _ = self.model  # loads the model (a broken folder fails here)
        self.check_capacity()

    def check_capacity(self) -> None:
        """One :class:`~embedeval.errors.ConfigError` when the window leaves fewer than
        :data:`~embedeval.defaults.MIN_CONTENT_TOKENS` content tokens for a query or a document,
        after the model's special tokens and its prompt for that kind (a kind whose prompt cannot
        be had as ids is left to the strategies that need them)."""
        for kind in KINDS:
            try:
                capacity = self.id_capacity(kind)
            except InputError:
                continue
            if capacity < MIN_CONTENT_TOKENS:
                raise ConfigError(f"`max_seq_length` {self.max_tokens} leaves {capacity} content tokens to a {kind} of {self.name} "
                                  f"after its special tokens and prompt; a window must leave at least {MIN_CONTENT_TOKENS}",
                                  "max_seq_length")
