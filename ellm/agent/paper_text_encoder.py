"""The original agent's text input (the paper setting; docs/fidelity.md row 3): only the real
tokens run, at their padded positions, which masking makes the original's pass."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ellm.embed import EmbeddingCache

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

Texts = tuple[str, ...]
"""One input of the encoder: the language state alone, the goal alone, or (state, goal)."""


def reinitialise_linear_layers(model: nn.Module, seed: int) -> None:
    """Orthogonal weights, zero biases in every Linear of ``model`` (the original's quirk)."""
    generator = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                weight = torch.empty_like(module.weight, device="cpu")
                nn.init.orthogonal_(weight, generator=generator)
                module.weight.copy_(weight)
                if module.bias is not None:
                    module.bias.zero_()


class PaperTextEncoder(EmbeddingCache):
    """Frozen transformer over one or two texts, as the original's encoder (a copy)."""

    def __init__(self, sentence_model: SentenceTransformer, max_tokens: int = 200,
                 reinit_seed: int | None = None, device: str | torch.device = "cpu"):
        first = sentence_model[0]
        self.tokenizer = first.tokenizer
        self._pretrained: nn.Module = first.auto_model
        self.max_tokens = int(max_tokens)
        self.device = torch.device(device)
        self.dim = int(self._pretrained.config.hidden_size)
        if 2 * self.max_tokens > int(self._pretrained.config.max_position_embeddings):
            raise ValueError(f"max_seq_len={max_tokens}: two texts of this length do not fit the "
                             f"sentence model's {self._pretrained.config.max_position_embeddings} "
                             "positions")
        self.reinit_seed: int | None = None
        self.model: nn.Module = self._pretrained
        self._init_cache()
        self._tokens: dict[str, list[int]] = {}
        self.set_reinit_seed(reinit_seed)

    def set_reinit_seed(self, seed: int | None) -> None:
        """(Re)build the transformer from ``seed``, recorded in checkpoints."""
        if seed is not None:
            seed = int(seed)
        if self._cache and seed == self.reinit_seed:
            return
        self.reinit_seed = seed
        if seed is None:
            self.model = self._pretrained
        else:
            self.model = copy.deepcopy(self._pretrained).to(self.device)
            reinitialise_linear_layers(self.model, seed)
        self.model.eval().requires_grad_(False)
        self._forget()

    def _token_ids(self, text: str) -> list[int]:
        ids = self._tokens.get(text)
        if ids is None:
            # Cut after tokenising, as the original did; verbose=False: the "longer than 256" notice
            # is about the uncut text.
            ids = self.tokenizer(text, verbose=False)["input_ids"][: self.max_tokens]
            self._tokens[text] = ids
        return ids

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "max_tokens": self.max_tokens,
                "reinit_seed": self.reinit_seed}

    def embed(self, inputs: Sequence[Texts]) -> np.ndarray:
        """Unit-norm float32 embeddings ``[N, dim]``, each distinct input encoded once."""
        return self._lookup(inputs)

    @torch.inference_mode()
    def _encode(self, inputs: Sequence[Texts]) -> np.ndarray:
        rows = []
        for texts in inputs:
            ids: list[int] = []
            positions: list[int] = []
            for slot, text in enumerate(texts):
                tokens = self._token_ids(text)
                ids += tokens
                positions += range(slot * self.max_tokens, slot * self.max_tokens + len(tokens))
            rows.append((ids, positions))
        length = max(len(ids) for ids, _ in rows)
        input_ids = torch.zeros(len(rows), length, dtype=torch.long)
        position_ids = torch.zeros(len(rows), length, dtype=torch.long)
        mask = torch.zeros(len(rows), length, dtype=torch.long)
        for i, (ids, positions) in enumerate(rows):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            position_ids[i, : len(ids)] = torch.tensor(positions)
            mask[i, : len(ids)] = 1
        out = self.model(input_ids=input_ids.to(self.device),
                         attention_mask=mask.to(self.device),
                         position_ids=position_ids.to(self.device),
                         token_type_ids=torch.zeros_like(input_ids).to(self.device))
        tokens = out[0]
        weights = mask.to(self.device, tokens.dtype).unsqueeze(-1)
        pooled = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()
