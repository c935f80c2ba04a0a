"""Meta-World pick-place as a language-feedback task: actions are where the hand should go, and
feedback compares them with Meta-World's scripted expert (docs/optimizers.md, "Targets")."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Final

import gymnasium as gym
import numpy as np

TASK: Final = "pick-place-v3"
GAIN: Final = 10.0  # the scripted policies' proportional gain (metaworld.policies.move)
MAX_SIM_STEPS: Final = 500  # Meta-World's episode limit


@dataclass(frozen=True)
class Transition:
    obs: dict[str, Any]
    reward: float        # the mean over the action's simulator steps
    success: bool
    feedback: str
    last_reward: float   # the reward of its last simulator step (LLF-Bench's)


def _plain(obs: np.ndarray) -> dict[str, Any]:
    r = [round(float(v), 3) for v in obs]
    return {"hand_pos": r[0:3], "gripper_distance_apart": r[3], "puck_pos": r[4:7],
            "puck_rot": r[7:11], "goal_pos": r[-3:]}


class PickPlace:
    """Meta-World pick-place with target actions and expert feedback."""

    def __init__(self, substeps: int = 10, seed: int = 0, tolerance: float = 0.0,
                 max_sim_steps: int = MAX_SIM_STEPS, stop_on_success: bool = True,
                 render_mode: str | None = None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Meta-World warns about its observation space
            import metaworld  # noqa: F401 - registers the Meta-World/ ids
            from metaworld.policies import SawyerPickPlaceV3Policy

            self.env = gym.make("Meta-World/MT1", env_name=TASK, seed=seed,
                                disable_env_checker=True, max_episode_steps=max_sim_steps,
                                render_mode=render_mode)
        if render_mode is not None:
            self._check_rendering()
        # Meta-World raises past its own 500-step limit; LLF-Bench's 30 actions of up to 20
        # simulator steps need more.
        self.env.unwrapped.max_path_length = max_sim_steps
        self.expert = SawyerPickPlaceV3Policy()
        self.substeps = substeps
        self.tolerance = tolerance  # > 0: an action ends once the hand is this close (metres)
        # False: LLF-Bench's controller, which moves on after success (the puck goes on toward
        # the goal), and success is the last simulator step's
        self.stop_on_success = stop_on_success
        self._obs: np.ndarray | None = None

    def reset(self, seed: int | None) -> dict[str, Any]:
        if seed is not None:
            # Meta-World draws the task (the goal) before reset(seed) reseeds it: seed the
            # draw too, or a seed's goal depends on the episodes before.
            self.env.unwrapped.np_random = gym.utils.seeding.np_random(seed)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._obs, _ = self.env.reset(seed=seed)
        return _plain(self._obs)

    def _check_rendering(self) -> None:
        """Render one frame now, so a machine without OpenGL for MuJoCo is refused up front."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.env.reset(seed=0)
                self.env.render()
        except Exception as err:  # MuJoCo's GL backends fail in many ways (AttributeError, EGLError...)
            self.env.close()
            raise RuntimeError(
                f"render_mode='rgb_array' needs MuJoCo to render off screen, and it failed here "
                f"({type(err).__name__}: {err}). Set MUJOCO_GL=egl (a GPU driver with EGL) or "
                "MUJOCO_GL=osmesa (apt-get install libosmesa6), or build without render_mode"
                ) from err

    def render(self) -> np.ndarray:
        return self.env.render()

    @property
    def observation(self) -> dict[str, Any]:
        assert self._obs is not None, "reset first"
        return _plain(self._obs)

    def expert_action(self) -> list[float]:
        parts = self.expert._parse_obs(self._obs)
        target = self.expert._desired_pos(parts)
        return [round(float(v), 3) for v in target] + [float(self.expert._grab_effort(parts))]

    def step(self, action: list[float]) -> Transition:
        assert self._obs is not None, "reset first"
        expert = np.asarray(self.expert_action()[:3])
        before = float(np.linalg.norm(self._obs[:3] - expert))
        target = np.asarray(action[:3], dtype=float)
        grip = float(np.clip(action[3], -1.0, 1.0))
        rewards, success = [], False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.substeps):
                delta = np.clip(GAIN * (target - self._obs[:3]), -1.0, 1.0)
                self._obs, reward, _, _, info = self.env.step(
                    np.append(delta, grip).astype(np.float32))
                rewards.append(float(reward))
                success = bool(info["success"])
                if success and self.stop_on_success:
                    break
                if np.abs(target - self._obs[:3]).max() < self.tolerance:
                    break
        reward = float(np.mean(rewards))
        after = float(np.linalg.norm(self._obs[:3] - expert))
        return Transition(_plain(self._obs), reward, success,
                          self._feedback(reward, success, before, after), rewards[-1])

    def _feedback(self, reward: float, success: bool, before: float, after: float) -> str:
        if success:
            return f"Reward {reward:.2f}: the puck is at the goal. Task done."
        moved = after - before
        if abs(moved) < 0.005:
            hindsight = "the hand barely moved relative to where the expert would go"
        elif moved < 0:
            hindsight = (f"good: the hand came {-moved * 100:.0f} cm closer to where the "
                         "expert would go")
        else:
            hindsight = (f"the hand went {moved * 100:.0f} cm further from where the expert "
                         "would go")
        x, y, z, g = self.expert_action()
        grip = "closed" if g > 0 else "open"
        return (f"Reward {reward:.2f}; {hindsight}. The expert would now send the hand to "
                f"[{x:.3f}, {y:.3f}, {z:.3f}] with the gripper {grip} ({g:g}).")

    def close(self) -> None:
        self.env.close()
