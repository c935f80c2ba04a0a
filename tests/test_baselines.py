"""Baselines (RND, NovelD, APT/ICM, Novelty, extrinsic-only): exact maths on hand-made tensors,
the n-step combination on real replay batches, checkpoints, config spellings, and end-to-end
runs of ``python train.py`` with tiny budgets that checkpoint and resume."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import re
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from conftest import csv_rows
from torch import nn

import ellm.agent.dqn as agent_module
from baselines.agent import IntrinsicAgent
from baselines.icm_apt import APT, ICM, ICMAPTAgent, knn_mean_distance
from baselines.intrinsic import (
    RewardOutput,
    RunningMeanStd,
    Transitions,
    WindowReward,
    input_encoder,
    nstep_intrinsic_return,
    window_stacks,
)
from baselines.rnd import RND, RNDAgent
from ellm.agent.dqn import DQNAgent, read_metrics
from ellm.agent.networks import ImageEncoder
from ellm.agent.precision import bf16_support
from ellm.replay import (
    EpisodeStart,
    ReplayStorage,
    Row,
    StringTable,
    make_replay_loader,
    nstep_targets,
)
from ellm.reward import BatchReward

GAMMA = 0.99
OBS_SHAPE = (4, 84, 84)
NUM_ACTIONS = 6
SMALL = {"hidden_dim": 32, "rep_dim": 16, "seed": 0}
needs_cpu_bf16 = pytest.mark.skipif(
    bf16_support(torch.device("cpu")) is None,
    reason="this CPU has neither AMX nor AVX512-BF16 (precision=bf16 is refused on it)")


# ---------------------------------------------------------------------------- helpers
def frame(ep: int, t: int) -> np.ndarray:
    """A frame whose pixels say which (episode, step) it is."""
    f = np.full((84, 84), (ep * 31 + t * 7) % 256, np.uint8)
    f[0, 0], f[0, 1] = ep, t
    return f


def write_episodes(replay_dir: Path, lengths: list[int]) -> StringTable:
    """Episodes whose frames and texts encode (episode, step); stored reward 0.25."""
    strings = StringTable(replay_dir / "strings.jsonl")
    storage = ReplayStorage(replay_dir, strings)
    for ep, length in enumerate(lengths):
        storage.add_first(EpisodeStart(frame(ep, 0), f"text {ep} 0", ""))
        for t in range(1, length + 1):
            last = t == length
            storage.add(Row(frame(ep, t), t % NUM_ACTIONS, 0.25, 0.0 if last and ep % 2 else 1.0,
                            f"text {ep} {t}", "", last))
    return strings


def sample(replay_dir: Path, batch_size: int = 64, num_workers: int = 0, **kw):
    return next(make_replay_loader(
        replay_dir, capacity=10**6, batch_size=batch_size, num_workers=num_workers, nstep=3,
        discount=GAMMA, frame_stack=4, clip_reward=True, save_buffer=True, seed=0, **kw))


def where(batch, n: int) -> tuple[int, int]:
    """(episode, i) of sample n: its first reward step i = (last frame of obs) + 1."""
    return int(batch.obs[n, -1, 0, 0]), int(batch.obs[n, -1, 0, 1]) + 1


def roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> tuple[Path, StringTable]:
    replay_dir = tmp_path_factory.mktemp("replay")
    return replay_dir, write_episodes(replay_dir, [7, 2, 5, 1])


@pytest.fixture(scope="module")
def embedder():
    from ellm.embed import SentenceEmbedder

    return SentenceEmbedder()


# ---------------------------------------------------------------------------- running stats
def test_running_mean_std_equals_the_statistic_of_all_values():
    stats = RunningMeanStd()
    chunks = [[1.0, 9.0], [0.0], [4.0, 4.0, -2.5, 7.0]]
    for chunk in chunks:
        stats.update(torch.tensor(chunk))
    every = np.concatenate(chunks)
    assert stats.count == 7
    assert stats.mean == pytest.approx(every.mean(), abs=1e-12)
    assert stats.var == pytest.approx(every.var(), abs=1e-12)
    again = RunningMeanStd()
    again.load_state_dict(roundtrip(stats.state_dict()))
    assert (again.count, again.mean, again.m2) == (stats.count, stats.mean, stats.m2)


def chan_merge(state: tuple, x: torch.Tensor) -> tuple:
    """(count, mean, m2) after ``x``: sums of squared deviations merged (Chan et al.)."""
    count, mean, m2 = state
    x = x.to(torch.float64)
    n, batch_mean = x.numel(), float(x.mean())
    total, delta = count + n, batch_mean - mean
    m2 += float(((x - batch_mean) ** 2).sum()) + delta * delta * count * n / total
    return total, mean + delta * n / total, m2


def original_merge(state: tuple, x: torch.Tensor) -> tuple:
    """(count, mean, var) after ``x``, as the original's normaliser merged its variance."""
    count, mean, var = state
    x = x.to(torch.float64)
    n, delta = x.numel(), float(x.mean()) - mean
    total = count + n
    var = (var * count + float(x.var(unbiased=False)) * n + delta**2 * count * n / total) / total
    return total, mean + delta * n / total, var


