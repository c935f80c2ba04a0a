"""gymnasium's render contract as both games keep it: ``render_mode`` None or ``rgb_array``."""

from __future__ import annotations

from typing import Any, Final

import gymnasium as gym

METADATA: Final[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 5}


def checked_render_mode(render_mode: str | None) -> str | None:
    if render_mode is not None and render_mode not in METADATA["render_modes"]:
        raise ValueError(f"render_mode={render_mode!r} is not supported: expected None or "
                         f"one of {METADATA['render_modes']}")
    return render_mode


def warn_no_render_mode(env: gym.Env, env_id: str) -> None:
    name = env.spec.id if env.spec is not None else env_id
    gym.logger.warn("You are calling render method without specifying any render mode; "
                    f'build with gym.make("{name}", render_mode="rgb_array")')


__all__ = ["METADATA", "checked_render_mode", "warn_no_render_mode"]
