"""Goal-conditioned double/dueling n-step DQN (ELLM.md section 5).

The TD reward is the replay's n-step ``reward`` plus each BatchReward plug-in's n-step return
(RND, NovelD, APT); texts enter as frozen sentence embeddings.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch.nn import functional as F

from ellm.agent.cuda_graph import GraphedStep
from ellm.agent.networks import ENCODER_MODULES, QNetwork
from ellm.agent.options import IGNORED_OPTIONS, AgentOptions, LearnerSetting
from ellm.agent.precision import autocast, check_compile, check_precision
from ellm.agent.text_embeddings import StringTable, TextInput, TextTensors, text_seed
from ellm.embed import SentenceEmbedder
from ellm.errors import ConfigError
from ellm.reward import BatchReward
from ellm.run import schema


def double_dqn_target(q_next_online: torch.Tensor, q_next_target: torch.Tensor,
                      reward: torch.Tensor, discount: torch.Tensor) -> torch.Tensor:
    """reward + discount * Q_target(s', argmax_a Q_online(s', a)); ``discount`` already holds
    gamma^n times the continuation flags, so termination zeroes the bootstrap.
    """
    best = q_next_online.argmax(dim=1, keepdim=True)
    return reward + discount * q_next_target.gather(1, best).squeeze(1)


def huber_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean Huber (smooth L1, delta 1) loss."""
    return F.smooth_l1_loss(prediction, target)


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _config_error(key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"agent.{key}={value!r}: expected {expected}")