def test_one_running_statistic_gives_both_normalisers_bit_for_bit():
    chunks = [torch.randn(n, generator=torch.Generator().manual_seed(n)) * n for n in (3, 17, 64)]
    plain, prior = RunningMeanStd(), RunningMeanStd(prior_count=1e-4)
    chan, original = (0, 0.0, 0.0), (1e-4, 0.0, 1.0)
    assert prior.var == 1.0
    for x in chunks:
        plain.update(x)
        prior.update(x)
        chan, original = chan_merge(chan, x), original_merge(original, x)
        assert (plain.count, plain.mean, plain.m2) == chan
        assert (prior.count, prior.mean, prior.var) == original
    legacy = RunningMeanStd(prior_count=1e-4)  # a snapshot of the prior one's old layout
    legacy.load_state_dict(dict(zip(("count", "mean", "var"), original)))
    assert (legacy.count, legacy.mean) == original[:2]
    assert legacy.var == pytest.approx(original[2], rel=1e-15)


# ---------------------------------------------------------------------------- RND, NovelD
def linear(weight: list[list[float]]) -> nn.Linear:
    w = torch.tensor(weight)
    layer = nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(w)
    return layer


def hand_rnd(noveld: bool = False) -> RND:
    """err(x) = (x_1 - x_0)^2: target reads x_0, predictor x_1."""
    rnd = RND((2,), hidden_dim=4, rep_dim=1, lr=0.1, noveld=noveld, alpha=0.5)
    rnd.target, rnd.predictor = linear([[1.0, 0.0]]), linear([[0.0, 1.0]])
    return rnd


def pairs(obs: list[list[float]], next_obs: list[list[float]]) -> Transitions:
    return Transitions(torch.tensor(obs), torch.zeros(len(obs), dtype=torch.long),
                       torch.tensor(next_obs))


def test_rnd_reward_is_the_prediction_error_over_its_running_std():
    rnd = hand_rnd()
    out = rnd.score(pairs([[5.0, 5.0]] * 2, [[0.0, 1.0], [0.0, 3.0]]))  # errors 1, 9: std 4
    torch.testing.assert_close(out.raw, torch.tensor([1.0, 9.0]))
    torch.testing.assert_close(out.reward, torch.tensor([0.25, 2.25]))
    out = rnd.score(pairs([[5.0, 5.0]] * 2, [[1.0, 1.0], [2.0, 0.0]]))  # errors 0, 4
    # std of {1, 9, 0, 4}: mean 3.5, variance (6.25 + 30.25 + 12.25 + 0.25) / 4 = 12.25
    torch.testing.assert_close(out.reward, torch.tensor([0.0, 4.0 / 3.5]))
    assert rnd.statistics() == {"raw_std": pytest.approx(3.5)}


def test_noveld_reward_is_relu_of_novelty_difference_in_one_feature_space():
    rnd = hand_rnd(noveld=True)
    # err(s) = 4, err(s') = 1: relu(1 - 2) = 0;  err(s) = 1, err(s') = 9: 9 - 0.5 = 8.5
    out = rnd.score(pairs([[0.0, 2.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 3.0]]))
    torch.testing.assert_close(out.raw, torch.tensor([0.0, 8.5]))
    torch.testing.assert_close(out.reward, torch.tensor([0.0, 2.0]))  # std of {0, 8.5} = 4.25


def test_rnd_update_trains_the_predictor_only():
    torch.manual_seed(0)
    rnd = RND((3,), hidden_dim=16, rep_dim=8, lr=1e-2)
    target = [p.clone() for p in rnd.target.parameters()]
    predictor = [p.clone() for p in rnd.predictor.parameters()]
    batch = Transitions(torch.randn(32, 3), torch.zeros(32, dtype=torch.long), torch.randn(32, 3))
    losses = [rnd.learn(batch)["loss"] for _ in range(50)]
    assert losses[-1] < 0.2 * losses[0]
    assert all(torch.equal(p, q) for p, q in zip(rnd.target.parameters(), target))
    assert not any(torch.equal(p, q) for p, q in zip(rnd.predictor.parameters(), predictor))


@pytest.mark.parametrize("cls, kwargs", [(RNDAgent, {}), (RNDAgent, {"noveld": True}),
                                         (ICMAPTAgent, {})])
