"""The text embeddings an actor computes to act reach the learner's cache, so that the learner
does not run the transformer again for them; those of another transformer never do."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from ellm.agent.text_embeddings import TextInput
from ellm.embed import SentenceEmbedder

pytestmark = pytest.mark.slow  # each test runs the sentence transformer: 9-20 s here
OBS = {"text_obs": "You see grass and a tree.", "goal": "chop tree, drink water"}


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def _joint(embedder: SentenceEmbedder, seed: int) -> TextInput:
    return TextInput("joint", embedder, None, use_language=True, use_goal=True,
                     device=torch.device("cpu"), max_tokens=200, reinit_seed=seed)


def test_an_actors_embeddings_are_served_to_the_learner_unencoded(embedder, monkeypatch):
    actor, learner = _joint(embedder, 7), _joint(embedder, 7)
    actor.record_new_embeddings()
    acted, _ = actor.of_obs(OBS)
    shipped = actor.new_embeddings()
    assert shipped.reinit_seed == 7 and list(shipped.entries) == [(OBS["text_obs"], OBS["goal"])]
    assert actor.new_embeddings().entries == {}  # each is shipped once

    def no_encoding(inputs):
        raise AssertionError(f"the learner encoded {inputs}")

    monkeypatch.setattr(learner.encoder, "_encode", no_encoding)
    learner.add_embeddings(shipped)
    served, _ = learner.of_obs(OBS)
    assert torch.equal(served, acted)
    assert learner.embedding_counts() == (0, 1)


def test_embeddings_of_another_transformer_are_dropped(embedder):
    actor, learner = _joint(embedder, 7), _joint(embedder, 8)
    actor.record_new_embeddings()
    acted, _ = actor.of_obs(OBS)
    learner.add_embeddings(actor.new_embeddings())
    assert learner.embedding_counts() == (0, 0)
    own, _ = learner.of_obs(OBS)
    assert not torch.allclose(own, acted)  # seed 8's transformer embeds differently
    assert learner.embedding_counts() == (1, 0)


def test_reseeding_the_actors_transformer_forgets_what_it_recorded(embedder):
    actor = _joint(embedder, 7)
    actor.record_new_embeddings()
    actor.of_obs(OBS)
    actor.use_reinit_seed(9)  # the learner's seed arrives with its first weights
    assert actor.new_embeddings() == (9, {})


@pytest.mark.parametrize("paper_setting", [True, False])  # a joint pair; texts apart
def test_an_actor_of_another_seed_acts_as_the_learner_after_a_refresh(embedder, paper_setting):
    """An actor's agent is built from its own seed (its own random transformer in the paper
    setting); once it loads the learner's policy it must score every action as the learner
    does, text included, or the actors would collect with another policy than the one learnt."""
    from ellm.actors.shared import SharedPolicy
    from ellm.agent.dqn import DQNAgent

    def agent(seed: int) -> DQNAgent:
        return DQNAgent((1, 84, 84), 5, hidden_dim=32, seed=seed, embedder=embedder,
                        use_goal=True, use_language_state="sbert", paper_setting=paper_setting)

    learner, actor = agent(1), agent(2)
    obs = {"frames": torch.randint(0, 256, (1, 84, 84), dtype=torch.uint8).numpy(), **OBS}
    assert not torch.allclose(actor.q_values(obs), learner.q_values(obs))
    policy = SharedPolicy(torch.multiprocessing.get_context("spawn"), learner.policy_state())
    policy.refresh(actor, 0)
    assert torch.allclose(actor.q_values(obs), learner.q_values(obs), atol=1e-6)
