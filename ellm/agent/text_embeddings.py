"""How the agent's texts reach its Q-network: frozen sentence embeddings served by string id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from ellm.agent.paper_text_encoder import PaperTextEncoder
from ellm.agent.precision import to_device
from ellm.embed import EmbeddingCache, SentenceEmbedder

TEXT_INPUTS = ("separate", "paper", "joint")


class StringTable(Protocol):
    """The replay's id -> string table."""

    def __getitem__(self, index: int) -> str: ...


class TextTensors(NamedTuple):
    """Embeddings ``[B, dim]`` of a batch's texts; None where the network reads no such text."""

    language: torch.Tensor | None
    next_language: torch.Tensor | None
    goal: torch.Tensor | None
    next_goal: torch.Tensor | None


NO_TEXT = TextTensors(None, None, None, None)


class ShippedEmbeddings(NamedTuple):
    """Embeddings an actor computed for the learner's cache, and the seed of their transformer."""

    reinit_seed: int | None
    entries: dict[Any, np.ndarray]


class TextInput:
    """The language state and goal of observations and batches as embeddings of width ``dim``."""

    def __init__(self, kind: str | None, embedder: SentenceEmbedder | None,
                 strings: StringTable | None, *, use_language: bool, use_goal: bool,
                 device: torch.device, max_tokens: int, reinit_seed: int | None):
        if kind is not None and embedder is None:
            raise ValueError("agent.use_goal / agent.use_language_state need a SentenceEmbedder: "
                             "pass embedder=... when instantiating the agent")
        self.kind, self.embedder, self.strings, self.device = kind, embedder, strings, device
        self.use_language, self.use_goal = use_language, use_goal
        self.model = embedder.model if embedder is not None else None
        if self.model is not None:
            self.model.eval()
            self.model.requires_grad_(False)
        self.dim = embedder.dim if embedder is not None else 0
        self.encoder: PaperTextEncoder | None = None
        if kind in ("paper", "joint"):
            assert embedder is not None
            self.encoder = PaperTextEncoder(embedder.model, max_tokens, device=device,
                                            reinit_seed=reinit_seed)
        self._cache = torch.zeros(0, self.dim, device=device)
        self._known = torch.zeros(0, dtype=torch.bool)
        self._pair_rows: dict[tuple[int, int], int] = {}
        self._pair_cache = torch.zeros(0, self.dim, device=device)

    def of_obs(self, obs: Mapping[str, Any]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(language, goal) ``[1, dim]`` of an observation (a joint pair is the language)."""
        if self.kind == "joint":
            return self._embed_pairs([(obs["text_obs"], obs["goal"])]), None
        language = self._embed_strings([obs["text_obs"]]) if self.use_language else None
        goal = self._embed_strings([obs["goal"]]) if self.use_goal else None
        return language, goal

    def _embed_strings(self, texts: Sequence[str]) -> torch.Tensor:
        if self.encoder is not None:
            return self._embed_pairs([(text,) for text in texts])
        assert self.embedder is not None
        return torch.from_numpy(self.embedder.embed(texts)).to(self.device)

    def _embed_pairs(self, inputs: Sequence[tuple[str, ...]]) -> torch.Tensor:
        assert self.encoder is not None
        return torch.from_numpy(self.encoder.embed(inputs)).to(self.device)

    def of_batch(self, batch: Any) -> TextTensors:
        """The embeddings of a batch's texts (ids ``text_obs``, ``goal`` and their next)."""
        if self.kind == "joint":
            return TextTensors(self.embed_id_pairs(batch.text_obs, batch.goal),
                               self.embed_id_pairs(batch.next_text_obs, batch.next_goal),
                               None, None)
        fields = []
        if self.use_language:
            fields += [batch.text_obs, batch.next_text_obs]
        if self.use_goal:
            fields += [batch.goal, batch.next_goal]
        if not fields:
            return NO_TEXT
        rows = self.embed_ids(torch.stack([f.reshape(-1) for f in fields])).unbind(0)
        language, next_language = rows[:2] if self.use_language else (None, None)
        goal, next_goal = rows[-2:] if self.use_goal else (None, None)
        return TextTensors(language, next_language, goal, next_goal)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Embeddings ``[*ids.shape, dim]`` of string-table ids, each encoded once."""
        if self.embedder is None or self.strings is None:
            raise ValueError("text inputs need embedder=... and strings=... (the replay's string "
                             "table) when instantiating the agent")
        flat = ids.detach().reshape(-1).to("cpu", torch.long)
        if flat.numel() == 0:
            return self._cache.new_zeros(*ids.shape, self.dim)
        if int(flat.min()) < 0:
            raise ValueError(f"negative string id {int(flat.min())} in batch")
        needed = int(flat.max()) + 1
        if needed > self._known.numel():
            capacity = max(needed, 2 * self._known.numel(), 64)
            cache = self._cache.new_zeros(capacity, self.dim)
            cache[: self._cache.shape[0]] = self._cache
            known = torch.zeros(capacity, dtype=torch.bool)
            known[: self._known.numel()] = self._known
            self._cache, self._known = cache, known
        new_ids = flat[~self._known[flat]].unique()
        if new_ids.numel():
            texts = [self.strings[int(i)] for i in new_ids]
            self._cache[new_ids.to(self.device)] = self._embed_strings(texts)
            self._known[new_ids] = True
        return self._cache[to_device(flat, self.device)].reshape(*ids.shape, self.dim)

    def embed_id_pairs(self, state_ids: torch.Tensor, goal_ids: torch.Tensor) -> torch.Tensor:
        """Joint embeddings ``[N, dim]`` of (language state, goal) id pairs, each encoded once."""
        if self.strings is None:
            raise ValueError("text inputs need strings=... (the replay's string table) when "
                             "instantiating the agent")
        pairs = list(zip(state_ids.reshape(-1).tolist(), goal_ids.reshape(-1).tolist()))
        new = [p for p in dict.fromkeys(pairs) if p not in self._pair_rows]
        if new:
            start = len(self._pair_rows)
            if start + len(new) > self._pair_cache.shape[0]:
                grown = self._pair_cache.new_zeros(max(2 * self._pair_cache.shape[0],
                                                       start + len(new), 64), self.dim)
                grown[:start] = self._pair_cache[:start]
                self._pair_cache = grown
            texts = [(self.strings[s], self.strings[g]) for s, g in new]
            self._pair_cache[start:start + len(new)] = self._embed_pairs(texts)
            self._pair_rows.update((p, start + i) for i, p in enumerate(new))
        rows = torch.tensor([self._pair_rows[p] for p in pairs])
        return self._pair_cache[to_device(rows, self.device)]

    def _embedding_cache(self) -> EmbeddingCache | None:
        """The cache this input's embeddings live in (None without text inputs)."""
        if self.kind is None:
            return None
        return self.encoder if self.encoder is not None else self.embedder

    def record_new_embeddings(self) -> None:
        """Actor: keep the embeddings computed from now on for :meth:`new_embeddings`."""
        cache = self._embedding_cache()
        if cache is not None:
            cache.record_new()

    def new_embeddings(self) -> ShippedEmbeddings | None:
        """Actor: the embeddings computed since the last call, to ship with its steps."""
        cache = self._embedding_cache()
        if cache is None:
            return None
        return ShippedEmbeddings(self.reinit_seed, cache.take_new())

    def add_embeddings(self, shipped: ShippedEmbeddings) -> None:
        """Learner: serve an actor's embeddings from the cache; another transformer's are dropped.
        """
        cache = self._embedding_cache()
        if cache is not None and shipped.reinit_seed == self.reinit_seed:
            cache.remember(shipped.entries)

    def embedding_counts(self) -> tuple[int, int]:
        """(inputs encoded here, entries taken from actors) of this input's cache."""
        cache = self._embedding_cache()
        return (cache.encoded, cache.remembered) if cache is not None else (0, 0)

    def save_embeddings(self, path: Path) -> int | None:
        """Write this input's embedding cache; the entries written, None without text inputs."""
        cache = self._embedding_cache()
        return None if cache is None else cache.save(path)

    def load_embeddings(self, path: Path) -> int:
        """Add the entries a run saved, if its encoder was this one; the entries added."""
        cache = self._embedding_cache()
        return cache.load(path) if cache is not None and Path(path).is_file() else 0

    @property
    def reinit_seed(self) -> int | None:
        """Seed of the re-initialised transformer (None: pretrained weights or no encoder)."""
        return self.encoder.reinit_seed if self.encoder is not None else None

    def use_reinit_seed(self, seed: int | None) -> None:
        """Embed as the run whose checkpoint recorded ``seed`` did (its random transformer)."""
        if self.encoder is not None and self.encoder.reinit_seed is not None and seed is not None \
                and seed != self.encoder.reinit_seed:
            self.encoder.set_reinit_seed(seed)
            self._known.zero_()
            self._pair_rows.clear()


def text_seed(seed: int | None) -> int:
    """Seed of the re-initialised text transformer, per run seed, as the original's was."""
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    return int(np.random.SeedSequence([int(seed), 3]).generate_state(1)[0])