def test_a_fixed_setting_update_reads_each_state_once_and_steps_as_a_fresh_forward(
        replay, cls, kwargs):
    """The plug-in's step reuses what scoring computed for the first transitions' next states
    (RND's prediction error, APT's representation): each scored state goes through the networks
    once, and the step equals one from a fresh forward, bit for bit."""
    batch = sample(replay[0])
    agent = cls(OBS_SHAPE, NUM_ACTIONS, **kwargs, **SMALL)
    (plugin,) = agent.rewards
    scorer = plugin.scorers["pixel"]
    fresh = copy.deepcopy(scorer)
    rnd = isinstance(scorer, RND)
    nets = (scorer.predictor, scorer.target) if rnd else (scorer.icm.encoder,)
    rows: list[int] = []
    for net in nets:
        net.register_forward_hook(lambda _m, args, _out: rows.append(len(args[0])))
    metrics = agent.update(batch, step=4)
    scored, first = int(batch.n_steps.sum()), len(batch.action)
    # RND: s' of every valid window step (NovelD: s as well); APT: those, then s of the first
    expected = 2 * scored * (2 if scorer.noveld else 1) if rnd else scored + first
    assert sum(rows) == expected
    x = plugin.read(batch)["pixel"]
    losses = fresh.learn(Transitions(x[:, 0], batch.action, x[:, 1]))
    for key, value in losses.items():
        assert torch.equal(value, metrics[f"{agent.method}_pixel_{key}"])
    networks = (scorer.predictor, fresh.predictor) if rnd else (scorer.icm, fresh.icm)
    for mine, theirs in zip(*(net.parameters() for net in networks)):
        assert torch.equal(mine, theirs)
    # Another batch than the one scored last: the step takes a forward of its own.
    with pytest.raises(ValueError, match="kept"):
        scorer.learn(Transitions(x[:3, 0], batch.action[:3], x[:3, 1]), kept=torch.zeros(2))
    rows.clear()
    plugin.update(sample(replay[0]))
    assert sum(rows) == 2 * first  # RND: predictor and target; APT: s and s'


# ---------------------------------------------------------------------------- APT, ICM
def brute_force_knn(x: np.ndarray, k: int) -> np.ndarray:
    out = []
    for a in range(len(x)):
        d = sorted(math.dist(x[a], x[b]) for b in range(len(x)) if b != a)
        out.append(sum(d[:k]) / len(d[:k]) if d else 0.0)
    return np.array(out)


def test_knn_mean_distance_on_a_line():
    x = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    torch.testing.assert_close(knn_mean_distance(x, 2), torch.tensor([2.0, 1.5, 2.5, 5.0]))
    torch.testing.assert_close(knn_mean_distance(x[:1], 12), torch.tensor([0.0]))


