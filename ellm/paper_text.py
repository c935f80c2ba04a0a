"""The original agent's text input (the paper setting; docs/fidelity.md row 3).

The original tokenised the language state and the goal separately with the sentence model's
tokenizer, padded each to ``max_seq_len`` (200) tokens, concatenated the two arrays and ran the
sentence transformer ONCE over the pair, with padding masked, then mean-pooled, L2-normalised and
projected the result by a trainable Linear layer. Its Q-network's ``apply(weight_init)`` also
reached the transformer: every Linear layer inside it was re-initialised (orthogonal weights,
zero biases) before the first embedding, so the frozen encoder was a random transformer on top of
pretrained token embeddings and LayerNorms.

``PaperTextEncoder`` computes exactly that, with one shortcut that changes no number: instead of
running 2 x 200 positions of which most are masked padding, it runs the real tokens with the
position ids they had in the padded layout (the goal's tokens start at position ``max_tokens``).
Masked positions get zero attention weight, so the result is the padded computation's.
"""

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
    """Orthogonal weights and zero biases in every Linear layer of ``model``, drawn from a torch
    generator seeded with ``seed`` (the original's ``weight_init`` reaching the transformer)."""
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
    """Frozen sentence transformer over one or two texts, as the original agent's encoder.

    Args:
        sentence_model: the loaded sentence-transformers model (its tokenizer and transformer are
            used; it is copied, never changed, so the reward's model stays pretrained).
        max_tokens: each text's padded length in the original (``env_spec.max_seq_len``, 200);
            longer texts are cut there, as the original did.
        reinit_seed: re-initialise the copy's Linear layers from this seed (the original's quirk);
            ``None`` keeps the pretrained weights.
        device: torch device of the transformer.
    """

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
        """(Re)build the transformer: the pretrained one, or a copy re-initialised from ``seed``.
        Checkpoints record the seed, so a run that loads one embeds as the run that saved it."""
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
            # Cut after tokenising, as the original did ([SEP] is lost past the cap); verbose=False:
            # the tokenizer's "longer than 256" notice is about the whole text, not the cut one.
            ids = self.tokenizer(text, verbose=False)["input_ids"][: self.max_tokens]
            self._tokens[text] = ids
        return ids

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "max_tokens": self.max_tokens,
                "reinit_seed": self.reinit_seed}

    def embed(self, inputs: Sequence[Texts]) -> np.ndarray:
        """Unit-norm float32 embeddings ``[N, dim]``, one per input of one or two texts; each
        distinct input is encoded once and then served from a cache."""
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