class DQNAgent:
    """Double/dueling DQN on n-step returns; ``options``: the ``agent`` keys."""

    Options: ClassVar[type[AgentOptions]] = AgentOptions

    def __init__(self, obs_shape: Sequence[int], num_actions: int, device: str = "cpu", *,
                 embedder: SentenceEmbedder | None = None, strings: StringTable | None = None,
                 discount: float = 0.99, nstep: int = 3, hold_epsilon: bool = False,
                 seed: int | None = None, channels_last: bool = True, use_extr_rew: bool = False,
                 paper_setting: bool = False, max_text_tokens: int = 200,
                 precision: str = "fp32", compile: bool | str = False,
                 agent_options: AgentOptions | None = None, **options: Any):
        del use_extr_rew
        self.options = o = self._options(agent_options, options)
        self.obs_shape = tuple(int(x) for x in obs_shape)
        if len(self.obs_shape) != 3 or min(self.obs_shape) < 1:
            raise _config_error("obs_shape", obs_shape, "(frame_stack, height, width)")
        if not 0.0 < float(discount) <= 1.0:
            raise _config_error("discount", discount, "a number in (0, 1]")
        for key, value in (("num_actions", num_actions), ("nstep", nstep)):
            if int(value) != value or int(value) < 1:
                raise _config_error(key, value, "a positive integer")
        self.num_actions, self.nstep, self.discount = int(num_actions), int(nstep), float(discount)
        self.device = torch.device(device)
        check_precision(precision, self.device)
        check_compile(compile, self.device)
        self.precision, self.compile = precision, compile
        self.setting = LearnerSetting.choose(bool(paper_setting), o)
        self.text = TextInput(
            self.setting.text_input, embedder, strings, use_language=bool(o.use_language_state),
            use_goal=o.use_goal, device=self.device, max_tokens=max_text_tokens,
            reinit_seed=text_seed(seed) if self.setting.reinit_text_encoder else None)
        self._rng = np.random.default_rng(seed)
        self.online, self.target = self._networks(seed, channels_last)
        self._select_trainable()
        self.optimizer = self._make_optimizer()
        # Compiled on its first call; "graph" records the whole eager step as one CUDA graph.
        mode = "reduce-overhead" if compile == "reduce-overhead" else None
        compiled = compile is True or compile == "reduce-overhead"
        self._loss = torch.compile(self._td_loss, mode=mode) if compiled else self._td_loss
        self._graphed: GraphedStep | None = None
        self._new_graph()
        self.hold_epsilon = bool(hold_epsilon)
        self.decay_start = self.num_updates = self._last_target_sync = 0
        self._expl_agent: DQNAgent | None = None
        self.rewards: list[BatchReward] = []

    @classmethod
    def _options(cls, parsed: AgentOptions | None, keywords: dict[str, Any]) -> AgentOptions:
        """The options a run parsed once, or those of an agent built in Python, parsed here."""
        if parsed is not None:
            if keywords or not isinstance(parsed, cls.Options):
                raise TypeError(f"{cls.__name__} takes agent_options (a {cls.Options.__name__}) "
                                f"or keyword options, not {type(parsed).__name__} and "
                                f"{sorted(keywords)}")
            return parsed
        if keywords.get("use_language_state") is False:
            keywords["use_language_state"] = None
        return schema.parse_keywords(cls.Options, keywords, "agent.", IGNORED_OPTIONS)

    def _networks(self, seed: int | None, channels_last: bool) -> tuple[QNetwork, QNetwork]:
        """Online and target Q-networks (weights drawn from ``seed``)."""
        o, joint = self.options, self.setting.text_input == "joint"
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            online = QNetwork(
                self.obs_shape, self.num_actions, o.hidden_dim, o.use_image,
                bool(o.use_language_state), o.use_goal and not joint, self.text.dim,
                channels_last,
            ).to(self.device)
        target = copy.deepcopy(online).requires_grad_(False)
        if self.setting.shared_encoder:
            for name in ENCODER_MODULES:
                setattr(target, name, getattr(online, name))
        return online, target

    def trainable_parameter_names(self) -> list[str]:
        """Names (in ``self.online``) of the parameters the optimiser updates."""
        setting = self.options.finetune_settings
        if setting == "train_all":
            return [name for name, _ in self.online.named_parameters()]
        if setting == "critic":
            prefixes = ("value.", "advantage.")
        else:
            last = len(self.online.value) - 1
            prefixes = (f"value.{last}.", f"advantage.{last}.")
        return [name for name, _ in self.online.named_parameters() if name.startswith(prefixes)]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return list(self._trainable)

    def _make_optimizer(self) -> torch.optim.Adam:
        # The fused kernel is ~3x faster than the foreach one on CPU (docs/scale.md).
        fused = self.device.type in ("cpu", "cuda")
        return torch.optim.Adam(self.trainable_parameters(), lr=self.options.lr, fused=fused,
                                capturable=self.compile == "graph")

    def _new_graph(self) -> None:
        """compile=graph: a fresh recording, as the old one holds the previous optimiser's state."""
        if self.compile == "graph":
            self._graphed = GraphedStep(self._gradient_step, self.optimizer,
                                        self.trainable_parameters())

    def _select_trainable(self) -> None:
        """Mark the parameters the optimiser updates; kept as a list, read by every update."""
        names = set(self.trainable_parameter_names())
        for name, param in self.online.named_parameters():
            param.requires_grad_(name in names)
        self._trainable = [p for name, p in self.online.named_parameters() if name in names]

    def epsilon(self, step: int, eval_mode: bool = False) -> float:
        """Exploration rate: linear decay from ``decay_start``; eval_eps in eval mode."""
        o = self.options
        if eval_mode:
            return o.eval_eps
        if self.hold_epsilon:
            return o.train_eps_max
        frac = min(max((step - self.decay_start) / o.train_eps_decay_steps, 0.0), 1.0)
        return o.train_eps_max + frac * (o.train_eps_min - o.train_eps_max)

    def start_epsilon_decay(self, step: int) -> bool:
        """Release a held epsilon (``decay_after_reward``) from ``step`` on; True if this call did.
        """
        if not self.hold_epsilon:
            return False
        self.hold_epsilon = False
        self.decay_start = int(step)
        return True

    def set_exploration_agent(self, other: DQNAgent | None) -> None:
        """Guided exploration: an exploring step may take ``other``'s greedy action."""
        if other is self:
            raise ValueError("an agent cannot guide its own exploration")
        if other is not None and other.num_actions != self.num_actions:
            raise ValueError(f"exploration agent has {other.num_actions} actions, this agent "
                             f"{self.num_actions} (agent.num_actions differs)")
        self._expl_agent = other

    def act(self, obs: Mapping[str, Any], step: int, eval_mode: bool) -> int:
        """Epsilon-greedy action for ``obs`` (frames, text_obs, goal; only the keys used are read).
        """
        if self._rng.random() < self.epsilon(step, eval_mode):
            if (not eval_mode and self._expl_agent is not None
                    and self._rng.random() < self.options.other_model_prob):
                return self._expl_agent.greedy_action(obs)
            return int(self._rng.integers(self.num_actions))
        return self.greedy_action(obs)

    def greedy_action(self, obs: Mapping[str, Any]) -> int:
        return int(self.q_values(obs).argmax())

    @torch.inference_mode()
    def q_values(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """Online Q-values ``[num_actions]`` for one observation."""
        frames = None
        if self.options.use_image:
            frames = torch.as_tensor(np.asarray(obs["frames"]), device=self.device).unsqueeze(0)
        return self.online(frames, *self.text.of_obs(obs))[0]

    def update(self, batch: Any, step: int) -> dict[str, torch.Tensor]:
        """One double-DQN gradient step, then one step of each plug-in; metrics stay 0-d device
        tensors so that an update never waits for the device.
        """
        reward = batch.reward.to(self.device, torch.float32)
        metrics: dict[str, torch.Tensor] = {}
        for plugin in self.rewards:  # scored before the TD step moves the encoder they may read
            returns, scores = plugin.compute(batch)
            reward = reward + returns
            metrics.update(scores)
        metrics.update(self._td_step(batch, reward, step))
        for plugin in self.rewards:
            metrics.update(plugin.update(batch))
        return metrics

    def _td_loss(self, obs: torch.Tensor | None, next_obs: torch.Tensor | None,
                 action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
                 text: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Huber loss of Q(action) against the double-DQN target (loss in fp32)."""
        # a CUDA graph cannot record autocast's cache of cast weights
        with autocast(self.device, self.precision, cache=self.compile != "graph"):
            with torch.no_grad():
                if self.setting.shared_encoder:
                    h = self.online.features(next_obs, text.next_language, text.next_goal)
                    q_next_online, q_next_target = self.online.heads(h), self.target.heads(h)
                else:
                    q_next_online = self.online(next_obs, text.next_language, text.next_goal)
                    q_next_target = self.target(next_obs, text.next_language, text.next_goal)
            q = self.online(obs, text.language, text.goal)
        target = double_dqn_target(q_next_online.float(), q_next_target.float(), reward, discount)
        q_taken = q.float().gather(1, action.unsqueeze(1)).squeeze(1)
        return huber_loss(q_taken, target), q_taken, target

    def _td_step(self, batch: Any, reward: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        """One gradient step towards the double-DQN target (one CUDA graph with compile=graph)."""
        use_image = self.options.use_image
        obs = batch.obs.to(self.device, non_blocking=True) if use_image else None
        next_obs = batch.next_obs.to(self.device, non_blocking=True) if use_image else None
        action = batch.action.to(self.device, torch.long, non_blocking=True)
        discount = batch.discount.to(self.device, torch.float32, non_blocking=True)
        inputs = (obs, next_obs, action, reward * self.options.reward_scale, discount,
                  *self.text.of_batch(batch))
        if self._graphed is not None:
            metrics = self._graphed(inputs)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            metrics = self._gradient_step(*inputs)
        if self.options.debug and not torch.isfinite(metrics["loss"]):
            raise FloatingPointError(f"non-finite DQN loss {metrics['loss'].item()} at step {step}")
        self.num_updates += 1
        self._maybe_sync_target(step)
        return metrics

    def _gradient_step(self, obs: torch.Tensor | None, next_obs: torch.Tensor | None,
                       action: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
                       *text: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Loss, backward, gradient norm and Adam's step, with no host read (CUDA-graph recordable).
        """
        loss, q_taken, target = self._loss(obs, next_obs, action, reward, discount,
                                           TextTensors(*text))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), math.inf)
        self.optimizer.step()
        with torch.no_grad():
            # clone: with CUDA graphs the loss's memory is the graph's, rewritten by the next update
            return {"loss": loss.detach().clone(), "q_mean": q_taken.detach().mean(),
                    "target_mean": target.mean(), "td_error_abs": (q_taken - target).abs().mean(),
                    "grad_norm": grad_norm.detach(), "batch_reward": reward.mean()}

    def _maybe_sync_target(self, step: int) -> None:
        """Every critic_target_update_every_steps env steps: target <- tau*online + (1-tau)*target.
        """
        if step - self._last_target_sync < self.options.critic_target_update_every_steps:
            return
        self._last_target_sync = int(step)
        tau = self.options.critic_target_tau
        with torch.no_grad():
            for p_target, p in zip(self.target.parameters(), self.online.parameters()):
                if tau == 1.0:
                    p_target.copy_(p)
                else:
                    p_target.lerp_(p, tau)

    def architecture_config(self) -> dict[str, Any]:
        """Config values that fix the network shapes/meaning, keyed by their config names."""
        text, embedder = self.setting.text_input, self.text.embedder
        return {
            "agent.obs_shape": list(self.obs_shape), "agent.num_actions": self.num_actions,
            **{f"agent.{key}": getattr(self.options, key) for key in (
                "hidden_dim", "use_image", "use_language_state", "use_goal", "goal_encoder_type")},
            "sbert_model": embedder.model_name if text and embedder else None,
            "agent.text_input": text,
            "agent.reinit_text_encoder": (self.setting.reinit_text_encoder
                                          if self.text.encoder else None),
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain state: networks, optimiser, RNG, counters and architecture config."""
        return {
            "config": self.architecture_config(),
            "agent_target": _qualified_name(type(self)),
            "finetune_settings": self.options.finetune_settings,
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self._rng.bit_generator.state,
            "hold_epsilon": self.hold_epsilon,
            "decay_start": self.decay_start,
            "num_updates": self.num_updates,
            "last_target_sync": self._last_target_sync,
            "text_encoder_seed": self.text.reinit_seed,
        }

    def policy_state(self) -> dict[str, Any]:
        """What acting needs: the weights the learner hands its actors (no target, no optimiser)."""
        return {"online": self.online.state_dict(), "text_encoder_seed": self.text.reinit_seed}

    def load_policy(self, state: Mapping[str, Any]) -> None:
        """Actor: act with the learner's :meth:`policy_state` (same config, so no check)."""
        self.text.use_reinit_seed(state["text_encoder_seed"])
        self.online.load_state_dict(state["online"])

    def _check_config(self, state: Mapping[str, Any], resume: bool) -> None:
        if not isinstance(state, Mapping) or "config" not in state or "online" not in state:
            raise ValueError("not a DQNAgent state dict (missing 'config'/'online')")
        saved = dict(state["config"])
        # Checkpoints from before the paper setting's text input had separate projections.
        saved.setdefault("agent.text_input", "separate" if saved.get("sbert_model") else None)
        saved.setdefault("agent.reinit_text_encoder", None)
        mine = self.architecture_config()
        if resume:
            saved["agent.finetune_settings"] = state.get("finetune_settings")
            mine["agent.finetune_settings"] = self.options.finetune_settings
            saved["agent._target_"] = state.get("agent_target", _qualified_name(DQNAgent))
            mine["agent._target_"] = _qualified_name(type(self))
        check_same(saved, mine)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: restore networks, optimiser, RNG and counters (config must match)."""
        self._check_config(state, resume=True)
        self.text.use_reinit_seed(state.get("text_encoder_seed"))
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._new_graph()
        self._rng.bit_generator.state = state["rng"]
        self.hold_epsilon, self.decay_start = bool(state["hold_epsilon"]), int(state["decay_start"])
        self.num_updates = int(state["num_updates"])
        self._last_target_sync = int(state["last_target_sync"])

    def load_weights(self, state: Mapping[str, Any]) -> None:
        """Finetune: load only the online network weights (target = copy), fresh Adam at ``lr``."""
        self._check_config(state, resume=False)
        self.text.use_reinit_seed(state.get("text_encoder_seed"))
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(self.online.state_dict())
        self.optimizer = self._make_optimizer()
        self._new_graph()


def read_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """One update's metrics (0-d tensors or numbers) as floats."""
    return {key: float(value) for key, value in metrics.items()}


def mean_metrics(updates: Mapping[str, Sequence[Any]]) -> dict[str, float]:
    """The mean of each metric over a row's updates: one device read per metric, in float64."""
    out = {}
    for key, values in updates.items():
        if all(isinstance(v, torch.Tensor) for v in values):
            array = torch.stack([v.detach() for v in values]).to("cpu", torch.float64).numpy()
        else:
            array = np.array([float(v) for v in values], dtype=np.float64)
        out[key] = float(np.mean(array))
    return out


def check_same(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """A checkpoint's config values against this agent's; the error names every difference."""
    diffs = [f"{k}: checkpoint={saved.get(k)!r}, this agent={mine.get(k)!r}"
             for k in sorted(set(saved) | set(mine)) if saved.get(k) != mine.get(k)]
    if diffs:
        raise ValueError("checkpoint does not match this agent's config: " + "; ".join(diffs))
