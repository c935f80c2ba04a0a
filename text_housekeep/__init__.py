"""Text-Housekeep: tidy a house, with text (ELLM's second environment; docs/housekeep.md).
Its data, backend and bridge modules stay importable on Python 3.8, the habitat interpreter's;
only :mod:`text_housekeep.env` needs gymnasium."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from text_housekeep.backend import FAILED, PICK, PLACE, BackendError
from text_housekeep.data import (
    Episode,
    HousekeepDataError,
    episode_count,
    find_scene,
    load_episode,
    scene_files,
    shuffled_order,
)
from text_housekeep.symbolic import ACTION_MODES
from text_housekeep.text import pick_caption, place_caption

if TYPE_CHECKING:
    from text_housekeep.env import HousekeepTextEnv

DEFAULT_TASK = "pomaria_2_int"  # ELLM's Rs_int is not in the data available (docs/housekeep.md)
BACKENDS = ("symbolic", "habitat")


def make(task: str = DEFAULT_TASK, ep_num: int = 0, *, action_mode: str = "lowlevel",
         backend: str = "symbolic", length: int = 1000, language_state: bool = True,
         data_dir: str | Path | None = None, version: int = 1,
         render_mode: str | None = None) -> HousekeepTextEnv:
    """Episode ``ep_num`` (after the seed-100 shuffle) of scene ``task`` as a Text-Housekeep env;
    ``version`` 1 stores a time-out as terminal, as the original did, 2 as a truncation."""
    from text_housekeep.env import HousekeepTextEnv

    episode = load_episode(task, ep_num, Path(data_dir) if data_dir is not None else None)
    if backend == "symbolic":
        from text_housekeep.symbolic import SymbolicBackend

        simulator = SymbolicBackend(episode, action_mode)
        shape = (84, 84, 3)
    elif backend == "habitat":
        from text_housekeep.bridge import habitat_backend

        simulator = habitat_backend(episode, action_mode)
        shape = (128, 128, 3)
    else:
        raise ValueError(f"env_spec.housekeep_backend={backend!r} is invalid: expected one of "
                         f"{', '.join(BACKENDS)}")
    return HousekeepTextEnv(episode, simulator, length=length, language_state=language_state,
                            image_shape=shape, version=version, render_mode=render_mode)


__all__ = [
    "ACTION_MODES", "BACKENDS", "DEFAULT_TASK", "FAILED", "PICK", "PLACE", "BackendError",
    "Episode", "HousekeepDataError", "episode_count", "find_scene", "load_episode", "make",
    "pick_caption", "place_caption", "scene_files", "shuffled_order",
]

try:
    import gymnasium as _gym
except ImportError:  # the habitat interpreter needs only the data, backend and bridge modules
    _gym = None
if _gym is not None:
    from text_housekeep.env import (
        ENV_ID,
        ENV_VERSIONS,
        GYM_IDS,
        STAT_KEYS,
        HousekeepTextEnv,
        HousekeepView,
    )

    # gymnasium.make reads its entry point's metadata to serve "rgb_array_list" (RenderCollection)
    # and "human" from rgb_array; a function has none unless given the env's.
    make.metadata = HousekeepTextEnv.metadata
    for _env_id in GYM_IDS:
        if _env_id not in _gym.registry:
            _gym.register(id=_env_id, entry_point="text_housekeep:make",
                          kwargs={"version": ENV_VERSIONS[_env_id]})
    LLF_ENV_ID = "llf-housekeep-v0"
    if LLF_ENV_ID not in _gym.registry:
        # Text actions and None fields are the LLF contract, not gymnasium's checks'.
        _gym.register(id=LLF_ENV_ID, entry_point="text_housekeep.llf:HousekeepLLFEnv",
                      disable_env_checker=True, order_enforce=False)
    __all__ += ["ENV_ID", "ENV_VERSIONS", "GYM_IDS", "LLF_ENV_ID", "STAT_KEYS",
                "HousekeepTextEnv", "HousekeepView"]