@pytest.mark.parametrize("k", [1, 3, 12, 19, 40])
def test_knn_mean_distance_matches_brute_force(k):
    x = torch.randn(20, 5, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
    expected = brute_force_knn(x.numpy(), k)
    np.testing.assert_allclose(knn_mean_distance(x, k).numpy(), expected, rtol=1e-12)


def test_apt_reward_compares_particles_within_their_group_and_is_log_normalised():
    apt = APT((1,), NUM_ACTIONS, hidden_dim=4, rep_dim=1, lr=1e-3, knn_k=1)
    apt.icm.encoder = nn.Identity()
    values = [0.0, 1.0, 3.0, 10.0, 14.0]
    group = torch.tensor([0, 0, 0, 1, 1])
    batch = Transitions(torch.zeros(5, 1), torch.full((5,), -1), torch.tensor([values]).T, group)
    out = apt.score(batch)
    raw = np.array([1.0, 1.0, 2.0, 4.0, 4.0])  # nearest other particle of the same group
    np.testing.assert_allclose(out.raw.numpy(), raw)
    np.testing.assert_allclose(out.reward.numpy(), np.log1p(raw / raw.mean()), rtol=1e-6)
    out = apt.score(Transitions(torch.zeros(2, 1), torch.full((2,), -1),
                                  torch.tensor([[0.0], [6.0]])))  # no groups: one set
    running_mean = (raw.sum() + 12.0) / 7
    np.testing.assert_allclose(out.reward.numpy(), np.log1p(6.0 / running_mean), rtol=1e-6)


def hand_icm() -> ICM:
    """phi = identity on 2-d inputs; linear forward and inverse models with fixed weights."""
    icm = ICM((2,), num_actions=3, hidden_dim=4, rep_dim=2)
    icm.encoder = linear([[1.0, 0.0], [0.0, 1.0]])
    icm.forward_model = linear([[1.0, 0.0, 0.5, 0.0, -0.5], [0.0, 1.0, 0.0, 1.0, 0.0]])
    icm.inverse_model = linear([[1.0, 0.0, -1.0, 0.0], [0.0, 1.0, 0.0, -1.0],
                                [-1.0, -1.0, 1.0, 1.0]])
    return icm


def test_icm_losses_exact_with_an_inverse_classifier_over_discrete_actions():
    icm = hand_icm()
    obs = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    next_obs = torch.tensor([[1.5, 2.0], [0.0, 0.0]])
    action = torch.tensor([0, 1])
    losses = icm.losses(Transitions(obs, action, next_obs))
    # forward: [phi, onehot(a)] -> (x0 + 0.5 a0 - 0.5 a2, x1 + a1)
    predicted = np.array([[1.5, 2.0], [0.0, 0.0]])
    assert losses.forward.item() == pytest.approx(
        np.mean((predicted - next_obs.numpy()) ** 2), abs=1e-7)
    # inverse logits: (x0 - x0', x1 - x1', x0' + x1' - x0 - x1)
    logits = np.array([[-0.5, 0.0, 0.5], [0.0, -1.0, 1.0]])
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -np.mean(log_softmax[[0, 1], [0, 1]])
    assert losses.inverse.item() == pytest.approx(expected, abs=1e-6)
    assert losses.inverse_accuracy.item() == 0.0  # argmax is action 2 for both
    # The encoder learns from the inverse loss only.
    losses.forward.backward()
    assert icm.encoder.weight.grad is None and icm.forward_model.weight.grad is not None
    icm.losses(Transitions(obs, action, next_obs)).inverse.backward()
    assert icm.encoder.weight.grad is not None and icm.encoder.weight.grad.abs().sum() > 0


@pytest.mark.slow
def test_icm_inverse_model_learns_which_action_was_taken():
    torch.manual_seed(0)
    apt = APT((4,), num_actions=4, hidden_dim=32, rep_dim=8, lr=1e-2)
    obs = torch.randn(256, 4)
    action = torch.randint(0, 4, (256,))
    next_obs = obs + 2.0 * nn.functional.one_hot(action, 4)  # each action moves one coordinate
    for _ in range(150):
        metrics = apt.learn(Transitions(obs, action, next_obs))
    assert metrics["inverse_accuracy"] > 0.95 and metrics["inverse_loss"] < 0.2


# ---------------------------------------------------------------------------- replay window
def test_replay_batches_carry_every_text_of_the_window(replay):
    replay_dir, strings = replay
    for batch in (sample(replay_dir), sample(replay_dir, num_workers=2)):
        lengths = {0: 7, 1: 2, 2: 5, 3: 1}
        for n in range(len(batch.action)):
            ep, i = where(batch, n)
            k = min(3, lengths[ep] - i + 1)
            assert batch.n_steps[n] == k
            assert batch.reward[n] == pytest.approx(0.25 * sum(GAMMA**j for j in range(k)),
                                                    abs=1e-6)
            texts = [strings[int(x)] for x in batch.window_text_obs[n]]
            assert texts == [f"text {ep} {i - 1 + min(j, k)}" for j in range(4)]


def test_window_stacks_rebuild_every_state_of_the_window(replay):
    batch = sample(replay[0], one_step_next_obs=True)
    stacks = window_stacks(batch.obs, batch.next_obs, batch.n_steps, nstep=3)
    assert stacks.shape == (64, 4, *OBS_SHAPE)
    assert torch.equal(stacks[:, 0], batch.obs)
    assert torch.equal(stacks[:, 1], batch.one_step_next_obs)
    assert torch.equal(stacks[torch.arange(64), batch.n_steps], batch.next_obs)
    for n in range(64):
        ep, i = where(batch, n)
        k = int(batch.n_steps[n])
        for j in range(4):
            end = i - 1 + min(j, k)
            expected = [frame(ep, max(end - back, 0)) for back in (3, 2, 1, 0)]
            assert np.array_equal(stacks[n, j].numpy(), np.stack(expected)), (n, j)


def test_window_longer_than_the_frame_stack_is_refused():
    obs = torch.zeros(2, 2, 84, 84, dtype=torch.uint8)
    with pytest.raises(ValueError, match="frame stack"):
        window_stacks(obs, obs, torch.tensor([3, 1]), nstep=3)


# ---------------------------------------------------------------------------- n-step combination
def test_nstep_intrinsic_return_exact():
    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [0.5, 9.0, 9.0]])
    k = torch.tensor([3, 2, 1])
    expected = [1.0 + 2.0 * GAMMA + 4.0 * GAMMA**2, 1.0 + 2.0 * GAMMA, 0.5]
    torch.testing.assert_close(nstep_intrinsic_return(rewards, k, GAMMA), torch.tensor(expected))
    # = the replay's n-step sum with no termination inside the window
    reference, _ = nstep_targets(rewards.numpy(), np.ones((3, 3)), k.numpy(), GAMMA)
    np.testing.assert_allclose(nstep_intrinsic_return(rewards, k, GAMMA).numpy(), reference,
                               rtol=1e-6)


class StepIndexScorer:
    """A scorer whose reward of s -> s' is the step index t of s' (read off its last frame)."""

    def __init__(self):
        self.seen: list[Transitions] = []

    def score(self, batch: Transitions, keep: torch.Tensor | None = None) -> RewardOutput:
        self.seen.append(batch)
        t = batch.next_obs[:, -1, 0, 1].float()
        return RewardOutput(t, t)

    def learn(self, batch: Transitions, kept=None) -> dict[str, float]:
        self.seen.append(batch)
        return {"loss": 0.0}

    def statistics(self) -> dict[str, float]:
        return {}


