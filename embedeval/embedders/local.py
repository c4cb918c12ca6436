"""Local models through sentence-transformers (spec ``st:<model name or path>``).

Where the weights come from (bundled packages, folders) is :mod:`embedeval.embedders.models`.
Queries and documents get the model's own ``query``/``document`` prompts when its
``config_sentence_transformers.json`` declares them (e5, bge, nomic, ...); models without
prompts (all-MiniLM-L6-v2) embed both kinds the same way.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from collections.abc import Sequence

import numpy as np
import torch

from embedeval.embedders.base import Kind, check_texts
from embedeval.embedders.models import (
    canonical_model,
    folder_fingerprint,
    resolve_model_path,
)
from embedeval.errors import InputError, UnknownEmbedderError
from embedeval.tokens import TokenCounter, quiet_transformers


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or ``device``).

    Vectors are pooled per the model's own config and L2-normalised; ``max_tokens`` is the
    model's ``max_seq_length`` (special tokens included). ``name`` is ``st:`` + the bundled
    model's name or the folder's absolute path.
    """

    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int = 32, device: str = "cpu"):
        path = resolve_model_path(model)
        quiet_transformers()
        from sentence_transformers import SentenceTransformer

        try:
            self.model = SentenceTransformer(path, device=device)
        except (OSError, ValueError) as exc:
            raise UnknownEmbedderError(f"cannot load local model {model!r}: {exc}") from None
        self.name = f"st:{canonical_model(model)}"
        self.batch_size = batch_size
        self.token_counter = TokenCounter(self.model.tokenizer, self.name)
        self._folder_fingerprint = folder_fingerprint(model)
        self._prompt_cache: dict[str, list[int]] = {}

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    @property
    def fingerprint(self) -> str:
        """sha256 of the folder's fingerprint, the live ``max_seq_length``, prompts and every
        module's config (pooling, normalisation): what changes a vector besides the text and kind."""
        modules = [m.get_config_dict() for m in self.model if hasattr(m, "get_config_dict")]
        live = {"folder": self._folder_fingerprint, "max_seq_length": self.max_tokens,
                "prompts": self.model.prompts, "default_prompt": self.model.default_prompt_name, "modules": modules}
        return hashlib.sha256(json.dumps(live, sort_keys=True, default=str).encode()).hexdigest()

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encode = self.model.encode_query if kind == "query" else self.model.encode_document
        vectors = encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.token_counter.count(texts, special_tokens=True)

    # -- token ids (the TokenIdEmbedder protocol): windows cut exactly, never re-tokenised --------

    @cached_property
    def _special_ids(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a single text ([CLS] / [SEP], <s> / </s>)."""
        probe = self.token_counter.ids(["a"])[0][0]
        framed = self.model.tokenizer("a", add_special_tokens=True)["input_ids"]
        at = next(i for i in range(len(framed)) if framed[i : i + len(probe)] == probe)
        return framed[:at], framed[at + len(probe):]

    def _prompt_ids(self, kind: Kind) -> list[int]:
        """Content ids of the model's prompt for ``kind`` as they come out when the prompt is
        tokenised together with a text (as ``encode`` does): the tokens that start inside the
        prompt. Checked on a probe text: if prompt ids + text ids differ from the joint
        tokenisation, ids cannot reproduce ``encode`` for this model and an :class:`InputError`
        says so."""
        prompt = (self.model.prompts or {}).get(kind) or ""
        if not prompt:
            return []
        if kind not in self._prompt_cache:
            probe = "The probe sentence checks how the prompt joins the text."
            (joint, offsets), = self.token_counter.ids([prompt + probe])
            ids = [i for i, (start, _) in zip(joint, offsets) if start < len(prompt)]
            if ids + self.token_counter.ids([probe])[0][0] != joint:
                raise InputError(f"{self.name}'s {kind} prompt {prompt!r} does not tokenise apart from the text, "
                                 "so windows on token ids cannot match the model's own encode; use --strategy truncate")
            self._prompt_cache[kind] = ids
        return self._prompt_cache[kind]

    def id_capacity(self, kind: Kind = "document") -> int:
        """Content tokens one input holds: ``max_seq_length`` - special tokens - the kind's prompt."""
        before, after = self._special_ids
        return self.max_tokens - len(before) - len(after) - len(self._prompt_ids(kind))

    def token_ids(self, texts: Sequence[str], limit: int | None = None) -> list[tuple[list[int], list[tuple[int, int]]]]:
        texts = check_texts(texts, "document")
        return self.token_counter.ids(texts, limit)

    def embed_ids(self, ids: Sequence[Sequence[int]], kind: Kind = "document") -> np.ndarray:
        """Embed content-id sequences: each gets the special tokens and the kind's prompt, as
        ``encode`` would add them, and goes through the model's modules (pooling, normalisation);
        vectors are L2-normalised. ``prompt_length`` is passed for pooling that leaves the prompt out."""
        if kind not in ("query", "document"):
            check_texts([], kind)
        ids = [list(map(int, seq)) for seq in ids]
        capacity = self.id_capacity(kind)
        if any(not seq or len(seq) > capacity for seq in ids):
            raise InputError(f"embed_ids takes 1..{capacity} token ids per input for {self.name} ({kind})")
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        before, after = self._special_ids
        prompt = self._prompt_ids(kind)
        tokenizer = self.model.tokenizer
        order = np.argsort([-len(seq) for seq in ids], kind="stable")  # like encode: batches of similar length pad little
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(ids), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = [before + prompt + ids[i] + after for i in rows]
                features = dict(tokenizer.pad({"input_ids": batch}, return_tensors="pt", return_attention_mask=True))
                features = {k: v.to(self.model.device) for k, v in features.items()}
                if prompt:
                    features["prompt_length"] = len(before) + len(prompt)
                vectors = self.model.forward(features)["sentence_embedding"]
                out[rows] = torch.nn.functional.normalize(vectors.float(), dim=1).cpu().numpy()
        return out

    def check(self) -> None:
        """Nothing to reach: the weights are loaded."""