def spy_on_td_targets(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(reward, discount) of every double-DQN target the agents compute from now on."""
    seen = []
    real = agent_module.double_dqn_target

    def spy(q_next_online, q_next_target, reward, discount):
        seen.append((reward, discount))
        return real(q_next_online, q_next_target, reward, discount)

    monkeypatch.setattr(agent_module, "double_dqn_target", spy)
    return seen


@pytest.mark.parametrize("use_extr_rew", [False, True])
def test_update_trains_on_the_batch_reward_plus_the_nstep_intrinsic_return(
        replay, monkeypatch, use_extr_rew):
    batch = sample(replay[0])
    # use_extr_rew changes nothing here: the loop mixes the game reward into the stored reward
    agent = RNDAgent(OBS_SHAPE, NUM_ACTIONS, use_extr_rew=use_extr_rew, extr_rew_weight=0.5,
                     **SMALL)
    (plugin,) = agent.rewards
    assert isinstance(plugin, WindowReward) and plugin.name == "rnd" and not plugin.per_step
    fake = plugin.scorers["pixel"] = StepIndexScorer()
    targets = spy_on_td_targets(monkeypatch)
    metrics = agent.update(batch, step=4)
    intrinsic = []
    for n in range(64):
        _, i = where(batch, n)
        k = int(batch.n_steps[n])
        intrinsic.append(sum(GAMMA**j * (i + j) for j in range(k)))  # r_int at step i+j: i+j
    ((reward, discount),) = targets
    # the stored reward (0.25 a step here, the game's included when used) counted once
    np.testing.assert_allclose(reward.numpy(), batch.reward.numpy() + np.array(intrinsic),
                               rtol=1e-6)
    assert metrics["intrinsic_return"] == pytest.approx(np.mean(intrinsic), rel=1e-6)
    assert torch.equal(discount, batch.discount)  # gamma^k, bootstrap as is
    # Scored: each valid window step once, grouped by window position; trained: first steps.
    scored, trained = fake.seen
    assert len(scored.group) == int(batch.n_steps.sum())
    assert torch.equal(scored.next_obs[:, -1, 0, 1], scored.obs[:, -1, 0, 1] + 1)
    first = scored.group == 0
    assert torch.equal(scored.action[first], batch.action)
    assert (scored.action[~first] == -1).all()
    assert torch.equal(trained.obs, batch.obs) and torch.equal(trained.action, batch.action)
    assert {"rnd_pixel_raw", "rnd_pixel_reward", "rnd_pixel_loss",
            "intrinsic_reward"} <= set(metrics)


@needs_cpu_bf16
@pytest.mark.parametrize("agent_class", [RNDAgent, ICMAPTAgent])
def test_fixed_setting_networks_run_in_the_learners_bf16_and_score_in_fp32(
        replay, agent_class) -> None:
    """precision=bf16 runs the plug-in's conv encoders in bf16 autocast (they are most of a
    fixed-setting update's cost); its weights, rewards and losses stay fp32 and near fp32's."""
    batch = sample(replay[0])
    fp32 = agent_class(OBS_SHAPE, NUM_ACTIONS, **SMALL)
    bf16 = agent_class(OBS_SHAPE, NUM_ACTIONS, precision="bf16", **SMALL)
    seen: list[torch.dtype] = []
    (scorer,) = bf16.rewards[0].scorers.values()
    encoders = [m for m in vars(scorer).values() if isinstance(m, nn.Module)]
    for module in encoders:
        for encoder in module.modules():
            if isinstance(encoder, ImageEncoder):
                encoder.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    metrics32, metrics16 = fp32.update(batch, step=4), bf16.update(batch, step=4)
    assert seen and set(seen) == {torch.bfloat16}  # scored and trained in bf16
    assert all(p.dtype == torch.float32 for m in encoders for p in m.parameters())
    returns, _ = bf16.rewards[0].compute(batch)
    assert returns.dtype == torch.float32
    raw = f"{bf16.method}_pixel_raw"
    assert float(metrics16[raw]) == pytest.approx(float(metrics32[raw]), rel=0.05)


def test_a_compiled_intrinsic_encoder_keeps_its_checkpoint_keys() -> None:
    eager, compiled = input_encoder(OBS_SHAPE, 8), input_encoder(OBS_SHAPE, 8, compile=True)
    assert compiled._compiled_call_impl is not None and eager._compiled_call_impl is None
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    compiled.load_state_dict(eager.state_dict())  # snapshots load either way


class ConstantReward:
    """A BatchReward plug-in of our own: a return of ``value`` for every sample."""

    name, per_step = "constant", False

    def __init__(self, value: float):
        self.value, self.calls = value, []

    def compute(self, batch):
        self.calls.append(("compute", batch))
        return torch.full((len(batch.action),), self.value), {"constant_return": self.value}

    def update(self, batch):
        self.calls.append(("update", batch))
        return {"constant_loss": 0.0}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def test_a_dqn_has_no_plugin_and_takes_any_batch_reward_plugin(replay, monkeypatch):
    batch = sample(replay[0], batch_size=16)
    agent = DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=32, seed=0)
    assert agent.rewards == []
    targets = spy_on_td_targets(monkeypatch)
    agent.update(batch, step=4)
    assert torch.equal(targets[-1][0], batch.reward)
    plugins: list[BatchReward] = [ConstantReward(2.0), ConstantReward(0.5)]
    agent.rewards.extend(plugins)
    metrics = agent.update(batch, step=8)
    torch.testing.assert_close(targets[-1][0], batch.reward + 2.5)
    assert {"constant_return", "constant_loss", "loss"} <= set(metrics)
    assert [c for c, _ in plugins[0].calls] == ["compute", "update"]
    assert all(b is batch for _, b in plugins[0].calls)


@pytest.mark.slow
def test_language_module_reads_the_window_texts(replay, embedder):
    replay_dir, strings = replay
    batch = sample(replay_dir, batch_size=16)
    agent = RNDAgent(OBS_SHAPE, NUM_ACTIONS, use_language=True, use_language_state="sbert",
                     embedder=embedder, strings=strings, **SMALL)
    inputs = agent.window_inputs(batch)
    assert set(inputs) == {"pixel", "language"}
    texts = [strings[int(x)] for x in batch.window_text_obs.reshape(-1)]
    expected = torch.from_numpy(embedder.embed(texts)).reshape(16, 4, -1)
    torch.testing.assert_close(inputs["language"], expected)
    metrics = agent.update(batch, step=4)
    assert {"rnd_language_raw", "rnd_language_reward", "rnd_language_loss"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())


# ---------------------------------------------------------------------------- agents
@pytest.mark.parametrize("cls, kwargs", [
    (RNDAgent, {}), (RNDAgent, {"noveld": True}), (ICMAPTAgent, {"knn_k": 4}),
])
@pytest.mark.slow
def test_pixel_only_agents_train_and_resume_exactly(replay, cls, kwargs):
    batch = sample(replay[0], batch_size=16)
    agent = cls(OBS_SHAPE, NUM_ACTIONS, use_extr_rew=True, **SMALL, **kwargs)  # no text at all
    assert agent.text.embedder is None and set(agent.rewards[0].scorers) == {"pixel"}
    for step in (4, 8):
        metrics = agent.update(batch, step)
    assert all(math.isfinite(v) for v in metrics.values())
    state = roundtrip(agent.state_dict())
    assert set(state["intrinsic"]) == {"config", "modules"}  # the layout of earlier versions
    assert set(state["intrinsic"]["modules"]["pixel"]["stats"]) == {"count", "mean", "m2"}
    again = cls(OBS_SHAPE, NUM_ACTIONS, use_extr_rew=True, **{**SMALL, "seed": 7}, **kwargs)
    again.load_state_dict(state)
    assert read_metrics(again.update(batch, 12)) == read_metrics(agent.update(batch, 12))


@pytest.mark.e2e
def test_checkpoints_name_a_method_or_option_mismatch(replay):
    rnd = RNDAgent(OBS_SHAPE, NUM_ACTIONS, **SMALL)
    state = roundtrip(rnd.state_dict())
    with pytest.raises(ValueError, match="agent._target_"):
        DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=32).load_state_dict(state)
    with pytest.raises(ValueError, match="agent.noveld"):
        RNDAgent(OBS_SHAPE, NUM_ACTIONS, noveld=True, **SMALL).load_state_dict(state)
    dqn_state = roundtrip(DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=32).state_dict())
    with pytest.raises(ValueError, match="agent._target_"):
        RNDAgent(OBS_SHAPE, NUM_ACTIONS, **SMALL).load_state_dict(dqn_state)
    # Finetuning may change the method: an RND-pretrained Q-network into a DQN, and back.
    dqn = DQNAgent(OBS_SHAPE, NUM_ACTIONS, hidden_dim=32)
    dqn.load_weights(state)
    assert all(torch.equal(p, q) for p, q in zip(dqn.online.parameters(), rnd.online.parameters()))
    RNDAgent(OBS_SHAPE, NUM_ACTIONS, **SMALL).load_weights(dqn_state)


@pytest.mark.parametrize("cls, kwargs, key", [
    (RNDAgent, {"noveld": "yes"}, "agent.noveld"),
    (RNDAgent, {"noveld_alpha": -1.0}, "agent.noveld_alpha"),
    (RNDAgent, {"use_language": True}, "agent.use_language"),
    (RNDAgent, {"language_weight": -0.5}, "agent.language_weight"),
    (RNDAgent, {"rep_dim": 0}, "agent.rep_dim"),
    (RNDAgent, {"intrinsic_lr": 0}, "agent.intrinsic_lr"),
    (RNDAgent, {"extr_rew_weight": "one"}, "agent.extr_rew_weight"),
    (RNDAgent, {"nstep": 5}, "nstep"),
    (ICMAPTAgent, {"knn_k": 0}, "agent.knn_k"),
])
def test_bad_options_name_the_key(cls, kwargs, key):
    with pytest.raises(ValueError, match=key):
        cls(OBS_SHAPE, NUM_ACTIONS, **{**SMALL, **kwargs})


def test_an_unknown_option_is_refused_naming_it():
    with pytest.raises(TypeError, match="knn_kk"):
        ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, knn_kk=4, **SMALL)


def test_apt_needs_a_batch_larger_than_k(replay):
    agent = ICMAPTAgent(OBS_SHAPE, NUM_ACTIONS, **SMALL)  # knn_k = 12
    with pytest.raises(ValueError, match="agent.knn_k=12 needs batch_size > 12"):
        agent.update(sample(replay[0], batch_size=8), step=4)


@pytest.mark.parametrize("short, original", [
    (["agent=rnd"], ["agent._target_=baselines.rnd.RNDAgent"]),
    (["agent=noveld"], ["agent._target_=baselines.rnd.RNDAgent", "+agent.noveld=True"]),
    (["agent=rnd", "agent.use_language=True"],
     ["agent._target_=baselines.rnd.RNDAgent", "+agent.use_language=True"]),
    (["agent=apt"], ["agent._target_=baselines.icm_apt.ICMAPTAgent"]),
    (["agent=dqn"], []),
])
def test_short_names_and_original_spellings_build_the_same_agent(short, original, embedder):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    root = Path(__file__).resolve().parents[1]
    agents = []
    for overrides in (short, original):
        with initialize_config_dir(config_dir=str(root), version_base="1.3"):
            cfg = compose("config", overrides=["device=cpu", "use_language_state=sbert",
                                               *overrides])
        cfg.agent.obs_shape, cfg.agent.num_actions = list(OBS_SHAPE), NUM_ACTIONS
        agents.append(instantiate(cfg.agent, embedder=embedder, discount=GAMMA, nstep=3))
    a, b = agents
    assert type(a) is type(b) and a.options == b.options  # agent/*.yaml = the classes' defaults
    if isinstance(a, IntrinsicAgent):
        assert a.intrinsic_config() == b.intrinsic_config()


# ---------------------------------------------------------------------------- end to end
ROOT = Path(__file__).resolve().parents[1]
# Tiny budgets (the idea of TINY in test_train_e2e.py): 20-step episodes, updates from frame 20
# on, an evaluation and a snapshot every 30 frames; 60 frames, then resumed to 80.
TINY = ["num_seed_frames=20", "eval_every_frames=30", "num_eval_episodes=1",
        "env_spec.length=20", "replay_buffer_num_workers=0", "batch_size=16",
        "agent.critic_target_update_every_steps=40", "agent.hidden_dim=32", "progress=false"]
SCENARIOS = {
    # the original spellings, pixel-only RND with the game reward added (the paper setting:
    # one reward per sample on the DQN encoder's features, baselines/paper_setting.py)
    "rnd": (["agent._target_=baselines.rnd.RNDAgent", "+agent.rep_dim=16", "use_extr_rew=True"],
            ["rnd_raw", "rnd_pixel_raw", "rnd_raw_std", "rnd_pixel_loss", "intrinsic_reward"]),
    "noveld": (["agent._target_=baselines.rnd.RNDAgent", "+agent.noveld=True",
                "+agent.use_language=True", "use_language_state=sbert", "env_spec.use_sbert=True",
                "+agent.rep_dim=16"],
               ["noveld_pixel_raw", "noveld_language_raw", "noveld_raw_std",
                "noveld_language_loss"]),
    # the fixed setting's RND: a reward per step of the window, on its own conv nets
    "rnd_v2": (["agent=rnd", "agent.rep_dim=16", "env_spec.name=CrafterTextEnv-v2"],
               ["rnd_pixel_raw", "rnd_pixel_reward", "rnd_pixel_raw_std", "rnd_pixel_loss"]),
    # the short name, with the language module and goal conditioning
    "apt": (["agent=apt", "agent.knn_k=4", "agent.rep_dim=16", "agent.use_language=True",
             "use_language_state=sbert", "env_spec.use_sbert=True", "use_goal=True"],
            ["apt_raw", "apt_pixel_raw", "apt_language_raw", "apt_pixel_forward_loss",
             "apt_pixel_inverse_loss", "apt_language_inverse_loss"]),
    "apt_v2": (["agent=apt", "agent.knn_k=4", "agent.rep_dim=16",
                "env_spec.name=CrafterTextEnv-v2"],
               ["apt_pixel_raw", "apt_pixel_reward", "apt_pixel_raw_mean",
                "apt_pixel_forward_loss", "apt_pixel_inverse_loss"]),
    "novelty": (["env_spec.lm_spec.lm_class=BaselineModel"], ["loss"]),
    "extrinsic": (["env_spec.name=CrafterReward-v1"], ["loss"]),
    # methods by name
    "method_noveld": (["method=noveld", "agent.rep_dim=16"], ["noveld_raw"]),
    "method_extrinsic": (["method=extrinsic"], ["loss"]),
}
# The method each scenario records in config.json.
RECORDED = {"rnd": "rnd", "noveld": "noveld", "rnd_v2": "rnd", "apt": "apt", "apt_v2": "apt",
            "novelty": "novelty", "extrinsic": "extrinsic", "method_noveld": "noveld",
            "method_extrinsic": "extrinsic"}
# Scenarios whose agent reads no goal and learns from no goal reward: no LM is asked.
NO_LM = ("rnd", "noveld", "rnd_v2", "apt_v2", "extrinsic", "method_noveld", "method_extrinsic")


def snapshot(run: Path) -> dict:
    return torch.load(run / "snapshot.pt", weights_only=True)


def statistic_counts(agent_state: dict) -> dict[str, float]:
    """The count of every running statistic of a baseline's plug-in (none for a DQN)."""
    intrinsic = agent_state.get("intrinsic")
    if intrinsic is None:
        return {}
    if intrinsic["config"]["paper_setting"]:
        return {"paper": intrinsic["paper"]["stats"]["count"]}
    return {name: state["stats"]["count"] for name, state in intrinsic["modules"].items()}


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.e2e
def test_baseline_trains_checkpoints_and_resumes_through_train_py(train, tmp_path, name):
    overrides, metrics = SCENARIOS[name]
    train(*overrides, *TINY, "num_train_frames=60", f"exp_name={name}")
    (run,) = tmp_path.glob(f"exp_local/*/{name}_*")
    first = snapshot(run)
    assert first["meta"]["frame"] == 60
    assert first["agent"]["num_updates"] == 11  # frames 20, 24, ..., 60
    train_rows = csv_rows(run / "train.csv")
    assert [int(r["frame"]) for r in train_rows] == [20, 40, 60]
    # One update per 4 frames from frame 20 on: (frame - 20) / 4 + 1, cumulative.
    assert [float(r["updates"]) for r in train_rows] == [1, 6, 11]
    for key in metrics:
        assert math.isfinite(float(train_rows[-1][key])), key
    config = json.loads((run / "config.json").read_text())
    assert config["method"] == RECORDED[name]
    if "intrinsic" in first["agent"]:  # the resolved language input the report labels by
        language_logged = any("_language_" in k and v for k, v in train_rows[-1].items())
        assert config["language_input"] is language_logged, name
    # A run whose agent reads no goal asks no LM and writes no LM records.
    assert (run / "lm.csv").exists() != (name in NO_LM), name
    if name not in NO_LM:
        assert max(float(row["queries"]) for row in csv_rows(run / "lm.csv")) > 0

    train(*overrides, *TINY, "num_train_frames=80", f"snapshot_path={run}",
          f"exp_name={name}")
    assert list(tmp_path.glob("exp_local/*/*")) == [run]
    resumed = snapshot(run)
    assert resumed["meta"]["frame"] == 80
    assert resumed["agent"]["num_updates"] == 16  # counted on from the snapshot
    assert [int(r["frame"]) for r in csv_rows(run / "eval.csv")] == [0, 30, 60, 80]
    assert [int(r["frame"]) for r in csv_rows(run / "train.csv")] == [20, 40, 60, 80]
    assert resumed["agent"]["agent_target"] == first["agent"]["agent_target"]
    before, after = statistic_counts(first["agent"]), statistic_counts(resumed["agent"])
    assert before.keys() == after.keys() and bool(before) == ("intrinsic" in first["agent"])
    for stat, count in before.items():  # the plug-in's statistics went on from the snapshot
        assert after[stat] > count, stat


@pytest.mark.e2e
def test_a_baseline_resumes_from_its_snapshot_path_alone(train, tmp_path):
    """The keys only agent=noveld adds (agent.noveld, and a width set beside it) come back from
    the record when the command names the snapshot alone, as the README resumes a run."""
    train("method=noveld", "agent.rep_dim=16", "env_spec.name=CrafterTextEnv-v2", *TINY,
          "num_train_frames=60", "exp_name=noveld")
    (run,) = tmp_path.glob("exp_local/*/noveld_*")
    first = snapshot(run)
    train(f"snapshot_path={run}", "num_train_frames=80")
    resumed = snapshot(run)
    assert resumed["meta"]["frame"] == 80
    assert resumed["agent"]["num_updates"] == first["agent"]["num_updates"] + 5
    modules = resumed["agent"]["intrinsic"]["modules"]
    assert {name: state["stats"]["count"] > first["agent"]["intrinsic"]["modules"][name]
            ["stats"]["count"] for name, state in modules.items()} == {"pixel": True}
    rows = csv_rows(run / "train.csv")
    assert [int(r["frame"]) for r in rows] == [20, 40, 60, 80]
    assert math.isfinite(float(rows[-1]["noveld_pixel_raw"])) and "rnd_pixel_raw" not in rows[-1]
    recorded = json.loads((run / "config.json").read_text())["agent"]  # rewritten on resume
    assert (recorded["noveld"], recorded["rep_dim"]) == (True, 16)


@pytest.mark.e2e
def test_random_actions_are_a_method_that_never_learns(train, tmp_path):
    train("method=random", *TINY, "num_train_frames=60", "exp_name=random")
    (run,) = tmp_path.glob("exp_local/*/random_*")
    assert json.loads((run / "config.json").read_text())["method"] == "random"
    assert snapshot(run)["agent"]["num_updates"] == 0
    rows = csv_rows(run / "train.csv")
    assert {float(r["epsilon"]) for r in rows} == {1.0} and "loss" not in rows[-1]
    assert not (run / "lm.csv").exists()  # no LM: no all-zero LM records


@pytest.mark.e2e
def test_rnds_progress_line_shows_the_intrinsic_return_it_learns_from(train, tmp_path):
    train("method=rnd", *TINY[:-1], "num_train_frames=60", "progress=true", "progress_every_s=0",
          "exp_name=rnd")
    (run,) = tmp_path.glob("exp_local/*/rnd_*")
    shown = [float(x) for x in re.findall(r"intrinsic return ([\d.]+) \(batches\)",
                                          (run / "train.log").read_text())]
    learned = [float(r["intrinsic_return"]) for r in csv_rows(run / "train.csv")
               if r.get("intrinsic_return")]
    assert learned and max(shown) > 0 and f"{learned[0]:.2f}" in {f"{x:.2f}" for x in shown}
    assert not (run / "lm.csv").exists()
